// Error budgets: every formula a verdict or a kernel test compares an error against. The
// formulas, and the derivation next to each, are in properties/src/budgets.cpp; this header only
// declares them. The README's property section states the attention O budget in one line.
//
// Notation: F the output (storage) format, u_F its unit roundoff, sub_F its smallest subnormal,
// ulp_F(x) the ulp of x in F, N the visible keys of a row, d the head size, S the scale an output is
// computed at (attention: sum_j p_j |v_j|), c_j the fp32 conditioning of score j.
#pragma once
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
double score_conditioning(ac_dtype, double head_size, double abs_dot, double dist, double score,
                          bool scores_rounded);
// Where a declared naive exp decides overflow: a score above threshold + slack overflows, one
// within slack of it is ambiguous (attention; softmax takes abs_dot = 0 and head_size = 0).
double naive_exp_overflow_slack(ac_dtype, double head_size, double abs_dot, double score,
                                bool scores_rounded);
double softmax_overflow_slack(double x);

// One row of attention: what its O and LSE allowances share.
struct AttentionRow {
  ac_dtype dtype = AC_DTYPE_F32;
  double keys = 0;            // N
  double head_size = 0;       // d
  double max_score = 0;       // max_j s_j
  double sum_exp_scaled = 0;  // l = sum_j e^(s_j - max), >= 1 when N > 0
  bool naive_exp = false;     // AC_FEAT_NAIVE_EXP
};
// ulp_S = ulp_F(S); cond = sum_j p_j |v_j| c_j; vmax = max_j |v_j| over the column.
double attention_o_allowance(const Budget&, const AttentionRow&, double ulp_S, double S, double cond,
                             double vmax);
// lse_scale = max(1, |LSE|) in the declared base; cond = sum_j p_j c_j; lse_unit = 1 (base e) or
// 1 / ln 2 (base 2).
double attention_lse_allowance(const Budget&, const AttentionRow&, double lse_scale, double cond,
                               double lse_unit);
// Merge of two states: S = w_a|O_a| + w_b|O_b|, max_lse_abs = |max(LSE_a, LSE_b)| (0 when empty).
double merge_o_allowance(const Budget&, double ulp_S, double S, double max_lse_abs);
double merge_lse_allowance(const Budget&, double lse_scale);
// Softmax element y of x in a row of N visible entries; sum_exp = sum e^x (naive exp only).
double softmax_allowance(const Budget&, ac_dtype, double ulp_exact, double keys, double dist_to_max,
                         double y_abs, bool naive_exp, double sum_exp);
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

// --- The kernel tests' bounds (host twins and CUDA kernels against an fp64 oracle) --------------
// Declared in kernel_bounds below when the tests need them.

}  // namespace attncheck
