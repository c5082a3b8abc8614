// Per-element math of textbook attention, shared by the CUDA kernels (textbook.cu) and the host
// twin (textbook_host.cpp). The softmax step's math is softmax_math.h's.
//
// What it computes, per sequence (T_q queries, T_k keys), query head h, query i, key j:
//   S[h, i, j] = scale * sum_c Q[i, h, c] K[j, kv(h), c]   if key j is visible to query i,
//              = -inf                                       otherwise,
//   P[h, i, :] = softmax(S[h, i, :]),  O[i, h, :] = sum_j P[h, i, j] V[j, kv(h), :].
// Accumulators: the dot product and P V are fp32 fma chains (hd.h's fma_f) in index order
// (c = 0 .. d-1, j = 0 .. T_k-1), the same order on host and device; the scale multiplies the finished dot
// product. Rounding points: S to its storage type (fp32, or the input type for the naive
// variant), P to the input type (as production kernels round P before P V), O to the input type.
// Conventions: GQA kv(h) = h / (num_heads / num_kv_heads); causal is bottom-right aligned (query
// i sees keys j <= i + T_k - T_q); the mask (nonzero = visible) and causal combine by logical and;
// a row with no visible key (or T_k = 0) is empty: P = 0, O = 0, LSE = -inf. LSE is natural log,
// m + log(l) of the row of S, in [heads, total_q] or [total_q, heads] layout.
// Check: ctest -R kernels_basic_textbook
#pragma once
#include <cstdint>

#include "attncheck/plugin_abi.h"
#include "common/hd.h"

namespace attncheck::kern {

AC_HD int32_t kv_head_of(int32_t h, int32_t num_heads, int32_t num_kv_heads) {
  return h / (num_heads / num_kv_heads);
}
AC_HD bool causal_visible(int64_t i, int64_t j, int64_t tq, int64_t tk) { return j <= i + tk - tq; }

// One step of the fp32 dot-product chain, an explicit fma (hd.h) so host and device round alike.
AC_HD float dot_step(float acc, float q, float k) { return fma_f(q, k, acc); }
AC_HD float masked_score(bool visible, float dot, float scale) { return visible ? scale * dot : neg_inf_f(); }

AC_HD int64_t lse_index(ac_lse_layout layout, int64_t head, int64_t token, int64_t num_heads,
                        int64_t total_q) {
  return layout == AC_LSE_HEADS_TOKENS ? head * total_q + token : token * num_heads + head;
}

}  // namespace attncheck::kern
