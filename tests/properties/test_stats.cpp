// Statistics of judgements (accumulate_stats, finish_stats) on judgements built by hand, whose
// quantiles are known: the error / budget ratio's p50, p99 and max over the finite outputs, with
// non-finite outputs, non-finite exact values and rows a naive-exp hazard skips left out; the
// samples of one output carry over from one judgement to the next.
#include <catch2/catch.hpp>
#include <cmath>

#include "internal.hpp"

using namespace attncheck;
using namespace attncheck::detail;

namespace {

Elem elem(Out out, ac_dtype d, int64_t row, double ratio) {
  Elem e;
  e.out = out;
  e.dtype = d;
  e.row = row;
  e.ratio = ratio;
  e.ulp = 2 * ratio;
  e.cancel = ratio;
  return e;
}

Judgement judgement(int64_t rows) {
  Judgement J;
  J.num_rows = rows;
  J.rows.resize(size_t(rows));
  return J;
}

}  // namespace

TEST_CASE("ratio quantiles: p50, p99 and max of error / budget over the finite outputs",
          "[properties][stats]") {
  // O (fp16): ratios (i + 1) / 200 for i = 0..199 in a scrambled order (7 is prime to 200), over
  // two judgements. The q-quantile is the sorted sample at ceil(q n) - 1: p50 index 99 = 100/200,
  // p99 index 197 = 198/200, max 200/200.
  Judgement a = judgement(3), b = judgement(3);
  for (int i = 0; i < 200; ++i) {
    const int k = (i * 7) % 200;
    (i < 120 ? a : b).elems.push_back(elem(Out::O, AC_DTYPE_F16, 0, double(k + 1) / 200));
  }
  // Counted but not in the quantiles: a non-finite output where the exact value is finite.
  Elem nonfinite = elem(Out::O, AC_DTYPE_F16, 0, INFINITY);
  nonfinite.out_finite = false;
  a.elems.push_back(nonfinite);
  // Not counted: a non-finite exact value, and a row a naive-exp hazard makes unpredictable.
  Elem inf_exact = elem(Out::O, AC_DTYPE_F16, 0, 5.0);
  inf_exact.exact_finite = false;
  a.elems.push_back(inf_exact);
  a.rows[2].hazard = true;
  a.elems.push_back(elem(Out::O, AC_DTYPE_F16, 2, 1e9));
  // LSE (fp32), three samples 0.75, 3, 0.25: p50 index ceil(1.5) - 1 = 1 -> 0.75; p99 index
  // ceil(2.97) - 1 = 2 -> 3; max 3.
  for (double r : {0.75, 3.0, 0.25}) b.elems.push_back(elem(Out::LSE, AC_DTYPE_F32, 1, r));

  std::vector<OutputStats> stats;
  StatSamples samples;
  accumulate_stats(stats, a, samples);
  accumulate_stats(stats, b, samples);
  finish_stats(stats, samples);
  REQUIRE(stats.size() == 2);
  const OutputStats& o = stats[0];
  CHECK(o.dtype == "fp16");
  CHECK(o.output == "O");
  CHECK(o.count == 201);
  CHECK(o.nonfinite == 1);
  CHECK(o.p50_ratio == 100.0 / 200);
  CHECK(o.p99_ratio == 198.0 / 200);
  CHECK(o.max_ratio == 1.0);
  // The ulp statistics read the same elements (ulp = 2 x ratio here).
  CHECK(o.max_ulp == 2.0);
  CHECK(o.p99_ulp == 2 * 198.0 / 200);
  const OutputStats& l = stats[1];
  CHECK(l.output == "LSE");
  CHECK(l.count == 3);
  CHECK(l.p50_ratio == 0.75);
  CHECK(l.p99_ratio == 3.0);
  CHECK(l.max_ratio == 3.0);
}

TEST_CASE("ratio quantiles of a single sample and of no finite sample", "[properties][stats]") {
  Judgement J = judgement(1);
  J.elems.push_back(elem(Out::Y, AC_DTYPE_BF16, 0, 0.375));
  Elem nan_out = elem(Out::Y, AC_DTYPE_F32, 0, INFINITY);
  nan_out.out_finite = false;
  J.elems.push_back(nan_out);
  std::vector<OutputStats> stats;
  StatSamples samples;
  accumulate_stats(stats, J, samples);
  finish_stats(stats, samples);
  REQUIRE(stats.size() == 2);
  CHECK(stats[0].p50_ratio == 0.375);
  CHECK(stats[0].p99_ratio == 0.375);
  CHECK(stats[0].max_ratio == 0.375);
  CHECK(stats[1].count == 1);
  CHECK(stats[1].nonfinite == 1);
  CHECK(stats[1].p50_ratio == 0);
  CHECK(stats[1].max_ratio == 0);
}

TEST_CASE("quantiles past the exact samples: the bin's largest sample, never below the order statistic",
          "[properties][stats]") {
  // n = 200000 samples 1..n, past QuantileSketch::kExactSamples (16384), so the quantiles come
  // from the bins of 1/32 octave (exponent and the significand's top five bits). The order
  // statistic at ceil(0.99 n) - 1 = 197999 is the sample 198000 = 2^17 x 1.5106: its bin is
  // [2^17 (1 + 16/32), 2^17 (1 + 17/32)) = [196608, 200704), whose largest sample is n itself. The
  // median's order statistic is 100000 = 2^16 x 1.5259, in [98304, 100352): its largest sample
  // is 100351.
  constexpr int n = 200000;
  QuantileSketch q;
  for (int i = n; i >= 1; --i) q.add(double(i));
  const double p99 = q.quantile(0.99), p50 = q.quantile(0.5);
  CHECK(p99 == 200000.0);
  CHECK(p50 == 100351.0);
  // The bound report merge rests on: at most (1 - q) n samples lie above.
  CHECK(double(n) - p99 <= 0.01 * n);
  CHECK(double(n) - p50 <= 0.5 * n);
  // Zero and +inf keep bins of their own; NaN counts as +inf.
  QuantileSketch z;
  for (size_t i = 0; i <= QuantileSketch::kExactSamples; ++i) z.add(i % 2 ? 0.0 : NAN);
  CHECK(z.quantile(0.25) == 0.0);
  CHECK(z.quantile(0.99) == INFINITY);
}
