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
// With a plugin path (worker_transport_bench build/examples/libattncheck_example_plugin.so) it also
// times one merge of that shape through the plugin in-process (AbiSubject) and through
// attncheck-isolate (WorkerSubject, the whole protocol): their difference is the worker's
// per-call overhead. The merge is fp16 where the plugin's host merge subject has it, else bf16,
// else fp32; a plugin it cannot bench (no host merge subject, head size 128 refused, a failed
// load or call) gets one line on stderr and exit 2.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "attncheck/names.hpp"
#include "attncheck/plugin.hpp"
#include "process.hpp"
#include "worker_subject.hpp"

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

}  // namespace

double time_merge(attncheck::Subject& s, const attncheck::MergeInput& in) {
  std::vector<double> t;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = Clock::now();
    const auto out = s.merge(in);
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (out.out.size() != in.prefix_out.size()) std::_Exit(1);
  }
  return median(t);
}

// 0, or 2 after one line on stderr saying why the plugin's merge cannot be benched.
int bench_subjects(const char* plugin) {
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
    ac::MergeInput in;
    in.num_tokens = 4096;
    in.num_heads = 32;
    in.head_size = 128;
    if (!d->supports_head_size(in.head_size))
      return cannot(d->name() + " does not take head size " + std::to_string(in.head_size));
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
    in.dtype = c->dtype;
    const size_t n = size_t(in.num_tokens) * in.num_heads * in.head_size,
                 nl = size_t(in.num_tokens) * in.num_heads;
    in.prefix_out.assign(n, c->one);
    in.suffix_out.assign(n, c->two);
    in.prefix_lse.assign(nl, 1.0f);
    in.suffix_lse.assign(nl, 2.0f);
    auto isolated = ac::worker::load_worker_subjects(ac::worker::isolate_command(plugin));
    ac::Subject* w = nullptr;
    for (auto& s : isolated)
      if (s->name() == d->name()) w = s.get();
    if (!w) return cannot("attncheck-isolate does not serve " + d->name());
    const double td = time_merge(*d, in), tw = time_merge(*w, in);
    std::printf("\n%s %s merge 4096 x 32 x 128, median of 7 calls (host subject):\n", d->name().c_str(),
                ac::dtype_name(in.dtype));
    std::printf(
        "  in-process (C ABI)        %8.2f ms\n  through attncheck-isolate %8.2f ms\n  worker overhead per "
        "call  %8.2f ms (%.2fx)\n",
        td, tw, tw - td, tw / td);
    return 0;
  } catch (const std::exception& e) {
    // A plugin that cannot be loaded, a worker that fails its handshake, a call that is refused
    // or faults: each says what happened in one line.
    return cannot(e.what());
  }
}

int main(int argc, char** argv) {
  const size_t T = 4096, H = 32, D = 128;
  std::printf("worker transport, one merge of %zu tokens x %zu heads x %zu, round trip, median of %d\n", T, H,
              D, kReps);
  std::printf("%-6s %10s %10s %12s %12s %8s\n", "dtype", "in MiB", "out MiB", "pipe ms", "shm ms", "ratio");
  for (size_t es : {size_t(4), size_t(2)}) {
    const size_t in_bytes = 2 * T * H * D * es + 2 * T * H * 4, out_bytes = T * H * D * es + T * H * 4;
    const double p = bench_pipe(in_bytes, out_bytes), s = bench_shm(in_bytes, out_bytes);
    std::printf("%-6s %10.1f %10.1f %12.2f %12.2f %8.2f\n", es == 4 ? "fp32" : "fp16", in_bytes / 1048576.0,
                out_bytes / 1048576.0, p, s, p / s);
  }
  return argc > 1 ? bench_subjects(argv[1]) : 0;
}
