// Pipe versus shared memory for the worker protocol's tensors: one 4096 tokens x 32 heads x 128
// merge (two states in, one out, LSEs included), fp32 and fp16, round trip to a child process.
//   pipe: the inputs' bytes written through a pipe, read by the child into its buffer, the output
//         written back through a second pipe (each byte crosses the pipe once, the minimum a
//         pipe transport can do);
//   shm:  the inputs copied into the memfd arena, a one-line request and reply through the pipe,
//         the child copies its output into the arena, the harness copies it out.
// Both include the harness's copy of the inputs into the transport and of the output out of it.
// Prints the median of 15 round trips; asserts nothing.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "process.hpp"

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

int main() {
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
  return 0;
}
