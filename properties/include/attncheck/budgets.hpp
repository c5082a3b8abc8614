// Error budgets: the one place their numbers live, with the reasoning behind them.
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
//     subnormal per key, so O moves by up to N sub_F max|v| / (2 l), l = sum e^(s - m) >= 1.
// Budget: |O - O_exact| <= o_ulp * ulp_F(S) + 2^-24 [(N + d + 8) S + sum_j p_j |v_j| c_j]
//   + N sub_F max|v| / (2 l), with c_j the score/exponent term above.
// A declared naive exp (AC_FEAT_NAIVE_EXP) stores e^s rounded to F, sums the rounded terms and
// rounds P again: + 3 u_F S + N sub_F max|v| / sum e^s for O, + 2 u_F + N sub_F / sum e^s for LSE
// (rows whose exp overflows, or whose largest term is subnormal, are the hazard and are skipped). o_ulp = 4 passes the analysis (1.5) with margin; the mutants of
// issue 6 err by whole units (NaN, a lost rescale, a wrong base, a missed head), far beyond it.
// LSE (fp32): |LSE - exact| <= 2^-24 [lse_ulp * max(1, |exact|) + N + sum_j p_j c_j], lse_ulp = 16.
// Merge: |O - exact| <= o_ulp * ulp_F(S) + 2^-23 (|M| + 8) S with S = w_a|O_a| + w_b|O_b| and M the
// larger LSE (fp32 LSE differences are exact to 2^-24 |M|); LSE as above with N = 2.
// Softmax: |y - exact| <= softmax_ulp * ulp_F(exact) + 2^-24 (N + |x - max| + 8) |exact|.
// Split-order drift: each split count and fold order must meet the accuracy budget, so pairwise
// drift is bounded by twice it; the drift itself is reported.
#pragma once
#include "attncheck/plugin_abi.h"

namespace attncheck {

struct Budget {
  double o_ulp = 4;         // attention / merge O, in ulps of the cancellation-aware scale
  double lse_ulp = 16;      // LSE, fp32 ulps of max(1, |LSE|)
  double softmax_ulp = 2;   // softmax Y, ulps of the exact value
};
Budget default_budget(uint32_t op, ac_dtype);

}  // namespace attncheck
