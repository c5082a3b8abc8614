// Exact (working-precision) logsumexp, softmax, online-softmax state, attention forward and merge.
//
// Conventions:
//   - LSE in natural log by default; LseBase::two gives log2(sum e^x) = LSE / ln 2 (FlashInfer,
//     TensorRT-LLM). Merge inputs given in base two are masses 2^lse.
//   - Empty rows (no visible key) and all -inf logits: softmax all zero, O = 0, LSE = -inf (the
//     sink when the problem has sinks, see AttentionProblem).
//   - Scores s_j = softmax_scale * dot(q, k_j): the products of fp16/bf16/fp32 inputs are exact,
//     the dot product is rounded once (correctly) to working precision, the scale is the float value
//     taken as given.
//   - Causal is bottom-right aligned: query t (0-based within its sequence) sees key j when
//     j <= t + Tk - Tq (chunked prefill). Query head i reads KV head i / (h / h_kv).
//   - The mask, when present, is per sequence row-major [Tq_i, Tk_i] (nonzero = visible), the
//     sequences back to back, shared by all heads, AND-ed with causal.
//   - NaN and infinity (IEEE meaning of the exact expression, limits where it has one):
//       a NaN logit/score among the visible ones: the whole row is NaN (every O element and LSE);
//       a +inf score (no NaN): the softmax is uniform over the +inf keys, LSE = +inf;
//       a -inf score: that key has weight zero (as if masked);
//       an inf or NaN in a visible value with nonzero weight: that O element is +-inf or NaN
//       (NaN when +inf and -inf meet). Invisible keys' values never matter.
//     Scores follow IEEE products: inf * 0 = NaN, so a query with inf against a zero key is NaN.
//     Under softcap the rules apply to the capped scores: a NaN stays NaN (tanh(NaN)), and a +-inf
//     scaled score caps to +-softcap (softcap * tanh(+-inf)), a finite logit like any other.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "attncheck/reference/format.hpp"

namespace attncheck::ref {

enum class LseBase { e, two };

// -inf for empty or all -inf; +inf when any element is +inf (and none NaN); NaN when any is NaN.
Real logsumexp(const std::vector<Real>& x, LseBase base = LseBase::e);
// Empty input: empty; all -inf: all zero; NaN anywhere: all NaN; +inf entries share the mass.
std::vector<Real> softmax(const std::vector<Real>& x);

// The online state (m, l, O~): m the running max, l = sum e^(x - m), O~ = sum e^(x - m) v
// (unnormalised). Final output O = O~ / l, LSE = m + log l.
struct OnlineState {
  Real m;
  Real l;
  std::vector<Real> o;
};
OnlineState online_state_init(int head_size);  // m = -inf, l = 0, O~ = 0
// Exact recurrence of the seed: m' = max(m, max x), alpha = e^(m - m') (0 when m = -inf: the base
// case guard; nothing changes when m' = -inf), l' = alpha l + sum e^(x - m'), O' = alpha O + sum e^(x-m') v.
// block_values[i] is the value vector of block_logits[i].
void online_state_update(OnlineState&, const std::vector<Real>& block_logits,
                         const std::vector<std::vector<Real>>& block_values);

struct AttentionProblem {
  Format dtype;
  int32_t num_heads, num_kv_heads, head_size;
  std::vector<int32_t> seqlens_q, seqlens_k;
  bool causal;
  std::vector<uint8_t> mask;
  float softmax_scale;
  std::vector<uint32_t> q, k, v;  // q [total_q, num_heads, head_size], k [total_k, num_kv_heads, head_size]
  // The engines' variants; the defaults give the plain contract above.
  //   head_size_v: V's and O's head size (0: head_size); v is [total_k, num_kv_heads, head_size_v]
  //     and O [total_q, num_heads, head_size_v] (MLA: 192 / 128, 576 / 512).
  //   softcap > 0: each score is capped after the scale, s_j = softcap * tanh(softmax_scale * dot /
  //     softcap) (scale first, then cap); 0: no cap. Finite and >= 0.
  //   window_left / window_right >= 0: query t of a sequence with Tq queries and Tk keys sees key j
  //     only when t + Tk - Tq - window_left <= j <= t + Tk - Tq + window_right (the window around the
  //     bottom-right aligned diagonal); -1: that side unbounded. AND-ed with causal and the mask.
  //   sinks: empty, or one finite logit per query head, in the units of the scaled (and capped)
  //     scores: e^sink joins the softmax denominator only (a key whose value is 0). LSE =
  //     log(e^sink + sum_j e^s_j); a row with no visible key has O = 0 and LSE = sink.
  //   k_scale / v_scale: empty, or one positive finite factor per KV head ([num_kv_heads]) or per
  //     (sequence, KV head) ([num_seqs, num_kv_heads]): the kernel was given each stored K (V)
  //     element of that head (and sequence) times the factor, as an FP8 cache's descales give it. K's factor
  //     multiplies the head's scores with the softmax scale (their product of two floats is exact in double),
  //     V's each decoded element (a value of at most 24 significant bits times a float: exact in double), so
  //     the reference is that of the scaled values, exactly.
  //   q_scale: empty, or one positive finite factor per KV head (or per (sequence, KV head), as
  //     k_scale), for the query heads that read it:
  //     the kernel was given each stored Q element times its factor (an FP8 Q's descale). It
  //     multiplies the head's scores after the softmax scale and K's factor, rounded once in
  //     working precision (the fast path's bound counts that rounding of the scale).
  int32_t head_size_v = 0;
  float softcap = 0.0f;
  int32_t window_left = -1, window_right = -1;
  std::vector<float> sinks;
  std::vector<float> k_scale, v_scale, q_scale;

  // Keys [first, last] of query t (of tq over tk keys) before the mask, by the rule above: causal and
  // window_right bound them above, window_left below; none when first > last.
  std::pair<int64_t, int64_t> key_range(int64_t t, int64_t tq, int64_t tk) const {
    const int64_t diag = t + tk - tq;
    int64_t first = 0, last = tk - 1;
    if (causal) last = std::min(last, diag);
    if (window_right >= 0) last = std::min(last, diag + window_right);
    if (window_left >= 0) first = std::max(first, diag - window_left);
    return {first, last};
  }
};

// Sequence seq's KV head kv_head's factor in scales (k_scale, v_scale or q_scale): 1 where the
// problem has none.
inline double scale_of(const std::vector<float>& scales, int32_t num_kv_heads, size_t seq, int32_t kv_head) {
  if (scales.empty()) return 1.0;
  const size_t at = scales.size() == static_cast<size_t>(num_kv_heads)
                        ? static_cast<size_t>(kv_head)
                        : seq * static_cast<size_t>(num_kv_heads) + static_cast<size_t>(kv_head);
  return static_cast<double>(scales[at]);
}
inline double k_scale_of(const AttentionProblem& pb, size_t seq, int32_t kv_head) {
  return scale_of(pb.k_scale, pb.num_kv_heads, seq, kv_head);
}
inline double q_scale_of(const AttentionProblem& pb, size_t seq, int32_t kv_head) {
  return scale_of(pb.q_scale, pb.num_kv_heads, seq, kv_head);
}
inline double v_scale_of(const AttentionProblem& pb, size_t seq, int32_t kv_head) {
  return scale_of(pb.v_scale, pb.num_kv_heads, seq, kv_head);
}

// V's and O's head size: head_size_v, or head_size when head_size_v is 0.
inline int32_t value_head_size(const AttentionProblem& pb) {
  return pb.head_size_v > 0 ? pb.head_size_v : pb.head_size;
}

// Throws ReferenceError naming the problem: head counts/size <= 0, h % h_kv != 0, seqlens_q/k
// sizes differ, negative lengths, q/k/v/mask sizes not matching the shape, fp16/bf16 bit patterns
// above 16 bits, non-finite softmax_scale, a negative or non-finite softcap, head_size_v < 0, a
// window side below -1, sinks neither empty nor num_heads finite values, k_scale / v_scale /
// q_scale neither empty nor num_kv_heads positive finite values.
void validate(const AttentionProblem&);

struct ExactRow {
  std::vector<Real> o;  // head_size_v elements
  Real lse;             // in the requested base (natural by default)
  bool empty;           // no visible key: o = 0, lse = -inf (the sink, when the problem has sinks)
};
ExactRow exact_attention_row(const AttentionProblem&, int64_t token /*global index in [0,total_q)*/,
                             int32_t head, LseBase base = LseBase::e);
std::vector<ExactRow> exact_attention(const AttentionProblem&,
                                      LseBase base = LseBase::e);  // [total_q][num_heads]

// How attention accumulates O~ = sum p_j v_j. `automatic` (default) sums exactly in fixed point
// when a KV slice's values allow it (always for fp16; bf16/fp32 values spanning at most 62 bits) and
// otherwise adds correctly rounded exact products; `rounded_adds` always takes the second path. Both
// meet the error bound of README.md; the switch exists so tests can compare two independent
// computations. Process-wide.
enum class Accumulation { automatic, rounded_adds };
void set_accumulation(Accumulation);
Accumulation accumulation();

// A partial attention result: normalised output and its LSE (in `base`).
struct ExactState {
  std::vector<Real> o;
  Real lse;
};
// Merge two or more states exactly: O = sum_i w_i O_i / sum_i w_i with w_i = e^(lse_i - M)
// (2^(lse_i - M) in base two), LSE = M + log(sum w_i). +inf LSE is FlashAttention-2's empty
// sentinel and is read as empty (-inf) when plus_inf_is_empty (default); otherwise a +inf state is
// infinite mass: LSE = +inf and O = NaN (no defined convex combination). All empty: O = 0,
// LSE = -inf. A NaN LSE makes the result NaN. Throws ReferenceError when states is empty or head
// sizes differ.
ExactState exact_merge(const std::vector<ExactState>& states, LseBase base = LseBase::e,
                       bool plus_inf_is_empty = true);
// The same for two states, without copying them into a vector.
ExactState exact_merge(const ExactState& a, const ExactState& b, LseBase base = LseBase::e,
                       bool plus_inf_is_empty = true);

}  // namespace attncheck::ref
