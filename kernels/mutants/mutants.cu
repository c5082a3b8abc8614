// CUDA launcher of the fused-attention mutants: fused/fused_kernel.cuh's kernel template
// instantiated with a fused::Mutation (launch_fused_kernel<..., M>), run by the correct launcher's
// own fused::run_unsplit, so the argument checks and parameters are fused_attention_cuda's. Numerics are the
// correct kernel's (fp32 m / l / O, P rounded to the input type, natural-log LSE [heads, tokens], empty row
// -inf) except for the one thing each mutation breaks. To keep the build small the mutants are compiled for
// one tiling, (64, 64), and:
//   6, 7, 9, 10       fp16 and bf16, head sizes 64 and 128;
//   19, 20, 21, 22    the same (the variants' mutants: paged K / V, the window, the softcap);
//   12, 13            fp16, head size 128 (GPU-only mutants, run by dedicated tests).
// A mutant's caps are fused's, variants included: each runs the kernel's VAR instantiation
// (fused_kernel.cuh) on a call with a variant and the plain one otherwise, as fused does; 19 to 22
// act only through the variants and are compiled as VAR alone (on a call without one it computes
// what the plain kernel does).
// Check: ctest --test-dir build -L gpu -R mutants
#include <cstdint>

#include "common/cuda_check.h"
#include "fused/fused.h"
#include "fused/fused_kernel.cuh"
#include "mutants/mutants.h"

namespace attncheck::kern {

namespace {

using fused::LaunchFn;
using fused::Mutation;
// The first tiling of kFusedTilings, the one the mutants' caps declare (mutants_subject.cpp).
constexpr int kBr = kFusedTilings[0].br, kBc = kFusedTilings[0].bc;

template <Mutation M, bool VAR>
LaunchFn pick_all(bool bf16, int d) {
  if (bf16)
    return d == 64 ? &fused::launch_fused_kernel<true, 64, kBr, kBc, false, VAR, M>
                   : &fused::launch_fused_kernel<true, 128, kBr, kBc, false, VAR, M>;
  return d == 64 ? &fused::launch_fused_kernel<false, 64, kBr, kBc, false, VAR, M>
                 : &fused::launch_fused_kernel<false, 128, kBr, kBc, false, VAR, M>;
}
template <Mutation M>
LaunchFn pick_all(bool bf16, int d, bool var) {
  return var ? pick_all<M, true>(bf16, d) : pick_all<M, false>(bf16, d);
}

template <Mutation M>
LaunchFn pick_fp16_128(bool bf16, int d, bool var) {
  if (bf16 || d != 128) return nullptr;
  return var ? &fused::launch_fused_kernel<false, 128, kBr, kBc, false, true, M>
             : &fused::launch_fused_kernel<false, 128, kBr, kBc, false, false, M>;
}

// var: the call uses a variant (uses_variants).
LaunchFn pick(int mutation, bool bf16, int d, bool var) {
  switch (Mutation(mutation)) {
    case Mutation::forget_rescale_o:
      return pick_all<Mutation::forget_rescale_o>(bf16, d, var);
    case Mutation::finite_mask_sentinel:
      return pick_all<Mutation::finite_mask_sentinel>(bf16, d, var);
    case Mutation::gqa_head_mod:
      return pick_all<Mutation::gqa_head_mod>(bf16, d, var);
    case Mutation::causal_off_by_one:
      return pick_all<Mutation::causal_off_by_one>(bf16, d, var);
    case Mutation::missing_barrier:
      return pick_fp16_128<Mutation::missing_barrier>(bf16, d, var);
    case Mutation::offsets_32bit:
      return pick_fp16_128<Mutation::offsets_32bit>(bf16, d, var);
    case Mutation::page_off_by_one:
      return pick_all<Mutation::page_off_by_one, true>(bf16, d);
    case Mutation::read_past_end:
      return pick_all<Mutation::read_past_end, true>(bf16, d);
    case Mutation::window_edge_off_by_one:
      return pick_all<Mutation::window_edge_off_by_one, true>(bf16, d);
    case Mutation::softcap_before_scale:
      return pick_all<Mutation::softcap_before_scale, true>(bf16, d);
    default:
      return nullptr;
  }
}

}  // namespace

int fused_mutant_cuda(int mutation, const ac_attention_args& a, char* err, size_t err_len) {
  if (int rc = fused_check_args(a, FusedOptions{}, 1, err, err_len)) return rc;
  const bool bf16 = a.dtype == AC_DTYPE_BF16;
  const LaunchFn fn = pick(mutation, bf16, a.head_size, uses_variants(a));
  if (!fn)
    AC_REFUSE("fused mutant %d: not compiled for %s, head size %d", mutation, bf16 ? "bf16" : "fp16",
              a.head_size);
  return fused::run_unsplit(a, FusedOptions{}, fn, err, err_len);
}

}  // namespace attncheck::kern
