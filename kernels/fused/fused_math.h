// Per-element math of the fused attention forward, shared by the CUDA kernel (fused_kernel.cuh)
// and its host twin (fused_host.cpp), so the two cannot drift apart.
//
// What it computes: the online-softmax recurrence for one query row, one key tile at a
// time, in base 2 with log2(e) folded into the softmax scale (what FlashAttention-2 does on the
// GPU, where exp2 is the native instruction):
//   x_j   = fp32(dot(q, k_j)) * (softmax_scale * log2 e)      (-inf when key j is masked)
//   m'    = max(m, max_j x_j)
//   alpha = 2^(m - m')   but 0 when m = -inf                  (the base-case guard)
//   p_j   = 2^(x_j - m'') with m'' = m' unless m' = -inf, then 0, so a fully masked tile gives
//           p = 0, never 2^(-inf - -inf) = NaN
//   l'    = alpha l + sum_j p_j         (fp32, the unrounded p, as FlashAttention-2 sums it)
//   O'    = alpha O + sum_j round_to_input_type(p_j) v_j      (fp32 accumulator)
// Final: O = O / l, or exactly 0 when l = 0 (an empty row); LSE = m + log2 l (base 2) or
// ln 2 * (m + log2 l) (natural); an empty row gets the caller's sentinel (-inf or +inf).
// Accumulators m, l, O are fp32; rounding happens at the dot product (fp32), at P (rounded to the
// input type before P V, as production kernels do) and at the final store of O (input type).
// exp2 and log2 are hd.h's exp2_f / log2_f: exp2f / log2f on the device, std::exp2 / std::log2
// (float) in the twin, so the twin's p and LSE may differ from the GPU's by an ulp of exp2.
// Mutation switch (kernels/mutants/): the helpers a mutant changes take a compile-time Mutation;
// the correct kernels and twins use Mutation::none, each mutant one other value.
// Check: ctest --test-dir build -R kernels_attention
#pragma once
#include <cstdint>

#include "common/hd.h"
#include "common/storage.h"  // round_to_e4m3

namespace attncheck::kern::fused {

// Compile-time switch point for the deliberately broken variants of kernels/mutants/ (values are
// the mutants' numbers). The correct kernels use Mutation::none; each mutant is one instantiation
// with another value.
enum class Mutation : int {
  none = 0,
  forget_rescale_o = 6,      // rescales l but not O when the max moves
  finite_mask_sentinel = 7,  // masked logits get a finite -5e4 (natural units) instead of -inf
  gqa_head_mod = 9,          // query head i reads KV head i mod h_kv instead of i / (h / h_kv)
  causal_off_by_one = 10,    // causal sees one key too many (t + Tk - Tq + 1)
  combine_plus_inf = 11,     // split-KV combine writes +inf (FlashAttention-2 style) for an all-empty row
  missing_barrier = 12,      // drops the barrier that protects a shared-memory buffer before reuse
  offsets_32bit = 13,        // element offsets computed in 32 bits
  // The engines' variants (plugin_abi.h AC_VAR_*):
  page_off_by_one = 19,         // the last page of a sequence read from the block-table entry before it
  read_past_end = 20,           // paged: the key range runs one slot past the sequence's last key
  window_edge_off_by_one = 21,  // the left window edge admits one key too many
  softcap_before_scale = 22,    // the cap applied to the raw dot product, the scale after it
  sink_every_split = 23,        // split-KV: every partial counts the sink, not the combine once
  v_head_from_qk = 24,          // V's rows read at the QK head size instead of head_size_v
  v_in_k_own_stride = 31,       // V inside K (AC_VAR_V_IN_K) read at V's own row stride, not K's
  // An FP8 KV cache (plugin_abi.h AC_FP8_*), host twins only:
  fp8_v_descale_ignored = 26,      // V's codes read without v_descale
  fp8_descale_by_query_head = 27,  // k_descale indexed by the query head, not its KV head
  fp8_v_descale_twice = 28,        // V's codes multiplied by v_descale twice
  // FlashAttention-3's FP8 contract (AC_FP8_Q, AC_FP8_P_E4M3), host twins only:
  fp8_p_no_offset = 29,      // P cast to e4m3fn as p itself, without the 2^8 offset
  fp8_q_descale_twice = 30,  // q_descale folded into the softmax scale twice
  // cuDNN's P scale (AC_FP8_P_SCALE), host twins only:
  fp8_p_scale_ignored = 34,  // P stored times the call's p_scale, read over the fixed 2^8
  // cuDNN's FP8 output (AC_FP8_OUT), host twins only:
  fp8_out_scale_ignored = 35,  // O cast to FP8 without dividing by output_scale
  // cuDNN's maxima (AC_FP8_AMAX), host twins only:
  fp8_amax_unnormalised = 36,  // P's maximum taken before the row's division by l (so always 1)
  // fused-hopper-fp8's P V (AC_FP8_TRUNCATED_SUMS), its host twin and HopperMutation::fp8_row_accumulator:
  fp8_row_accumulator = 37,  // every tile's P V added into O in the e4m3 tensor cores' accumulator
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Is key `key` (0-based within its sequence) visible to query row `row` under bottom-right
// causal alignment? Query t sees keys 0 .. t + Tk - Tq.
template <Mutation M = Mutation::none>
AC_HD bool causal_visible(int64_t row, int64_t key, int64_t tq, int64_t tk) {
  if constexpr (M == Mutation::causal_off_by_one) return key <= row + tk - tq + 1;
  return key <= row + tk - tq;
}

// The window around the bottom-right aligned diagonal (AC_VAR_WINDOW): query `row` sees key `key`
// only when row + tk - tq - left <= key <= row + tk - tq + right; a side of -1 is unbounded.
template <Mutation M = Mutation::none>
AC_HD bool window_visible(int64_t row, int64_t key, int64_t tq, int64_t tk, int left, int right) {
  const int64_t diag = row + tk - tq;
  const int64_t first = diag - left - (M == Mutation::window_edge_off_by_one ? 1 : 0);
  return (left < 0 || key >= first) && (right < 0 || key <= diag + right);
}
// The first key a row tile [row0, row0 + rows) can see under a left window (0 without one): the
// walk starts its key range there, as the kernel does, so a window edge falls anywhere in a tile.
template <Mutation M = Mutation::none>
AC_HD int64_t window_first_key(int64_t row0, int64_t tq, int64_t tk, int left) {
  if (left < 0) return 0;
  const int64_t first = row0 + tk - tq - left - (M == Mutation::window_edge_off_by_one ? 1 : 0);
  return first > 0 ? first : 0;
}

// Where a walk of key tiles of `tile` keys from `k_lo` starts under a left window whose first
// visible key is `first`: the start of the tile holding it. The tiles stay on the grid of the walk's
// origin (k_lo: 0, or a split's first key), whichever rows share the row tile, so a row folds its
// keys in the same tiles whether its prompt is computed whole or in chunks (chunked_prefill: a row
// tile of a chunk starts at another row); the keys before `first` in that tile are masked by the
// per-element window test. Starting at `first` itself (an edge anywhere in a tile) moved the tiles
// with the row tile's first row, and with them the fold order.
AC_HD int64_t window_walk_start(int64_t k_lo, int64_t first, int tile) {
  return first > k_lo ? k_lo + (first - k_lo) / tile * tile : k_lo;
}

// A row tile's key walk [k_lo, k_end) cut by the window (AC_VAR_WINDOW): nothing past what its last
// row sees under the right side, nothing before the key tile holding what its first row sees under
// the left side (window_walk_start). The kernels' walks (fused, fused-hopper, splitkv-packed), in
// key tiles of `tile`; fused_twin.h cuts its walk the same way in 64 bits.
template <Mutation M = Mutation::none>
AC_HD void window_walk(int64_t row0, int64_t last_row, int64_t tq, int64_t tk, int left, int right, int tile,
                       int& k_lo, int& k_end) {
  if (right >= 0) {
    const int64_t lim = last_row + tk - tq + right + 1;
    k_end = lim < k_end ? int(lim) : k_end;
  }
  k_lo = int(window_walk_start(k_lo, window_first_key<M>(row0, tq, tk, left), tile));
}

// The base-2 logit of an fp32 dot product (log2 e folded in). Without a cap (cap = 0):
// fl(dot * scale_log2), one rounding. With one (AC_VAR_SOFTCAP), the scale first, then the cap:
// t = fl(dot * scale), c = fl(cap * tanh_f(fl(t / cap))), x = fl(c * log2 e); the capped score
// is in natural units before log2 e, so the sink (also natural) compares with it. Every step is
// mul_rn_f / div_rn_f (hd.h): the same roundings on both sides, never contracted on the device, so
// the kernel and its twin differ only where tanh_f does.
template <Mutation M = Mutation::none>
AC_HD float scaled_logit(float dot, float scale, float scale_log2, float cap) {
  if (cap == 0.0f) return mul_rn_f(dot, scale_log2);
  if constexpr (M == Mutation::softcap_before_scale)
    return mul_rn_f(mul_rn_f(mul_rn_f(cap, tanh_f(div_rn_f(dot, cap))), scale), kLog2e);
  const float t = mul_rn_f(dot, scale);
  return mul_rn_f(mul_rn_f(cap, tanh_f(div_rn_f(t, cap))), kLog2e);
}

// A weight as P V reads it under AC_FP8_P_E4M3 (FlashAttention-3): 256 p held in e4m3fn and read
// over 256, both scalings exact (powers of two, p <= 1 far from fp32's limits), so the one rounding
// is the cast's. Mutant 29 casts p itself: every weight below 2^-6 lands on e4m3fn's subnormal grid
// and every one below 2^-10 on zero.
// With a call's p_scale s (AC_FP8_P_SCALE): s p rounded to fp32, then to e4m3fn, read back times
// the fp32 reciprocal `inv` of s: three roundings besides the cast's (budgets.cpp
// p_e4m3_o_allowance); s = 256 and inv = 2^-8 are the fixed offset, exact both ways.
template <Mutation M = Mutation::none>
AC_HD float p_e4m3(float p, float scale = 256.0f, float inv = 0x1p-8f) {
  if constexpr (M == Mutation::fp8_p_no_offset) return round_to_e4m3(p);
  if constexpr (M == Mutation::fp8_p_scale_ignored)
    return mul_rn_f(round_to_e4m3(mul_rn_f(p, scale)), 0x1p-8f);
  return mul_rn_f(round_to_e4m3(mul_rn_f(p, scale)), inv);
}

// The storage row of key `key` of a sequence (AC_VAR_PAGED_KV): slot key % page_size of page
// table[key / page_size]; without a table (table null) the key itself, from the sequence's first
// row. `last_page` is the index of the sequence's last page (mutant 19 reads the entry before it:
// a page count one short, which reads inside the table and the pool, with the wrong keys).
// The division is 32-bit (a sequence's keys and the page size fit): a 64-bit division by a value
// known only at run time is a long subroutine on the GPU, and the paged walks divide once per row.
template <Mutation M = Mutation::none>
AC_HD int64_t kv_slot(const int32_t* table, int page_size, int64_t key, int64_t last_page) {
  if (!table) return key;
  const uint32_t k = uint32_t(key), ps = uint32_t(page_size);
  int64_t block = int64_t(k / ps);
  if constexpr (M == Mutation::page_off_by_one) block -= block == last_page && block > 0 ? 1 : 0;
  (void)last_page;
  return int64_t(table[block]) * page_size + int64_t(k % ps);
}
// Elements per V row of one KV head: head_size_v (AC_VAR_HEAD_SIZE_V; O's rows have as many).
// Mutant 25 takes it from the QK head size, what a kernel written for one head size does: V's row
// stride becomes K's, so key j reads V row j d / dv and a key in V's second half reads past V.
template <Mutation M = Mutation::none>
AC_HD int v_row_elems(int head_size, int head_size_v) {
  return M == Mutation::v_head_from_qk ? head_size : head_size_v;
}
// The keys a paged walk covers: tk, or one more under mutant 20 (a read of the slot after the end).
template <Mutation M = Mutation::none>
AC_HD int64_t walked_keys(int64_t tk, bool paged) {
  return M == Mutation::read_past_end && paged ? tk + 1 : tk;
}

// A finished row's state (m, l, O~ in base 2) with the sink's weight joined to the denominator
// (AC_VAR_SINKS; sink2 = sink log2 e, -inf without one): m' = max(m, sink2), l' = 2^(m - m') l +
// 2^(sink2 - m'), and O~ must be multiplied by the returned 2^(m - m') (0 when m = -inf: an empty
// row then has O = 0, l = 1 and LSE = sink). Without a sink nothing changes and the factor is 1.
AC_HD float join_sink(float& m, float& l, float sink2) {
  if (sink2 == neg_inf_f()) return 1.0f;
  const float m_new = m > sink2 ? m : sink2;
  const float alpha = m == neg_inf_f() ? 0.0f : exp2_f(m - m_new);
  l = l * alpha + exp2_f(sink2 - m_new);
  m = m_new;
  return alpha;
}

// The logit a masked key (causal or explicit mask) gets: -inf, never a finite sentinel
// (a -5e4 sentinel let masked keys win against extreme real logits, and a fully masked row then
// averages V instead of being empty). The mutant's sentinel is in natural units, scaled to base 2.
template <Mutation M = Mutation::none>
AC_HD float masked_logit() {
  if constexpr (M == Mutation::finite_mask_sentinel) return -5.0e4f * kLog2e;
  return neg_inf_f();
}

// The KV head query head `head` reads under grouped-query attention: head / (h / h_kv).
template <Mutation M = Mutation::none>
AC_HD int kv_head_of(int head, int group, int num_kv_heads) {
  if constexpr (M == Mutation::gqa_head_mod) return head % num_kv_heads;
  return head / group;
}

// Element offset of row `row` of a tensor with `stride` elements per row, in 64 bits: K and V
// pass 2^31 elements at 128 KV heads x 128 dims x 131080 tokens (a regression shape of a real overflow).
template <Mutation M = Mutation::none>
AC_HD int64_t row_offset(int64_t row, int64_t stride) {
  if constexpr (M == Mutation::offsets_32bit) return int64_t(int32_t(uint32_t(row) * uint32_t(stride)));
  return row * stride;
}

// The rescale factor alpha = 2^(m_old - m_new), with the base-case guard: before any visible key
// (m_old = -inf) the state is (l = 0, O = 0) and alpha is 0, never 2^(-inf - -inf) = NaN.
AC_HD float rescale_factor(float m_old, float m_new) {
  return m_old == neg_inf_f() ? 0.0f : exp2_f(m_old - m_new);
}
// The max subtracted inside the exponent: 0 while no key is visible, so p = 2^(-inf - 0) = 0.
AC_HD float exponent_offset(float m_new) { return m_new == neg_inf_f() ? 0.0f : m_new; }
// p = 2^(x - m): x is the scaled logit (log2 e folded in), m the offset above.
AC_HD float tile_probability(float x, float m_offset) { return exp2_f(x - m_offset); }

// How the twins form p = 2^(x - m) (a kernel's choice, stated in its header). The default is
// fused's and the split-KV kernels': x = fl(s scale_log2), p = exp2_f(fl(x - m)). fma: where
// scale_log2 > 0, p = 2^fl(s scale_log2 - m), one rounding (the max of the fl(s scale_log2) is the
// same either way, rounding being monotonic). flush: a p below 2^-126 is 0 (ex2.approx.ftz, the
// exp2 of kernels built with fast math). fused-hopper takes both.
struct ExpForm {
  bool fma = false, flush = false;
};
// The twins' fp32 arithmetic (fused_twin.h applies it): IEEE by default. ftz: a kernel built with
// flush-to-zero / denormals-are-zero (fast math): a subnormal input reads as 0 and every fp32 result
// below 2^-126 is 0. mantissa_bits below 24: every fp32 result truncated to that many significant
// bits, a kernel that loses precision on normal numbers (the tests' broken variant).
struct TwinArithmetic {
  bool ftz = false;
  int mantissa_bits = 24;
  bool ieee() const { return !ftz && mantissa_bits >= 24; }
};
// p of key j under form f: x = fl(s scale_log2) as the walk stored it (-inf, or mutant 7's
// sentinel, for a hidden key), s its unscaled fp32 score (used only for a visible key under fma).
inline float twin_probability(float x, float s, bool visible, float scale_log2, float m_offset, ExpForm f) {
  const float p = f.fma && visible && scale_log2 > 0.0f ? exp2_f(std::fma(s, scale_log2, -m_offset))
                                                        : tile_probability(x, m_offset);
  return f.flush && p < 0x1p-126f ? 0.0f : p;
}

// 1 / l for the final normalisation; 0 for an empty row so O = 0 exactly.
AC_HD float inverse_row_sum(float l) { return l == 0.0f ? 0.0f : 1.0f / l; }

// LSE of a finished row: base 2 (m + log2 l) or natural (ln 2 (m + log2 l)); the empty-row
// sentinel (-inf by default, +inf for FlashAttention-2 compatibility) when l = 0.
AC_HD float final_lse(float m, float l, bool base2, float empty_sentinel) {
  if (l == 0.0f) return empty_sentinel;
  const float lse2 = m + log2_f(l);
  return base2 ? lse2 : lse2 * kLn2;
}
// The base-2 LSE a split partial carries (-inf when its key range saw nothing).
AC_HD float partial_lse2(float m, float l) { return l == 0.0f ? neg_inf_f() : m + log2_f(l); }

}  // namespace attncheck::kern::fused
