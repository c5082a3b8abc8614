// Host side of splitkv-packed that needs no GPU: its argument checks and its host twin. Packing the
// query heads of one KV head into one CTA changes which memory reads are shared, not the per-row
// computation: each row walks the key tiles of 64 of its split from the split's start, with the
// causal end of its token tile, and rounds where the split-KV twin rounds; so the split-KV twin
// (kernels/splitkv/splitkv_host.cpp) is this kernel's twin, and its checks are these checks.
// Check: ctest --test-dir build -R kernels_hopper
#include "hopper/hopper.h"
#include "splitkv/splitkv.h"

namespace attncheck::kern {

static_assert(kSplitKVMaxSplits == kPackedMaxSplits, "the packed kernel folds with the split-KV combine");

int packed_check_args(const ac_attention_args& a, char* err, size_t err_len) {
  return splitkv_check_args(a, err, err_len);
}

int packed_attention_host(const ac_attention_args& a, char* err, size_t err_len) {
  return splitkv_attention_host(a, err, err_len);
}

}  // namespace attncheck::kern
