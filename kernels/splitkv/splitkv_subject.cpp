// ac_subject adapter (plugin ABI) of split-KV attention, both backends: subject `splitkv`, natural
// LSE in [heads, tokens], empty row -inf, num_splits 1..64, fold orders left, right and tree,
// fp16 / bf16, head sizes 64 and 128, causal, mask, varlen, GQA; and its engine-style modes
// splitkv-adaptive and splitkv-fixed (below).
// Check: ctest --test-dir build -R kernels_attention
#include <cstdio>
#include <vector>

#include "fused/fused.h"
#include "hopper/hopper.h"
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

// The engine-style modes of splitkv as attention subjects (the kernel, not the caller, picks
// num_splits; fold left), as splitkv-packed has them (packed_subject.cpp):
//   splitkv-adaptive: packed_machine_splits from the batch's size, KV heads and longest row and the
//                     SM count (the device's; the host twin counts an H200's 132), so a request's
//                     last bits depend on its neighbours: batch variant, not declared (mutant 24
//                     declares it).
//   splitkv-fixed:    kFixedSplitKeys keys per split (splitkv::split_range on both backends):
//                     declared batch invariant.
struct EngineMode {
  bool fixed, cuda;
};
// splitkv-adaptive and splitkv-fixed on the host, then on the device.
EngineMode g_engine_modes[2][2] = {{{false, false}, {true, false}}, {{false, true}, {true, true}}};

int run_splitkv_engine(void* self, const ac_attention_args* args, char* err, size_t err_len) {
  const auto [fixed, cuda] = *static_cast<const EngineMode*>(self);
#if defined(ATTNCHECK_HAVE_CUDA)
  if (cuda) {
    ac_attention_args a = *args;
    a.fold_order = AC_FOLD_LEFT;
    SplitKVOptions o;
    if (fixed) {
      o.keys_per_split = kFixedSplitKeys;
      a.num_splits = fixed_split_count(a, kFixedSplitKeys);
    } else {
      const int sms = cuda_sm_count();
      if (sms < 1) {
        if (err && err_len)
          std::snprintf(err, err_len, "splitkv-adaptive: the device's SM count cannot be read");
        return AC_ERR_DEVICE;
      }
      a.num_splits = packed_machine_splits(a, sms);
    }
    return splitkv_attention_cuda(a, o, err, err_len);
  }
#endif
  (void)cuda;
  return packed_engine_attention(*args, fixed ? kFixedSplitKeys : 0, false, err, err_len);
}

}  // namespace

ac_caps engine_caps(ac_caps split, bool invariant) {
  split.ops = AC_OP_ATTENTION;
  split.max_splits = 0;
  split.fold_orders = 0;
  split.flags = invariant ? split.flags | AC_CAP_BATCH_INVARIANT : split.flags & ~AC_CAP_BATCH_INVARIANT;
  return split;
}

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
                 c, nullptr, nullptr, run_splitkv, &g_cuda_flag[cuda ? 1 : 0], nullptr});
  // The engine-style modes.
  const int b = cuda ? 1 : 0;
  out.push_back({"splitkv-adaptive",
                 cuda ? "split-KV attention choosing num_splits from the batch, heads and SMs as engines do "
                        "(batch variant)"
                      : "split-KV attention choosing num_splits from the batch, heads and SMs as engines do "
                        "(batch variant), host twin",
                 engine_caps(c, false), nullptr, nullptr, run_splitkv_engine, &g_engine_modes[b][0],
                 nullptr});
  out.push_back(
      {"splitkv-fixed",
       cuda ? "split-KV attention at a fixed split size of 64 keys (batch invariant, declared)"
            : "split-KV attention at a fixed split size of 64 keys (batch invariant, declared), host "
              "twin",
       engine_caps(c, true), nullptr, nullptr, run_splitkv_engine, &g_engine_modes[b][1], nullptr});
}

}  // namespace attncheck::kern
