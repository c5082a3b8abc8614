// Host side of splitkv-packed that needs no GPU: its argument checks and its host twin. Packing the
// query heads of one KV head into one CTA changes which memory reads are shared, not the per-row
// computation: each row walks the key tiles of 64 of its split from the split's start, with the
// causal end of its token tile, and rounds where the split-KV twin rounds; so the split-KV twin
// (kernels/splitkv/splitkv_host.cpp) is this kernel's twin, and its checks are these checks.
// Check: ctest --test-dir build -R kernels_hopper
#include <algorithm>
#include <cstdint>

#include "hopper/hopper.h"
#include "splitkv/splitkv.h"

namespace attncheck::kern {

static_assert(kSplitKVMaxSplits == kPackedMaxSplits, "the packed kernel folds with the split-KV combine");

int packed_check_args(const ac_attention_args& a, char* err, size_t err_len) {
  return splitkv_check_args(a, err, err_len);
}

int packed_machine_splits(const ac_attention_args& a, int sms) {
  if (a.num_kv_heads <= 0 || a.num_seqs <= 0 || !a.cu_seqlens_k_host) return 1;
  int max_tk = 0;
  for (int s = 0; s < a.num_seqs; ++s)
    max_tk = std::max(max_tk, a.cu_seqlens_k_host[s + 1] - a.cu_seqlens_k_host[s]);
  // Four CTAs per SM: at batch 1 (8 KV heads) one CTA per SM with 16 splits left each CTA's four
  // warps latency-bound (69% of the copy bandwidth at 128k keys); batch 64 runs two CTAs per SM at
  // the copy bandwidth. Splits under 128 keys would cost more in the combine than they add.
  const int64_t ctas = int64_t(a.num_kv_heads) * a.num_seqs;
  const int64_t s =
      std::min<int64_t>((4 * int64_t(std::max(sms, 1)) + ctas - 1) / ctas, std::max(1, max_tk / 128));
  return int(std::clamp<int64_t>(s, 1, kPackedMaxSplits));
}

int packed_attention_host(const ac_attention_args& a, char* err, size_t err_len) {
  return splitkv_attention_host(a, err, err_len);
}

}  // namespace attncheck::kern
