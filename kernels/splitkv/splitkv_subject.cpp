// ac_subject adapter (plugin ABI) of split-KV attention, both backends: subject `splitkv`, natural
// LSE in [heads, tokens], empty row -inf, num_splits 1..64, fold orders left, right and tree,
// fp16 / bf16, head sizes 64 and 128, causal, mask, varlen, GQA.
// Check: ctest --test-dir build -R kernels_attention
#include <vector>

#include "fused/fused.h"
#include "splitkv/splitkv.h"

namespace attncheck::kern {

namespace {

bool g_cuda_flag[2] = {false, true};

int run_splitkv(void* self, const ac_attention_args* args, char* err, size_t err_len) {
  const bool cuda = *static_cast<const bool*>(self);
#if defined(ATTNCHECK_HAVE_CUDA)
  if (cuda) return splitkv_attention_cuda(*args, err, err_len);
#endif
  (void)cuda;
  return splitkv_attention_host(*args, err, err_len);
}

}  // namespace

void append_splitkv_subjects(std::vector<ac_subject>& out, bool cuda) {
#if !defined(ATTNCHECK_HAVE_CUDA)
  if (cuda) return;
#endif
  // The fused kernel's mainloop: its dtypes, heads, features and variants (a sink counted once, by
  // the combine).
  ac_caps c = with_fused_variants(fused_caps(cuda, 0, -1));
  c.ops = AC_OP_SPLITKV;
  c.tilings = kSplitKVTilings;
  c.num_tilings = kNumSplitKVTilings;
  c.max_splits = kSplitKVMaxSplits;
  c.fold_orders = AC_FOLD_BIT(AC_FOLD_LEFT) | AC_FOLD_BIT(AC_FOLD_RIGHT) | AC_FOLD_BIT(AC_FOLD_TREE);
  out.push_back({"splitkv",
                 cuda ? "split-KV attention (flash-decoding): fp32 partials, fold left / right / tree"
                      : "split-KV attention, host twin: fp32 partials, fold left / right / tree",
                 c, nullptr, nullptr, run_splitkv, &g_cuda_flag[cuda ? 1 : 0]});
}

}  // namespace attncheck::kern
