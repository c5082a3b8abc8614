// Host side of splitkv-packed that needs no GPU: its argument checks and its host twin. Packing the
// query heads of one KV head into one CTA changes which memory reads are shared, not the per-row
// computation: each row walks the key tiles of 64 of its split from the split's start, with the
// causal end of its token tile, and rounds where the split-KV twin rounds; so the split-KV twin
// (kernels/splitkv/splitkv_host.cpp) is this kernel's twin, and its checks are these checks.
// Check: ctest --test-dir build -R kernels_hopper
#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "hopper/hopper.h"
#include "splitkv/splitkv.h"
#include "splitkv/splitkv_math.h"

namespace attncheck::kern {

static_assert(kSplitKVMaxSplits == kPackedMaxSplits, "the packed kernel folds with the split-KV combine");

int packed_check_args(const ac_attention_args& a, char* err, size_t err_len) {
  // The variants of the fused walk (paged K / V, softcap, window, sinks), MLA's decode head sizes and
  // an FP8 cache.
  return splitkv_check_args(a, err, err_len,
                            ArgScope{kPackedHeadPairs, kNumPackedHeadPairs, true, false, true});
}

int packed_machine_splits(const ac_attention_args& a, int sms) {
  if (a.num_kv_heads <= 0 || a.num_seqs <= 0 || !a.cu_seqlens_k_host) return 1;
  int max_tk = 0;
  for (int s = 0; s < a.num_seqs; ++s)
    max_tk = std::max(max_tk, a.cu_seqlens_k_host[s + 1] - a.cu_seqlens_k_host[s]);
  // Where the KV heads alone leave the machine more than half empty (batch 1 to 16 at 8 KV heads on
  // 132 SMs), the splits fill exactly one wave of kPackedResidentPerSM CTAs per SM: batch 1 at 128k
  // keys measured 3501 GB/s with 33 splits (264 CTAs) against 3228 with 64 (512 CTAs, 1.94 waves,
  // the second one part empty) and 3066 with 16 (one CTA per SM cannot keep the memory busy).
  // Otherwise about four CTAs per SM, as batch 64 runs at the copy bandwidth with 2 splits (1024
  // CTAs). At most one split per key tile of the longest sequence (as FlashAttention-2's heuristic
  // caps splits at its key blocks), so a batch's longest row sets every row's split count.
  // MLA's kernel (packed_mla.cu) fits one CTA per SM.
  const int resident = head_size_v_of(a) != a.head_size ? 1 : kPackedResidentPerSM;
  const int64_t ctas = int64_t(a.num_kv_heads) * a.num_seqs, slots = int64_t(std::max(sms, 1));
  const int64_t wave = resident * slots / ctas;
  const int64_t s = std::min<int64_t>(wave >= 2 ? wave : (4 * slots + ctas - 1) / ctas,
                                      std::max(1, max_tk / splitkv::kSplitTile));
  return int(std::clamp<int64_t>(s, 1, kPackedMaxSplits));
}

int packed_attention_host(const ac_attention_args& a, char* err, size_t err_len) {
  return splitkv_attention_host(a, err, err_len);
}

}  // namespace attncheck::kern
