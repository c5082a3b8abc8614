// CUDA cascade attention (cascade.h): fused kernel over the cached prefix (no causal), fused kernel
// over the chunk's own keys (causal), merge kernel over the two states, all on prefix.stream and
// synchronised before returning. Rounding and conventions as in cascade.h.
// Check: ctest --test-dir build -L gpu -R kernels_attention
#include "cascade/cascade.h"
#include "common/cuda_check.h"
#include "fused/fused.h"
#include "merge/merge.h"

namespace attncheck::kern {

int cascade_attention_cuda(const ac_attention_args& prefix, const ac_attention_args& suffix, void* out,
                           float* out_lse, char* err, size_t err_len) {
  if (int rc = cascade_check_args(prefix, suffix, out, err, err_len)) return rc;
  FusedOptions async;
  async.synchronize = false;
  ac_attention_args s = suffix;
  s.stream = prefix.stream;
  if (int rc = fused_attention_cuda(prefix, async, err, err_len)) return rc;
  if (int rc = fused_attention_cuda(s, async, err, err_len)) return rc;
  if (prefix.num_seqs == 0) return AC_OK;
  return merge_cuda(cascade_merge_args(prefix, s, out, out_lse), MergeOptions{}, err, err_len);
}

}  // namespace attncheck::kern
