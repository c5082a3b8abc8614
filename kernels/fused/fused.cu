// CUDA launcher of the fused attention forward (kernel: fused_kernel.cuh; math: fused_math.h).
// Instantiates the kernel for fp16 / bf16, head sizes 64 / 128 and every tiling of kFusedTilings
// (one list), picks one at run time by args.tiling. Outputs O (input type) and LSE (fp32,
// [heads, tokens], natural or base 2, empty row -inf or +inf per FusedOptions).
// Check: ctest --test-dir build -L gpu -R kernels_attention
#include <array>
#include <cstdint>
#include <utility>

#include "common/cuda_check.h"
#include "common/host_tensor.h"
#include "fused/fused.h"
#include "fused/fused_kernel.cuh"

namespace attncheck::kern {

namespace {

using LaunchFn = cudaError_t (*)(const fused::KernelParams&, int, int, cudaStream_t);

template <bool BF16, int D, size_t... Is>
constexpr std::array<LaunchFn, sizeof...(Is)> fused_table(std::index_sequence<Is...>) {
  return {&fused::launch_fused_kernel<BF16, D, kFusedTilings[Is].br, kFusedTilings[Is].bc, false>...};
}
template <bool BF16, int D>
LaunchFn pick(int tiling) {
  static constexpr auto table = fused_table<BF16, D>(std::make_index_sequence<kNumFusedTilings>{});
  return table[size_t(tiling)];
}

}  // namespace

int fused_attention_cuda(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  if (int rc = fused_check_args(a, o, kNumFusedTilings, err, err_len)) return rc;
  if (a.num_seqs == 0) return AC_OK;
  if (!aligned_to(a.q, 16) || !aligned_to(a.k, 16) || !aligned_to(a.v, 16))
    AC_REFUSE("fused attention: q, k and v must be 16-byte aligned (cp.async of 16-byte chunks)");
  if (!aligned_to(a.out, 4)) AC_REFUSE("fused attention: out must be 4-byte aligned");
  if (!a.cu_seqlens_q || !a.cu_seqlens_k) AC_REFUSE("fused attention: device cu_seqlens missing");
  const int max_tq = fused::max_seqlen_q_host(a);
  if (a.num_seqs > 65535) AC_REFUSE("fused attention: %d sequences exceed the grid (65535)", a.num_seqs);

  fused::KernelParams p = fused::params_from_args(a);
  p.lse_base2 = o.lse_base == 2;
  p.empty_lse = o.empty_lse_sign > 0 ? fused::pos_inf_f() : fused::neg_inf_f();

  const bool bf16 = a.dtype == AC_DTYPE_BF16;
  LaunchFn fn = bf16 ? (a.head_size == 64 ? pick<true, 64>(a.tiling) : pick<true, 128>(a.tiling))
                     : (a.head_size == 64 ? pick<false, 64>(a.tiling) : pick<false, 128>(a.tiling));
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  AC_CUDA_TRY(fn(p, max_tq, a.num_seqs, stream));
  if (o.synchronize) AC_CUDA_TRY(cudaStreamSynchronize(stream));
  return AC_OK;
}

}  // namespace attncheck::kern
