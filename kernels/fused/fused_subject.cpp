// ac_subject adapters (plugin ABI) of the fused attention forward, for both backends:
//   fused       natural-log LSE, empty row LSE = -inf
//   fused-fa2   natural-log LSE, empty row LSE = +inf (FlashAttention-2's unsplit convention)
//   fused-log2  base-2 LSE, empty row LSE = -inf (FlashInfer / TensorRT-LLM's base)
// All: fp16 and bf16, head sizes 64 and 128, LSE [heads, tokens], causal (bottom-right), mask,
// varlen, GQA, the tilings of kFusedTilings; paged K / V (kFusedPageSizes), softcap, sliding
// window and sinks; the host twins also V's own head size (kFusedTwinHeadPairs). Host twins run
// where no GPU is present.
//   fused-fp8kv (host twin only) fused's contract with K and V from an FP8 cache (fused_twin.h)
//   fused-fp8   (host twin only) FlashAttention-3's FP8 forward: Q, K and V in e4m3fn with their
//               descales, P in e4m3fn with the offset 2^8, O in the input type (fused_twin.h)
//   fused-fp8-scaled (host twin only) fused-fp8 with cuDNN's scales: P's the call's p_scale
//               (scale_s, AC_FP8_P_SCALE), O in e4m3fn over output_scale where asked (scale_o,
//               AC_FP8_OUT, saturating)
// Check: ctest --test-dir build -R kernels_attention
#include <vector>

#include "fused/fused.h"

namespace attncheck::kern {

namespace {

struct FusedSubjectSelf {
  FusedOptions options;
  bool cuda;
};

int run_fused(void* self, const ac_attention_args* args, char* err, size_t err_len) {
  const auto* s = static_cast<const FusedSubjectSelf*>(self);
#if defined(ATTNCHECK_HAVE_CUDA)
  if (s->cuda) return fused_attention_cuda(*args, s->options, err, err_len);
#endif
  return fused_attention_host(*args, s->options, err, err_len);
}

// Static storage: subjects hand out `self` pointers that must outlive the registry.
FusedSubjectSelf g_self[2][3] = {{{{0, -1, true}, false}, {{0, 1, true}, false}, {{2, -1, true}, false}},
                                 {{{0, -1, true}, true}, {{0, 1, true}, true}, {{2, -1, true}, true}}};
// fused-fp8: the twin with P held in e4m3fn in its FP8 calls.
FusedSubjectSelf g_fp8_self = [] {
  FusedSubjectSelf s{{0, -1, true}, false};
  s.options.p_e4m3 = true;
  return s;
}();
// fused-fp8-scaled: P in e4m3fn too, and O in FP8 where a call asks for it.
FusedSubjectSelf g_fp8_scaled_self = [] {
  FusedSubjectSelf s = g_fp8_self;
  s.options.fp8_out = true;
  return s;
}();

}  // namespace

ac_caps fused_caps(bool cuda, int lse_base, int empty_lse_sign) {
  ac_caps c{};
  c.ops = AC_OP_ATTENTION;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
  c.memory = cuda ? AC_MEMORY_CUDA : AC_MEMORY_HOST;
  c.head_size_min = 64;
  c.head_size_max = 128;
  c.head_sizes = kFusedHeadSizes;
  c.num_head_sizes = 2;
  c.lse_base = lse_base;
  c.lse_layout = AC_LSE_HEADS_TOKENS;
  c.empty_lse_sign = empty_lse_sign;
  c.features = AC_FEAT_CAUSAL | AC_FEAT_MASK | AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE;
  c.tilings = kFusedTilings;
  c.num_tilings = kNumFusedTilings;
  c.max_splits = 1;
  c.fold_orders = 0;
  // Every sequence is its own walk over its own keys, whatever the others of its call: the twin
  // loops over sequences, and each CUDA kernel built on this contract (fused, fused-hopper, splitkv,
  // splitkv-packed) gives each (sequence, head, row tile, split) its own CTA whose tiling and split
  // count are the call's options, with no atomics; the grid's size never enters a CTA's arithmetic.
  // splitkv-packed-adaptive, which picks its split count from the batch, takes the flag off.
  c.flags |= AC_CAP_BATCH_INVARIANT;
  return c;
}

ac_caps with_fused_variants(ac_caps c) {
  c.variants = kFusedVariants;
  c.page_sizes = kFusedPageSizes;
  c.num_page_sizes = kNumFusedPageSizes;
  if (c.memory == AC_MEMORY_HOST) {                    // the CUDA kernels compute one head size (fused.h)
    c.variants |= AC_VAR_HEAD_SIZE_V | AC_VAR_V_IN_K;  // fused_twin.h decode_args reads V inside K
    c.head_pairs = kFusedTwinHeadPairs;
    c.num_head_pairs = kNumFusedTwinHeadPairs;
  }
  return c;
}

ac_caps with_fp8_kv_cache(ac_caps c) {
  c.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3) | AC_DTYPE_BIT(AC_DTYPE_E5M2);
  c.fp8 = AC_FP8_DESCALE_PER_KV_HEAD;
  return c;
}

ac_caps with_fp8_forward(ac_caps c) {
  c = with_fp8_kv_cache(c);
  c.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3);  // FlashAttention-3's FP8 format
  c.fp8 |= AC_FP8_Q | AC_FP8_P_E4M3;
  return c;
}

namespace {
// fused-fp8-scaled: fused-fp8's contract with P's scale per call (cuDNN's scale_s).
ac_caps with_fp8_p_scale(ac_caps c) {
  c = with_fp8_forward(c);
  c.fp8 |= AC_FP8_P_SCALE | AC_FP8_OUT | AC_FP8_SATURATE | AC_FP8_AMAX;
  return c;
}
}  // namespace

void append_fused_subjects(std::vector<ac_subject>& out, bool cuda) {
#if !defined(ATTNCHECK_HAVE_CUDA)
  if (cuda) return;
#endif
  FusedSubjectSelf* self = g_self[cuda ? 1 : 0];
  out.push_back({"fused",
                 cuda ? "fused attention forward (mma.sync, online softmax), natural LSE, empty -inf"
                      : "fused attention forward, host twin, natural LSE, empty -inf",
                 with_fused_variants(fused_caps(cuda, 0, -1)), nullptr, nullptr, run_fused, &self[0],
                 nullptr});
  out.push_back({"fused-fa2",
                 cuda ? "fused attention forward, FlashAttention-2 empty-row LSE +inf"
                      : "fused attention forward, host twin, FlashAttention-2 empty-row LSE +inf",
                 with_fused_variants(fused_caps(cuda, 0, 1)), nullptr, nullptr, run_fused, &self[1],
                 nullptr});
  out.push_back({"fused-log2",
                 cuda ? "fused attention forward, base-2 LSE, empty -inf"
                      : "fused attention forward, host twin, base-2 LSE, empty -inf",
                 with_fused_variants(fused_caps(cuda, 2, -1)), nullptr, nullptr, run_fused, &self[2],
                 nullptr});
  if (!cuda)
    out.push_back({"fused-fp8kv",
                   "fused attention forward, host twin, K and V from an FP8 cache (e4m3fn or e5m2, descales "
                   "per tensor or per KV head), natural LSE, empty -inf",
                   with_fp8_kv_cache(with_fused_variants(fused_caps(false, 0, -1))), nullptr, nullptr,
                   run_fused, &self[0], nullptr});
  if (!cuda)
    out.push_back(
        {"fused-fp8",
         "fused attention forward, host twin, FlashAttention-3's FP8 contract: Q, K and V in e4m3fn "
         "(descales per tensor or per KV head), P in e4m3fn with the offset 2^8, natural LSE, empty "
         "-inf",
         with_fp8_forward(with_fused_variants(fused_caps(false, 0, -1))), nullptr, nullptr, run_fused,
         &g_fp8_self, nullptr});
  if (!cuda)
    out.push_back(
        {"fused-fp8-scaled",
         "fused attention forward, host twin, cuDNN's FP8 scales: Q, K and V in e4m3fn, P in e4m3fn "
         "times the call's p_scale (scale_s) and read over it, O in e4m3fn over output_scale "
         "(scale_o, saturating) where asked, natural LSE, empty -inf",
         with_fp8_p_scale(with_fused_variants(fused_caps(false, 0, -1))), nullptr, nullptr, run_fused,
         &g_fp8_scaled_self, nullptr});
}

}  // namespace attncheck::kern
