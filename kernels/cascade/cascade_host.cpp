// Host twin of cascade attention (cascade.h): the fused twin over the cached prefix (no causal),
// the fused twin over the chunk's own keys (causal), the merge twin over the two states. Rounding
// as on the GPU: partial O rounded to the input type, LSE fp32 natural, merge in fp32 with one
// rounding at its store. Empty row: O = 0, LSE = -inf.
// Check: ctest --test-dir build -R kernels_attention_twin
#include <cstdint>

#include "cascade/cascade.h"
#include "common/cuda_check.h"
#include "fused/fused.h"
#include "merge/merge.h"

namespace attncheck::kern {

int cascade_check_args(const ac_attention_args& p, const ac_attention_args& s, void* out, char* err,
                       size_t err_len) {
  if (p.dtype != s.dtype || p.num_seqs != s.num_seqs || p.num_heads != s.num_heads ||
      p.num_kv_heads != s.num_kv_heads || p.head_size != s.head_size || p.q != s.q)
    AC_REFUSE(
        "cascade attention: prefix and suffix passes differ in dtype, sequences, heads, head size or q");
  if (p.num_seqs > 0 && (!p.cu_seqlens_q_host || !s.cu_seqlens_q_host))
    AC_REFUSE("cascade attention: cu_seqlens_q_host missing");
  for (int i = 0; i <= p.num_seqs; ++i)
    if (p.cu_seqlens_q_host[i] != s.cu_seqlens_q_host[i])
      AC_REFUSE("cascade attention: prefix and suffix cu_seqlens_q differ at %d", i);
  if (p.causal)
    AC_REFUSE("cascade attention: the prefix pass must not be causal (every query sees the whole prefix)");
  if (!p.out || !p.lse || !s.out || !s.lse)
    AC_REFUSE("cascade attention: prefix and suffix out / lse (the partial states) must be provided");
  if (p.num_seqs > 0 && p.cu_seqlens_q_host[p.num_seqs] > 0 && !out) AC_REFUSE("cascade attention: null out");
  return AC_OK;
}

ac_merge_args cascade_merge_args(const ac_attention_args& p, const ac_attention_args& s, void* out,
                                 float* out_lse) {
  const int64_t total_q = p.num_seqs > 0 ? p.cu_seqlens_q_host[p.num_seqs] : 0;
  const int64_t tok_stride = int64_t(p.num_heads) * p.head_size;
  ac_merge_args m{};
  m.dtype = p.dtype;
  m.num_tokens = int32_t(total_q);
  m.num_heads = p.num_heads;
  m.head_size = p.head_size;
  m.out = out;
  m.out_stride_token = tok_stride;
  m.out_stride_head = p.head_size;
  m.out_lse = out_lse;
  m.prefix_out = p.out;
  m.prefix_stride_token = tok_stride;
  m.prefix_stride_head = p.head_size;
  m.prefix_lse = p.lse;
  m.suffix_out = s.out;
  m.suffix_stride_token = tok_stride;
  m.suffix_stride_head = p.head_size;
  m.suffix_lse = s.lse;
  m.lse_stride_token = 1;  // the fused kernel's LSE layout is [heads, tokens]
  m.lse_stride_head = total_q;
  m.stream = p.stream;
  return m;
}

int cascade_attention_host(const ac_attention_args& prefix, const ac_attention_args& suffix, void* out,
                           float* out_lse, char* err, size_t err_len) {
  if (int rc = cascade_check_args(prefix, suffix, out, err, err_len)) return rc;
  if (int rc = fused_attention_host(prefix, FusedOptions{}, err, err_len)) return rc;
  if (int rc = fused_attention_host(suffix, FusedOptions{}, err, err_len)) return rc;
  if (prefix.num_seqs == 0) return AC_OK;
  return merge_host(cascade_merge_args(prefix, suffix, out, out_lse), MergeOptions{}, err, err_len);
}

}  // namespace attncheck::kern
