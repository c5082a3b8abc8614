// Pipe versus shared memory for the worker protocol's tensors: one 4096 tokens x 32 heads x 128
// merge (two states in, one out, LSEs included), fp32 and fp16, round trip to a child process.
//   pipe: the inputs' bytes written through a pipe, read by the child into its buffer, the output
//         written back through a second pipe (each byte crosses the pipe once, the minimum a
//         pipe transport can do);
//   shm:  the inputs copied into the memfd arena, a one-line request and reply through the pipe,
//         the child copies its output into the arena, the harness copies it out.
// Both include the harness's copy of the inputs into the transport and of the output out of it.
// Prints the median of 15 round trips; asserts nothing.
//
// Then the whole protocol against the same subject in-process, one merge of that shape per call,
// median of 7 calls, one row per subject:
//   PLUGIN      with a plugin path (worker_transport_bench build/examples/libattncheck_example_plugin.so)
//               its host merge subject through the C ABI (AbiSubject) and through attncheck-isolate
//               (WorkerSubject). The merge is fp16 where the subject has it, else bf16, else fp32;
//               a plugin it cannot bench (no host merge subject, head size 128 refused, a failed
//               load or call) gets one line on stderr and exit 2, before the numpy merge;
//   merge-np    the numpy merge of examples/python_worker/numpy_subjects.py in fp32, called in
//               python by merge_inprocess.py and through `python3 -m attncheck.worker`, with the
//               first python3 on PATH that imports numpy and the SDK of this source tree (else of
//               the current directory); where either is missing, one line says so.
// The difference of a row's two times is the worker's per-call overhead.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "attncheck/names.hpp"
#include "attncheck/plugin.hpp"
#include "attncheck/pythons.hpp"
#include "process.hpp"
#include "worker_subject.hpp"

#ifndef ATTNCHECK_SOURCE_DIR
#define ATTNCHECK_SOURCE_DIR ""
#endif

namespace {

using Clock = std::chrono::steady_clock;

void write_all(int fd, const unsigned char* p, size_t n) {
  while (n) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) std::_Exit(1);
    p += w, n -= size_t(w);
  }
}
void read_all(int fd, unsigned char* p, size_t n) {
  while (n) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) std::_Exit(1);
    p += r, n -= size_t(r);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr int kReps = 15;

double bench_pipe(size_t in_bytes, size_t out_bytes) {
  int to[2], from[2];
  if (::pipe(to) || ::pipe(from)) return -1;
  ::fcntl(to[1], F_SETPIPE_SZ, 1 << 20);
  ::fcntl(from[1], F_SETPIPE_SZ, 1 << 20);
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<unsigned char> buf(in_bytes), out(out_bytes, 0x3c);
    for (int i = 0; i < kReps; ++i) {
      read_all(to[0], buf.data(), in_bytes);
      write_all(from[1], out.data(), out_bytes);
    }
    std::_Exit(0);
  }
  std::vector<unsigned char> src(in_bytes, 0x11), packed(in_bytes), got(out_bytes), dst(out_bytes);
  std::vector<double> t;
  for (int i = 0; i < kReps; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(packed.data(), src.data(), in_bytes);  // pack
    write_all(to[1], packed.data(), in_bytes);
    read_all(from[0], got.data(), out_bytes);
    std::memcpy(dst.data(), got.data(), out_bytes);  // unpack
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  int st;
  ::waitpid(pid, &st, 0);
  ::close(to[1]), ::close(from[0]), ::close(to[0]), ::close(from[1]);
  return median(t);
}

double bench_shm(size_t in_bytes, size_t out_bytes) {
  attncheck::worker::Arena arena;
  arena.reserve(in_bytes + out_bytes);
  int to[2], from[2];
  if (::pipe(to) || ::pipe(from)) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child maps the arena by its fd, as a worker maps fd 3.
    unsigned char* a = static_cast<unsigned char*>(
        ::mmap(nullptr, arena.size(), PROT_READ | PROT_WRITE, MAP_SHARED, arena.fd(), 0));
    std::vector<unsigned char> out(out_bytes, 0x3c);
    unsigned char line[256];
    for (int i = 0; i < kReps; ++i) {
      read_all(to[0], line, 64);
      volatile unsigned char sink = a[0] ^ a[in_bytes - 1];
      (void)sink;
      std::memcpy(a + in_bytes, out.data(), out_bytes);
      write_all(from[1], line, 32);
    }
    std::_Exit(0);
  }
  std::vector<unsigned char> src(in_bytes, 0x11), dst(out_bytes);
  unsigned char line[64] = {0};
  std::vector<double> t;
  for (int i = 0; i < kReps; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(arena.data(), src.data(), in_bytes);
    write_all(to[1], line, 64);
    read_all(from[0], line, 32);
    std::memcpy(dst.data(), arena.data() + in_bytes, out_bytes);
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  int st;
  ::waitpid(pid, &st, 0);
  return median(t);
}

constexpr int kCallReps = 7;
constexpr int32_t kTokens = 4096, kHeads = 32, kHeadSize = 128;

double time_merge(attncheck::Subject& s, const attncheck::MergeInput& in) {
  std::vector<double> t;
  for (int i = 0; i < kCallReps; ++i) {
    const auto t0 = Clock::now();
    const auto out = s.merge(in);
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (out.out.size() != in.prefix_out.size()) std::_Exit(1);
  }
  return median(t);
}

// The bench's merge case in a dtype whose 1.0 and 2.0 have these bits: prefix_out 1.0, suffix_out
// 2.0, LSEs 1 and 2 (merge_inprocess.py builds the same in fp32).
attncheck::MergeInput merge_case(ac_dtype dtype, uint32_t one, uint32_t two) {
  attncheck::MergeInput in;
  in.dtype = dtype;
  in.num_tokens = kTokens;
  in.num_heads = kHeads;
  in.head_size = kHeadSize;
  const size_t n = size_t(kTokens) * kHeads * kHeadSize, nl = size_t(kTokens) * kHeads;
  in.prefix_out.assign(n, one);
  in.suffix_out.assign(n, two);
  in.prefix_lse.assign(nl, 1.0f);
  in.suffix_lse.assign(nl, 2.0f);
  return in;
}

void print_header() {
  std::printf("\nworker against in-process, one merge of %d x %d x %d per call, median of %d calls:\n",
              kTokens, kHeads, kHeadSize, kCallReps);
  std::printf("%-14s %-6s %-18s %14s %10s %12s %7s\n", "subject", "dtype", "worker", "in-process ms",
              "worker ms", "overhead ms", "ratio");
}

void print_row(const std::string& subject, ac_dtype dtype, const char* worker, double in_ms,
               double worker_ms) {
  std::printf("%-14s %-6s %-18s %14.2f %10.2f %12.2f %6.2fx\n", subject.c_str(), attncheck::dtype_name(dtype),
              worker, in_ms, worker_ms, worker_ms - in_ms, worker_ms / in_ms);
}

// The source tree holding the SDK (python/attncheck) and the numpy subjects: this build's, else
// the current directory (a copied binary run from a checkout); "" when neither has them.
std::string sdk_tree() {
  namespace fs = std::filesystem;
  for (const std::string& dir : {std::string(ATTNCHECK_SOURCE_DIR), fs::current_path().string()}) {
    std::error_code ec;
    if (!dir.empty() && fs::is_regular_file(dir + "/python/attncheck/worker.py", ec) &&
        fs::is_regular_file(dir + "/examples/python_worker/merge_inprocess.py", ec))
      return dir;
  }
  return "";
}

// The numpy merge's row, or one line saying why it has none. Never fails the bench: a machine
// without numpy still gets the transport and plugin numbers.
void bench_numpy_merge() {
  namespace ac = attncheck;
  using ac::worker::shell_word;
  auto skip = [](const std::string& why) {
    std::printf("merge-np       fp32   not benched: %s\n", why.c_str());
  };
  const std::string tree = sdk_tree();
  if (tree.empty())
    return skip(std::string("no python/attncheck and examples/python_worker in ") +
                (*ATTNCHECK_SOURCE_DIR ? ATTNCHECK_SOURCE_DIR " or " : "") + "the current directory");
  std::string python;
  for (const std::string& py : ac::pythons_on_path())
    if (python.empty() && ac::run_captured({py, "-c", "import numpy"}).status == 0) python = py;
  if (python.empty()) return skip("no python3 on PATH imports numpy");
  const std::string env = "PYTHONPATH=" + tree + "/python";
  const std::string examples = tree + "/examples/python_worker";
  const ac::CapturedRun in = ac::run_captured({"/usr/bin/env", env, python, examples + "/merge_inprocess.py",
                                               std::to_string(kTokens), std::to_string(kHeads),
                                               std::to_string(kHeadSize), std::to_string(kCallReps)});
  char* end = nullptr;
  const double in_ms = in.status == 0 ? std::strtod(in.output.c_str(), &end) : 0;
  if (!(in_ms > 0)) return skip(python + " merge_inprocess.py failed: " + in.output.substr(0, 200));
  try {
    auto subjects = ac::worker::load_worker_subjects("env " + shell_word(env) + " " + shell_word(python) +
                                                     " -m attncheck.worker " +
                                                     shell_word(examples + "/numpy_subjects.py:merge_np"));
    print_row("merge-np", AC_DTYPE_F32, "attncheck.worker", in_ms,
              time_merge(*subjects.front(), merge_case(AC_DTYPE_F32, 0x3f800000, 0x40000000)));
  } catch (const std::exception& e) {
    skip(e.what());
  }
}

// 0, or 2 after one line on stderr saying why the plugin's merge cannot be benched.
int bench_plugin(const char* plugin) {
  namespace ac = attncheck;
  auto cannot = [&](const std::string& why) {
    std::fprintf(stderr, "worker_transport_bench: cannot bench %s: %s\n", plugin, why.c_str());
    return 2;
  };
  try {
    auto direct = ac::load_plugin(plugin);
    ac::Subject* d = nullptr;
    for (auto& s : direct.subjects)
      if (s->has_op(AC_OP_MERGE) && s->backend() == "host") d = s.get();
    if (!d) return cannot("no host merge subject");
    if (!d->supports_head_size(kHeadSize))
      return cannot(d->name() + " does not take head size " + std::to_string(kHeadSize));
    // fp16 where the subject has it (the dtype of the figure quoted in the README), else one it
    // declares: a subject refuses the dtypes it does not declare.
    struct Choice {
      ac_dtype dtype;
      uint32_t one, two;  // the bits of 1.0 and 2.0
    };
    constexpr Choice kChoices[] = {{AC_DTYPE_F16, 0x3c00, 0x4000},
                                   {AC_DTYPE_BF16, 0x3f80, 0x4000},
                                   {AC_DTYPE_F32, 0x3f800000, 0x40000000}};
    const Choice* c = nullptr;
    for (const Choice& k : kChoices)
      if (!c && d->has_dtype(k.dtype)) c = &k;
    if (!c) return cannot(d->name() + " declares no dtype");
    const ac::MergeInput in = merge_case(c->dtype, c->one, c->two);
    auto isolated = ac::worker::load_worker_subjects(ac::worker::isolate_command(plugin));
    ac::Subject* w = nullptr;
    for (auto& s : isolated)
      if (s->name() == d->name()) w = s.get();
    if (!w) return cannot("attncheck-isolate does not serve " + d->name());
    const double td = time_merge(*d, in), tw = time_merge(*w, in);
    print_row(d->name(), in.dtype, "attncheck-isolate", td, tw);
    return 0;
  } catch (const std::exception& e) {
    // A plugin that cannot be loaded, a worker that fails its handshake, a call that is refused
    // or faults: each says what happened in one line.
    return cannot(e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const size_t T = kTokens, H = kHeads, D = kHeadSize;
  std::printf("worker transport, one merge of %zu tokens x %zu heads x %zu, round trip, median of %d\n", T, H,
              D, kReps);
  std::printf("%-6s %10s %10s %12s %12s %8s\n", "dtype", "in MiB", "out MiB", "pipe ms", "shm ms", "ratio");
  for (size_t es : {size_t(4), size_t(2)}) {
    const size_t in_bytes = 2 * T * H * D * es + 2 * T * H * 4, out_bytes = T * H * D * es + T * H * 4;
    const double p = bench_pipe(in_bytes, out_bytes), s = bench_shm(in_bytes, out_bytes);
    std::printf("%-6s %10.1f %10.1f %12.2f %12.2f %8.2f\n", es == 4 ? "fp32" : "fp16", in_bytes / 1048576.0,
                out_bytes / 1048576.0, p, s, p / s);
  }
  print_header();
  std::fflush(stdout);
  if (argc > 1)
    if (const int rc = bench_plugin(argv[1])) return rc;
  bench_numpy_merge();
  return 0;
}
