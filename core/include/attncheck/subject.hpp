// The subject interface properties run against: a kernel implementation seen through host-side
// tensors. Every subject, built-in or plugin, CUDA or host twin, reaches the properties through
// this class; the harness adapts ac_subject (plugin_abi.h) to it, staging tensors to and from
// the device where the subject lives there. Properties never see CUDA.
#pragma once
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attncheck/names.hpp"
#include "attncheck/plugin_abi.h"

namespace attncheck {

// Tensors are kept as bit patterns, one uint32 per element (fp16 / bf16 in the low 16 bits),
// so cases are stored, compared and replayed bit-exactly.
using Bits = std::vector<uint32_t>;

struct MergeInput {
  ac_dtype dtype = AC_DTYPE_F32;
  int32_t num_tokens = 0, num_heads = 0, head_size = 0;
  Bits prefix_out, suffix_out;    // [num_tokens, num_heads, head_size], contiguous
  std::vector<float> prefix_lse;  // logical [num_tokens, num_heads], in the subject's base
  std::vector<float> suffix_lse;
  // An FP8 output (plugin_abi.h ac_merge_args.out_dtype): out_dtype an FP8 format (names.hpp is_fp8)
  // makes out the codes of the merged value / output_scale; any other value: out in dtype.
  ac_dtype out_dtype = AC_DTYPE_F32;
  float output_scale = 1.0f;
  bool fp8_out() const { return is_fp8(out_dtype); }
  ac_dtype o_dtype() const { return fp8_out() ? out_dtype : dtype; }  // out's storage format
};
struct MergeOutput {
  Bits out;                // [num_tokens, num_heads, head_size], in o_dtype()
  std::vector<float> lse;  // logical [num_tokens, num_heads]
};

struct SoftmaxInput {
  ac_dtype dtype = AC_DTYPE_F32;
  int32_t rows = 0, cols = 0;
  Bits x;  // [rows, cols]
};
struct SoftmaxOutput {
  Bits y;  // [rows, cols]
};

// The KV-cache quantiser (plugin_abi.h, AC_OP_QUANTIZE): y = the out_dtype code of x / scale.
struct QuantizeInput {
  ac_dtype dtype = AC_DTYPE_F16;       // x's
  ac_dtype out_dtype = AC_DTYPE_E4M3;  // an FP8 format (names.hpp is_fp8)
  int32_t num_tokens = 0, num_heads = 0, head_size = 0;
  Bits x;                     // [num_tokens, num_heads, head_size], contiguous
  std::vector<float> scales;  // one (per tensor) or num_heads (per head), each positive and finite
  float scale_of_head(int64_t h) const { return scales.size() == 1 ? scales[0] : scales[size_t(h)]; }
};
struct QuantizeOutput {
  Bits y;  // one code per element, the low 8 bits
};

struct AttentionInput {
  ac_dtype dtype = AC_DTYPE_F16;
  int32_t num_heads = 1, num_kv_heads = 1, head_size = 0;
  std::vector<int32_t> seqlens_q, seqlens_k;  // one entry per sequence
  bool causal = false;                        // bottom-right aligned
  std::vector<uint8_t> mask;                  // empty: none; else per sequence [Tq_i, Tk_i], back to back
  float softmax_scale = 1.0f;
  Bits q;  // [total_q, num_heads, head_size]
  Bits k;  // [total_k, num_kv_heads, head_size], or the page pool below
  Bits v;  // [total_k, num_kv_heads, head_size_v], or the page pool below
  // The engines' variants (plugin_abi.h, version 3); the defaults give the plain contract.
  int32_t head_size_v = 0;                      // V's and O's head size; 0: head_size
  float softcap = 0.0f;                         // > 0: s = softcap tanh(scale q.k / softcap)
  int32_t window_left = -1, window_right = -1;  // around the bottom-right diagonal; -1: unbounded
  std::vector<float> sinks;                     // empty, or one logit per query head
  // Paged KV: page_size > 0 makes k and v page pools [num_pages, page_size, num_kv_heads, d] and
  // block_table [num_seqs, max_blocks] (row-major) name each sequence's pages in key order; entries
  // past a sequence's last page and the slots past its last key are outside the contract (the
  // generators point them at poisoned pages).
  int32_t page_size = 0, num_pages = 0, max_blocks = 0;
  std::vector<int32_t> block_table;
  // V inside K (AC_VAR_V_IN_K, MLA's absorbed decode as FlashMLA stores it): V is the first
  // head_size_v columns of K's rows, not a tensor of its own. v still holds those columns (equal
  // to them: case.cpp v_in_k_problem), so every reader of v is unchanged; a subject declaring it is
  // given v pointing at k, read at K's row stride; any other is given v as its own tensor
  // (input_for_subject), the same attention.
  bool v_in_k = false;
  // An FP8 KV cache (plugin_abi.h, AC_FP8_*): kv_dtype an FP8 format (names.hpp is_fp8) makes k and
  // v FP8 codes (one per element, the low 8 bits), read times k_descale / v_descale: one value
  // (per tensor), one per KV head, or one per (sequence, KV head) ([num_seqs, num_kv_heads]). Any
  // other kv_dtype: k and v are in dtype, no descales. q and O stay in dtype, q too unless
  // q_descale is given (AC_FP8_Q: q then holds codes of kv_dtype, read times q_descale, as many
  // values as k_descale).
  ac_dtype kv_dtype = AC_DTYPE_F32;
  std::vector<float> k_descale, v_descale, q_descale;
  // P's scale (AC_FP8_P_SCALE, cuDNN's scale_s), an FP8 call's: in (0, AC_MAX_P_SCALE]; 0 gives the
  // fixed 2^8 of AC_FP8_P_E4M3 (p_scale_or_fixed).
  float p_scale = 0.0f;
  double p_scale_or_fixed() const { return p_scale > 0.0f ? double(p_scale) : 256.0; }
  // O in FP8 (AC_FP8_OUT, cuDNN's scale_o): out_dtype an FP8 format (names.hpp is_fp8) makes out the
  // codes of O / output_scale; any other value: out in dtype.
  ac_dtype out_dtype = AC_DTYPE_F32;
  float output_scale = 1.0f;
  bool fp8_out() const { return is_fp8(out_dtype); }
  ac_dtype o_dtype() const { return fp8_out() ? out_dtype : dtype; }  // out's storage format
  // The call asks for the maxima of P and O (AC_FP8_AMAX, cuDNN's Amax_S and Amax_O): FP8 calls only.
  bool want_amax = false;

  int32_t dv() const { return head_size_v > 0 ? head_size_v : head_size; }
  // Keys [first, last] that query t of a sequence of tq queries over tk keys may see before the
  // mask: causal and window_right bound them above, window_left below, around the bottom-right
  // aligned diagonal; none when first > last. The judge's rows and a failure's words both read it;
  // the reference states the rule on its own (AttentionProblem::key_range), as it states the whole
  // contract without the harness's types.
  std::pair<int64_t, int64_t> key_range(int64_t t, int64_t tq, int64_t tk) const {
    const int64_t diag = t + tk - tq;
    int64_t first = 0, last = tk - 1;
    if (causal) last = std::min(last, diag);
    if (window_right >= 0) last = std::min(last, diag + window_right);
    if (window_left >= 0) first = std::max(first, diag - window_left);
    return {first, last};
  }
  // V inside K: v set to the first head_size_v columns of K's rows (the pool's, paged), codes,
  // poison and all, so that case.cpp v_in_k_problem holds; v_in_k set.
  void share_v_with_k() {
    const size_t D = size_t(head_size), Dv = size_t(dv()), rows = k.size() / D;
    v.resize(rows * Dv);
    for (size_t r = 0; r < rows; ++r) std::copy_n(k.begin() + long(r * D), Dv, v.begin() + long(r * Dv));
    v_in_k = true;
  }
  // A copy with q, k, v and mask empty and everything else kept: where a caller builds new tensors
  // of the same kind (batch_invariance's pieces of a batch), copying a batch's tensors only to
  // clear them cost more than the pieces themselves.
  AttentionInput without_tensors() const;
  bool fp8_kv() const { return is_fp8(kv_dtype); }
  bool fp8_q() const { return fp8_kv() && !q_descale.empty(); }
  // The dtype k and v are stored in, and q's.
  ac_dtype k_dtype() const { return fp8_kv() ? kv_dtype : dtype; }
  ac_dtype q_dtype() const { return fp8_q() ? kv_dtype : dtype; }
  // The KV head of element i of k or v (contiguous rows or page slots alike: [.., num_kv_heads,
  // width], `width` the tensor's head size).
  int32_t kv_head_of_element(size_t i, int64_t width) const {
    return int32_t((int64_t(i) / width) % num_kv_heads);
  }
  // The KV head of element i of q ([tokens, num_heads, head_size]): its query head's.
  int32_t q_kv_head_of_element(size_t i) const {
    return int32_t((int64_t(i) / head_size) % num_heads / (num_heads / num_kv_heads));
  }
  // The descales' granularity (plugin_abi.h descale_granularity), read off k_descale's size: 0 one
  // value, 1 one per KV head, 2 one per (sequence, KV head). The sizes differ wherever the meanings
  // do (one sequence's per-sequence descales are its per-KV-head ones).
  int32_t descale_granularity() const {
    const size_t n = k_descale.size();
    return n <= 1 ? 0 : n == size_t(num_kv_heads) ? 1 : 2;
  }
  // The index in a descale array of d_size values (1, num_kv_heads or num_seqs x num_kv_heads) of
  // sequence seq's KV head kv_head.
  size_t descale_slot(size_t d_size, int32_t seq, int32_t kv_head) const {
    return d_size <= 1                      ? 0
           : d_size == size_t(num_kv_heads) ? size_t(kv_head)
                                            : size_t(seq) * num_kv_heads + kv_head;
  }
  // Sequence seq's KV head kv_head's descale in d (k_descale, v_descale or q_descale): 1 where d
  // is empty (no FP8 cache, or q in dtype).
  float descale(const std::vector<float>& d, int32_t seq, int32_t kv_head) const {
    return d.empty() ? 1.0f : d[descale_slot(d.size(), seq, kv_head)];
  }
  // The sequence of each storage row of k and v: by seqlens_k, or in a page pool the first sequence
  // whose block table names the row's page (0 for a page no sequence names: its descales are any
  // sequence's). And the sequence of each query token.
  std::vector<int32_t> kv_row_sequences() const;
  std::vector<int32_t> token_sequences() const;
  // d (k_descale, v_descale or q_descale) for an input made of this one's sequences `seqs` (in
  // that order, one per new sequence) and KV heads `kv_heads`, at d's granularity: what a piece,
  // a shrunk case or a sub-batch holds.
  std::vector<float> descales_for(const std::vector<float>& d, const std::vector<size_t>& seqs,
                                  const std::vector<int32_t>& kv_heads) const {
    if (d.size() <= 1) return d;
    std::vector<float> out;
    if (d.size() == size_t(num_kv_heads)) {
      for (int32_t kv : kv_heads) out.push_back(d[size_t(kv)]);
      return out;
    }
    for (size_t s : seqs)
      for (int32_t kv : kv_heads) out.push_back(d[descale_slot(d.size(), int32_t(s), kv)]);
    return out;
  }
  // The slot, in a descale array of d_size values, of element i of k or v (storage rows of
  // num_kv_heads x width; rows from kv_row_sequences) and of q (tokens from token_sequences).
  size_t kv_descale_slot(size_t d_size, const std::vector<int32_t>& rows, size_t i, int64_t width) const {
    return descale_slot(d_size, rows[size_t(int64_t(i) / (width * num_kv_heads))],
                        kv_head_of_element(i, width));
  }
  size_t q_descale_slot(size_t d_size, const std::vector<int32_t>& tokens, size_t i) const {
    return descale_slot(d_size, tokens[size_t(int64_t(i) / (int64_t(head_size) * num_heads))],
                        q_kv_head_of_element(i));
  }
  bool paged() const { return page_size > 0; }
  // Rows of K / V storage: total keys, or num_pages * page_size.
  int64_t kv_rows() const {
    if (paged()) return int64_t{num_pages} * page_size;
    int64_t n = 0;
    for (int32_t t : seqlens_k) n += t;
    return n;
  }
  // The storage row of key j of sequence s.
  int64_t kv_row(size_t s, int64_t j, int64_t seq_first_key) const {
    if (!paged()) return seq_first_key + j;
    return int64_t{block_table[s * size_t(max_blocks) + size_t(j / page_size)]} * page_size + j % page_size;
  }
};
inline std::vector<int32_t> AttentionInput::kv_row_sequences() const {
  std::vector<int32_t> rows(size_t(kv_rows()), 0);
  if (paged()) {
    // Later sequences first, so the first sequence naming a page writes it last.
    for (size_t s = seqlens_k.size(); s-- > 0;)
      for (int64_t j = 0; j < seqlens_k[s]; ++j) rows[size_t(kv_row(s, j, 0))] = int32_t(s);
    return rows;
  }
  size_t r = 0;
  for (size_t s = 0; s < seqlens_k.size(); ++s)
    for (int32_t j = 0; j < seqlens_k[s]; ++j) rows[r++] = int32_t(s);
  return rows;
}
inline std::vector<int32_t> AttentionInput::token_sequences() const {
  std::vector<int32_t> tokens;
  for (size_t s = 0; s < seqlens_q.size(); ++s) tokens.insert(tokens.end(), size_t(seqlens_q[s]), int32_t(s));
  return tokens;
}
inline AttentionInput AttentionInput::without_tensors() const {
  AttentionInput s;
  s.dtype = dtype;
  s.num_heads = num_heads;
  s.num_kv_heads = num_kv_heads;
  s.head_size = head_size;
  s.seqlens_q = seqlens_q;
  s.seqlens_k = seqlens_k;
  s.causal = causal;
  s.softmax_scale = softmax_scale;
  s.head_size_v = head_size_v;
  s.softcap = softcap;
  s.window_left = window_left;
  s.window_right = window_right;
  s.sinks = sinks;
  s.page_size = page_size;
  s.num_pages = num_pages;
  s.max_blocks = max_blocks;
  s.block_table = block_table;
  s.kv_dtype = kv_dtype;
  s.k_descale = k_descale;
  s.v_descale = v_descale;
  s.q_descale = q_descale;
  s.p_scale = p_scale;
  s.out_dtype = out_dtype;
  s.output_scale = output_scale;
  s.want_amax = want_amax;
  // A member added to AttentionInput changes its size (on 64-bit targets): copy it above too, then
  // update the size.
  static_assert(sizeof(void*) != 8 || sizeof(AttentionInput) == 352,
                "AttentionInput gained a member: copy it in without_tensors");
  return s;
}
struct AttentionOptions {
  int32_t tiling = 0;      // index into caps().tilings
  int32_t num_splits = 1;  // split-KV subjects
  ac_fold fold_order = AC_FOLD_LEFT;
};
struct AttentionOutput {
  Bits out;                // [total_q, num_heads, head_size], in the input's o_dtype()
  std::vector<float> lse;  // logical [total_q, num_heads], read from the subject's declared layout
  // want_amax: the largest weight of P and the largest |O| the subject wrote (AC_FP8_AMAX); else empty.
  std::vector<float> amax;
};

// A subject refused a case (unsupported shape, dtype...) or failed while running it.
// transport_failed: the process serving the subject (a worker) died, hung or broke the protocol;
// its own outcome, never read as a fault of the device. interrupted: the run was asked to stop
// while the call was in flight; the case did not end, so it is neither a verdict nor a crash.
struct SubjectError : std::runtime_error {
  enum class Kind { unsupported, device_fault, internal, transport_failed, interrupted };
  Kind kind;
  SubjectError(Kind k, const std::string& what) : std::runtime_error(what), kind(k) {}
  // The failure class a crash of this kind is reported under (report.json, replay verdicts).
  const char* failure_class() const {
    return kind == Kind::device_fault       ? "device_fault"
           : kind == Kind::transport_failed ? "transport_failed"
           : kind == Kind::interrupted      ? "interrupted"
                                            : "internal";
  }
};

class Subject {
 public:
  virtual ~Subject() = default;
  virtual const std::string& name() const = 0;
  virtual const std::string& description() const = 0;
  virtual const ac_caps& caps() const = 0;
  // "host" or "cuda", and where it came from ("builtin" or the plugin path)
  virtual std::string backend() const = 0;
  virtual std::string origin() const = 0;

  // Each throws SubjectError on refusal or failure.
  virtual MergeOutput merge(const MergeInput& in) = 0;
  virtual SoftmaxOutput softmax(const SoftmaxInput& in) = 0;
  virtual AttentionOutput attention(const AttentionInput& in, const AttentionOptions& opt) = 0;
  // Only a subject declaring AC_OP_QUANTIZE is given one; the others keep this refusal.
  virtual QuantizeOutput quantize(const QuantizeInput&) {
    throw SubjectError(SubjectError::Kind::unsupported, name() + " has no quantize");
  }

  bool has_op(uint32_t op) const { return (caps().ops & op) != 0; }
  bool has_dtype(ac_dtype d) const { return (caps().dtypes & AC_DTYPE_BIT(d)) != 0; }
  bool supports_head_size(int32_t d) const {
    const ac_caps& c = caps();
    if (c.head_sizes) {
      for (int32_t i = 0; i < c.num_head_sizes; ++i)
        if (c.head_sizes[i] == d) return true;
      return false;
    }
    return d >= c.head_size_min && d <= c.head_size_max;
  }
  // QK head size qk with V head size v (0, or qk: V's is QK's): a supported head size, or a pair of
  // caps.head_pairs where the subject declares AC_VAR_HEAD_SIZE_V.
  bool supports_head_sizes(int32_t qk, int32_t v) const {
    if (v <= 0 || v == qk) return supports_head_size(qk);
    const ac_caps& c = caps();
    for (int32_t i = 0; (c.variants & AC_VAR_HEAD_SIZE_V) && c.head_pairs && i < c.num_head_pairs; ++i)
      if (c.head_pairs[i].qk == qk && c.head_pairs[i].v == v) return true;
    return false;
  }
};

}  // namespace attncheck
