// ac_attention_args (plugin_abi.h) filled in one place. The harness's adapter, the benchmarks and
// the kernel tests say what a call is (shape, sequences, tensors, options) and this builder writes
// the fields:
//
//   const ac_attention_args a = AttentionArgs(AC_DTYPE_F16, heads, kv_heads, head_size)
//                                   .sequences(num_seqs, cu_q, cu_k, cu_q_host, cu_k_host)
//                                   .tensors(q, k, v, out, lse)
//                                   .scale(scale)
//                                   .causal(true);
//
// A field no call sets keeps the value of a value-initialised ac_attention_args (null, 0,
// AC_FOLD_LEFT). C++ for host code, compiled by a C++ compiler or nvcc's host pass; not installed
// (plugins fill the C struct as they like).
#pragma once
#include <cstdint>

#include "attncheck/plugin_abi.h"

namespace attncheck {

class AttentionArgs {
 public:
  AttentionArgs(ac_dtype dtype, int32_t num_heads, int32_t num_kv_heads, int32_t head_size) {
    a_.dtype = dtype;
    a_.num_heads = num_heads;
    a_.num_kv_heads = num_kv_heads;
    a_.head_size = head_size;
    a_.head_size_v = head_size;
    a_.window_left = a_.window_right = -1;
    a_.kv_dtype = dtype;
    a_.out_dtype = dtype;
  }

  // num_seqs sequences back to back: num_seqs + 1 offsets of each sequence's first query and key
  // row, in the subject's memory (cu_q, cu_k) and in host memory (cu_q_host, cu_k_host). The
  // longest sequence (max_seqlen_q / _k) is read off the host offsets.
  AttentionArgs& sequences(int32_t num_seqs, const int32_t* cu_q, const int32_t* cu_k,
                           const int32_t* cu_q_host, const int32_t* cu_k_host) {
    a_.num_seqs = num_seqs;
    a_.cu_seqlens_q = cu_q;
    a_.cu_seqlens_k = cu_k;
    a_.cu_seqlens_q_host = cu_q_host;
    a_.cu_seqlens_k_host = cu_k_host;
    a_.max_seqlen_q = longest(num_seqs, cu_q_host);
    a_.max_seqlen_k = longest(num_seqs, cu_k_host);
    return *this;
  }
  // The same with the offsets in host memory only (a host subject's view).
  AttentionArgs& sequences(int32_t num_seqs, const int32_t* cu_q_host, const int32_t* cu_k_host) {
    return sequences(num_seqs, cu_q_host, cu_k_host, cu_q_host, cu_k_host);
  }
  AttentionArgs& tensors(const void* q, const void* k, const void* v, void* out, float* lse) {
    a_.q = q;
    a_.k = k;
    a_.v = v;
    a_.out = out;
    a_.lse = lse;
    return *this;
  }
  AttentionArgs& scale(float softmax_scale) {
    a_.softmax_scale = softmax_scale;
    return *this;
  }
  AttentionArgs& causal(bool causal) {
    a_.causal = causal ? 1 : 0;
    return *this;
  }
  // The mask and its block offsets in the subject's memory (cu_mask) and in host memory.
  AttentionArgs& mask(const uint8_t* mask, const int64_t* cu_mask, const int64_t* cu_mask_host) {
    a_.mask = mask;
    a_.cu_mask = cu_mask;
    a_.cu_mask_host = cu_mask_host;
    return *this;
  }
  // The same with the offsets in host memory only.
  AttentionArgs& mask(const uint8_t* mask, const int64_t* cu_mask_host) {
    return this->mask(mask, cu_mask_host, cu_mask_host);
  }
  AttentionArgs& tiling(int32_t tiling) {
    a_.tiling = tiling;
    return *this;
  }
  AttentionArgs& splits(int32_t num_splits, ac_fold fold_order) {
    a_.num_splits = num_splits;
    a_.fold_order = fold_order;
    return *this;
  }
  // Version 3's variants (plugin_abi.h AC_VAR_*): V's head size, the softcap (0: none), the window
  // sides (-1: unbounded) and the sinks (num_heads logits in the subject's memory, or null).
  AttentionArgs& variants(int32_t head_size_v, float softcap, int32_t window_left, int32_t window_right,
                          const float* sinks) {
    a_.head_size_v = head_size_v;
    a_.softcap = softcap;
    a_.window_left = window_left;
    a_.window_right = window_right;
    a_.sinks = sinks;
    return *this;
  }
  // K and V as page pools read through a block table [num_seqs, max_blocks], in the subject's
  // memory (table) and in host memory (table_host).
  AttentionArgs& paged(int32_t page_size, int32_t num_pages, int32_t max_blocks, const int32_t* table,
                       const int32_t* table_host) {
    a_.page_size = page_size;
    a_.num_pages = num_pages;
    a_.max_blocks = max_blocks;
    a_.block_table = table;
    a_.block_table_host = table_host;
    return *this;
  }
  // An FP8 KV cache: k and v hold codes of kv_dtype, read times k_descale / v_descale (one value,
  // granularity 0, one per KV head, 1, or one per (sequence, KV head), 2; the subject's memory).
  AttentionArgs& fp8_kv(ac_dtype kv_dtype, const float* k_descale, const float* v_descale,
                        int32_t granularity) {
    a_.kv_dtype = kv_dtype;
    a_.k_descale = k_descale;
    a_.v_descale = v_descale;
    a_.descale_granularity = granularity;
    return *this;
  }
  // V inside K (AC_VAR_V_IN_K): v is k, read as the first head_size_v columns of K's rows.
  AttentionArgs& v_in_k(bool inside) {
    a_.v_in_k = inside ? 1 : 0;
    return *this;
  }
  // Q in FP8 as well (AC_FP8_Q): q holds codes of the cache's kv_dtype, read times q_descale (as
  // many values as k_descale).
  AttentionArgs& fp8_q(const float* q_descale) {
    a_.q_descale = q_descale;
    return *this;
  }
  // P's scale (AC_FP8_P_SCALE): one value in the subject's memory, or NULL for the fixed 2^8.
  AttentionArgs& p_scale(const float* scale) {
    a_.p_scale = scale;
    return *this;
  }
  // O in FP8 (AC_FP8_OUT): out_dtype an FP8 format with one output_scale in the subject's memory;
  // dtype (and NULL) for out in the input type.
  AttentionArgs& fp8_out(ac_dtype out_dtype, const float* output_scale) {
    a_.out_dtype = out_dtype;
    a_.output_scale = output_scale;
    return *this;
  }
  // The maxima an FP8 call writes (AC_FP8_AMAX): two floats in the subject's memory, or NULL.
  AttentionArgs& amax(float* amax) {
    a_.amax = amax;
    return *this;
  }
  AttentionArgs& stream(void* stream) {
    a_.stream = stream;
    return *this;
  }

  const ac_attention_args& args() const { return a_; }
  operator const ac_attention_args&() const { return a_; }

 private:
  // The most rows of one sequence (0 without offsets).
  static int32_t longest(int32_t num_seqs, const int32_t* cu) {
    int32_t most = 0;
    for (int32_t s = 0; cu && s < num_seqs; ++s) most = cu[s + 1] - cu[s] > most ? cu[s + 1] - cu[s] : most;
    return most;
  }

  ac_attention_args a_{};
};

}  // namespace attncheck
