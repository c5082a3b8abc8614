// fast_bench: the certified fast reference against the pure MPFR reference. Not a test.
// Prints, for fp16 inputs at d = 128 (values N(0,1), scale 1/sqrt(d)):
//   1. one row at T in {1024, 8192} keys: MPFR (exact_attention_row) versus the fast path, both
//      as a single-row call (which decodes the row's K/V slice) and amortised over a whole head,
//      and the ratio;
//   2. a whole head at T = 8192 (8192 rows, non-causal and causal): rounded O (fp16) and LSE (fp32)
//      bit-identical to the MPFR reference, with the escalation rate;
//   3. with --layer: a full layer of the Llama-3-8B layer shape (32 query heads, 8 KV heads, T = 8192,
//      non-causal), run once; without it the layer time is extrapolated from the head (x 32).
// Wall time and process CPU time are both printed: the machine may be shared, and CPU time / 2 is
// the wall time an idle 2-core machine would show.
//   build-fast/reference/fast_bench [--layer] [--threads N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attncheck/reference/fast.hpp"
#include "attncheck/reference/reference.hpp"
#include "bench_problem.hpp"

using namespace attncheck::ref;
using attncheck::ref::bench::random_problem;
using Clock = std::chrono::steady_clock;

namespace {

double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

struct Timer {
  Clock::time_point wall0 = Clock::now();
  double cpu0 = process_cpu_s();
  double wall() const { return std::chrono::duration<double>(Clock::now() - wall0).count(); }
  double cpu() const { return process_cpu_s() - cpu0; }
};

void print_stats(const EscalationStats& s) {
  std::printf(
      "    escalation: %lld of %lld rows (rate %.3g), %lld of %lld elements undecided (rate %.3g), %lld rows "
      "uncertified\n",
      static_cast<long long>(s.rows_escalated), static_cast<long long>(s.rows), s.row_rate(),
      static_cast<long long>(s.elements_undecided), static_cast<long long>(s.elements), s.element_rate(),
      static_cast<long long>(s.rows_uncertified));
}

}  // namespace

int main(int argc, char** argv) {
  bool layer = false;
  int threads = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--layer"))
      layer = true;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: fast_bench [--layer] [--threads N]\n");
      return 2;
    }
  }
  FastOptions opt;
  opt.threads = threads;
  std::mt19937_64 rng(2024);
  std::printf("fast reference benchmark: fp16 inputs, d = 128, %u-bit MPFR reference, threads = %d\n",
              precision_bits(),
              threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency()));
  std::printf("(wall and process-CPU seconds; the machine may be shared with other builds)\n\n");

  std::printf("1. one row, MPFR versus fast\n");
  for (int32_t t : {1024, 8192}) {
    // A head of t rows over t keys: the fast path's amortised cost per row, and single rows.
    const AttentionProblem pb = random_problem(t, t, 1, 1, 128, false, rng);
    const int mp_rows = t >= 8192 ? 2 : 4;
    Timer tm;
    for (int r = 0; r < mp_rows; ++r) (void)exact_attention_row(pb, r * 37, 0);
    const double mp_wall = tm.wall() / mp_rows, mp_cpu = tm.cpu() / mp_rows;
    FastOptions one = opt;
    one.threads = 1;
    FastAttentionReference single(pb, one);
    Timer tf;
    (void)single.row(0, 0);  // decodes the K/V slice
    const double first_wall = tf.wall();
    Timer ts;
    const int fast_rows = 50;
    for (int r = 1; r <= fast_rows; ++r) (void)single.row(r * 17 % t, 0);
    const double single_wall = ts.wall() / fast_rows;
    std::vector<FastAttentionReference::RowId> sample;
    for (int r = 0; r < 64; ++r) sample.push_back({static_cast<int64_t>((r * 7919) % t), 0});
    FastAttentionReference sampler(pb, opt);
    Timer tr;
    sampler.for_rows(sample, [](int64_t, int32_t, const FastRow&) {});
    const double sampled_wall = tr.wall() / 64;
    FastAttentionReference fast(pb, opt);
    Timer th;
    (void)fast.rounded(Format::fp16, Format::fp32);
    const double head_wall = th.wall() / t, head_cpu = th.cpu() / t;
    std::printf("  T = %5d: MPFR %.4f s/row (cpu %.4f)\n", t, mp_wall, mp_cpu);
    std::printf("    fast row(): first call %.2f ms (decodes the K/V slice), then %.3f ms/row (1 thread)\n",
                first_wall * 1e3, single_wall * 1e3);
    std::printf("    fast for_rows, 64 sampled rows (slice decode included): %.3f ms/row wall -> %.0fx\n",
                sampled_wall * 1e3, mp_wall / sampled_wall);
    std::printf("    fast whole head (rounded O and LSE, %d threads): %.1f us/row wall, %.1f us/row cpu\n",
                threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency()),
                head_wall * 1e6, head_cpu * 1e6);
    std::printf(
        "    ratio MPFR / fast: %.0fx row() (1 thread each, after the first), %.0fx whole head wall, %.0fx "
        "whole head cpu\n",
        mp_wall / single_wall, mp_wall / head_wall, mp_cpu / head_cpu);
    print_stats(fast.stats());
  }

  std::printf("\n2. a whole head, T = 8192, d = 128, fp16: rounded O (fp16) + LSE (fp32)\n");
  double head_noncausal = 0;
  for (bool causal : {false, true}) {
    const AttentionProblem pb = random_problem(8192, 8192, 1, 1, 128, causal, rng);
    FastAttentionReference fast(pb, opt);
    Timer tm;
    const RoundedAttention r = fast.rounded(Format::fp16, Format::fp32);
    const double wall = tm.wall(), cpu = tm.cpu();
    if (!causal) head_noncausal = wall;
    std::printf("  %s: %.2f s wall, %.2f s cpu (%zu O elements)\n", causal ? "causal    " : "non-causal",
                wall, cpu, r.o.size());
    print_stats(fast.stats());
  }

  std::printf("\n3. a full layer: 32 query heads, 8 KV heads, T = 8192, d = 128, fp16, non-causal\n");
  if (layer) {
    const AttentionProblem pb = random_problem(8192, 8192, 32, 8, 128, false, rng);
    FastAttentionReference fast(pb, opt);
    Timer tm;
    const RoundedAttention r = fast.rounded(Format::fp16, Format::fp32);
    std::printf("  %.1f s wall, %.1f s cpu (%zu O elements)\n", tm.wall(), tm.cpu(), r.o.size());
    print_stats(fast.stats());
  } else {
    std::printf("  not run (pass --layer); extrapolated from the non-causal head: 32 x %.2f s = %.0f s\n",
                head_noncausal, 32 * head_noncausal);
  }
  return 0;
}
