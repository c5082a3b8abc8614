// Per-element math of the split-KV combine (flash-decoding), shared by the CUDA combine kernel
// (splitkv.cu) and the host twin (splitkv_host.cpp).
//
// Each part s of the key range leaves a partial state: O_s = O~_s / l_s (fp32, 0 for an empty
// part) and its base-2 LSE_s = m_s + log2 l_s (-inf for an empty part). Two states merge as in
// the LSE merge of two attention states, in base 2, scale first and multiply afterwards (a convex
// combination, no unbounded intermediate), with the both-empty guard:
//   M = max(LSE_a, LSE_b);  both -inf: O = 0, LSE = -inf (never -inf - -inf = NaN)
//   w_a = 2^(LSE_a - M), w_b = 2^(LSE_b - M), s = w_a + w_b
//   O = O_a (w_a / s) + O_b (w_b / s),  LSE = M + log2 s
// The fold order is selectable: left to right ((p0 p1) p2) ..., right to left p0 (p1 (p2 ...)),
// or a pairwise tree (p0 p1) (p2 p3) ... then pairs of pairs; all in fp32, up to kMaxSplits = 64
// parts. They agree in real arithmetic; the last bits differ, which is what the fold-order
// properties look at.
// exp2 and log2 are hd.h's exp2_f / log2_f (exp2f / log2f on the device, std::exp2 / std::log2
// in the twin). Mutation switch (kernels/mutants/, mutant 11): final_lse_natural<M>.
// Check: ctest --test-dir build -R kernels_attention_twin
#pragma once
#include "attncheck/plugin_abi.h"
#include "common/hd.h"
#include "fused/fused_math.h"

namespace attncheck::kern::splitkv {

using fused::Mutation;

inline constexpr int kMaxSplits = 64;
// Levels of the pairwise tree over kMaxSplits parts: leaves at level 0, the root of 64 at level 6.
inline constexpr int kFoldLevels = 7;
static_assert(1 << (kFoldLevels - 1) == kMaxSplits, "the tree fold keeps one block per level");

// A part's partial O element: the part's P V sum over its row sum, times V's FP8 descale where the
// kernel applies it to the output (fused_twin.h VDescale::output; 1 otherwise, an exact product).
// The CUDA kernel (packed.cu) and the twin store this same expression.
AC_HD float partial_o(float pv, float l, float v_descale) {
  return pv * fused::inverse_row_sum(l) * v_descale;
}

// a = merge(a, b), element o and its row's LSE (base 2).
// An empty side leaves the other side exactly as it is (in real arithmetic the weights are 1 and
// 0; in fp32 o + 0 * o_b would turn a -0 into +0): so parts past a row's own last part, which a
// launch over a longer neighbour gives it (fixed split size, splitkv::split_range), change no bit
// of the row in any fold order.
// Both empty is tested on each side, not on m: a NaN LSE_a (a part whose only key had a NaN logit,
// from a NaN code in K) gives m = LSE_b, and m = -inf would drop the NaN as if both were empty.
template <Mutation M = Mutation::none>
AC_HD void merge_partial(float& o_a, float& lse_a, float o_b, float lse_b) {
  const float m = lse_a > lse_b ? lse_a : lse_b;
  if (lse_a == neg_inf_f() && lse_b == neg_inf_f()) {  // both empty
    o_a = 0.0f;
    lse_a = neg_inf_f();
    return;
  }
  if (lse_b == neg_inf_f()) return;
  if (lse_a == neg_inf_f()) {
    o_a = o_b;
    lse_a = lse_b;
    return;
  }
  const float w_a = exp2_f(lse_a - m), w_b = exp2_f(lse_b - m);
  const float s = w_a + w_b;
  o_a = o_a * (w_a / s) + o_b * (w_b / s);
  lse_a = m + log2_f(s);
}

// Fold the partials 0..n-1 (1 <= n <= kMaxSplits) of one element in the given order; load(i, o,
// lse) sets partial i. The parts are read once each, in a streaming walk, so the state is a few
// registers whatever n is (a GPU thread cannot index a register array at run time; an array of
// kMaxSplits would live in local memory):
//   left:  acc = p0, then acc = merge(acc, p_i) for i = 1..n-1;
//   right: acc = p_{n-1}, then acc = merge(p_i, acc) for i = n-2..0;
//   tree:  pairs (p0 p1) (p2 p3) ..., then pairs of pairs; a last block without a partner at some
//          level moves up unchanged. Walked as a binary counter: leaf i closes the blocks of the
//          levels of i's trailing one bits (merge(left block, right block)), and after n leaves
//          the blocks left are those of n's one bits, folded from the smallest (rightmost) up,
//          merge(larger left block, the rest): the same merges, operands and order as the level by
//          level tree.
// Every merge is merge_partial, so every order agrees in real arithmetic and differs in the last
// bits, which is what the fold-order properties look at.
template <Mutation M = Mutation::none, class Load>
AC_HD void fold_partials(int n, ac_fold order, Load&& load, float& o_out, float& lse_out) {
  float o = 0.0f, lse = neg_inf_f();
  if (order == AC_FOLD_RIGHT) {
    load(n - 1, o, lse);
    for (int i = n - 2; i >= 0; --i) {
      float o_i, lse_i;
      load(i, o_i, lse_i);
      merge_partial<M>(o_i, lse_i, o, lse);
      o = o_i;
      lse = lse_i;
    }
  } else if (order == AC_FOLD_TREE) {
    float block_o[kFoldLevels] = {}, block_lse[kFoldLevels] = {};  // the open block of each level
    for (int i = 0; i < n; ++i) {
      load(i, o, lse);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
      for (int level = 0, open = 1; level < kFoldLevels; ++level) {
        if (!open) continue;  // no break: the levels stay compile-time indices (registers on a GPU)
        if ((i >> level) & 1) {
          merge_partial<M>(block_o[level], block_lse[level], o, lse);
          o = block_o[level];
          lse = block_lse[level];
        } else {
          block_o[level] = o;
          block_lse[level] = lse;
          open = 0;
        }
      }
    }
    bool have = false;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int level = 0; level < kFoldLevels; ++level) {
      if (((n >> level) & 1) == 0) continue;
      if (have) merge_partial<M>(block_o[level], block_lse[level], o, lse);
      o = block_o[level];
      lse = block_lse[level];
      have = true;
    }
  } else {  // AC_FOLD_LEFT
    load(0, o, lse);
    for (int i = 1; i < n; ++i) {
      float o_i, lse_i;
      load(i, o_i, lse_i);
      merge_partial<M>(o, lse, o_i, lse_i);
    }
  }
  o_out = o;
  lse_out = lse;
}

// The sink (AC_VAR_SINKS; sink2 = sink log2 e, -inf without one) joins a combined element once:
// it is the state (O = 0, LSE = sink2), merged like a partial. The partials themselves never count
// it, so it is counted exactly once whatever the split count; a row without keys ends with O = 0
// and LSE = sink2.
AC_HD void merge_sink(float& o, float& lse2, float sink2) {
  if (sink2 == neg_inf_f()) return;
  merge_partial(o, lse2, 0.0f, sink2);
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
// parts one key longer (the same split the CUDA kernel makes). The parts then depend on n, which
// a launch takes from its whole batch.
AC_HD void split_range(int tk, int n, int split, int& lo, int& hi) {
  const int base = tk / n, rem = tk % n;
  lo = split * base + (split < rem ? split : rem);
  hi = lo + base + (split < rem ? 1 : 0);
}

// Fixed split size (keys_per_split > 0, a multiple of the 64-key tile): part `split` of a row of tk
// keys is [split x K, (split + 1) x K) clipped to the row, K = split_keys(tk, keys_per_split),
// whatever the launch's part count; parts past the row's end are empty. K depends on the row alone,
// so a row's parts, its tile walk in each part (tiles start at multiples of 64) and, with
// merge_partial's empty-side identity, its fold are the same in every batch.
inline constexpr int kSplitTile = 64;
// keys_per_split, or the smallest multiple of the tile that cuts tk into at most kMaxSplits parts
// where keys_per_split would need more.
AC_HD int split_keys(int tk, int keys_per_split) {
  const int need = (tk + kMaxSplits - 1) / kMaxSplits;
  const int tiles = (need + kSplitTile - 1) / kSplitTile * kSplitTile;
  return tiles > keys_per_split ? tiles : keys_per_split;
}
// The part count of a row of tk keys under keys_per_split: at least 1, at most kMaxSplits.
AC_HD int fixed_parts(int tk, int keys_per_split) {
  const int k = split_keys(tk, keys_per_split);
  return tk > k ? (tk + k - 1) / k : 1;
}
// Part `split` of a launch of n parts: split_range above where keys_per_split is 0, else the fixed
// split size.
AC_HD void split_range(int tk, int n, int keys_per_split, int split, int& lo, int& hi) {
  if (keys_per_split <= 0) {
    split_range(tk, n, split, lo, hi);
    return;
  }
  const int k = split_keys(tk, keys_per_split);
  const int64_t first = int64_t(split) * k, last = first + k;
  lo = first < tk ? int(first) : tk;
  hi = last < tk ? int(last) : tk;
}

}  // namespace attncheck::kern::splitkv
