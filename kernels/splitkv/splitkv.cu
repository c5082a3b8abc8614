// CUDA split-KV attention (flash-decoding). Two kernels on one stream:
//   1. the fused mainloop (kernels/fused/fused_kernel.cuh, SPLIT = true): grid (row tiles, heads,
//      sequences x num_splits); each CTA covers one part of the key range and writes the fp32
//      partial O / l and base-2 LSE (-inf for an empty part) to the workspace;
//   2. the combine: one warp per (token, head), lanes over the head dimension, folds the
//      num_splits partials in args.fold_order with splitkv_math.h (fp32, both-empty guard), rounds
//      O to the input type, writes LSE natural, [heads, tokens], -inf for an empty row.
// No atomics: every output is written by one thread, so num_splits = 1 is bitwise reproducible.
// Check: ctest --test-dir build -L gpu -R kernels_attention
#include <cstdint>

#include "common/cuda_check.h"
#include "common/device_storage.cuh"
#include "common/host_tensor.h"
#include "fused/fused_kernel.cuh"
#include "splitkv/splitkv.h"
#include "splitkv/splitkv_math.h"

namespace attncheck::kern {

namespace {

template <bool BF16, fused::Mutation M = fused::Mutation::none>
__global__ void __launch_bounds__(128)
    splitkv_combine_kernel(const float* __restrict__ part_o, const float* __restrict__ part_lse, void* out,
                           float* lse, int64_t total_q, int num_heads, int head_size, int num_splits,
                           ac_fold order) {
  const int64_t pair = int64_t(blockIdx.x) * 4 + (threadIdx.x >> 5);  // (token, head)
  const int lane = threadIdx.x & 31;
  if (pair >= total_q * num_heads) return;
  const int64_t tok = pair / num_heads;
  const int head = int(pair % num_heads);
  const int64_t part_stride = total_q * num_heads;  // between parts, in (token, head) pairs
  float pl[splitkv::kMaxSplits];
#pragma unroll
  for (int s = 0; s < splitkv::kMaxSplits; ++s)
    pl[s] = s < num_splits ? part_lse[s * part_stride + pair] : neg_inf_f();
  float lse_final = neg_inf_f();
  using Out = dev::Elem<BF16 ? AC_DTYPE_BF16 : AC_DTYPE_F16>;
  for (int c = lane; c < head_size; c += 32) {
    float po[splitkv::kMaxSplits], pl_copy[splitkv::kMaxSplits];
#pragma unroll
    for (int s = 0; s < splitkv::kMaxSplits; ++s) {
      po[s] = s < num_splits ? part_o[(s * part_stride + pair) * head_size + c] : 0.0f;
      pl_copy[s] = pl[s];
    }
    float o_final;
    splitkv::fold_partials<M>(po, pl_copy, num_splits, order, o_final, lse_final);
    Out::store(out, pair * head_size + c, o_final);
  }
  if (lse && lane == 0) {
    // Lane 0 folded at least one element (head_size >= 32), so lse_final is the folded LSE.
    lse[int64_t(head) * total_q + tok] = splitkv::final_lse_natural<M>(lse_final);
  }
}

}  // namespace

int splitkv_combine_cuda(const float* part_o, const float* part_lse, const ac_attention_args& a,
                         void* stream) {
  const int64_t total_q = a.cu_seqlens_q_host[a.num_seqs];
  const int64_t pairs = total_q * a.num_heads;
  if (pairs == 0) return int(cudaSuccess);
  const unsigned blocks = unsigned((pairs + 3) / 4);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (a.dtype == AC_DTYPE_BF16)
    splitkv_combine_kernel<true><<<blocks, 128, 0, s>>>(part_o, part_lse, a.out, a.lse, total_q, a.num_heads,
                                                        a.head_size, a.num_splits, a.fold_order);
  else
    splitkv_combine_kernel<false><<<blocks, 128, 0, s>>>(part_o, part_lse, a.out, a.lse, total_q, a.num_heads,
                                                         a.head_size, a.num_splits, a.fold_order);
  return int(cudaGetLastError());
}

int splitkv_attention_cuda(const ac_attention_args& a, char* err, size_t err_len) {
  return splitkv_attention_cuda(a, SplitKVOptions{}, err, err_len);
}

int splitkv_attention_cuda(const ac_attention_args& a, const SplitKVOptions& o, char* err, size_t err_len) {
  if (int rc = splitkv_check_args(a, err, err_len)) return rc;
  if (a.num_seqs == 0) return AC_OK;
  if (!aligned_to(a.q, 16) || !aligned_to(a.k, 16) || !aligned_to(a.v, 16))
    AC_REFUSE("split-KV attention: q, k and v must be 16-byte aligned (cp.async of 16-byte chunks)");
  if (!aligned_to(a.out, 2)) AC_REFUSE("split-KV attention: out must be 2-byte aligned");
  if (!a.cu_seqlens_q || !a.cu_seqlens_k) AC_REFUSE("split-KV attention: device cu_seqlens missing");
  if (int64_t(a.num_seqs) * a.num_splits > 65535)
    AC_REFUSE("split-KV attention: %d sequences x %d splits exceed the grid (65535)", a.num_seqs,
              a.num_splits);
  const int max_tq = fused::max_seqlen_q_host(a);
  const int64_t total_q = a.cu_seqlens_q_host[a.num_seqs];
  if (total_q == 0) return AC_OK;
  const size_t need = splitkv_workspace_bytes(a);
  if (o.workspace && o.workspace_bytes < need)
    AC_REFUSE("split-KV attention: workspace of %zu bytes, %zu needed", o.workspace_bytes, need);
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  void* ws = o.workspace;
  if (!ws) AC_CUDA_TRY(cudaMallocAsync(&ws, need, stream));

  fused::KernelParams p = fused::params_from_args(a);
  p.out = nullptr;  // split mode writes only the fp32 partials; the combine writes out and lse
  p.lse = nullptr;
  p.num_splits = a.num_splits;
  p.part_o = static_cast<float*>(ws);
  p.part_lse = p.part_o + size_t(a.num_splits) * size_t(total_q) * size_t(a.num_heads) * size_t(a.head_size);

  const bool bf16 = a.dtype == AC_DTYPE_BF16;
  const fused::LaunchFn fn = fused::pick_launch<kSplitKVTilings, true>(bf16, a.head_size, a.tiling);
  cudaError_t e = fn(p, max_tq, a.num_seqs, stream);
  if (e == cudaSuccess) {
    const int64_t pairs = total_q * a.num_heads;
    const unsigned blocks = unsigned((pairs + 3) / 4);
    // o.mutation selects mutant 11's combine (kernels/mutants/); the partials are the correct ones.
    constexpr auto kPlusInf = fused::Mutation::combine_plus_inf;
    const bool plus_inf = o.mutation == kPlusInf;
    if (bf16 && plus_inf)
      splitkv_combine_kernel<true, kPlusInf><<<blocks, 128, 0, stream>>>(
          p.part_o, p.part_lse, a.out, a.lse, total_q, a.num_heads, a.head_size, a.num_splits, a.fold_order);
    else if (plus_inf)
      splitkv_combine_kernel<false, kPlusInf><<<blocks, 128, 0, stream>>>(
          p.part_o, p.part_lse, a.out, a.lse, total_q, a.num_heads, a.head_size, a.num_splits, a.fold_order);
    else if (bf16)
      splitkv_combine_kernel<true><<<blocks, 128, 0, stream>>>(
          p.part_o, p.part_lse, a.out, a.lse, total_q, a.num_heads, a.head_size, a.num_splits, a.fold_order);
    else
      splitkv_combine_kernel<false><<<blocks, 128, 0, stream>>>(
          p.part_o, p.part_lse, a.out, a.lse, total_q, a.num_heads, a.head_size, a.num_splits, a.fold_order);
    e = cudaGetLastError();
  }
  if (!o.workspace) {
    const cudaError_t f = cudaFreeAsync(ws, stream);
    if (e == cudaSuccess) e = f;
  }
  if (e != cudaSuccess) {
    if (err && err_len) std::snprintf(err, err_len, "split-KV attention: %s", cudaGetErrorString(e));
    return AC_ERR_DEVICE;
  }
  if (o.synchronize) AC_CUDA_TRY(cudaStreamSynchronize(stream));
  return AC_OK;
}

}  // namespace attncheck::kern
