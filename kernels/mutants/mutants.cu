// CUDA launcher of the fused-attention mutants: fused/fused_kernel.cuh's kernel template
// instantiated with a fused::Mutation (launch_fused_kernel<..., M>), run by the correct launcher's
// own fused::run_unsplit, so the argument checks and parameters are fused_attention_cuda's. Numerics are the
// correct kernel's (fp32 m / l / O, P rounded to the input type, natural-log LSE [heads, tokens], empty row
// -inf) except for the one thing each mutation breaks. To keep the build small the mutants are compiled for
// one tiling, (64, 64), and:
//   6, 7, 9, 10   fp16 and bf16, head sizes 64 and 128;
//   12, 13        fp16, head size 128 (GPU-only mutants, run by dedicated tests).
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

template <Mutation M>
LaunchFn pick_all(bool bf16, int d) {
  if (bf16)
    return d == 64 ? &fused::launch_fused_kernel<true, 64, kBr, kBc, false, M>
                   : &fused::launch_fused_kernel<true, 128, kBr, kBc, false, M>;
  return d == 64 ? &fused::launch_fused_kernel<false, 64, kBr, kBc, false, M>
                 : &fused::launch_fused_kernel<false, 128, kBr, kBc, false, M>;
}

template <Mutation M>
LaunchFn pick_fp16_128(bool bf16, int d) {
  return !bf16 && d == 128 ? &fused::launch_fused_kernel<false, 128, kBr, kBc, false, M> : nullptr;
}

LaunchFn pick(int mutation, bool bf16, int d) {
  switch (Mutation(mutation)) {
    case Mutation::forget_rescale_o:
      return pick_all<Mutation::forget_rescale_o>(bf16, d);
    case Mutation::finite_mask_sentinel:
      return pick_all<Mutation::finite_mask_sentinel>(bf16, d);
    case Mutation::gqa_head_mod:
      return pick_all<Mutation::gqa_head_mod>(bf16, d);
    case Mutation::causal_off_by_one:
      return pick_all<Mutation::causal_off_by_one>(bf16, d);
    case Mutation::missing_barrier:
      return pick_fp16_128<Mutation::missing_barrier>(bf16, d);
    case Mutation::offsets_32bit:
      return pick_fp16_128<Mutation::offsets_32bit>(bf16, d);
    default:
      return nullptr;
  }
}

}  // namespace

int fused_mutant_cuda(int mutation, const ac_attention_args& a, char* err, size_t err_len) {
  if (int rc = fused_check_args(a, FusedOptions{}, 1, err, err_len)) return rc;
  const bool bf16 = a.dtype == AC_DTYPE_BF16;
  const LaunchFn fn = pick(mutation, bf16, a.head_size);
  if (!fn)
    AC_REFUSE("fused mutant %d: not compiled for %s, head size %d", mutation, bf16 ? "bf16" : "fp16",
              a.head_size);
  return fused::run_unsplit(a, FusedOptions{}, fn, err, err_len);
}

}  // namespace attncheck::kern
