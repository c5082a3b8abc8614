// Per-element math of the split-KV combine (flash-decoding), shared by the CUDA combine kernel
// (splitkv.cu) and the host twin (splitkv_host.cpp).
//
// Each part s of the key range leaves a partial state: O_s = O~_s / l_s (fp32, 0 for an empty
// part) and its base-2 LSE_s = m_s + log2 l_s (-inf for an empty part). Two states merge as in
// the seed's merge section, in base 2, scale first and multiply afterwards (a convex combination,
// no unbounded intermediate), with the both-empty guard:
//   M = max(LSE_a, LSE_b);  M = -inf: O = 0, LSE = -inf (never -inf - -inf = NaN)
//   w_a = 2^(LSE_a - M), w_b = 2^(LSE_b - M), s = w_a + w_b
//   O = O_a (w_a / s) + O_b (w_b / s),  LSE = M + log2 s
// The fold order is selectable: left to right ((p0 p1) p2) ..., right to left p0 (p1 (p2 ...)),
// or a pairwise tree (p0 p1) (p2 p3) ... then pairs of pairs; all in fp32. They agree in real
// arithmetic; the last bits differ, which is what the fold-order properties look at.
// exp2 and log2 are hd.h's exp2_f / log2_f (exp2f / log2f on the device, std::exp2 / std::log2
// in the twin). Mutation switch (kernels/mutants/, mutant 11): final_lse_natural<M>.
// Check: ctest --test-dir build -R kernels_attention_twin
#pragma once
#include "attncheck/plugin_abi.h"
#include "common/hd.h"
#include "fused/fused_math.h"

namespace attncheck::kern::splitkv {

using fused::Mutation;

inline constexpr int kMaxSplits = 16;

// a = merge(a, b), element o and its row's LSE (base 2).
template <Mutation M = Mutation::none>
AC_HD void merge_partial(float& o_a, float& lse_a, float o_b, float lse_b) {
  const float m = lse_a > lse_b ? lse_a : lse_b;
  if (m == neg_inf_f()) {  // both empty
    o_a = 0.0f;
    lse_a = neg_inf_f();
    return;
  }
  const float w_a = exp2_f(lse_a - m), w_b = exp2_f(lse_b - m);
  const float s = w_a + w_b;
  o_a = o_a * (w_a / s) + o_b * (w_b / s);
  lse_a = m + log2_f(s);
}

// Fold n <= kMaxSplits partials (o[i], lse[i]) in the given order; the result is left in
// (o_out, lse_out). Indices are compile-time after unrolling, so a GPU thread keeps the arrays in
// registers.
template <Mutation M = Mutation::none>
AC_HD void fold_partials(float (&o)[kMaxSplits], float (&lse)[kMaxSplits], int n, ac_fold order, float& o_out,
                         float& lse_out) {
  if (order == AC_FOLD_RIGHT) {
    float so = 0.0f, sl = neg_inf_f();
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = kMaxSplits - 1; i >= 0; --i) {
      if (i < n - 1) {
        merge_partial<M>(o[i], lse[i], so, sl);
        so = o[i];
        sl = lse[i];
      } else if (i == n - 1) {
        so = o[i];
        sl = lse[i];
      }
    }
    o_out = so;
    lse_out = sl;
    return;
  }
  if (order == AC_FOLD_TREE) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int stride = 1; stride < kMaxSplits; stride *= 2) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
      for (int i = 0; i + stride < kMaxSplits; i += 2 * stride)
        if (i + stride < n) merge_partial<M>(o[i], lse[i], o[i + stride], lse[i + stride]);
    }
  } else {  // AC_FOLD_LEFT
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 1; i < kMaxSplits; ++i)
      if (i < n) merge_partial<M>(o[0], lse[0], o[i], lse[i]);
  }
  o_out = o[0];
  lse_out = lse[0];
}

// The row's LSE as the combine writes it: natural log (ln 2 times the base-2 fold), -inf for an
// all-empty row. Mutant 11 (kernels/mutants/) writes FlashAttention-2's +inf there instead.
template <Mutation M = Mutation::none>
AC_HD float final_lse_natural(float lse2) {
  if constexpr (M == Mutation::combine_plus_inf)
    if (lse2 == neg_inf_f()) return pos_inf_f();
  return lse2 * fused::kLn2;
}

// The key range [lo, hi) of part `split` of `n`: sizes as equal as possible, the first tk % n
// parts one key longer (the same split the CUDA kernel makes).
AC_HD void split_range(int tk, int n, int split, int& lo, int& hi) {
  const int base = tk / n, rem = tk % n;
  lo = split * base + (split < rem ? split : rem);
  hi = lo + base + (split < rem ? 1 : 0);
}

}  // namespace attncheck::kern::splitkv
