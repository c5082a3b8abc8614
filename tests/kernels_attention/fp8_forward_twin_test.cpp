// FlashAttention-3's FP8 forward contract in the host twin (plugin_abi.h AC_FP8_Q, AC_FP8_P_E4M3;
// kernels/fused/fused_twin.h): the e4m3fn cast of P (storage.h round_to_e4m3) against every e4m3fn
// value decoded, the error of a weight held with the 2^8 offset against budgets.cpp's bound, that
// bound's two terms each needed by a correct kernel's error, and the fused-fp8 twin on one hand-
// derived row (Q in FP8, P in e4m3fn) beside the fused-fp8kv twin (P in fp16).
// Run: ctest --test-dir build -R kernels_attention_twin
#include <algorithm>
#include <catch2/catch.hpp>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attncheck/attention_args.hpp"
#include "attncheck/budgets.hpp"
#include "common/storage.h"
#include "fused/fused.h"
#include "fused/fused_math.h"
#include "tensor_core_model.h"

using namespace attncheck;
using namespace attncheck::test;

namespace {

// The e4m3fn value nearest to x by search over every finite code's decoded value, ties to the code
// whose last mantissa bit is 0, past the largest (448) the largest: what the cast must give.
float nearest_e4m3(float x) {
  struct Entry {
    float value;
    int code;
  };
  static const std::vector<Entry> table = [] {
    std::vector<Entry> t;
    for (int code = 0; code < 128; ++code)  // the non-negative codes; 0x7f is NaN
      if (const float v = kern::fp8_to_float(AC_DTYPE_E4M3, uint8_t(code)); std::isfinite(v))
        t.push_back({v, code});
    return t;
  }();
  const float a = std::fabs(x);
  const Entry* best = &table.front();
  for (const Entry& e : table) {
    const float d = std::fabs(e.value - a), bd = std::fabs(best->value - a);
    if (d < bd || (d == bd && (e.code & 1) == 0)) best = &e;
  }
  return std::copysign(best->value, x);
}

// One row's budget inputs in an FP8 call: N keys, head size d, l = sum e^(s - max).
AttentionRow fp8_row(ac_dtype dtype, double keys, double head_size, double l) {
  AttentionRow r;
  r.dtype = dtype;
  r.keys = keys;
  r.head_size = head_size;
  r.sum_exp_scaled = l;
  r.fp8_kv = true;
  return r;
}

}  // namespace

TEST_CASE("FP8 tensor-core sums: without their terms a kernel with the measured accumulator fails",
          "[fp8][truncated_sums][budgets]") {
  // A score (d = 128, scale 1): q_0 k_0 = 1 and 127 products 1.875 2^-12 (q_c = 2^-6, k_c = 1.875
  // 2^-6, e4m3fn codes 0x08 and 0x0f), each 3.75 units of 2^-13 and cut to 3 (the H100 did so with
  // 31 of them): the score is 127 * 0.75 2^-13 = 0.01163 low. The fp32 conditioning allows 2^-24
  // c_j, c_j about 3 d abs_dot: 2.4e-5. truncated_sum_error allows it, and c_j's term expm1(2
  // delta) >= delta.
  std::vector<double> q(128, 0x1p-6), k(128, 1.875 * 0x1p-6);
  q[0] = k[0] = 1;
  double exact = 0, abs_dot = 0;
  for (size_t c = 0; c < 128; ++c) exact += q[c] * k[c], abs_dot += std::fabs(q[c] * k[c]);
  const double err = std::fabs(tc_sum(q, k) - exact);
  const double fp32_only = 0x1p-24 * (score_conditioning(AC_DTYPE_F16, 128, abs_dot, 0, exact, false) +
                                      fp8_kv_score_conditioning(abs_dot) + fp8_q_score_conditioning(abs_dot));
  const double bound = truncated_sum_error(q.data(), k.data(), q.size(), kE4m3MinExp, kE4m3Frac);
  INFO("score: err " << err << " fp32 terms " << fp32_only << " truncated_sum_error " << bound);
  CHECK(err == Approx(127 * 0.75 * 0x1p-13).epsilon(1e-6));
  CHECK(err > fp32_only);
  CHECK(err <= bound);
  CHECK(err <= 0x1p-24 * truncated_sum_score_conditioning(1.0, bound));
  // The order matters: with the large product last, the small ones fill the first three
  // instructions on their own grid, where nothing is dropped.
  std::swap(q.front(), q.back());
  std::swap(k.front(), k.back());
  CHECK(std::fabs(tc_sum(q, k) - exact) < err / 4);
  CHECK(truncated_sum_error(nullptr, nullptr, 0, kE4m3MinExp, kE4m3Frac) == 0);
  // A subnormal code's product aligns at its field: 2^-9 x 448 = 0.875 has field -6 + 8 = 2, so
  // 1.875 2^-12 beside it is under the grid 2^-11 and dropped (as on the H100), 2^3 more than a
  // grid taken from 0.875's own exponent would drop; the bound holds.
  const std::vector<double> sa = {0x1p-9, 1.875 * 0x1p-6}, sb = {448, 0x1p-6};
  const double s_exact = 0.875 + 1.875 * 0x1p-12;
  CHECK(tc_sum(sa, sb) == 0.875);
  CHECK(s_exact - 0.875 <= truncated_sum_error(sa.data(), sb.data(), 2, kE4m3MinExp, kE4m3Frac));

  // P V (one chain of 128 keys, V = 1 but key 0's, which is 0): key 0 at the max (256 p = 256), key 1
  // with 256 p = 136, held as 128 (the tie between e4m3fn's 128 and 144 goes to even: 5.9% low),
  // keys 2..127 with 256 p = 7 2^-9 (an e4m3fn subnormal, exact), each under 2^-6, the grid of the
  // accumulator's 128: all dropped. O~ = 128 against 136 + 126 * 7 2^-9 exactly: 7.06% of S
  // low, more than P's e4m3fn term (2^-4 S and its subnormal part) and the output's ulps allow.
  std::vector<double> held(128, 7 * 0x1p-9), ones(128, 1.0), weights(128, 7 * 0x1p-9 / 256);
  held[0] = weights[0] = ones[0] = 0;  // V = 0 at key 0: its product is 0 whatever its weight
  held[1] = 128;
  weights[1] = 136.0 / 256;
  double l = 1, S = 0;
  for (size_t j = 1; j < 128; ++j) l += weights[j], S += weights[j];
  S /= l;  // V = 1: S = sum p |v| / l = O
  const double o_err = std::fabs(tc_sum(held, ones) / 256 / l - S);
  Budget b;
  AttentionRow r = fp8_row(AC_DTYPE_F16, 128, 128, l);
  r.p_e4m3 = true;
  r.v_min = 0x1p-6;  // e4m3fn's smallest normal, V's descale 1
  const double ulp_S = std::ldexp(1.0, std::ilogb(S) - 10);
  const double without = attention_o_allowance(b, r, ulp_S, S, 0, 1);
  r.truncated_sums = true;
  const double with = attention_o_allowance(b, r, ulp_S, S, 0, 1);
  INFO("P V: err " << o_err << " (" << o_err / S << " of S) without " << without << " with " << with);
  CHECK(o_err > without);
  CHECK(o_err <= with);
}

// FlashAttention-3's FP8 forward issues each key tile's P V wgmma into O's own accumulator, so a
// row's every product meets the truncating alignment of the measured accumulator above, not only
// 128 of them (AC_FP8_TRUNCATED_SUMS declares a fresh accumulator per 128 keys). Here one row of
// N = 8192 keys (the speed goal's T), V = 1 everywhere, key 0 at the max and the others' scores
// drawn in [-2, 0] (a fixed xorshift), P held as e4m3fn(256 p): O must be 1 (sum p v / l with
// v = 1), whatever the weights. Key 0 leads, so the max never moves and no rescale of O between
// tiles hides anything. Once the accumulator holds some 2^13 products' worth, each new product of
// at most 256 lies under its grid of 2^-13 of it and is cut toward zero: the row sums low.
TEST_CASE("FP8 tensor-core sums: one accumulator over an 8192-key row is past O's allowance",
          "[fp8][truncated_sums][budgets]") {
  constexpr size_t N = 8192;
  std::vector<double> held(N), ones(N, 1.0);
  uint64_t state = 0x2545f4914f6cdd1dull;
  double l = 0;
  for (size_t j = 0; j < N; ++j) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    const double s = j == 0 ? 0.0 : -2.0 * double(state >> 11) * 0x1p-53;
    const double p = std::exp(s);
    l += p;
    held[j] = double(kern::round_to_e4m3(float(256 * p)));
  }
  double held_sum = 0;
  for (const double h : held) held_sum += h;  // exact: multiples of 2^-9 below 2^22
  const double chained = tc_sum(held, ones), row = tc_sum(held, ones, N);
  const double o_chained = chained / 256 / l, o_row = row / 256 / l;
  const double allowance = v_one_fp8_row_allowance(double(N), l);
  // The worst case of one accumulator over the row, the declared bound's derivation with one chain.
  const double row_bound = truncated_sum_error(held.data(), ones.data(), N, kE4m3MinExp, kE4m3Frac, N);
  INFO("O with chains of 128: " << o_chained << ", with one accumulator: " << o_row << " (the sum "
                                << 1 - row / held_sum << " low); allowance " << allowance
                                << "; one chain's bound " << row_bound / held_sum << " of the sum");
  // Chains of 128, as declared: within O's allowance (and the truncation alone nearly exact here).
  CHECK(std::fabs(o_chained - 1) <= allowance);
  CHECK(std::fabs(chained - held_sum) <= 0x1p-20 * held_sum);
  // One accumulator: 14.4% low from the accumulator's cut alone, past the allowance's 13.1% (most
  // of which is P's 2^-4 per weight; at 2048 keys the same row loses 1.5%, inside it) ...
  CHECK(std::fabs(o_row - 1) > allowance);
  CHECK(1 - row / held_sum > 0.14);
  CHECK(row < held_sum);  // cut toward zero: never high
  // ... and the derivation, carried over the whole row as one chain, holds but allows 74% of the
  // sum: a budget of that form would pass nearly anything at this length.
  CHECK(held_sum - row <= row_bound);
  CHECK(row_bound > 0.7 * held_sum);
}

TEST_CASE("round_to_e4m3: the nearest e4m3fn value, ties to even, saturating at 448", "[fp8][p_e4m3]") {
  std::vector<float> xs = {0.0f,      -0.0f,     448.0f,    449.0f,        464.0f,        480.0f,   1e6f,
                           -1e6f,     0x1p-9f,   0x1p-10f,  0x1.0001p-10f, 0x0.ffffp-10f, 0x1p-11f, 0x1p-6f,
                           0x1.1p-6f, 0x1.08p0f, 0x1.18p0f, 0x1.17ffffp0f, 1e-30f,        0x1p-149f};
  // Every midpoint between neighbouring finite values, and a step either side of it.
  for (int code = 0; code < 0x7e; ++code) {
    const float lo = kern::fp8_to_float(AC_DTYPE_E4M3, uint8_t(code)),
                hi = kern::fp8_to_float(AC_DTYPE_E4M3, uint8_t(code + 1));
    const float mid = lo + (hi - lo) / 2;  // exact: both are short binary fractions
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid, lo});
  }
  for (int i = 0; i < 20000; ++i) xs.push_back(std::ldexp(float(i % 977) + 0.37f, -22 + i % 30));
  for (const float x : xs) {
    INFO(x);
    const float got = kern::round_to_e4m3(x), want = nearest_e4m3(x);
    CHECK(got == want);
    CHECK(std::signbit(got) == std::signbit(x));
  }
}

TEST_CASE("P in e4m3fn with the offset 2^8: each weight within 2^-4 p + 2^-18, both terms reached",
          "[fp8][p_e4m3][budgets]") {
  // budgets.cpp p_e4m3_o_allowance: a weight p <= 1 held as e4m3fn(256 p) / 256 moves by at most
  // 2^-4 p where 256 p is normal (>= 2^-6) and 2^-18 where it is subnormal. Swept over (0, 1]: the
  // largest ratio to the absolute term is 1 (a subnormal half-step), to the relative one
  // 1 / (1 + 2^-4) = 0.94 (256 p just below (1 + 2^-4) 2^k rounds down by 2^-4 2^k), so neither
  // constant could be much smaller.
  double worst = 0, worst_rel = 0, worst_abs = 0;
  for (int e = -30; e <= 0; ++e)
    for (int m = 0; m < 4096; ++m) {
      const float p = std::ldexp(1.0f + float(m) / 4096, e - 1);
      if (!(p <= 1.0f)) continue;
      const double err = std::fabs(double(kern::fused::p_e4m3(p)) - double(p));
      worst = std::max(worst, err / (0x1p-4 * p + 0x1p-18));
      if (256.0 * p >= 0x1p-6) worst_rel = std::max(worst_rel, err / (0x1p-4 * p));
      if (256.0 * p < 0x1p-6) worst_abs = std::max(worst_abs, err / 0x1p-18);
    }
  CHECK(worst <= 1.0);
  CHECK(worst_rel > 0.94);
  CHECK(worst_rel <= 1.0);
  CHECK(worst_abs > 0.99);
  CHECK(worst_abs <= 1.0);
  // Mutant 29 casts p itself: a weight of 2^-11 (below half of e4m3fn's smallest subnormal 2^-9)
  // becomes 0; with the offset it is 256 2^-11 = 2^-3, exact.
  CHECK(kern::fused::p_e4m3<kern::fused::Mutation::fp8_p_no_offset>(0x1p-11f) == 0.0f);
  CHECK(kern::fused::p_e4m3(0x1p-11f) == 0x1p-11f);
}

TEST_CASE("P in e4m3fn: without either term of its allowance a correct kernel's error fails",
          "[fp8][p_e4m3][budgets]") {
  // One row, 8 keys: key 0 at the max (p = 1, V = 0), keys 1..7 with weight p and V = 1; l is summed
  // from the unrounded weights (AC_FP8_P_E4M3). O = 7 p / l, and a kernel holding P in e4m3fn errs by
  // 7 (p~ - p) / l.
  auto row = [](double p, double held, bool declared, double& err, double& allowed_with,
                double& allowed_without) {
    const double l = 1 + 7 * p, S = 7 * p / l;
    err = 7 * std::fabs(held - p) / l;
    Budget b;
    AttentionRow r = fp8_row(AC_DTYPE_BF16, 8, 64, l);
    const double ulp_S = std::ldexp(1.0, std::ilogb(S) - 7);  // bf16: 8 significant bits
    r.p_e4m3 = false;
    allowed_without = attention_o_allowance(b, r, ulp_S, S, 0, 1);
    r.p_e4m3 = declared;
    allowed_with = attention_o_allowance(b, r, ulp_S, S, 0, 1);
  };
  double err = 0, with = 0, without = 0;
  // The relative term: 256 p = 1.0624 (a normal e4m3fn number's neighbours are 1 and 1.125) is held
  // as 1: each weight 0.0624 / 1.0624 = 5.9% low, over the bf16 allowance's 4 ulps (1.6% to 3.1%).
  const double p1 = 1.0624 / 256;
  row(p1, 1.0 / 256, true, err, with, without);
  INFO("relative: err " << err << " with " << with << " without " << without);
  CHECK(err > without);
  CHECK(err <= with);
  // The absolute term: 256 p = 1.0001 2^-10 rounds up to e4m3fn's smallest subnormal 2^-9: each
  // weight doubles (p~ - p = 0.9999 2^-18), far past 2^-4 p.
  const double p2 = 1.0001 * 0x1p-18;
  row(p2, 0x1p-17, true, err, with, without);
  INFO("absolute: err " << err << " with " << with << " without " << without);
  CHECK(err > without);
  CHECK(err > without + 0x1p-4 * (7 * p2 / (1 + 7 * p2)));  // the relative term alone is not enough
  CHECK(err <= with);
  CHECK(p_e4m3_o_allowance(1.0, 0, 1.0, 1.0, 256) == 0);  // a row without keys holds no weight
}

TEST_CASE(
    "P in e4m3fn with a call's p_scale: each weight within 2^-4 p + 2^-10 / p_scale, the scale's "
    "term reached",
    "[fp8][p_e4m3][p_scale][budgets]") {
  // budgets.cpp p_e4m3_o_allowance with p_scale s (AC_FP8_P_SCALE): s p rounded to fp32, cast to
  // e4m3fn, read back times the fp32 reciprocal of s (fused_math.h p_e4m3, three roundings more than
  // at s = 256). Swept over (0, 1] at scales whose reciprocal is inexact (300.5, 96, 57.375), at the
  // largest (448) and at 1: each weight within 2^-4 p + 2^-10 / s, the subnormal half-step 2^-10 / s
  // reached at every scale (so the fixed offset's 2^-18 is too small below s = 256: at 96 the
  // error reaches 2.6 times it), and the relative term within its 0.94 without an allowance for the
  // extra roundings.
  for (const float s : {300.5f, 96.0f, 57.375f, 448.0f, 1.0f}) {
    const float inv = 1.0f / s;
    double worst = 0, worst_rel = 0, worst_abs = 0;
    for (int e = -40; e <= 0; ++e)
      for (int m = 0; m < 4096; m += 3) {
        const float p = std::ldexp(1.0f + float(m) / 4096, e - 1);
        if (!(p <= 1.0f)) continue;
        const double err = std::fabs(double(kern::fused::p_e4m3(p, s, inv)) - double(p));
        worst = std::max(worst, err / (0x1p-4 * p + 0x1p-10 / double(s)));
        if (double(s) * p >= 0x1p-6 * (1 + 0x1p-20)) worst_rel = std::max(worst_rel, err / (0x1p-4 * p));
        if (double(s) * p < 0x1p-6) worst_abs = std::max(worst_abs, err / (0x1p-10 / double(s)));
      }
    INFO("p_scale " << s << ": worst " << worst << " relative " << worst_rel << " absolute " << worst_abs);
    CHECK(worst <= 1.0);
    CHECK(worst_rel <= 0.95);
    CHECK(worst_abs > 0.99);
    CHECK(worst_abs <= 1.0 + 1e-5);
    if (s < 256.0f) CHECK(worst_abs * (0x1p-10 / double(s)) > 2 * 0x1p-18);  // past the fixed offset's
  }
  // On O: a row of 8 keys, key 0 at the max with V = 0, keys 1..7 of weight p = 0.3 2^-10 with V = 1
  // at p_scale 1: each weight is a quarter of e4m3fn's smallest subnormal and rounds to 0, so O =
  // 7 p / l is lost whole. The allowance at s = 1 covers it; the fixed offset's does not.
  const double p = 0.3 * 0x1p-10, l = 1 + 7 * p, S = 7 * p / l;
  CHECK(kern::fused::p_e4m3(float(p), 1.0f, 1.0f) == 0.0f);
  CHECK(S <= p_e4m3_o_allowance(S, 8, 1.0, l, 1.0));
  CHECK(S > 2 * p_e4m3_o_allowance(S, 8, 1.0, l, 256.0));
  // Mutant 34 reads s p over 2^8: at s = 448 a weight of 1 comes back as 1.75.
  CHECK(kern::fused::p_e4m3<kern::fused::Mutation::fp8_p_scale_ignored>(1.0f, 448.0f, 1.0f / 448) == 1.75f);
}

TEST_CASE("fused-fp8 twin: Q in FP8 and P in e4m3fn on one hand-derived row", "[fp8][p_e4m3][twin]") {
  // One query, two keys, d = 64, all codes e4m3fn, softmax scale 1. Q one-hot on coordinate 0 with
  // code 0x38 (1.0), q_descale 2; K: key 0 all codes 0x00, key 1's coordinate 0 0xB8 (-1.0),
  // k_descale 2.5; V: key 0 all 0x00, key 1 all 0x38 (1.0), v_descale 1. Scores 0 and
  // 1 * 2 * -1 * 2.5 = -5: weights 1 and p = e^-5 = 6.7379e-3, l = 1 + p (unrounded), LSE =
  // ln(1 + e^-5).
  // fused-fp8 holds 256 p = 1.72492 in e4m3fn, whose values in [1, 2) are 0.125 apart: 1.75, so
  // P V reads 1.75 / 256 = 6.8359e-3 and O = 6.8359e-3 / 1.0067379 = 6.7902e-3 (fp16 spacing there
  // 2^-18 = 3.8e-6, relative 5.6e-4). fused-fp8kv rounds p to fp16 instead (the same spacing):
  // O = e^-5 / (1 + e^-5) = 6.6929e-3 within that rounding.
  const int d = 64;
  std::vector<uint8_t> q(d, 0), k(2 * d, 0), v(2 * d, 0);
  q[0] = 0x38;
  k[d] = 0xB8;
  for (int c = 0; c < d; ++c) v[d + c] = 0x38;
  const float q_descale = 2.0f, k_descale = 2.5f, v_descale = 1.0f;
  int32_t cu_q[2] = {0, 1}, cu_k[2] = {0, 2};
  auto run = [&](bool p_e4m3, bool fp8_q) {
    std::vector<uint16_t> out(d, 0x7e00);
    std::vector<float> lse(1, 12345.0f);
    std::vector<uint16_t> q16(d, 0);
    q16[0] = 0x4000;  // fp16 2.0: Q times its descale, for the call without an FP8 Q
    const ac_attention_args a = AttentionArgs(AC_DTYPE_F16, 1, 1, d)
                                    .sequences(1, cu_q, cu_k)
                                    .tensors(fp8_q ? static_cast<const void*>(q.data()) : q16.data(),
                                             k.data(), v.data(), out.data(), lse.data())
                                    .scale(1.0f)
                                    .fp8_kv(AC_DTYPE_E4M3, &k_descale, &v_descale, 0)
                                    .fp8_q(fp8_q ? &q_descale : nullptr);
    kern::FusedOptions o;
    o.p_e4m3 = p_e4m3;
    char err[256] = {};
    REQUIRE(kern::fused_attention_host(a, o, err, sizeof err) == AC_OK);
    return std::pair{kern::f16_to_float(out[0]), lse[0]};
  };
  const auto [o8, lse8] = run(true, true);
  CHECK(o8 == Approx(6.7902e-3).epsilon(6e-4));
  CHECK(lse8 == Approx(std::log1p(std::exp(-5.0))).epsilon(1e-5));  // l is unrounded
  const auto [o16, lse16] = run(false, true);
  CHECK(o16 == Approx(6.6929e-3).epsilon(6e-4));
  CHECK(lse16 == lse8);
  // Q in fp16 holding 2.0 with no q_descale: the same values, the same row.
  CHECK(run(false, false).first == o16);
  // A q_descale with a kernel that does not read FP8 Q is refused by name.
  std::vector<uint16_t> out(d);
  const ac_attention_args a = AttentionArgs(AC_DTYPE_F16, 1, 1, d)
                                  .sequences(1, cu_q, cu_k)
                                  .tensors(q.data(), k.data(), v.data(), out.data(), nullptr)
                                  .fp8_kv(AC_DTYPE_E4M3, &k_descale, &v_descale, 0)
                                  .fp8_q(&q_descale);
  char err[256] = {};
  CHECK(kern::fused_check_args(a, {}, kern::kNumFusedTilings, err, sizeof err,
                               kern::ArgScope{nullptr, 0, true, false}) == AC_ERR_UNSUPPORTED);
  CHECK(std::string(err).find("Q in FP8") != std::string::npos);
  // Descales per (sequence, KV head) where V's descale multiplies V (the fused twin) are refused by
  // name; the split-KV twin's scope (V's descale on the output) takes them.
  ac_attention_args g = a;
  g.q_descale = nullptr;
  g.descale_granularity = 2;
  CHECK(kern::fused_check_args(g, {}, kern::kNumFusedTilings, err, sizeof err, kern::kTwinScope) ==
        AC_ERR_UNSUPPORTED);
  CHECK(std::string(err) == "fused attention: descales per (sequence, KV head) are not read by this kernel");
  kern::ArgScope output_scope = kern::kTwinScope;
  output_scope.fp8_per_sequence = true;
  CHECK(kern::fused_check_args(g, {}, kern::kNumFusedTilings, err, sizeof err, output_scope) == AC_OK);
}
