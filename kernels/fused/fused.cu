// CUDA launcher of the fused attention forward (kernel: fused_kernel.cuh; math: fused_math.h).
// Instantiates the kernel for fp16 / bf16, head sizes 64 / 128 and every tiling of kFusedTilings
// (one list), each plain and with the variants (VAR, paged K / V, softcap, window, sinks: where
// fused_kernel.cuh applies them), picks one at run time by args.tiling and whether the call uses a
// variant. Outputs O (input type) and LSE (fp32, [heads, tokens], natural or base 2, empty row -inf
// or +inf per FusedOptions).
// Check: ctest --test-dir build -L gpu -R kernels_attention
#include <cstdint>

#include "common/cuda_check.h"
#include "common/host_tensor.h"
#include "fused/fused.h"
#include "fused/fused_kernel.cuh"

namespace attncheck::kern {

namespace fused {

int run_unsplit(const ac_attention_args& a, const FusedOptions& o, LaunchFn fn, char* err, size_t err_len) {
  if (a.num_seqs == 0) return AC_OK;
  if (!aligned_to(a.q, 16) || !aligned_to(a.k, 16) || !aligned_to(a.v, 16))
    AC_REFUSE("fused attention: q, k and v must be 16-byte aligned (cp.async of 16-byte chunks)");
  if (!aligned_to(a.out, 4)) AC_REFUSE("fused attention: out must be 4-byte aligned");
  if (!a.cu_seqlens_q || !a.cu_seqlens_k) AC_REFUSE("fused attention: device cu_seqlens missing");
  if (a.num_seqs > 65535) AC_REFUSE("fused attention: %d sequences exceed the grid (65535)", a.num_seqs);
  const int max_tq = max_seqlen_q_host(a);

  const KernelParams p = unsplit_params(a, o);
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  AC_CUDA_TRY(fn(p, max_tq, a.num_seqs, stream));
  if (o.synchronize) AC_CUDA_TRY(cudaStreamSynchronize(stream));
  return AC_OK;
}

}  // namespace fused

int fused_attention_cuda(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  if (int rc = fused_check_args(a, o, kNumFusedTilings, err, err_len)) return rc;
  if (o.mutation != fused::Mutation::none)
    AC_REFUSE("fused attention: a mutation runs on the GPU through fused_mutant_cuda (kernels/mutants/)");
  // A call with a variant runs the VAR instantiation; the others the plain one.
  const bool bf16 = a.dtype == AC_DTYPE_BF16;
  const fused::LaunchFn fn = uses_variants(a)
                                 ? fused::pick_launch<kFusedTilings, false, true>(bf16, a.head_size, a.tiling)
                                 : fused::pick_launch<kFusedTilings, false>(bf16, a.head_size, a.tiling);
  return fused::run_unsplit(a, o, fn, err, err_len);
}

}  // namespace attncheck::kern
