// CUDA merge of two attention states (the LSE merge of two attention states; vLLM merge_attn_states,
// SGLang merge_state): out[t, h, :] = p_scale * prefix_out[t, h, :] + s_scale * suffix_out[t, h, :].
//
// Numerics: the per-(token, head) weights and the per-element fma come from merge_math.h, shared
// with the host twin. LSEs are fp32; outputs are widened to fp32 on load; scales and the
// combination are fp32 (scale first, then multiply: a convex combination, no overflow); the one
// rounding to the storage type is the store (cvt.rn, nearest-even, as storage.h on the host).
// Conventions: LSE natural log (or base 2 via MergeOptions::lse_base), LSE layout by strides
// ([heads, tokens] or [tokens, heads]); +inf read as empty; two empty states give out = 0 exactly
// and out_lse = -inf.
//
// Layout of the work, built for bandwidth (the merge moves ~6 bytes per flop): one thread per
// 16-byte pack of one (token, head) row (16 threads for d = 128 fp16), each loading the two LSEs
// once and issuing 128-bit loads and stores; a grid-stride loop over tokens * heads * packs. Where
// the three states are dense ([tokens, heads, d] contiguous, as engines pass them) and a row is a
// power of two of packs, the dense path addresses pack i at element 8 i of each (16-byte packs of
// 2-byte types; 4 i for fp32) and finds the row by a shift: no division or stride product per pack
// except the LSE's (token, head), and every load issued before the weights' math. On the H200 it
// moved 4209 GB/s at 32768 tokens, 99% of a 1 GiB copy (the strided path 3887). Where the head size
// or the pointers and strides do not allow 16-byte packs, the scalar path runs one thread per
// element (every head size 1..512). Indices are 32-bit when the whole problem fits in 2^31 work
// items, 64-bit otherwise; element offsets are always 64-bit.
// An FP8 output (ac_merge_args.out_dtype) takes its own path, one element per thread: the fp32
// element divided by output_scale, then cast to the format, saturating (merge_math.h).
// Check: ctest -R kernels_basic_merge_gpu   (bandwidth: build/tests/kernels_basic/merge_bench)
#include <cstdint>

#include "common/cuda_check.h"
#include "common/device_storage.cuh"
#include "merge/merge.h"
#include "merge/merge_math.h"

namespace attncheck::kern {

namespace {

using dev::Elem;  // common/device_storage.cuh: fp32 on load, one rounding on store

constexpr int kThreads = 256;

template <typename I>
struct RowIndex {
  I tok, head, sub;  // sub: pack (vector path) or element (scalar path) within the row
};
template <typename I>
__device__ __forceinline__ RowIndex<I> split_index(I idx, I per_row, I num_heads) {
  const I row = idx / per_row;
  return RowIndex<I>{row / num_heads, row % num_heads, idx - row * per_row};
}

template <int DT, typename I, MergeMutation M>
__global__ void __launch_bounds__(kThreads)
    merge_vector_kernel(const ac_merge_args a, const int lse_base, const I packs_per_row, const I total) {
  using E = Elem<DT>;
  using T = typename E::T;
  constexpr int kPack = 16 / int(sizeof(T));
  const I num_heads = I(a.num_heads);
  for (I idx = I(blockIdx.x) * kThreads + threadIdx.x; idx < total; idx += I(gridDim.x) * kThreads) {
    const RowIndex<I> r = split_index(idx, packs_per_row, num_heads);
    const int64_t tok = int64_t(r.tok), h = int64_t(r.head), e = int64_t(r.sub) * kPack;
    const int64_t li = tok * a.lse_stride_token + h * a.lse_stride_head;
    const MergeWeights w = merge_weights<M>(__ldg(a.prefix_lse + li), __ldg(a.suffix_lse + li), lse_base);
    const T* p =
        static_cast<const T*>(a.prefix_out) + tok * a.prefix_stride_token + h * a.prefix_stride_head + e;
    const T* s =
        static_cast<const T*>(a.suffix_out) + tok * a.suffix_stride_token + h * a.suffix_stride_head + e;
    T* o = static_cast<T*>(a.out) + tok * a.out_stride_token + h * a.out_stride_head + e;
    const uint4 pv = __ldg(reinterpret_cast<const uint4*>(p));
    const uint4 sv = __ldg(reinterpret_cast<const uint4*>(s));
    const T* pe = reinterpret_cast<const T*>(&pv);
    const T* se = reinterpret_cast<const T*>(&sv);
    uint4 ov;
    T* oe = reinterpret_cast<T*>(&ov);
#pragma unroll
    for (int i = 0; i < kPack; ++i) oe[i] = E::store(merge_element<M>(E::load(pe[i]), E::load(se[i]), w));
    *reinterpret_cast<uint4*>(o) = ov;
    if (a.out_lse != nullptr && r.sub == 0) a.out_lse[li] = w.out_lse;
  }
}

// One pack per thread and no grid-stride loop (dense_row_shift keeps the packs under 2^31). Every
// load is issued before the weights are computed, so their math (two exponentials, two divisions,
// a logarithm) runs under the loads' latency; the LSE base is a template argument, so neither
// branch of merge_exp is taken at run time.
template <int DT, bool BASE2>
__global__ void __launch_bounds__(kThreads)
    merge_dense_kernel(const ac_merge_args a, const uint32_t row_shift, const uint32_t total) {
  using E = Elem<DT>;
  using T = typename E::T;
  constexpr int kPack = 16 / int(sizeof(T));
  const uint32_t idx = blockIdx.x * kThreads + threadIdx.x;
  if (idx >= total) return;
  const uint32_t num_heads = uint32_t(a.num_heads);
  const uint32_t row = idx >> row_shift, tok = row / num_heads, h = row - tok * num_heads;
  const int64_t li = int64_t(tok) * a.lse_stride_token + int64_t(h) * a.lse_stride_head;
  const size_t e = size_t(idx) * kPack;
  const float p_lse = __ldg(a.prefix_lse + li), s_lse = __ldg(a.suffix_lse + li);
  const uint4 pv = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(a.prefix_out) + e));
  const uint4 sv = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(a.suffix_out) + e));
  const MergeWeights w = merge_weights<MergeMutation::none>(p_lse, s_lse, BASE2 ? 2 : 0);
  const T* pe = reinterpret_cast<const T*>(&pv);
  const T* se = reinterpret_cast<const T*>(&sv);
  uint4 ov;
  T* oe = reinterpret_cast<T*>(&ov);
#pragma unroll
  for (int i = 0; i < kPack; ++i)
    oe[i] = E::store(merge_element<MergeMutation::none>(E::load(pe[i]), E::load(se[i]), w));
  *reinterpret_cast<uint4*>(static_cast<T*>(a.out) + e) = ov;
  if (a.out_lse != nullptr && (idx & ((1u << row_shift) - 1u)) == 0) a.out_lse[li] = w.out_lse;
}

template <int DT, typename I, MergeMutation M>
__global__ void __launch_bounds__(kThreads)
    merge_scalar_kernel(const ac_merge_args a, const int lse_base, const I total) {
  using E = Elem<DT>;
  using T = typename E::T;
  const I num_heads = I(a.num_heads), head_size = I(a.head_size);
  for (I idx = I(blockIdx.x) * kThreads + threadIdx.x; idx < total; idx += I(gridDim.x) * kThreads) {
    const RowIndex<I> r = split_index(idx, head_size, num_heads);
    const int64_t tok = int64_t(r.tok), h = int64_t(r.head), e = int64_t(r.sub);
    const int64_t li = tok * a.lse_stride_token + h * a.lse_stride_head;
    const MergeWeights w = merge_weights<M>(__ldg(a.prefix_lse + li), __ldg(a.suffix_lse + li), lse_base);
    const T p =
        static_cast<const T*>(a.prefix_out)[tok * a.prefix_stride_token + h * a.prefix_stride_head + e];
    const T s =
        static_cast<const T*>(a.suffix_out)[tok * a.suffix_stride_token + h * a.suffix_stride_head + e];
    static_cast<T*>(a.out)[tok * a.out_stride_token + h * a.out_stride_head + e] =
        E::store(merge_element<M>(E::load(p), E::load(s), w));
    if (a.out_lse != nullptr && r.sub == 0) a.out_lse[li] = w.out_lse;
  }
}

// An FP8 output (merge_fp8_out): one thread per element, 64-bit indices, the fp32 element divided by
// output_scale and cast (merge_fp8_store, shared with the twin). A path for correctness, not speed.
template <int DT, MergeMutation M>
__global__ void __launch_bounds__(kThreads)
    merge_fp8_kernel(const ac_merge_args a, const int lse_base, const int kv_dtype, const int64_t total) {
  using E = Elem<DT>;
  using T = typename E::T;
  const float scale = __ldg(a.output_scale);
  for (int64_t idx = int64_t(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * kThreads) {
    const RowIndex<int64_t> r = split_index(idx, int64_t(a.head_size), int64_t(a.num_heads));
    const int64_t tok = r.tok, h = r.head, e = r.sub;
    const int64_t li = tok * a.lse_stride_token + h * a.lse_stride_head;
    const MergeWeights w = merge_weights<M>(__ldg(a.prefix_lse + li), __ldg(a.suffix_lse + li), lse_base);
    const T p =
        static_cast<const T*>(a.prefix_out)[tok * a.prefix_stride_token + h * a.prefix_stride_head + e];
    const T s =
        static_cast<const T*>(a.suffix_out)[tok * a.suffix_stride_token + h * a.suffix_stride_head + e];
    static_cast<uint8_t*>(a.out)[tok * a.out_stride_token + h * a.out_stride_head + e] =
        merge_fp8_store<M>(kv_dtype, merge_element<M>(E::load(p), E::load(s), w), scale);
    if (a.out_lse != nullptr && r.sub == 0) a.out_lse[li] = w.out_lse;
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
bool stride16(int64_t stride_elems, int64_t elem) { return ((stride_elems * elem) % 16) == 0; }

unsigned grid_for(int64_t total) {
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  constexpr int64_t kMaxBlocks = int64_t(1) << 22;  // grid-stride beyond this
  return unsigned(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

template <int DT>
void launch_fp8(const ac_merge_args& a, const MergeOptions& o, int64_t total, cudaStream_t stream) {
  const int kv = int(a.out_dtype);
  if (o.mutation == MergeMutation::fp8_scale_ignored)
    merge_fp8_kernel<DT, MergeMutation::fp8_scale_ignored>
        <<<grid_for(total), kThreads, 0, stream>>>(a, o.lse_base, kv, total);
  else
    merge_fp8_kernel<DT, MergeMutation::none>
        <<<grid_for(total), kThreads, 0, stream>>>(a, o.lse_base, kv, total);
}

// The shift that finds a pack's row, when the dense path applies; -1 otherwise.
int dense_row_shift(const ac_merge_args& a, bool vector, int64_t total, int64_t packs_per_row) {
  const int64_t row = int64_t(a.num_heads) * a.head_size;
  const bool dense = vector && a.out_stride_head == a.head_size && a.prefix_stride_head == a.head_size &&
                     a.suffix_stride_head == a.head_size && a.out_stride_token == row &&
                     a.prefix_stride_token == row && a.suffix_stride_token == row;
  if (!dense || (packs_per_row & (packs_per_row - 1)) != 0) return -1;
  // Every pack index, and the block count, fit in 32 bits (one pack per thread, no grid stride).
  if (total >= (int64_t(1) << 31)) return -1;
  int shift = 0;
  while ((int64_t(1) << shift) < packs_per_row) ++shift;
  return shift;
}

template <int DT, typename I, MergeMutation M = MergeMutation::none>
void launch(const ac_merge_args& a, const MergeOptions& o, bool vector, int64_t total, int64_t packs_per_row,
            cudaStream_t stream) {
  if (vector)
    merge_vector_kernel<DT, I, M>
        <<<grid_for(total), kThreads, 0, stream>>>(a, o.lse_base, I(packs_per_row), I(total));
  else
    merge_scalar_kernel<DT, I, M><<<grid_for(total), kThreads, 0, stream>>>(a, o.lse_base, I(total));
}

template <int DT>
void launch_dtype(const ac_merge_args& a, const MergeOptions& o, bool vector, int64_t total,
                  int64_t packs_per_row, cudaStream_t stream) {
  // Mutants (kernels/mutants/) are instantiated with 64-bit indices only, to keep the build small.
  switch (o.mutation) {
    case MergeMutation::none:
      break;
    case MergeMutation::no_inf_mapping:
      return launch<DT, int64_t, MergeMutation::no_inf_mapping>(a, o, vector, total, packs_per_row, stream);
    case MergeMutation::no_both_empty_guard:
      return launch<DT, int64_t, MergeMutation::no_both_empty_guard>(a, o, vector, total, packs_per_row,
                                                                     stream);
    case MergeMutation::multiply_then_divide:
      return launch<DT, int64_t, MergeMutation::multiply_then_divide>(a, o, vector, total, packs_per_row,
                                                                      stream);
    case MergeMutation::base_swap:
      return launch<DT, int64_t, MergeMutation::base_swap>(a, o, vector, total, packs_per_row, stream);
    case MergeMutation::fp8_scale_ignored:  // an FP8 output's mutant: launch_fp8 only
      return;
  }
  if (const int shift = dense_row_shift(a, vector, total, packs_per_row); shift >= 0) {
    const unsigned blocks = unsigned((total + kThreads - 1) / kThreads);
    if (o.lse_base == 2)
      merge_dense_kernel<DT, true><<<blocks, kThreads, 0, stream>>>(a, uint32_t(shift), uint32_t(total));
    else
      merge_dense_kernel<DT, false><<<blocks, kThreads, 0, stream>>>(a, uint32_t(shift), uint32_t(total));
    return;
  }
  // 32-bit index arithmetic (cheap division) when every work item index and its grid-stride
  // successor fit; 64-bit otherwise, so huge tensors never wrap (the bug of kernels/mutants/ mutant 13).
  if (total < (int64_t(1) << 31) - int64_t(kThreads) * (int64_t(1) << 22))
    launch<DT, uint32_t>(a, o, vector, total, packs_per_row, stream);
  else
    launch<DT, int64_t>(a, o, vector, total, packs_per_row, stream);
}

}  // namespace

bool merge_cuda_uses_vector_path(const ac_merge_args& a, const MergeOptions& o) {
  if (!o.allow_vector || merge_fp8_out(a)) return false;
  const int64_t elem = a.dtype == AC_DTYPE_F32 ? 4 : 2;
  return (int64_t(a.head_size) * elem) % 16 == 0 && aligned16(a.out) && aligned16(a.prefix_out) &&
         aligned16(a.suffix_out) && stride16(a.out_stride_token, elem) && stride16(a.out_stride_head, elem) &&
         stride16(a.prefix_stride_token, elem) && stride16(a.prefix_stride_head, elem) &&
         stride16(a.suffix_stride_token, elem) && stride16(a.suffix_stride_head, elem);
}

namespace {
int64_t packs_per_row(const ac_merge_args& a, bool vector) {
  const int64_t elem = a.dtype == AC_DTYPE_F32 ? 4 : 2;
  return vector ? int64_t(a.head_size) * elem / 16 : int64_t(a.head_size);
}
}  // namespace

bool merge_cuda_uses_dense_path(const ac_merge_args& a, const MergeOptions& o) {
  const bool vector = merge_cuda_uses_vector_path(a, o);
  const int64_t per_row = packs_per_row(a, vector);
  return o.mutation == MergeMutation::none &&
         dense_row_shift(a, vector, int64_t(a.num_tokens) * a.num_heads * per_row, per_row) >= 0;
}

int merge_cuda(const ac_merge_args& a, const MergeOptions& o, char* err, size_t err_len) {
  if (const int rc = merge_check_args(a, o, err, err_len); rc != AC_OK) return rc;
  if (a.num_tokens == 0 || a.num_heads == 0) return AC_OK;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  if (merge_fp8_out(a)) {
    const int64_t total = int64_t(a.num_tokens) * a.num_heads * a.head_size;
    if (a.dtype == AC_DTYPE_F32) launch_fp8<AC_DTYPE_F32>(a, o, total, stream);
    if (a.dtype == AC_DTYPE_F16) launch_fp8<AC_DTYPE_F16>(a, o, total, stream);
    if (a.dtype == AC_DTYPE_BF16) launch_fp8<AC_DTYPE_BF16>(a, o, total, stream);
    AC_CUDA_TRY_LAUNCH();
    if (o.synchronize) AC_CUDA_TRY(cudaStreamSynchronize(stream));
    return AC_OK;
  }
  const bool vector = merge_cuda_uses_vector_path(a, o);
  const int64_t per_row = packs_per_row(a, vector);
  const int64_t total = int64_t(a.num_tokens) * a.num_heads * per_row;
  switch (a.dtype) {
    case AC_DTYPE_F32:
      launch_dtype<AC_DTYPE_F32>(a, o, vector, total, per_row, stream);
      break;
    case AC_DTYPE_F16:
      launch_dtype<AC_DTYPE_F16>(a, o, vector, total, per_row, stream);
      break;
    case AC_DTYPE_BF16:
      launch_dtype<AC_DTYPE_BF16>(a, o, vector, total, per_row, stream);
      break;
    case AC_DTYPE_E4M3:  // FP8 is refused by the argument checks before this point
    case AC_DTYPE_E5M2:
    case AC_DTYPE_E4M3FNUZ:
      break;
  }
  AC_CUDA_TRY_LAUNCH();
  if (o.synchronize) AC_CUDA_TRY(cudaStreamSynchronize(stream));
  return AC_OK;
}

}  // namespace attncheck::kern
