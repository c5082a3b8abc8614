// Per-element math of the attention-state merge, shared by the CUDA kernel (merge.cu) and its
// host twin (merge_host.cpp), so the two cannot drift apart.
//
// What it computes (the LSE merge of two attention states, vLLM / SGLang arithmetic):
//   M = max(p_lse, s_lse); p_se = e^(p_lse - M); s_se = e^(s_lse - M); out_se = p_se + s_se
//   p_scale = p_se / out_se; s_scale = s_se / out_se          (scale first ...)
//   out = fma(p, p_scale, s * s_scale)                         (... then multiply)
//   out_lse = log(out_se) + M
// Everything is fp32: the LSEs are fp32 by ABI, outputs are widened to fp32 on load, the scales
// and the combination are fp32 and the only rounding to the storage type is the final store.
// The combination is written as an explicit fma (hd.h's fma_f) so host and device round it
// identically (nvcc would contract p * p_scale + s * s_scale into this fma anyway; g++ would not).
// An FP8 output (merge_fp8_store): the fp32 element divided by output_scale (one fp32 rounding),
// then cast to the format, saturating (one more rounding, the last).
// Base: lse_base 0 uses exp_f/log_f (natural log, vLLM, FlashAttention); 2 uses exp2_f/log2_f
// (FlashInfer, TensorRT-LLM); hd.h picks expf / std::exp and so on per side.
// Guards, both from production incidents:
//   - an LSE of +inf is FlashAttention-2's empty-row sentinel and is read as -inf (empty);
//   - both sides empty (M = -inf) would give (-inf) - (-inf) = NaN: the merge of two empty
//     states is the identity (0, -inf), so the scales are 0 and out_lse is -inf, and the
//     kernel writes out = 0 exactly (whatever the inputs hold).
// A NaN LSE propagates (it is not a convention, it is a bug upstream, and must stay visible).
// Mutation switch (kernels/mutants/): merge_weights / merge_element take a compile-time
// MergeMutation; the correct merge is MergeMutation::none, each mutant one other value, so a
// mutant is the same code with one guard or one order changed, on the GPU and in the host twin.
// Check: ctest -R kernels_basic_merge
#pragma once
#include "common/hd.h"
#include "quantize/quantize_math.h"

namespace attncheck::kern {

struct MergeWeights {
  float p_scale;
  float s_scale;
  float out_lse;
  bool both_empty;
  float divisor = 1.0f;  // only MergeMutation::multiply_then_divide divides afterwards
};

// Deliberately broken variants of the merge (kernels/mutants/). none is the kernel.
enum class MergeMutation : int {
  none = 0,
  no_inf_mapping = 1,        // +inf (FlashAttention-2's empty sentinel) taken as a huge mass
  no_both_empty_guard = 2,   // two empty states: (-inf) - (-inf) = NaN
  multiply_then_divide = 3,  // out = (p e^(p_lse-M) + s e^(s_lse-M)) / out_se: unbounded intermediate
  base_swap = 4,             // LSEs read in the other base than the one declared (e <-> 2)
  fp8_scale_ignored = 5,     // an FP8 output written without dividing by output_scale
};

// The LSE base is a declared convention: 0 is natural (e), 2 is base 2 (hd.h's functions).
AC_HD float merge_exp(float x, int lse_base) { return lse_base == 2 ? exp2_f(x) : exp_f(x); }
AC_HD float merge_log(float x, int lse_base) { return lse_base == 2 ? log2_f(x) : log_f(x); }

// FlashAttention-2 writes +inf for a row with no keys; every merge maps it to -inf first.
AC_HD float empty_sentinel_to_neg_inf(float lse) { return lse == pos_inf_f() ? neg_inf_f() : lse; }

template <MergeMutation M = MergeMutation::none>
AC_HD MergeWeights merge_weights(float p_lse, float s_lse, int lse_base) {
  if constexpr (M == MergeMutation::base_swap) lse_base = lse_base == 2 ? 0 : 2;
  if constexpr (M != MergeMutation::no_inf_mapping) {
    p_lse = empty_sentinel_to_neg_inf(p_lse);
    s_lse = empty_sentinel_to_neg_inf(s_lse);
  }
  if (p_lse != p_lse || s_lse != s_lse) {  // NaN: kept visible, never taken for "empty"
    const float nan = p_lse + s_lse;
    return MergeWeights{nan, nan, nan, false};
  }
  const float max_lse = p_lse > s_lse ? p_lse : s_lse;
  if constexpr (M != MergeMutation::no_both_empty_guard)
    if (max_lse == neg_inf_f()) return MergeWeights{0.0f, 0.0f, neg_inf_f(), true};
  const float p_se = merge_exp(p_lse - max_lse, lse_base);
  const float s_se = merge_exp(s_lse - max_lse, lse_base);
  const float out_se = p_se + s_se;
  MergeWeights w;
  w.p_scale = p_se / out_se;
  w.s_scale = s_se / out_se;
  w.out_lse = merge_log(out_se, lse_base) + max_lse;
  w.both_empty = false;
  if constexpr (M == MergeMutation::multiply_then_divide) {
    w.p_scale = p_se;  // e^(LSE - M) in [0, 1]: p * p_se + s * s_se can reach 2 max|p, s|
    w.s_scale = s_se;
    w.divisor = out_se;
  }
  return w;
}

// One output element, in fp32, before the store rounds it to the storage type.
template <MergeMutation M = MergeMutation::none>
AC_HD float merge_element(float p, float s, const MergeWeights& w) {
  if (w.both_empty) return 0.0f;
  if constexpr (M == MergeMutation::multiply_then_divide)
    return fma_f(p, w.p_scale, s * w.s_scale) / w.divisor;
  return fma_f(p, w.p_scale, s * w.s_scale);
}

// An FP8 output (ac_merge_args.out_dtype, kv_dtype 3, 4 or 5): the fp32 element divided by
// output_scale in fp32, then one saturating rounding to the format (quantize_math.h), vLLM's
// merge with an output scale.
template <MergeMutation M = MergeMutation::none>
AC_HD uint8_t merge_fp8_store(int kv_dtype, float v, float output_scale) {
  if constexpr (M == MergeMutation::fp8_scale_ignored) return float_to_fp8(kv_dtype, v, true);
  return quantize_element(kv_dtype, v, output_scale, true);
}

}  // namespace attncheck::kern
