// Error budgets: every formula a verdict or a kernel test compares an error against. The
// formulas, and the derivation next to each, are in properties/src/budgets.cpp; this header only
// declares them. The README's property section states the attention O budget in one line.
//
// Notation: F the output (storage) format, u_F its unit roundoff, sub_F its smallest subnormal,
// ulp_F(x) the ulp of x in F, N the visible keys of a row, d the head size, S the scale an output is
// computed at (attention: sum_j p_j |v_j|), c_j the fp32 conditioning of score j.
#pragma once
#include <cstddef>

#include "attncheck/plugin_abi.h"

namespace attncheck {

struct Budget {
  double o_ulp = 4;        // attention / merge O, in ulps of the cancellation-aware scale
  double lse_ulp = 16;     // LSE, fp32 ulps of max(1, |LSE|)
  double softmax_ulp = 2;  // softmax Y, ulps of the exact value
};
Budget default_budget(uint32_t op, ac_dtype);

double unit_roundoff(ac_dtype);  // u_F: fp16 2^-11, bf16 2^-8, fp32 2^-24
double min_subnormal(ac_dtype);  // sub_F: fp16 2^-24, bf16 2^-133, fp32 2^-149

// --- The properties' budgets (absolute allowances for |output - exact|) -------------------------

// c_j for score s_j = scale q.k_j: abs_dot = |scale| sum_c |q_c k_jc|, dist = |s_j - max_j s_j|.
// An FP8 KV cache's descales: what they add to a score's conditioning c_j (abs_dot as there) and
// to O's allowance per S (budgets.cpp).
double fp8_kv_score_conditioning(double abs_dot);
double fp8_kv_o_terms();
// Q in FP8 (AC_FP8_Q): what q_descale adds to c_j (abs_dot as there).
double fp8_q_score_conditioning(double abs_dot);
// P held in e4m3fn with the offset 2^8 (AC_FP8_P_E4M3), or a call's p_scale (AC_FP8_P_SCALE): what it
// adds to O's allowance, S and vmax as for attention_o_allowance, keys N, l = sum_exp_scaled, and
// p_scale 256 for the fixed offset.
double p_e4m3_o_allowance(double S, double keys, double vmax, double sum_exp_scaled, double p_scale);
// FP8 products summed on the tensor cores (AC_FP8_TRUNCATED_SUMS): instructions of kTruncatedStep
// products, chains of at most kTruncatedChain in one accumulator, each addend truncated on a grid of
// kTruncatedSumUnit times 2 to the largest exponent field, the result within kTruncatedSumUnit of
// itself. truncated_sum_error bounds the error of sum_k a[k] b[k], k in [0, n) in that order, a and
// b the codes' values (before their descales) of the FP8 format; the score's conditioning c_j from
// that bound (times the descales: dot units) and |scale|; O's allowance for P V in chains of
// kTruncatedChain keys (cond as for attention_o_allowance; S_fields: S plus what the codes' exponent
// fields add, attention_o_allowance's).
constexpr double kTruncatedSumUnit = 0x1p-12;
constexpr int kTruncatedStep = 32;
constexpr int kTruncatedChain = 128;
// e_min: the format's smallest normal exponent (a subnormal's field); frac: its fraction bits;
// chain: the products one accumulator takes before fp32 does (the declared kTruncatedChain; n for
// a kernel that keeps one accumulator over the whole sum, which no declared contract allows).
double truncated_sum_error(const double* a, const double* b, size_t n, int e_min, int frac,
                           size_t chain = kTruncatedChain);
double truncated_sum_score_conditioning(double scale_abs, double dot_error);
double truncated_pv_o_allowance(double S_fields, double cond);
double score_conditioning(ac_dtype, double head_size, double abs_dot, double dist, double score,
                          bool scores_rounded);
// Where a declared naive exp decides overflow: a score above threshold + slack overflows, one
// within slack of it is ambiguous (attention; softmax takes abs_dot = 0 and head_size = 0).
// The same for a capped score (AC_VAR_SOFTCAP): t = scale q.k before the cap, capped = cap
// tanh(t / cap) the score, dist = |capped - max|. Replaces score_conditioning for such a row.
double softcap_conditioning(double head_size, double abs_dot, double t, double cap, double capped,
                            double dist);
// The sink's weight (AC_VAR_SINKS), in units of 2^-24 relative to it: sink the logit, dist =
// |sink - max| with the max over the scores and the sink.
double sink_conditioning(double sink, double dist);
double naive_exp_overflow_slack(ac_dtype, double head_size, double abs_dot, double score,
                                bool scores_rounded);
double softmax_overflow_slack(double x);

// One row of attention: what its O and LSE allowances share.
struct AttentionRow {
  ac_dtype dtype = AC_DTYPE_F32;
  double keys = 0;              // N
  double head_size = 0;         // d
  double max_score = 0;         // max_j s_j
  double sum_exp_scaled = 0;    // l = sum_j e^(s_j - max), >= 1 when N > 0
  bool naive_exp = false;       // AC_FEAT_NAIVE_EXP
  bool flushed_exp = false;     // AC_FEAT_FLUSHED_EXP: a weight e^(s - max) below 2^-126 may be 0
  bool ftz = false;             // AC_CAP_FTZ_ARITHMETIC: FTZ / DAZ fp32 arithmetic (attention_ftz_*)
  bool fp8_kv = false;          // K and V read from an FP8 cache times their descales (fp8_kv_*)
  bool p_e4m3 = false;          // AC_FP8_P_E4M3 in an FP8 call: P held in e4m3fn (p_e4m3_o_allowance)
  double p_scale = 256;         // with it: P's scale, the fixed 2^8 or the call's (AC_FP8_P_SCALE)
  bool truncated_sums = false;  // AC_FP8_TRUNCATED_SUMS in a call with Q in FP8 (truncated_pv_o_allowance)
  double v_min = 0;             // with it: the FP8 format's smallest normal times V's largest descale
  double v_descale = 1;         // fp8_kv: the row's V descale (gradual_underflow_o_allowance)
  // |scale| (sum_c |q_c| + max_j sum_c |k_jc|): what inputs read as 0 can move a score by, per 2^-126.
  double qk_abs = 0;
  double scale_abs = 0;  // |softmax_scale|
};
// ulp_S = ulp_F(S); cond = sum_j p_j |v_j| c_j; vmax = max_j |v_j| over the column.
double attention_o_allowance(const Budget&, const AttentionRow&, double ulp_S, double S, double cond,
                             double vmax);
// The part of attention_o_allowance that fp32's gradual underflow adds: the absolute roundings of
// the row's fp32 products and sums below 2^-126 (0 for a row without keys).
double gradual_underflow_o_allowance(const AttentionRow&);
// The part of the two allowances above that FTZ / DAZ arithmetic adds (0 unless r.ftz): S and vmax
// as for attention_o_allowance; the LSE's in natural-log units.
double attention_ftz_o_allowance(const AttentionRow&, double S, double vmax);
double attention_ftz_lse_allowance(const AttentionRow&);
// lse_scale = max(1, |LSE|) in the declared base; cond = sum_j p_j c_j; lse_unit = 1 (base e) or
// 1 / ln 2 (base 2).
double attention_lse_allowance(const Budget&, const AttentionRow&, double lse_scale, double cond,
                               double lse_unit);
// Merge of two states: S = w_a|O_a| + w_b|O_b|, max_lse_abs = |max(LSE_a, LSE_b)| (0 when empty).
// subnormal_weighted: sum of |O_i| over the sides whose weight e^(L_i - M) is below 2^-126.
double merge_o_allowance(const Budget&, double ulp_S, double S, double max_lse_abs,
                         double subnormal_weighted);
double merge_lse_allowance(const Budget&, double lse_scale);
// A merge's FP8 output (plugin_abi.h ac_merge_args.out_dtype): the values before the cast that a
// kernel within `allowance` of `exact` may divide by `scale` into (one fp32 rounding of the division).
struct Fp8Interval {
  double lo, hi;
};
Fp8Interval fp8_output_interval(double exact, double allowance, double scale);
// The maxima of an FP8 call (AC_FP8_AMAX): the log of a weight e^(s_j - LSE) the kernel forms is
// within this of the exact one (lse_allowance in natural-log units, score_cond the score's c_j); the
// allowance of |O| before the cast, from the element's own (fp8_out: fp32 value judged; else the
// output stored in `stored`).
double amax_weight_log_allowance(double lse_allowance, double score_cond);
// The interval of a kernel's weight whose exact value is w and whose log is allowed log_allowance,
// with the absolute error of fp32's subnormal range; may_flush: the subject declares flushing.
struct AmaxWeightInterval {
  double lo, hi;
};
AmaxWeightInterval amax_weight_interval(double w, double log_allowance, bool may_flush);
double amax_o_allowance(ac_dtype stored, bool fp8_out, double exact_abs, double allowance);
// Softmax element y of x in a row of N visible entries; sum_exp = sum e^x (naive exp only).
double softmax_allowance(const Budget&, ac_dtype, double ulp_exact, double keys, double dist_to_max,
                         double y_abs, bool naive_exp, double sum_exp);
// A subject that declares AC_CAP_FLUSHES_SUBNORMALS may write a zero (negative: a -0) where the
// exact value is `exact` and the element's own allowance is `allowed` in format F (budgets.cpp).
double min_normal(ac_dtype);  // fp16 2^-14, bf16 and fp32 2^-126
bool flushed_zero_allowed(ac_dtype, double exact, double allowed, bool negative);
// lse_convention: how close the other base's (or layout's) reading must be to call the LSE
// confused rather than merely inaccurate.
double lse_other_base_tolerance(double allowed, double out_value);
double lse_other_layout_tolerance(double allowed);
// split_equals_whole: the exact merge of the subject's two partial states against attention over
// all keys. w0, w1 the normalised weights of the parts, o_allowed0/1 their O allowances, lse_allowed0/1
// their LSE allowances, o0/o1 their O values, lse_to_nat ln 2 for base-2 LSEs (1 for base e).
double split_merge_allowance(double w0, double w1, double o_allowed0, double o_allowed1, double o0, double o1,
                             double lse_allowed0, double lse_allowed1, double lse_to_nat);
bool within_split_merge_allowance(double err, double allowed);

// --- The kernel tests' bounds: a built-in kernel (host twin or CUDA) against an fp64 oracle -------
// Tighter than the properties' budgets: they follow where each built-in kernel rounds. u is the
// unit roundoff of the kernel's input type.

// Attention (tests/kernels_attention): the fp32 error of one logit, e = d 2^-24 |scale| sum |q k|.
double kernel_logit_error(double head_size, double abs_dot);
// The fp16 P that rounds to a subnormal: keys 2^-25 max|v| / l (0 for other types).
double kernel_subnormal_p_error(bool fp16, bool p_flushed, double keys, double vmax, double l);
// O element: A = sum_j y_j |v_j|, o the exact output, max_logit_err the largest e of the row.
double kernel_attention_o_bound(double u, double A, double o, double max_logit_err, double keys,
                                double subnormal_p);
// What each extra rounding of O to the input type adds (cascade stores its partials).
double kernel_extra_o_rounding_bound(int extra_roundings, double u, double A, double o);
double kernel_attention_lse_bound(double max_logit_err, double keys, double lse);  // natural log
// Merge (tests/kernels_basic): O of weights w_a, w_b; scale = w_a |O_a| + w_b |O_b|.
double kernel_merge_o_bound(double ulp_of_exact, double scale);
double kernel_merge_lse_bound(double lse);
// Softmax: arg the exponent argument's magnitude (|x - max|, naive |x| + |max|), w the exact y.
double kernel_softmax_bound(double u, double ulp_of_exact, double w, double cols, double arg, bool naive_exp);
// Textbook attention: max_abs_s the largest |score| of the row, sum_p_abs_v the largest sum p|v|.
double kernel_textbook_o_bound(double u, bool naive_exp, double max_abs_s, double keys, double head_size,
                               double sum_p_abs_v, double ulp_of_exact);
double kernel_textbook_lse_bound(double u, bool naive_exp, double max_abs_s, double lse);

}  // namespace attncheck
