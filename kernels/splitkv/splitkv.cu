// CUDA split-KV attention (flash-decoding). Two kernels on one stream:
//   1. the fused mainloop (kernels/fused/fused_kernel.cuh, SPLIT = true): grid (row tiles, heads,
//      sequences x num_splits); each CTA covers one part of the key range (splitkv::split_range:
//      num_splits parts as equal as possible, or a fixed split size, SplitKVOptions.keys_per_split,
//      whose parts depend on the row alone) and writes the fp32 partial O / l and base-2 LSE (-inf
//      for an empty part) to the workspace;
//   2. the combine: one CTA per (token, head), a thread per element of the head dimension; it
//      stages the num_splits (1..64) partials in shared memory and folds them in args.fold_order
//      with splitkv_math.h (fp32, both-empty guard), rounds O to the input type, writes LSE
//      natural, [heads, tokens], -inf for an empty row.
// Variants: the mainloop's VAR instantiation applies paged K / V, the window and the softcap inside
// each part (fused_kernel.cuh); a sink is left out of the partials and joined once by the combine
// after the fold (splitkv_math.h merge_sink, fp32, sink times log2 e rounded once), before O is
// rounded to the input type. Mutants (kernels/mutants/): 11 is the combine's +inf, 23 lets every
// partial count the sink (the mainloop instantiated with it) and its combine skip merge_sink.
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

// One CTA per (token, head), one thread per element of the head dimension. The CTA first stages
// its num_splits partials in shared memory (every load in flight at once), then each thread folds
// its element: the fold is a chain of num_splits - 1 dependent merges, so the CTA waits for one
// chain, not one per element (with up to 64 parts, the chain is what the combine costs).
constexpr int kCombineMaxThreads = 128;

size_t combine_smem_bytes(int num_splits, int head_size) {
  return size_t(num_splits) * size_t(head_size + 1) * sizeof(float);
}

template <bool BF16, fused::Mutation M = fused::Mutation::none>
__global__ void __launch_bounds__(kCombineMaxThreads)
    splitkv_combine_kernel(const float* __restrict__ part_o, const float* __restrict__ part_lse, void* out,
                           float* lse, int64_t total_q, int num_heads, int head_size, int num_splits,
                           ac_fold order, const float* __restrict__ sinks) {
  extern __shared__ __align__(16) float staged[];  // [num_splits][head_size] O, then [num_splits] LSE
  float* const so = staged;
  float* const sl = staged + num_splits * head_size;
  const int64_t pair = blockIdx.x;                  // (token, head)
  const int64_t part_stride = total_q * num_heads;  // between parts, in (token, head) pairs
  const int tid = threadIdx.x, vecs = head_size / 4;
  for (int idx = tid; idx < num_splits * vecs; idx += blockDim.x) {
    const int s = idx / vecs, v = idx % vecs;
    reinterpret_cast<float4*>(so)[idx] =
        reinterpret_cast<const float4*>(part_o + (s * part_stride + pair) * head_size)[v];
  }
  for (int s = tid; s < num_splits; s += blockDim.x) sl[s] = part_lse[s * part_stride + pair];
  __syncthreads();
  // The row's sink in base 2 (-inf without sinks, which merge_sink leaves alone).
  const float sink2 = sinks ? __fmul_rn(sinks[pair % num_heads], fused::kLog2e) : neg_inf_f();
  using Out = dev::Elem<BF16 ? AC_DTYPE_BF16 : AC_DTYPE_F16>;
  for (int c = tid; c < head_size; c += blockDim.x) {
    float o_final, lse_final;
    splitkv::fold_partials<M>(
        num_splits, order,
        [&](int i, float& o_i, float& lse_i) {
          o_i = so[i * head_size + c];
          lse_i = sl[i];
        },
        o_final, lse_final);
    // The partials never counted the sink (mutant 23's did): it joins here, once.
    if constexpr (M != fused::Mutation::sink_every_split) splitkv::merge_sink(o_final, lse_final, sink2);
    Out::store(out, pair * head_size + c, o_final);
    // Every element's fold computes the same LSE; element 0's is written.
    if (lse && c == 0)
      lse[int64_t(pair % num_heads) * total_q + pair / num_heads] = splitkv::final_lse_natural<M>(lse_final);
  }
}

// The combine of a.num_splits parts on `stream`, M selecting mutant 11's or 23's (kernels/mutants/);
// a.sinks (device memory, or null) joins after the fold.
template <fused::Mutation M>
cudaError_t launch_combine(const float* part_o, const float* part_lse, const ac_attention_args& a,
                           cudaStream_t stream) {
  const int64_t total_q = a.cu_seqlens_q_host[a.num_seqs];
  const int64_t pairs = total_q * a.num_heads;
  if (pairs == 0) return cudaSuccess;
  // O's head size: V's (MLA's 512 from splitkv-packed).
  const int dv = head_size_v_of(a);
  const size_t smem = combine_smem_bytes(a.num_splits, dv);
  // 64 parts of d = 128: 33 KB, under the 48 KB a launch gets without opting in; of d = 512, 131 KB.
  if (a.num_splits < 1 || a.num_splits > splitkv::kMaxSplits || dv % 4 != 0 || smem > 227 * 1024 ||
      pairs > INT32_MAX || !aligned_to(part_o, 16))
    return cudaErrorInvalidValue;
  const unsigned threads = unsigned(dv < kCombineMaxThreads ? dv : kCombineMaxThreads);
  auto kernel = a.dtype == AC_DTYPE_BF16 ? splitkv_combine_kernel<true, M> : splitkv_combine_kernel<false, M>;
  if (smem > 48 * 1024)
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        e != cudaSuccess)
      return e;
  kernel<<<unsigned(pairs), threads, smem, stream>>>(part_o, part_lse, a.out, a.lse, total_q, a.num_heads, dv,
                                                     a.num_splits, a.fold_order, a.sinks);
  return cudaGetLastError();
}

}  // namespace

int splitkv_combine_cuda(const float* part_o, const float* part_lse, const ac_attention_args& a,
                         void* stream) {
  return int(launch_combine<fused::Mutation::none>(part_o, part_lse, a, static_cast<cudaStream_t>(stream)));
}

int cuda_sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return -1;
  return sms;
}

int splitkv_attention_cuda(const ac_attention_args& a, char* err, size_t err_len) {
  return splitkv_attention_cuda(a, SplitKVOptions{}, err, err_len);
}

int splitkv_attention_cuda(const ac_attention_args& a, const SplitKVOptions& o, char* err, size_t err_len) {
  if (int rc = splitkv_check_args(a, err, err_len)) return rc;
  if (int rc = splitkv_check_fixed(a, o.keys_per_split, err, err_len)) return rc;
  using fused::Mutation;
  if (o.mutation != Mutation::none && o.mutation != Mutation::combine_plus_inf &&
      o.mutation != Mutation::sink_every_split)
    AC_REFUSE("split-KV attention: mutation %d has no CUDA split-KV form", int(o.mutation));
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
  if (!aligned_to(o.workspace, 16))
    AC_REFUSE("split-KV attention: the workspace must be 16-byte aligned (the combine reads float4)");
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  void* ws = o.workspace;
  if (!ws) AC_CUDA_TRY(cudaMallocAsync(&ws, need, stream));

  fused::KernelParams p = fused::params_from_args(a);
  p.out = nullptr;  // split mode writes only the fp32 partials; the combine writes out and lse
  p.lse = nullptr;
  p.num_splits = a.num_splits;
  p.keys_per_split = o.keys_per_split;
  p.part_o = static_cast<float*>(ws);
  p.part_lse =
      p.part_o + size_t(a.num_splits) * size_t(total_q) * size_t(a.num_heads) * size_t(head_size_v_of(a));

  // The mainloop: plain, with the variants (VAR) where the call uses one, or mutant 23's (VAR, every
  // partial counting the sink).
  const bool bf16 = a.dtype == AC_DTYPE_BF16;
  constexpr auto kPlusInf = Mutation::combine_plus_inf, kSinkEvery = Mutation::sink_every_split;
  const fused::LaunchFn fn =
      o.mutation == kSinkEvery
          ? fused::pick_launch<kSplitKVTilings, true, true, kSinkEvery>(bf16, a.head_size, a.tiling)
      : uses_variants(a) ? fused::pick_launch<kSplitKVTilings, true, true>(bf16, a.head_size, a.tiling)
                         : fused::pick_launch<kSplitKVTilings, true>(bf16, a.head_size, a.tiling);
  cudaError_t e = fn(p, max_tq, a.num_seqs, stream);
  if (e == cudaSuccess) {
    // o.mutation selects mutant 11's or 23's combine; mutant 11's partials are the correct ones.
    e = o.mutation == kPlusInf     ? launch_combine<kPlusInf>(p.part_o, p.part_lse, a, stream)
        : o.mutation == kSinkEvery ? launch_combine<kSinkEvery>(p.part_o, p.part_lse, a, stream)
                                   : launch_combine<Mutation::none>(p.part_o, p.part_lse, a, stream);
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
