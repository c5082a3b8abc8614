// ac_subject adapter of splitkv-packed (split-KV decode with the query heads of one KV head packed
// into one CTA): the split-KV subject's contract (AC_OP_SPLITKV, its tilings, 1..64 splits, every
// fold order, natural LSE, empty row -inf). Host twin where no GPU is present.
// Check: ctest --test-dir build -R kernels_hopper
#include <cstdio>
#include <vector>

#include "hopper/hopper.h"
#include "splitkv/splitkv.h"

namespace attncheck::kern {

namespace {

bool g_packed_cuda[2] = {false, true};

int run_packed(void* self, const ac_attention_args* args, char* err, size_t err_len) {
#if defined(ATTNCHECK_HAVE_CUDA)
  if (*static_cast<const bool*>(self)) {
    if (args->num_splits < 1) {
      if (err && err_len) std::snprintf(err, err_len, "splitkv-packed: num_splits %d < 1", args->num_splits);
      return AC_ERR_UNSUPPORTED;
    }
    return packed_attention_cuda(*args, err, err_len);
  }
#endif
  return packed_attention_host(*args, err, err_len);
}

}  // namespace

void append_packed_subjects(std::vector<ac_subject>& out, bool cuda) {
#if !defined(ATTNCHECK_HAVE_CUDA)
  if (cuda) return;
#endif
  ac_caps c = fused_caps(cuda, 0, -1);  // splitkv's contract, with its own split count
  c.ops = AC_OP_SPLITKV;
  c.tilings = kSplitKVTilings;
  c.num_tilings = kNumSplitKVTilings;
  c.max_splits = kPackedMaxSplits;
  c.fold_orders = AC_FOLD_BIT(AC_FOLD_LEFT) | AC_FOLD_BIT(AC_FOLD_RIGHT) | AC_FOLD_BIT(AC_FOLD_TREE);
  out.push_back(
      {"splitkv-packed",
       cuda ? "split-KV decode, query heads of one KV head packed in one CTA (K/V read once per KV head)"
            : "split-KV decode with packed GQA heads, host twin (the split-KV twin)",
       c, nullptr, nullptr, run_packed, &g_packed_cuda[cuda ? 1 : 0]});
}

}  // namespace attncheck::kern
