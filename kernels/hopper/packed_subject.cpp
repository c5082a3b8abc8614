// ac_subject adapters of splitkv-packed (split-KV decode with the query heads of one KV head packed
// into one CTA): the split-KV subject's contract (AC_OP_SPLITKV, its tilings, 1..64 splits, every
// fold order, natural LSE, empty row -inf, K and V in Q's dtype or an FP8 cache), and its two engine-style
// modes as attention subjects (splitkv-packed-adaptive, splitkv-packed-fixed; below). Host twin where no GPU
// is present. Check: ctest --test-dir build -R kernels_hopper
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

// The engine-style modes: attention subjects (the kernel, not the caller, picks num_splits), fold
// left to right, splitkv-packed's kernel on a device and the split-KV twin on the host.
//   adaptive: packed_machine_splits from the batch's size, KV heads and longest row and the SM
//             count (the host twin counts the 132 SMs of an H200), so a request's split count, and
//             with it its last bits, depends on its neighbours: batch variant, and not declared so.
//   fixed:    kFixedSplitKeys keys per split (splitkv::split_range), so a row's parts depend on the
//             row alone and the empty parts a longer neighbour adds are exact identities in the
//             fold: declared batch invariant.
// Mutant 18 (kernels/mutants/) is the adaptive mode declaring invariance.
enum class SplitPolicy { adaptive, fixed };
struct EngineSelf {
  bool cuda;
  SplitPolicy policy;
};
EngineSelf g_engine[2][2] = {{{false, SplitPolicy::adaptive}, {false, SplitPolicy::fixed}},
                             {{true, SplitPolicy::adaptive}, {true, SplitPolicy::fixed}}};

int run_engine(void* self, const ac_attention_args* args, char* err, size_t err_len) {
  const auto* e = static_cast<const EngineSelf*>(self);
  return packed_engine_attention(*args, e->policy == SplitPolicy::fixed ? kFixedSplitKeys : 0, e->cuda, err,
                                 err_len);
}

}  // namespace

int packed_engine_attention(const ac_attention_args& args, int keys_per_split, bool cuda, char* err,
                            size_t err_len) {
  ac_attention_args a = args;
  a.fold_order = AC_FOLD_LEFT;
  a.num_splits = 0;  // the launcher's choice: packed_machine_splits, or fixed_split_count
#if defined(ATTNCHECK_HAVE_CUDA)
  if (cuda) return packed_attention_cuda(a, err, err_len, true, keys_per_split);
#endif
  (void)cuda;
  a.num_splits =
      keys_per_split > 0 ? fixed_split_count(a, keys_per_split) : packed_machine_splits(a, kH200SMs);
  SplitKVOptions o;
  o.keys_per_split = keys_per_split;
  return splitkv_attention_host(a, o, err, err_len);
}

namespace {
// The fused walk's variants (packed.cu's VAR instantiation; V's own head size: on the device MLA's
// decode pair, on the host the twin's pairs) and an FP8 cache (FlashAttention-3's contract, with
// descales per (sequence, KV head) too: each CTA reads its sequence's, packed_kernel.cuh descaled,
// the twin each view's, fused_twin.h head_view), on both backends.
ac_caps with_packed_variants(ac_caps c, bool cuda) {
  c = with_fp8_kv_cache(with_fused_variants(c));
  c.fp8 |= AC_FP8_DESCALE_PER_SEQUENCE;
  if (cuda) {  // MLA's absorbed decode (packed_mla.cu, V inside K too); the twin declares kFusedTwinHeadPairs
    c.variants |= AC_VAR_HEAD_SIZE_V | AC_VAR_V_IN_K;
    c.head_pairs = kPackedHeadPairs;
    c.num_head_pairs = kNumPackedHeadPairs;
  }
  return c;
}
}  // namespace

ac_caps packed_engine_caps(bool cuda, bool invariant) {
  ac_caps c = fused_caps(cuda, 0, -1);  // splitkv-packed's contract, as attention
  c.tilings = kSplitKVTilings;
  c.num_tilings = kNumSplitKVTilings;
  return engine_caps(with_packed_variants(c, cuda), invariant);
}

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
  c = with_packed_variants(c, cuda);
  out.push_back(
      {"splitkv-packed",
       cuda ? "split-KV decode, query heads of one KV head packed in one CTA (K/V read once per KV head), "
              "K/V in Q's dtype or an FP8 cache"
            : "split-KV decode with packed GQA heads, K/V in Q's dtype or an FP8 cache, host twin",
       c, nullptr, nullptr, run_packed, &g_packed_cuda[cuda ? 1 : 0], nullptr});
  const int b = cuda ? 1 : 0;
  out.push_back(
      {"splitkv-packed-adaptive",
       "splitkv-packed choosing num_splits from the batch, heads and SMs as engines do (batch variant)",
       packed_engine_caps(cuda, false), nullptr, nullptr, run_engine, &g_engine[b][0], nullptr});
  out.push_back({"splitkv-packed-fixed",
                 "splitkv-packed at a fixed split size of 64 keys (batch invariant, declared)",
                 packed_engine_caps(cuda, true), nullptr, nullptr, run_engine, &g_engine[b][1], nullptr});
}

}  // namespace attncheck::kern
