// Error budgets: every formula, each next to its derivation. Changing a number here changes
// verdicts; the derivations say what a correct kernel can be off by and why.
//
// A correct kernel accumulates in fp32, may round P to the storage format before P*V (FA2 style),
// and rounds the output once. With u_F = 2^-p the unit roundoff of the output format F:
//   - rounding P to F perturbs each weight by at most u_F relatively, so O moves by at most
//     u_F * S with S = sum_j p_j |v_j|: at most 1 ulp_F(S) (ulp_F(S) is between u_F S and 2 u_F S);
//   - the final rounding of O adds 0.5 ulp_F(O) <= 0.5 ulp_F(S);
//   - fp32 accumulation over N keys and d products adds up to (N + d) 2^-24 S, and rounding an fp32
//     score s_j = scale * q.k_j moves exp(s_j - m) by up to (d |scale| sum_c |q_c k_jc| +
//     |s_j - m| + 4) 2^-24 relatively: the conditioning of the problem in fp32, not kernel slack.
//   - where P = e^(s - m) is subnormal in F its rounding error is absolute: up to half the smallest
//     subnormal per key, so O moves by up to N sub_F max|v| / (2 l), l = sum e^(s - m) >= 1;
//   - a subject that declares a flushed exp2 (AC_FEAT_FLUSHED_EXP) may flush a weight p below
//     fp32's smallest normal 2^-126 to 0 (the exp2 of kernels built with fast math): up to 2^-126
//     per key absolutely. With F the dropped keys, O = (sum p v - sum_F p v) / (l - dl) moves by
//     (O dl - sum_F p v) / (l - dl): the second part is at most N 2^-126 max|v| / l, the term added
//     (more than the one above in bf16 and fp32); the first, |O| N 2^-126 / l, is far inside the
//     fp32 term 2^-24 N S (S >= |O|). l off by up to N 2^-126 moves the LSE by N 2^-126 / l
//     natural-log units.
// o_ulp = 4 passes this analysis (1.5) with margin; the deliberately broken kernels (mutants) err
// by whole units (NaN, a lost rescale, a wrong base, a missed head), far beyond it.
// The error itself is measured exactly (measure.cpp); the allowances are evaluated in double, as
// they only size the bound.
#include "attncheck/budgets.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

namespace attncheck {

namespace {
constexpr double kFp32Unit = 0x1p-24;  // u of fp32, in which every correct kernel accumulates
}  // namespace

Budget default_budget(uint32_t /*op*/, ac_dtype /*dtype*/) {
  // The same numbers for every op and dtype: the budgets are in ulps of the output format, and the
  // format-dependent parts (u_F, fp32 conditioning) are in the formulas below, not the constants.
  return Budget{};
}

double unit_roundoff(ac_dtype d) {
  return d == AC_DTYPE_F16 ? 0x1p-11 : d == AC_DTYPE_BF16 ? 0x1p-8 : 0x1p-24;
}
double min_subnormal(ac_dtype d) {
  return d == AC_DTYPE_F16 ? 0x1p-24 : d == AC_DTYPE_BF16 ? 0x1p-133 : 0x1p-149;
}

// c_j, in units of 2^-24 relative to p_j: d fp32 products and their sum (d |scale| sum |q k|), the
// exponent argument s_j - m rounded in fp32 (|s_j - m|), and the exp and the division (4). A score
// stored in the input format (AC_FEAT_SCORES_IN_INPUT_TYPE) is off by up to u_F |s_j| (and half its
// smallest subnormal); that moves p_j relatively by as much, and the normalisation by as much again.
double score_conditioning(ac_dtype d, double head_size, double abs_dot, double dist, double score,
                          bool scores_rounded) {
  double c = head_size * abs_dot + dist + 4;
  if (scores_rounded) c += 2 * (unit_roundoff(d) * std::fabs(score) + 0.5 * min_subnormal(d)) / kFp32Unit;
  return c;
}

// An FP8 KV cache (AC_FP8_*): the kernel is given codes and descales, and the exact reference is
// that of decode(code) * descale. A kernel forms k * ds in fp32, one rounding per element (2^-24
// relative on each of the d products of q.k: abs_dot 2^-24 more on the score), or folds ds into
// the softmax scale, one rounding of scale * ds (2^-24 |t| <= abs_dot 2^-24): either way c_j gains
// abs_dot. Likewise v * ds in fp32, or O~ * ds once at the end: 2^-24 relative on each value, S
// 2^-24 more on O (one more term of the (N + d + 8) S below). The LSE sees the scores' part
// through sum p_j c_j. (tests/properties/test_fp8_kv.cpp: each increment.)
double fp8_kv_score_conditioning(double abs_dot) { return abs_dot; }
double fp8_kv_o_terms() { return 1; }
// Q in FP8 (AC_FP8_Q): q_descale, applied to each q value in fp32 or folded into the scale next to
// k_descale, is one more fp32 rounding of the same kind as K's: abs_dot more on c_j.
// (tests/properties/test_fp8_kv.cpp: the increment.)
double fp8_q_score_conditioning(double abs_dot) { return abs_dot; }

// P in e4m3fn with the offset 2^8 (AC_FP8_P_E4M3, FlashAttention-3): the kernel stores 256 p_j, p_j =
// e^(s_j - m) <= 1 against its running max m, as the nearest e4m3fn value (ties to even) and
// multiplies V by that over 256; l sums the unrounded weights. e4m3fn keeps 3 bits after the
// leading one, so a normal value (256 p_j >= 2^-6) moves by at most half its spacing, 2^-4 p_j; a
// subnormal one (spacing 2^-9) by at most 2^-10, which is 2^-18 in p_j. 256 p_j <= 256 < 448: it
// never saturates. A later max m' >= m rescales the stored products by e^(m - m') <= 1 in fp32, which
// keeps the relative error and shrinks the absolute one, so against the final max each weight is
// off by at most 2^-4 p_j + 2^-18, and O = sum p_j v_j / l by at most 2^-4 S + N 2^-18 vmax / l, l =
// sum e^(s_j - max) >= 1. The LSE is unchanged (l is summed before the rounding). Without the offset
// every weight below 2^-6 would be subnormal in e4m3fn and every one below 2^-10 zero: a row of
// comparable scores would lose most of its mass, which this term does not allow
// (tests/properties/test_fp8_kv.cpp: the term, and mutant 29).
// A call's p_scale s in [2^-126, 448] (AC_FP8_P_SCALE, cuDNN's scale_s) in place of 256: s p_j <= 448
// never saturates either. The subnormal step is 2^-10 / s in p_j: 2^-18 at s = 256, 2^-10 at s = 1,
// where every weight below 2^-10 may be lost (a contract that declares it). The product s p_j may be
// rounded to fp32 first and the stored value read back by a division, or by the fp32 reciprocal and
// a product: three roundings of 2^-24 more (or, where P V takes the codes and O is multiplied once
// by the reciprocal, one rounding of |sum_j code_j v_j| <= sum_j |code_j v_j|, no more than one a
// weight, in place of the per-weight one), which need no term of their own: a normal value's cast
// moves it by at most 2^-4 / (1 + 2^-4) relative (the nearest of 2^k and (1 + 2^-3) 2^k to a value
// below (1 + 2^-4) 2^k), so (1 + 2^-24)^3 (1 + 2^-4 / (1 + 2^-4)) - 1 < 2^-4, and a subnormal one's
// 2^-10 / s leaves the 2^-4 p_j term free for them (tests/kernels_attention/fp8_forward_twin_test.cpp:
// the scale's terms swept, and mutant 34).
double p_e4m3_o_allowance(double S, double keys, double vmax, double sum_exp_scaled, double p_scale) {
  if (keys <= 0) return 0;
  return 0x1p-4 * S + keys * 0x1p-10 / p_scale * vmax / std::max(sum_exp_scaled, 1.0);
}

// Sums on the FP8 tensor cores (AC_FP8_TRUNCATED_SUMS). An instruction adds 32 products t = a b of
// FP8 codes' values to its accumulator c. Measured on the kernel's wgmma (kernels_hopper_gpu
// "[truncated_sums]"): L is the largest exponent field among the addends, E_a + E_b for a product of
// nonzero codes (a subnormal at the format's smallest normal exponent, so a subnormal's product may
// lie 2^3 below its field; a zero code's product takes no part) and ilogb(c) for c != 0; each
// addend is truncated toward zero to a multiple of 2^(L - 13), and the result keeps 13 bits.
// The bound allows one bit more: a grid of g = 2^(L - 12), u = 2^-12 on the result. An addend on
// that grid does not move: a product's last bit is 2^(E_a + E_b - 2 f), f the format's fraction
// bits (e4m3 3, e5m2 2), so one with E_a + E_b - 2 f >= L - 12 is exact; any other moves by less
// than min(g, |t|) (toward zero never passes zero). c moves by less than min(g, |c|). With C_i the
// exact partial sum after instruction i and E_i a bound on the accumulator's distance from it:
// |c| <= |C_(i-1)| + E_(i-1), the addends move by at most D_i, and E_i = E_(i-1) + D_i + u
// (|C_i| + E_(i-1) + D_i). A chain ends after at most 128 products, where the kernel adds it to
// fp32 registers (one fp32 rounding, inside the fp32 terms): the chains' bounds add. The fields
// are the codes' (their descales scale t, C and E alike: the caller multiplies by them).
//   - A score: q's and k's code values in column order (32 columns an instruction, 128 a chain);
//     the score moves by delta = |scale| q_descale k_descale E, its weight by a factor within
//     e^(+-delta), and O = sum p v / sum p, with numerator and denominator moved alike, by at most
//     expm1(2 delta) relative per key: c_j gains expm1(2 delta) / 2^-24 (the 2 covers the
//     denominator's move, which a first-order term would miss for large delta). Past delta = 300
//     the weight says nothing (c_j stays finite, so that a zero weight times it is still 0).
//   - P V (P in e4m3, a fresh accumulator per 128 keys): in no known order and with P's codes the
//     kernel's own, so every addend may move by g and |C_i| is bounded by A, the chain's sum of
//     the fields 2^(E_P + E_v) (each at least |t|). A field is at most max(P, 2^-6) max(|v|, v_min)
//     in code units, P = p_scale p held within 2^-4 and v_min the format's smallest normal: per key,
//     in O's units, (1 + 2^-4) p (|v| + v_min) + 2^-6 / p_scale max(|v|, v_min) (2^-14 at the
//     fixed 2^8), v_min now times V's descale. Summed over the keys and divided by l:
//     S_fields = S + v_min + N 2^-6 / p_scale max(vmax, v_min) / l
//     (sum p / l = 1), the caller's. Four instructions then give F A (F = 4 * 34 u to first order,
//     computed below): O moves by at most F (1 + 2^-4) (S_fields + 2^-24 cond), cond for the kernel's
//     weights' own relative error c_j 2^-24.
// Without these terms a kernel with Hopper's e4m3 wgmma fails a single key's LSE by 800 ulps
// (tests/kernels_attention/fp8_forward_twin_test.cpp: the emulated accumulator against each term).
double truncated_sum_error(const double* a, const double* b, size_t n, int e_min, int frac, size_t chain) {
  constexpr double u = kTruncatedSumUnit;
  auto field = [&](double x) { return std::max(std::ilogb(x), e_min); };
  double total = 0;
  for (size_t start = 0; start < n; start += chain) {
    const size_t chain_end = std::min(n, start + chain);
    double C = 0, E = 0;
    for (size_t i = start; i < chain_end; i += kTruncatedStep) {
      const size_t end = std::min(chain_end, i + kTruncatedStep);
      const double c_abs = std::fabs(C) + E;
      int L = c_abs > 0 ? std::ilogb(c_abs) : INT_MIN;
      for (size_t k = i; k < end; ++k)
        if (a[k] != 0 && b[k] != 0) L = std::max(L, field(a[k]) + field(b[k]));
      if (L == INT_MIN) continue;  // every product 0 and no accumulator: 0 exactly
      const double g = std::ldexp(1.0, L - 12);
      double D = std::min(g, c_abs);
      for (size_t k = i; k < end; ++k) {
        const double t = a[k] * b[k];
        if (t != 0 && field(a[k]) + field(b[k]) - 2 * frac < L - 12) D += std::min(g, std::fabs(t));
        C += t;
      }
      E += D + u * (std::fabs(C) + E + D);
    }
    total += E;
  }
  return total;
}
double truncated_sum_score_conditioning(double scale_abs, double dot_error) {
  return std::expm1(std::min(2 * scale_abs * dot_error, 600.0)) / kFp32Unit;
}
double truncated_pv_o_allowance(double S_fields, double cond) {
  // F: E after the chain's instructions with |C_i| at its bound A = 1 and every addend moving by g
  // <= u A; once, as every O element's allowance asks for it.
  static const double F = [] {
    constexpr double u = kTruncatedSumUnit;
    double E = 0;
    for (int i = 0; i < kTruncatedChain / kTruncatedStep; ++i) {
      const double D = (kTruncatedStep + 1) * u * (1 + E);
      E += D + u * (1 + E + D);
    }
    return E;
  }();
  return F * (1 + 0x1p-4) * (S_fields + kFp32Unit * cond);
}

// Softcap (AC_VAR_SOFTCAP): the kernel forms c = fl(cap fl(tanh(fl(t~ / cap)))) from its fp32
// t~ = scale q.k, then the exponent as for any score. Against the exact c = cap tanh(t / cap):
//   - t~ is off by (d abs_dot + |t|) 2^-24 (the d products and sum, and the scale's rounding), the
//     division by cap adds |t| 2^-24 / cap to the argument: cap times an argument error e moves c by
//     at most cap sech^2(t / cap) e, so together sech^2(t / cap) (d abs_dot + 2 |t|) 2^-24 (tanh's
//     slope is 1 at 0 and vanishes where it saturates, which is why a cap that saturates is cheap);
//   - tanh itself errs by at most 4 ulp of its result (twice what CUDA's tanhf and glibc's tanhf
//     document), 4 |c| 2^-24, and the multiplication by cap rounds once more, |c| 2^-24.
// c's error moves p_j = e^(c_j - m) relatively by as much; dist and the exp and division add as for
// a plain score (dist + 4). So c_j = sech^2 (d abs_dot + 2 |t|) + 5 |c| + dist + 4. Without the cap
// terms a capped row near the cap's knee is judged against a plain score's conditioning, which
// misses the tanh and the cap's roundings (tests/properties/test_variants.cpp).
double softcap_conditioning(double head_size, double abs_dot, double t, double cap, double capped,
                            double dist) {
  const double x = std::fabs(t / cap);
  // sech^2 x = 4 / (e^x + e^-x)^2, 0 in double past x = 400 (e^-800 underflows: below any ulp).
  const double sech2 = x > 400 ? 0.0 : 4.0 / std::pow(std::exp(x) + std::exp(-x), 2);
  return sech2 * (head_size * abs_dot + 2 * std::fabs(t)) + 5 * std::fabs(capped) + dist + 4;
}
// Sinks (AC_VAR_SINKS): the sink's weight e^(sink - m) joins the denominator. The kernel scales the
// sink to base 2 by fp32 log2 e: half an ulp of the result (up to 2^-24 relative) and the
// constant's own relative error (0.23 2^-24) move the exponent by 1.23 |sink| 2^-24 at most,
// natural units (tests/properties/test_variants.cpp measures 1.17); a shift of the max itself moves
// every weight alike and cancels. The subtraction of the max rounds once more (|sink - m| 2^-24),
// and exp2 and the rescale of l add 4: c_sink = 2 |sink| + dist + 4, relative to the sink's weight w.
// A relative error delta in w moves l by w delta (l = 1 after normalisation), so O by at most
// w delta |O| <= w delta S and the LSE by w delta: the judge adds w c_sink S to O's conditioning and
// w c_sink to the LSE's (judge_attention.cpp), each multiplied by 2^-24 in the allowances like every
// other key's.
double sink_conditioning(double sink, double dist) { return 2 * std::fabs(sink) + dist + 4; }
// A naive exp overflows when the score, as the kernel computed it, exceeds ln of the overflow
// threshold. The kernel's fp32 score is off by up to 2 d 2^-24 |scale| sum |q k| (products and
// sum), our double evaluation by a relative 1e-6 at most; a score stored in the input format
// decides overflow after its own rounding, u_F |s|.
double naive_exp_overflow_slack(ac_dtype d, double head_size, double abs_dot, double score,
                                bool scores_rounded) {
  const double slack = 1e-6 * std::max(1.0, std::fabs(score)) + 2 * head_size * kFp32Unit * abs_dot;
  return slack + (scores_rounded ? unit_roundoff(d) * std::fabs(score) : 0.0);
}
// Softmax inputs are stored values: only our evaluation of the threshold is uncertain.
double softmax_overflow_slack(double x) { return 1e-6 * std::fabs(x); }

// fp32's gradual underflow: an fp32 product whose result lies below 2^-126 is rounded to a
// multiple of 2^-149, off by up to 2^-150 absolutely, which no relative term covers (a product
// p_j v_j of 2^-136 keeps 13 bits). Sums and differences whose result is subnormal are exact, but
// a kernel may fuse them (fma): counted as well. Per key of a row, the unnormalised sum O~ takes
// the product p_j v_j and its addition, and the rescale alpha O~ at most once per key; a split-KV
// combine of at most N partial states adds a weight times a partial O and its addition per state:
// 5 N roundings of at most 2^-150, which O = O~ / l (l >= 1) divides. Each counts in the units the
// kernel sums in: a kernel that applies V's descale to O once (FlashAttention-3) sums codes, so its
// roundings are multiplied by v_descale; one that sums P's e4m3 codes, p_j times p_scale, and
// reads them over p_scale, by 1 / p_scale. Rows whose fp32 values stay normal are unaffected
// beyond 5 N 2^-150 max(1, v_descale) max(1, 1 / p_scale) absolutely.
double gradual_underflow_o_allowance(const AttentionRow& r) {
  const double codes = r.fp8_kv ? std::max(1.0, r.v_descale) : 1.0;
  const double p_codes = r.p_e4m3 ? std::max(1.0, 1.0 / r.p_scale) : 1.0;
  return 5 * r.keys * 0x1p-150 * codes * p_codes;
}

// Attention O: |O - O_exact| <= o_ulp * ulp_F(S) + 2^-24 [(N + d + 8) S + sum_j p_j |v_j| c_j]
//   + N max(sub_F / 2, 2^-126 when the subject declares a flushed exp2) max|v| / l
//   + gradual_underflow_o_allowance.
// A declared naive exp (AC_FEAT_NAIVE_EXP) stores e^s rounded to F (u_F per term), sums the rounded
// terms and rounds P again: + 3 u_F S, plus the subnormal absolute error of the stored e^s,
// N sub_F max|v| / sum e^s. (Rows whose exp overflows, or whose largest term is subnormal, are the
// hazard and are skipped by the properties.)
double attention_o_allowance(const Budget& b, const AttentionRow& r, double ulp_S, double S, double cond,
                             double vmax) {
  const double N = r.keys;
  const double fp8 = r.fp8_kv ? fp8_kv_o_terms() : 0.0;
  double allowed = b.o_ulp * ulp_S + kFp32Unit * ((N + r.head_size + 8 + fp8) * S + cond) +
                   attention_ftz_o_allowance(r, S, vmax) + gradual_underflow_o_allowance(r);
  const double p_abs = std::max(0.5 * min_subnormal(r.dtype), r.flushed_exp ? 0x1p-126 : 0.0);
  if (N > 0) allowed += p_abs * N * vmax / std::max(r.sum_exp_scaled, 1.0);
  if (r.p_e4m3) allowed += p_e4m3_o_allowance(S, N, vmax, r.sum_exp_scaled, r.p_scale);
  if (r.truncated_sums && r.p_e4m3 && N > 0) {  // P V on e4m3 codes
    // A subnormal P code's field is e4m3fn's smallest normal 2^-6, 2^-6 / p_scale in p_j.
    const double S_fields =
        S + r.v_min + N * 0x1p-6 / r.p_scale * std::max(vmax, r.v_min) / std::max(r.sum_exp_scaled, 1.0);
    allowed += truncated_pv_o_allowance(S_fields, cond);
  }
  if (r.naive_exp && N > 0) {
    const double sum_exp = std::exp(r.max_score) * r.sum_exp_scaled;
    allowed += 3 * unit_roundoff(r.dtype) * S + N * min_subnormal(r.dtype) * vmax / std::max(sum_exp, 1e-300);
  }
  return allowed;
}

// Attention LSE (fp32): |LSE - exact| <= 2^-24 [lse_ulp * max(1, |exact|) + (N + 2 + sum_j p_j c_j)
// per natural-log unit]: the sum of N terms, the log and the final addition of the max. lse_ulp =
// 16. A declared naive exp takes the log of a sum of e^s rounded to the storage format: the sum is
// off by 2 u_F relatively, plus the subnormal absolute error of each stored term.
double attention_lse_allowance(const Budget& b, const AttentionRow& r, double lse_scale, double cond,
                               double lse_unit) {
  const double N = r.keys;
  double allowed = kFp32Unit * (b.lse_ulp * lse_scale + (N + 2 + cond) * lse_unit) +
                   attention_ftz_lse_allowance(r) * lse_unit;
  if (r.flushed_exp && N > 0) allowed += 0x1p-126 * N / std::max(r.sum_exp_scaled, 1.0) * lse_unit;
  if (r.naive_exp && N > 0) {
    const double sum_exp = std::exp(r.max_score) * r.sum_exp_scaled;
    allowed +=
        (2 * unit_roundoff(r.dtype) + N * min_subnormal(r.dtype) / std::max(sum_exp, 1e-300)) * lse_unit;
  }
  return allowed;
}

// FTZ / DAZ arithmetic (AC_CAP_FTZ_ARITHMETIC): the kernel reads a subnormal input as 0 and
// flushes every fp32 result below T = 2^-126 to 0. The flushes are fp32's: an fp32 or bf16 input
// below T reads as 0, while fp16's subnormals (2^-24 and up) are normal fp32 numbers and stay, so
// T bounds every flushed input of every format. A flush replaces a value x, |x| < T, by 0: it
// moves that value by less than T, and the output by T times what the output's derivative with
// respect to that value can be. Counted per row of N visible keys, d the head size:
//   - a score s_j = scale sum_c q_c k_jc: an input q_c read as 0 moves the product by |q_c k_jc| <
//     T |k_jc|, a k_jc by < T |q_c|; each of the d products and d partial sums flushed moves the
//     dot by < T; the scaled score and the exponent argument s_j - m flushed, < T each (a base-2
//     argument is in units of ln 2 < 1). So |ds_j| <= Ds = T (qk_abs + 2 d |scale| + 2), qk_abs =
//     |scale| (sum_c |q_c| + max_j sum_c |k_jc|). Every weight p_j = e^(s_j - m) is then off by a
//     factor within e^(+-Ds), which moves O = sum p v / sum p by at most (e^(2 Ds) - 1) S and the
//     LSE by Ds.
//   - the unnormalised sum O~ = sum_j p_j v_j of a column, per key j: v_j read as 0 (< p_j T <= T,
//     p_j <= 1), p_j flushed (< T |v_j| <= T vmax), the product p_j v_j flushed (< T), the partial
//     sum flushed (< T), the rescale alpha O~ flushed (< T): at most N T (vmax + 4), which O = O~ / l
//     divides by l >= 1. A split-KV combine of at most N partial states (each one's O normalised,
//     so these terms weigh in with shares summing to 1) adds per state a flushed weight, product and
//     partial sum (< T vmax, T, T) and a flushed partial LSE: at most N T (vmax + 3) more; bounded
//     together, 2 N T (vmax + 4). The final O~ / l flushed: T.
//   - l = sum p: each p_j flushed and each partial sum flushed, 2 N T, so l is off relatively by
//     2 N T / l <= 2 N T, which moves O by |O| <= S times as much; the combine's partial LSEs as
//     much again: S 4 N T. The LSE, log l + m, moves by the same 4 N T, and the log, the addition of
//     m and the change of base flushed add 3 T.
// Total: O + T (2 N (vmax + 4) + 1) + S (4 N T + e^(2 Ds) - 1); LSE + Ds + (4 N + 3) T, in
// natural-log units. Every term carries the factor T: below 2^-100 for inputs of moderate size,
// none scales with the output's ulp, so a kernel that loses precision on normal numbers still fails.
// A split-KV partial state without keys is exactly 0 and flushes nothing, hence N states at most.
// A zero for a subnormal output is allowed as under AC_CAP_FLUSHES_SUBNORMALS (below), which an FTZ
// kernel's final store also does. The weights' flush is AC_FEAT_FLUSHED_EXP's term as well; the two
// may be declared together (the larger term, FTZ's, then contains it, and both are added).
namespace {
double attention_ftz_score_shift(const AttentionRow& r) {
  return 0x1p-126 * (r.qk_abs + 2 * r.head_size * r.scale_abs + 2);
}
}  // namespace
double attention_ftz_o_allowance(const AttentionRow& r, double S, double vmax) {
  if (!r.ftz) return 0;
  const double T = 0x1p-126, N = r.keys;
  return T * (2 * N * (vmax + 4) + 1) + S * (4 * N * T + std::expm1(2 * attention_ftz_score_shift(r)));
}
double attention_ftz_lse_allowance(const AttentionRow& r) {
  if (!r.ftz) return 0;
  const double T = 0x1p-126;
  return attention_ftz_score_shift(r) + (4 * r.keys + 3) * T;
}

// Merge O: |O - exact| <= o_ulp * ulp_F(S) + 2^-23 (|M| + 8) S + 2^-149 T with S = w_a|O_a| +
// w_b|O_b| and M the larger LSE: fp32 LSE differences are exact to 2^-24 |M|, and the weights' exp,
// sum and division add a few fp32 ulps each. T sums |O_i| over the sides whose weight e^(L_i - M)
// lies below fp32's normal range (2^-126): such a weight is an fp32 subnormal, off by up to half
// the subnormal spacing 2^-149 absolutely however it is computed (its exp rounds once more there:
// one full spacing), and that absolute error is multiplied by O_i. Relative terms cannot cover it:
// with L_a - M = -104, the exact weight e^-104 = 6.8e-46 rounds to 2^-149 = 1.4e-45 at best.
double merge_o_allowance(const Budget& b, double ulp_S, double S, double max_lse_abs,
                         double subnormal_weighted) {
  return b.o_ulp * ulp_S + 0x1p-23 * (max_lse_abs + 8) * S + 0x1p-149 * subnormal_weighted;
}
// An FP8 output (a merge's, ac_merge_args.out_dtype): the kernel's fp32 value v lies within
// `allowance` of the exact x (the fp32 output's budget, its last rounding included), and v / scale
// is rounded once in fp32: off by half an fp32 ulp, at most 2^-24 |v / scale| (2^-150 absolutely
// in fp32's subnormal range), taken outward with a margin for this double arithmetic. The cast to
// the format is judged exactly: measure_fp8 passes every code between those of the interval's ends.
Fp8Interval fp8_output_interval(double exact, double allowance, double scale) {
  const double lo = (exact - allowance) / scale, hi = (exact + allowance) / scale;
  constexpr double kDivision = 0x1.0001p-24;
  return {lo - kDivision * std::fabs(lo) - 0x1p-150, hi + kDivision * std::fabs(hi) + 0x1p-150};
}

// The maxima of an FP8 call (AC_FP8_AMAX, property fp8_amax).
// P's: the kernel writes some key's weight w~_j = e^(s~_j - L~), normalised, formed in fp32 (as
// e^(s~_j - m~) / l~ or e^(s~_j - L~) alike, L~ = m~ + ln l~). Its score is within 2^-24 c_j of s_j
// (c_j the score's conditioning, the one O's allowance weighs each p_j by), its log-sum within the
// LSE allowance of L (attention_lse_allowance, in natural-log units), and the fp32 steps after
// them (the subtraction, the exp, the division or the product with 1 / l, the result) round at most
// four times, each by a factor within 1 +- 2^-24, ln(1 + u) <= u: |ln w~_j - ln w_j| <= delta_j =
// lse_allowance + 2^-24 (c_j + 4). The largest of the w~_j then lies in [max_j w_j e^-delta_j,
// max_j w_j e^delta_j] (judge_attention.cpp), whichever key the kernel's maximum falls on.
double amax_weight_log_allowance(double lse_allowance, double score_cond) {
  return lse_allowance + 0x1p-24 * (score_cond + 4);
}
// A weight below fp32's normal range (2^-126) is a subnormal, and each of those roundings that lands
// there is off by up to half its spacing, 2^-150, absolutely: four of them 2^-148 (a sink far above
// every score makes every weight such a number, or 0). A kernel that declares flushing (a flushed
// exp2, FTZ arithmetic) may write 0 for it.
AmaxWeightInterval amax_weight_interval(double w, double log_allowance, bool may_flush) {
  const double lo = w * std::exp(-log_allowance), hi = w * std::exp(log_allowance);
  constexpr double kMargin = 0x1p-50;  // this double arithmetic
  return {may_flush && lo < 0x1p-126 ? 0.0 : std::max(0.0, lo * (1 - kMargin) - 0x1p-148),
          hi * (1 + kMargin) + 0x1p-148};
}
// O's: the largest |O| before output_scale and any cast. An FP8 output's fp32 value is within its
// allowance (the fp32 budget, fp8_output_interval's); an output stored in F is within it after its
// last rounding to F, so the value before that rounding is within the allowance plus half an ulp of
// F at it: at most u_F (|x| + allowance) + sub_F / 2.
double amax_o_allowance(ac_dtype stored, bool fp8_out, double exact_abs, double allowance) {
  if (fp8_out) return allowance;
  return allowance + unit_roundoff(stored) * (exact_abs + allowance) + 0.5 * min_subnormal(stored);
}

// Merge LSE: as attention's with N = 2 and no score conditioning: 2^-24 (lse_ulp max(1, |M|) + 4).
double merge_lse_allowance(const Budget& b, double lse_scale) {
  return 0x1p-24 * (b.lse_ulp * lse_scale + 4);
}

// Softmax: |y - exact| <= softmax_ulp * ulp_F(exact) + 2^-24 (N + |x - max| + 8) |exact|: the fp32
// sum of N terms, the exponent argument x - max, the exp and the division. A declared naive exp
// adds, as for attention, 3 u_F |exact| + N sub_F / sum e^x.
double softmax_allowance(const Budget& b, ac_dtype d, double ulp_exact, double keys, double dist_to_max,
                         double y_abs, bool naive_exp, double sum_exp) {
  double allowed = b.softmax_ulp * ulp_exact + kFp32Unit * (keys + dist_to_max + 8) * y_abs;
  if (naive_exp && keys > 0)
    allowed += 3 * unit_roundoff(d) * y_abs + keys * min_subnormal(d) / std::max(sum_exp, 1e-300);
  return allowed;
}

// Flushed subnormals (AC_CAP_FLUSHES_SUBNORMALS): a kernel running with FTZ / DAZ replaces a
// result whose magnitude is below the smallest normal min_F of its format by a zero, instead of the
// subnormal (or the rounding to a subnormal) a correct IEEE kernel would store. A correct kernel's
// value y before the flush is within the element's ordinary allowance a of the exact value x,
// |y - x| <= a; it is flushed exactly when 0 < |y| < min_F. So a stored zero is what such a kernel
// may write iff some y in [x - a, x + a] lies in the subnormal range (-min_F, min_F) \ {0}:
//   |x| - a < min_F  (the budget interval reaches into the subnormal range),
// and for its sign: +0 is the usual flush result, and the flush of a negative y may keep its sign,
// so -0 also needs a negative y in range, x - a < 0. Nothing else is relaxed: a nonzero output is
// judged by the ordinary allowance, and a zero where every y within budget is normal (|x| - a >=
// min_F) is still an error. An fp32 intermediate flushed inside the kernel moves its result by less
// than 2^-126 per flushed term; a declared flush buys no allowance for that beyond the zero above,
// so a kernel whose intermediate flushes push a normal output past its budget fails. (Attention's
// weights p flushed by its exp2 are declared apart, AC_FEAT_FLUSHED_EXP, and flushed inputs and
// intermediates as a whole, AC_CAP_FTZ_ARITHMETIC; both are allowed for in the attention
// allowances above.)
double min_normal(ac_dtype d) { return d == AC_DTYPE_F16 ? 0x1p-14 : 0x1p-126; }
bool flushed_zero_allowed(ac_dtype d, double exact, double allowed, bool negative) {
  if (!std::isfinite(exact)) return false;
  if (!(std::fabs(exact) - allowed < min_normal(d))) return false;
  return !negative || exact - allowed < 0;
}

// An LSE in the other base (or written in the other layout) differs from the declared reading by
// far more than the budget; within 8 budgets of the other reading (and a relative 1e-6 for the
// double evaluation of the other base) is that confusion, not an inaccuracy.
double lse_other_base_tolerance(double allowed, double out_value) {
  return 8 * allowed + 1e-6 * std::fabs(out_value);
}
double lse_other_layout_tolerance(double allowed) { return allowed * 8; }

// split_equals_whole: merging the two partial states exactly leaves each part's O error weighted
// by its share (w0 e0 + w1 e1), and each part's LSE error moves the shares: d w0 = w0 w1 (dL0 -
// dL1) in natural-log units, which moves the merged O by w0 w1 |O0 - O1| |dL0 - dL1|, bounded with
// a factor 2 of margin. 1e-300 keeps a zero allowance from failing an exact zero; the comparison
// allows a relative 1e-4 for evaluating all of this in double.
double split_merge_allowance(double w0, double w1, double o_allowed0, double o_allowed1, double o0, double o1,
                             double lse_allowed0, double lse_allowed1, double lse_to_nat) {
  const double mix =
      w0 > 0 && w1 > 0 ? 2 * w0 * w1 * std::fabs(o0 - o1) * (lse_allowed0 + lse_allowed1) * lse_to_nat : 0.0;
  return w0 * o_allowed0 + w1 * o_allowed1 + mix + 1e-300;
}
bool within_split_merge_allowance(double err, double allowed) { return err <= allowed * 1.0001; }

// --- The kernel tests' bounds ---------------------------------------------------------------------

// Attention kernels (fused, split-KV, cascade) against an fp64 attention, with y_j the exact softmax
// weights and A = sum_j y_j |v_j|:
//   - P is rounded to the input type before P V: each weight off by at most u relative: u A;
//   - l sums the unrounded p while P V uses the rounded ones: another u A;
//   - the final store of O rounds once: u |o|;
//   - fp32 dot products (d terms) perturb a logit by at most e = d 2^-24 scale sum_i |q_i k_i|,
//     which moves each weight by a factor within e^(+-2e): 2 e' A with e' = e (1 + e);
//   - fp32 accumulation of O over Tk keys: Tk 2^-24 A;
//   - fp16 only: a weight below 2^-14 (relative to the row max) rounds to a subnormal, absolute
//     error up to 2^-25 each: Tk 2^-25 max|v| / l (l >= 1 is the shifted sum);
//   - a kernel whose exp2 flushes (fused-hopper: ex2.approx.ftz) drops a weight below 2^-126,
//     absolute error up to 2^-126 each: Tk 2^-126 max|v| / l (in fp16 the term above is larger).
// Bound: |o - o_exact| <= 2 (2u A + u |o_exact| + 2 e' A + Tk 2^-24 A + sub) + 1e-30, a factor 2 of
// slack for the exp2 / log2 approximations (a few fp32 ulps each). LSE (fp32): |lse - exact| <=
// 2 (e + Tk 2^-23 + 4 2^-24 (|lse| + 1)).
double kernel_logit_error(double head_size, double abs_dot) { return head_size * 0x1p-24 * abs_dot; }
double kernel_subnormal_p_error(bool fp16, bool p_flushed, double keys, double vmax, double l) {
  return (fp16 ? 0x1p-25 : p_flushed ? 0x1p-126 : 0.0) * keys * vmax / l;
}
double kernel_attention_o_bound(double u, double A, double o, double max_logit_err, double keys,
                                double subnormal_p) {
  const double e2 = 2 * max_logit_err * (1 + max_logit_err);
  return 2 * (2 * u * A + u * std::fabs(o) + e2 * A + keys * 0x1p-24 * A + subnormal_p) + 1e-30;
}
// Each extra rounding of O to the input type (cascade: the partials are stored before the merge)
// adds u (A + |o|): a partial off by u relative moves the convex combination by at most u A, the
// extra store by u |o|; with the same factor 2 of slack.
double kernel_extra_o_rounding_bound(int extra_roundings, double u, double A, double o) {
  return 2 * extra_roundings * u * (A + std::fabs(o));
}
double kernel_attention_lse_bound(double max_logit_err, double keys, double lse) {
  return 2 * (max_logit_err + keys * 0x1p-23 + 4 * 0x1p-24 * (std::fabs(lse) + 1));
}

// Merge: the fp32 weights carry a few fp32 roundings (exp, sum, divide: <= 8 u32 relative), the fma
// one more, and the store half an ulp of the storage type. The LSE: log of the sum and the added
// max, 4 fp32 ulps of |lse| + 1.
double kernel_merge_o_bound(double ulp_of_exact, double scale) {
  return 0.5 * ulp_of_exact + 10 * kFp32Unit * scale;
}
double kernel_merge_lse_bound(double lse) { return 4 * kFp32Unit * (std::fabs(lse) + 1); }

// Softmax: the fp32 sum and exp carry <= (cols + 8) u32 relative error, the rounded argument x - max
// (or x, naive) adds |argument| * u32 through exp, the store half an ulp; the naive variant also
// rounds every e^x to the storage type (u of the type, relative), which moves the sum and the
// numerator by that much each.
double kernel_softmax_bound(double u, double ulp_of_exact, double w, double cols, double arg,
                            bool naive_exp) {
  const double rel = (cols + 8 + 2 * arg) * kFp32Unit + (naive_exp ? 3 * u : 0.0);
  return 0.5 * ulp_of_exact + rel * w;
}

// Textbook attention: P rounded to the input type moves each p_j by u relative (naive: S is
// rounded too, moving p_j by ~|s| u), fp32 accumulation adds (keys + d) u32, the store half an
// ulp: |O - O_exact| <= (2u + 2u|s|max [naive] + (keys + d + 8) u32) sum p|v| + ulp/2. The LSE:
// the scores' error (naive: 2u (|s|max + 1), else 4 u32 (|s|max + 1)), 8 fp32 ulps of |lse| + 1,
// and for the naive exp the rounded sum, 4u.
double kernel_textbook_o_bound(double u, bool naive_exp, double max_abs_s, double keys, double head_size,
                               double sum_p_abs_v, double ulp_of_exact) {
  const double rel = 2 * u + (naive_exp ? 2 * u * (max_abs_s + 1) : 0.0) + (keys + head_size + 8) * kFp32Unit;
  return rel * sum_p_abs_v + 0.5 * ulp_of_exact;
}
double kernel_textbook_lse_bound(double u, bool naive_exp, double max_abs_s, double lse) {
  const double s_err = naive_exp ? 2 * u * (max_abs_s + 1) : 4 * kFp32Unit * (max_abs_s + 1);
  return s_err + 8 * kFp32Unit * (std::fabs(lse) + 1) + (naive_exp ? 4 * u : 0.0);
}

}  // namespace attncheck
