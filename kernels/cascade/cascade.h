// Cascade attention, the composition chunked prefill uses: the queries of a new chunk attend to
//   1. the cached prefix (every key visible: no causal mask), by the fused kernel -> (O_p, LSE_p);
//   2. the chunk's own keys (causal, bottom-right), by the fused kernel -> (O_s, LSE_s);
// and the two states are merged by the merge kernel (kernels/merge/merge.h, scale first, +inf read
// as empty, two empty states give O = 0 and LSE = -inf):
//   O = O_p w_p / (w_p + w_s) + O_s w_s / (w_p + w_s),  w = e^(LSE - max),  LSE = max + log(w_p + w_s).
// For a chunk of Tq queries after P cached keys this equals causal attention over the P + Tq keys
// back to back (bottom-right alignment: query t sees keys <= t + P).
// Rounding: each partial O is rounded to the input type by the fused kernel (as an engine stores
// it), LSE fp32; the merge computes in fp32 and rounds O once more at its store.
// Conventions: LSE natural, [heads, tokens]; an empty row O = 0, LSE = -inf.
// Check: ctest --test-dir build -R kernels_attention
#pragma once
#include <cstddef>

#include "attncheck/plugin_abi.h"

namespace attncheck::kern {

// prefix and suffix describe the same queries (dtype, num_seqs, cu_seqlens_q, q, heads, head size
// equal) against two key sets. Their out / lse fields are the partial results: caller-provided
// scratch, [total_q, heads, head_size] in the input type and [heads, total_q] fp32, non-null.
// Their tiling fields pick the fused tiling of each pass. out / out_lse receive the merged result
// (out_lse may be null). Host twin: host memory; CUDA: device memory, prefix.stream used for all.
int cascade_attention_host(const ac_attention_args& prefix, const ac_attention_args& suffix, void* out,
                           float* out_lse, char* err, size_t err_len);
#if defined(ATTNCHECK_HAVE_CUDA)
int cascade_attention_cuda(const ac_attention_args& prefix, const ac_attention_args& suffix, void* out,
                           float* out_lse, char* err, size_t err_len);
#endif

// Checks shared by both: the two passes agree on the queries, partial buffers are present.
int cascade_check_args(const ac_attention_args& prefix, const ac_attention_args& suffix, void* out, char* err,
                       size_t err_len);
// The merge arguments combining prefix.out / prefix.lse with suffix.out / suffix.lse into out.
ac_merge_args cascade_merge_args(const ac_attention_args& prefix, const ac_attention_args& suffix, void* out,
                                 float* out_lse);

}  // namespace attncheck::kern
