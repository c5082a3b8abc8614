// ac_subject adapters of the Hopper kernels:
//   fused-hopper            the sm_90a attention forward, fused's caps with the Hopper tilings,
//                           softcap, window, sinks and paged K / V (CUDA only where the build targets sm_90a;
//                           the host twin always)
//   fused-hopper-fp8        its FP8 instantiation, FlashAttention-3's contract (hopper_fp8.cu): Q, K
//                           and V in e4m3fn, P in e4m3fn with the offset 2^8, sums on the e4m3
//                           tensor cores, head size 128, tiling (128, 128) (CUDA where the build
//                           targets sm_90a; the host twin always)
//   fused-hopper-fp8-scaled the same kernel under cuDNN's FP8 scales: P in e4m3fn times the call's
//                           p_scale (scale_s), O in e4m3fn over output_scale where asked (scale_o,
//                           saturating), the maxima of P and O (Amax_S, Amax_O)
//   mutant-hopper-*         its compile-time broken variants (CUDA only: each is a
//                           synchronisation bug with no host analogue), never default subjects
// Check: ctest --test-dir build -R kernels_hopper
#include <vector>

#include "hopper/hopper.h"

namespace attncheck::kern {

namespace {

struct HopperSelf {
  HopperMutation mutation;
  bool cuda;
};

// fused-hopper-fp8-scaled's options: P's scale the call's and O in FP8 accepted (fused_check_args);
// fused-hopper-fp8's are the defaults, which refuse both.
FusedOptions cudnn_scales() {
  FusedOptions o;
  o.p_e4m3 = true;
  o.fp8_out = true;
  return o;
}

int run_hopper_fp8(const HopperSelf* s, const FusedOptions& o, const ac_attention_args* args, char* err,
                   size_t err_len) {
#if defined(ATTNCHECK_HAVE_CUDA) && defined(ATTNCHECK_HAVE_SM90A)
  if (s->cuda) return hopper_fp8_attention_cuda(*args, o, err, err_len);
#else
  (void)s;
#endif
  return hopper_fp8_attention_host(*args, o, err, err_len);
}

int run_hopper_fp8_subject(void* self, const ac_attention_args* args, char* err, size_t err_len) {
  return run_hopper_fp8(static_cast<const HopperSelf*>(self), FusedOptions{}, args, err, err_len);
}

int run_hopper_fp8_scaled_subject(void* self, const ac_attention_args* args, char* err, size_t err_len) {
  return run_hopper_fp8(static_cast<const HopperSelf*>(self), cudnn_scales(), args, err, err_len);
}

int run_hopper_subject(void* self, const ac_attention_args* args, char* err, size_t err_len) {
#if defined(ATTNCHECK_HAVE_CUDA) && defined(ATTNCHECK_HAVE_SM90A)
  const auto* s = static_cast<const HopperSelf*>(self);
  if (s->cuda) return hopper_attention_cuda(*args, FusedOptions{}, err, err_len, s->mutation);
#endif
  return hopper_attention_host(*args, FusedOptions{}, err, err_len);
}

ac_caps hopper_caps(bool cuda) {
  ac_caps c = fused_caps(cuda, 0, -1);  // fused's contract: dtypes, heads, features, conventions
  c.tilings = kHopperTilings;
  c.num_tilings = kNumHopperTilings;
  // Its exp2 flushes a p below 2^-126 (hopper_kernel.cuh), as does its twin: declared, so the
  // budget allows the dropped weights (budgets.cpp). Its outputs are not flushed.
  c.features |= AC_FEAT_FLUSHED_EXP;
  return c;
}

// fused-hopper's variants (hopper_kernel.cuh; the mutants declare none): softcap, window and sinks
// (its VAR instantiation), paged K / V at kHopperPageSizes (its producer, any instantiation). V's own
// head size is not built (tensor-map tiles of one head size).
ac_caps with_hopper_variants(ac_caps c) {
  c.variants = AC_VAR_SOFTCAP | AC_VAR_WINDOW | AC_VAR_SINKS | AC_VAR_PAGED_KV;
  c.page_sizes = kHopperPageSizes;
  c.num_page_sizes = kNumHopperPageSizes;
  return c;
}

// fused-hopper-fp8: fused-hopper's contract at head size 128 and its first tiling, FlashAttention-3's
// FP8 (fused.h with_fp8_forward: e4m3fn, Q in FP8, P in e4m3fn with the offset) with Q in FP8 in
// every FP8 call (its tensor cores multiply e4m3 by e4m3) and descales per (sequence, KV head) (V's
// on the output); no variants.
ac_caps hopper_fp8_caps(bool cuda) {
  ac_caps c = with_fp8_forward(hopper_caps(cuda));
  c.head_size_min = c.head_size_max = kHopperFp8HeadSizes[0];
  c.head_sizes = kHopperFp8HeadSizes;
  c.num_head_sizes = 1;
  c.num_tilings = kNumHopperFp8Tilings;
  // Its e4m3 wgmma sums with the tensor cores' truncating accumulator (AC_FP8_TRUNCATED_SUMS): S in
  // one chain of four k32 steps (d = 128), P V in a fresh accumulator per 128-key tile added to fp32
  // registers (hopper_kernel.cuh). The twin sums in fp32, inside that budget.
  c.fp8 |= AC_FP8_Q_REQUIRED | AC_FP8_DESCALE_PER_SEQUENCE | AC_FP8_TRUNCATED_SUMS;
  return c;
}

// fused-hopper-fp8-scaled: cuDNN's FP8 contract on the same kernel (hopper_kernel.cuh): P in
// e4m3fn times the call's p_scale, its codes in P V and O times fl(1 / p_scale) once; O in e4m3fn
// over output_scale, saturating, where a call asks; the two maxima, raised by atomicMax.
ac_caps hopper_fp8_scaled_caps(bool cuda) {
  ac_caps c = hopper_fp8_caps(cuda);
  c.fp8 |= AC_FP8_P_SCALE | AC_FP8_OUT | AC_FP8_SATURATE | AC_FP8_AMAX;
  return c;
}

HopperSelf g_self[2] = {{HopperMutation::none, false}, {HopperMutation::none, true}};
#if defined(ATTNCHECK_HAVE_CUDA) && defined(ATTNCHECK_HAVE_SM90A)
HopperSelf g_mutants[3] = {{HopperMutation::no_full_wait, true},
                           {HopperMutation::stale_phase, true},
                           {HopperMutation::no_proxy_fence, true}};
#endif

}  // namespace

void append_hopper_subjects(std::vector<ac_subject>& out, bool cuda) {
#if !defined(ATTNCHECK_HAVE_CUDA) || !defined(ATTNCHECK_HAVE_SM90A)
  if (cuda) {
    append_packed_subjects(out, cuda);
    return;
  }
#endif
  out.push_back(
      {"fused-hopper",
       cuda
           ? "Hopper attention forward (TMA ring, mbarriers, warp-specialized wgmma), natural LSE, empty -inf"
           : "Hopper attention forward, host twin (fused's twin with the Hopper tilings)",
       with_hopper_variants(hopper_caps(cuda)), nullptr, nullptr, run_hopper_subject, &g_self[cuda ? 1 : 0],
       nullptr});
  out.push_back(
      {"fused-hopper-fp8",
       cuda ? "Hopper attention forward in FP8 (e4m3 wgmma, FlashAttention-3's contract: descales folded, "
              "P in e4m3fn with the offset 2^8, V's descale on the output)"
            : "Hopper attention forward in FP8, host twin (fused's twin, tile (128, 128), P in e4m3fn, V's "
              "descale on the output)",
       hopper_fp8_caps(cuda), nullptr, nullptr, run_hopper_fp8_subject, &g_self[cuda ? 1 : 0], nullptr});
  out.push_back(
      {"fused-hopper-fp8-scaled",
       cuda ? "Hopper attention forward in FP8 (e4m3 wgmma) under cuDNN's scales: P in e4m3fn times the "
              "call's p_scale (scale_s), O in e4m3fn over output_scale where asked (scale_o, saturating), "
              "the maxima of P and O"
            : "Hopper attention forward in FP8 under cuDNN's scales, host twin (fused-hopper-fp8's twin with "
              "the call's p_scale, O in e4m3fn over output_scale, the maxima of P and O)",
       hopper_fp8_scaled_caps(cuda), nullptr, nullptr, run_hopper_fp8_scaled_subject, &g_self[cuda ? 1 : 0],
       nullptr});
  append_packed_subjects(out, cuda);
}

void append_hopper_mutant_subjects(std::vector<ac_subject>& out, bool cuda) {
#if defined(ATTNCHECK_HAVE_CUDA) && defined(ATTNCHECK_HAVE_SM90A)
  if (!cuda) return;
  out.push_back(
      {"mutant-hopper-no-full-wait",
       "MUTANT: fused-hopper consumers read K/V stages without waiting on their full mbarriers "
       "(killers: split_equals_whole and accuracy, nondeterministic output; synccheck: missing wait)",
       hopper_caps(true), nullptr, nullptr, run_hopper_subject, &g_mutants[0], nullptr});
  out.push_back(
      {"mutant-hopper-stale-phase",
       "MUTANT: fused-hopper consumers wait on a fixed mbarrier parity (wrong pipeline phase after the "
       "ring wraps): on odd passes they read a stage before its tile lands, or run ahead until the "
       "pipeline deadlocks and the wait's guard traps (killers: streamed_kv and kernels_hopper_gpu, with K/V "
       "past L2; memcheck; small cases mostly pass with 4 ring stages)",
       hopper_caps(true), nullptr, nullptr, run_hopper_subject, &g_mutants[1], nullptr});
  out.push_back(
      {"mutant-hopper-no-proxy-fence",
       "MUTANT: fused-hopper's partial V tile, written by ordinary stores, misses fence.proxy.async "
       "before wgmma reads it (killer: none at run time on the H200, within the exact bound, memcheck, "
       "racecheck and synccheck silent; statically, ptx_proxy_lint on its PTX)",
       hopper_caps(true), nullptr, nullptr, run_hopper_subject, &g_mutants[2], nullptr});
#else
  (void)out;
  (void)cuda;
#endif
}

}  // namespace attncheck::kern
