// reference_bench: how fast is the exact reference? Not a test.
// Prints the time of one exact attention row (fp16, d = 128, non-causal) for T in {64, 1024, 8192}
// keys (median of a few repeats), the cost of a whole GQA group sharing its KV slice, and exact
// merges of two states per second (d = 128), at the default 200 bits.
//   build-ref/reference/reference_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <vector>

#include "attncheck/reference/reference.hpp"
#include "bench_problem.hpp"

using namespace attncheck::ref;
using attncheck::ref::bench::random_problem;
using Clock = std::chrono::steady_clock;

namespace {

// CPU time of this thread, in ms: robust against other processes sharing the cores.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  std::mt19937_64 rng(12345);
  std::printf("exact reference benchmark, %u-bit working precision (%u effective), fp16 inputs, d = 128\n",
              precision_bits(), precision_bits_effective());
  for (int32_t t : {64, 1024, 8192}) {
    const AttentionProblem pb = random_problem(1, t, 1, 1, 128, false, rng);
    const int repeats = t >= 8192 ? 3 : (t >= 1024 ? 5 : 9);
    std::vector<double> ms, cpu;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = Clock::now();
      const double c0 = cpu_ms();
      const ExactRow row = exact_attention_row(pb, 0, 0);
      cpu.push_back(cpu_ms() - c0);
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (row.empty) return 1;
    }
    std::printf("attention row  T = %5d: %9.3f ms wall, %9.3f ms cpu (median of %d)\n", t, median(ms),
                median(cpu), repeats);
  }
  {
    // A GQA group of 4 query heads over one KV head, 4 query rows: exact_attention decodes K/V once.
    const AttentionProblem pb = random_problem(4, 1024, 4, 1, 128, false, rng);
    const double c0 = cpu_ms();
    const auto rows = exact_attention(pb);
    const double ms = cpu_ms() - c0;
    std::printf("exact_attention T = 1024, 16 rows (4 tokens x 4 heads, 1 KV head): %.3f ms cpu/row\n",
                ms / static_cast<double>(rows.size()));
  }
  {
    std::normal_distribution<double> n01(0.0, 1.0);
    std::vector<ExactState> pairs;
    for (int i = 0; i < 64; ++i) {
      ExactState s{std::vector<Real>(128), Real(n01(rng) * 4)};
      for (auto& x : s.o) x = Real(n01(rng));
      pairs.push_back(std::move(s));
    }
    int merges = 0;
    const double c0 = cpu_ms();
    double elapsed = 0;
    while (elapsed < 1.0) {
      for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
        const ExactState r = exact_merge(pairs[i], pairs[i + 1]);
        merges += r.o.size() == 128;
      }
      elapsed = (cpu_ms() - c0) * 1e-3;
    }
    std::printf("exact merges of 2 states, d = 128: %.0f merges per cpu second\n", merges / elapsed);
  }
  return 0;
}
