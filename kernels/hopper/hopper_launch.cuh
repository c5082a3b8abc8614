// Host side of the Hopper attention forward, shared by hopper.cu (the correct kernel) and
// hopper_mutants.cu (the mutants): tensor maps, argument checks, launch of one instantiation.
// Check: ctest --test-dir build -L gpu -R kernels_hopper
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "common/cuda_check.h"
#include "common/host_tensor.h"
#include "hopper/hopper.h"
#include "hopper/hopper_kernel.cuh"

namespace attncheck::kern::hopper {

using LaunchFn = cudaError_t (*)(const CUtensorMap&, const CUtensorMap&, const CUtensorMap&,
                                 const fused::KernelParams&, int, int, cudaStream_t);

template <bool BF16, int D, int BR, int BC, HopperMutation HM, bool VAR, bool FP8 = false>
cudaError_t launch(const CUtensorMap& mq, const CUtensorMap& mk, const CUtensorMap& mv,
                   const fused::KernelParams& p, int max_tq, int num_seqs, cudaStream_t stream) {
  using L = Layout<BR, BC, D, FP8 ? 1 : 2>;
  auto kernel = hopper_attention_kernel<BF16, D, BR, BC, HM, VAR, FP8>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid(unsigned((max_tq + BR - 1) / BR), unsigned(p.num_heads), unsigned(num_seqs));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
  kernel<<<grid, L::kThreads, L::kBytes, stream>>>(mq, mk, mv, p);
  return cudaGetLastError();
}

template <bool BF16, int D, HopperMutation HM, bool VAR, size_t... Is>
constexpr std::array<LaunchFn, sizeof...(Is)> table(std::index_sequence<Is...>) {
  return {&launch<BF16, D, kHopperTilings[Is].br, kHopperTilings[Is].bc, HM, VAR>...};
}
// The launcher of one (dtype, head size, tiling): the VAR instantiation where the call has a
// softcap or a window (the mutants have none).
template <HopperMutation HM, bool VAR>
LaunchFn pick(bool bf16, int d, int tiling) {
  constexpr auto seq = std::make_index_sequence<kNumHopperTilings>{};
  static constexpr auto t16_64 = table<false, 64, HM, VAR>(seq), t16_128 = table<false, 128, HM, VAR>(seq);
  static constexpr auto tb_64 = table<true, 64, HM, VAR>(seq), tb_128 = table<true, 128, HM, VAR>(seq);
  const auto& t = bf16 ? (d == 64 ? tb_64 : tb_128) : (d == 64 ? t16_64 : t16_128);
  return t[size_t(tiling)];
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda).
inline PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A 3-D map of elements of `type` (`bytes` each): dims innermost first, the outer two dimensions'
// strides in bytes, one box of box[0] x box[1] x box[2] elements (box[0] bytes <= 128), 128-byte
// swizzled; reads past the tensor are zero-filled.
inline bool encode_map3(CUtensorMap* m, const void* base, CUtensorMapDataType type,
                        const cuuint64_t (&dims)[3], const cuuint64_t (&strides)[2],
                        const cuuint32_t (&box)[3]) {
  auto fn = encode_fn();
  if (!fn) return false;
  const cuuint32_t estr[3] = {1, 1, 1};
  return fn(m, type, 3, const_cast<void*>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
// A [tokens, heads, d] tensor as a 3-D map (d, head, token); one box is 128 bytes of d x 1 head x
// rows tokens (64 fp16 / bf16 values, or 128 FP8 codes: `bytes` per element).
inline bool make_map(CUtensorMap* m, const void* base, CUtensorMapDataType type, int bytes, int d, int heads,
                     int64_t tokens, int rows) {
  const cuuint64_t dims[3] = {cuuint64_t(d), cuuint64_t(heads), cuuint64_t(tokens > 0 ? tokens : 1)};
  const cuuint64_t strides[2] = {cuuint64_t(d) * bytes, cuuint64_t(heads) * cuuint64_t(d) * bytes};
  const cuuint32_t box[3] = {cuuint32_t(128 / bytes), 1, cuuint32_t(rows)};
  return encode_map3(m, base, type, dims, strides, box);
}
inline bool make_map(CUtensorMap* m, const void* base, bool bf16, int d, int heads, int64_t tokens,
                     int rows) {
  return make_map(m, base, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, d,
                  heads, tokens, rows);
}

// The device-side refusals of a call that passed its argument checks and has a sequence: tensor-map
// alignment, device cu_seqlens, the grid, an sm_90 device, 32-bit coordinates. `name`: the
// subject's, for the messages.
inline int device_checks(const ac_attention_args& a, const char* name, char* err, size_t err_len) {
  if (!aligned_to(a.q, 16) || !aligned_to(a.k, 16) || !aligned_to(a.v, 16))
    AC_REFUSE("%s: q, k and v must be 16-byte aligned (tensor maps)", name);
  if (!aligned_to(a.out, 4)) AC_REFUSE("%s: out must be 4-byte aligned", name);
  if (!a.cu_seqlens_q || !a.cu_seqlens_k) AC_REFUSE("%s: device cu_seqlens missing", name);
  if (a.num_seqs > 65535) AC_REFUSE("%s: %d sequences exceed the grid (65535)", name, a.num_seqs);
  int dev = 0, major = 0;
  AC_CUDA_TRY(cudaGetDevice(&dev));
  AC_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major != 9) AC_REFUSE("%s: needs a compute capability 9.0 GPU (sm_90a code), found %d.x", name, major);
  const int64_t total_q = a.cu_seqlens_q_host[a.num_seqs], total_k = a.cu_seqlens_k_host[a.num_seqs];
  if (total_q >= (int64_t(1) << 31) || total_k >= (int64_t(1) << 31))
    AC_REFUSE("%s: more than 2^31 tokens (tensor-map coordinates are 32-bit)", name);
  return AC_OK;
}

template <HopperMutation HM>
int run_hopper(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  if (int rc = hopper_check_args(a, o, err, err_len)) return rc;
  if (a.num_seqs == 0) return AC_OK;
  if (int rc = device_checks(a, "fused-hopper", err, err_len)) return rc;
  const int64_t total_q = a.cu_seqlens_q_host[a.num_seqs], total_k = a.cu_seqlens_k_host[a.num_seqs];
  const int max_tq = fused::max_seqlen_q_host(a);
  if (max_tq == 0) return AC_OK;
  const bool bf16 = a.dtype == AC_DTYPE_BF16;
  const int br = kHopperTilings[a.tiling].br, bc = kHopperTilings[a.tiling].bc;
  // Paged K / V: the maps cover the pools, their box a page where pages are smaller than a key
  // tile (the kernel's producer copies a tile in chunks then).
  const bool paged = a.page_size > 0;
  if (paged && HM != HopperMutation::none) AC_REFUSE("fused-hopper: the mutants take no paged K / V");
  const int64_t kv_rows = paged ? int64_t(a.num_pages) * a.page_size : total_k;
  if (kv_rows >= (int64_t(1) << 31))
    AC_REFUSE("fused-hopper: more than 2^31 pool slots (tensor-map coordinates are 32-bit)");
  const int kv_box = paged && a.page_size < bc ? a.page_size : bc;
  CUtensorMap mq{}, mk{}, mv{};
  if (!make_map(&mq, a.q, bf16, a.head_size, a.num_heads, total_q, br) ||
      !make_map(&mk, a.k, bf16, a.head_size, a.num_kv_heads, kv_rows, kv_box) ||
      !make_map(&mv, a.v, bf16, a.head_size, a.num_kv_heads, kv_rows, kv_box)) {
    if (err && err_len) std::snprintf(err, err_len, "fused-hopper: cuTensorMapEncodeTiled failed");
    return AC_ERR_DEVICE;
  }
  const fused::KernelParams p = fused::unsplit_params(a, o);
  const bool var = caps_or_windows(a);
  if (var && HM != HopperMutation::none) AC_REFUSE("fused-hopper: the mutants take no softcap or window");
  const LaunchFn fn = var ? pick<HopperMutation::none, true>(bf16, a.head_size, a.tiling)
                          : pick<HM, false>(bf16, a.head_size, a.tiling);
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  AC_CUDA_TRY(fn(mq, mk, mv, p, max_tq, a.num_seqs, stream));
  if (o.synchronize) AC_CUDA_TRY(cudaStreamSynchronize(stream));
  return AC_OK;
}

}  // namespace attncheck::kern::hopper
