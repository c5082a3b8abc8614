// Device side of the row softmax: one thread block of kSoftmaxThreads threads per row, the
// per-element math and fold order of softmax_math.h (whose header block states the numerics and
// conventions); element loads and stores are common/device_storage.cuh's. Included by softmax.cu and
// textbook.cu (the textbook softmax step), so the standalone softmax and the textbook attention's P are
// computed by the same code.
#pragma once
#include <cstdint>

#include "common/device_storage.cuh"
#include "softmax/softmax.h"
#include "softmax/softmax_math.h"

namespace attncheck::kern::dev {

__device__ __forceinline__ float shfl_xor(float v, int off) { return __shfl_xor_sync(0xffffffffu, v, off); }
__device__ __forceinline__ OnlineState shfl_xor(OnlineState v, int off) {
  return OnlineState{__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.l, off)};
}

// Block-wide fold of one value per thread, in the tree block_fold_host() replays. Every thread
// gets the result. scratch holds kSoftmaxWarps + 1 values.
template <typename T, typename Op>
__device__ T block_fold(T v, T identity, Op op, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // the previous fold's readers are done with scratch
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) v = op(v, shfl_xor(v, off));
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kSoftmaxWarps ? scratch[lane] : identity;
#pragma unroll
    for (int off = 16; off >= 1; off /= 2) v = op(v, shfl_xor(v, off));
    if (lane == 0) scratch[kSoftmaxWarps] = v;
  }
  __syncthreads();
  return scratch[kSoftmaxWarps];
}

struct FoldMax {
  __device__ float operator()(float a, float b) const { return fold_max(a, b); }
};
struct FoldSum {
  __device__ float operator()(float a, float b) const { return fold_sum(a, b); }
};
template <bool kLInFp16 = false>
struct FoldOnline {
  __device__ OnlineState operator()(OnlineState a, OnlineState b) const {
    return online_combine<kLInFp16>(a, b);
  }
};

// Softmax of one row by the whole block: x (DTIN) -> y (DTOUT), cols elements each. Returns the
// row's natural-log LSE in every thread. Must be called by all threads of the block.
template <SoftmaxVariant V, int DTIN, int DTOUT>
__device__ float softmax_row_block(const void* x, void* y, int64_t cols) {
  using In = Elem<DTIN>;
  using Out = Elem<DTOUT>;
  __shared__ float scratch[kSoftmaxWarps + 1];
  __shared__ OnlineState scratch_online[kSoftmaxWarps + 1];
  const int64_t t0 = threadIdx.x;
  if constexpr (V == SoftmaxVariant::naive) {
    // e[j] = exp(x[j]) rounded to the output type and stored in y: the materialised intermediate.
    float sum = 0.0f;
    for (int64_t j = t0; j < cols; j += kSoftmaxThreads) {
      Out::store(y, j, exp_f(In::load(x, j)));
      sum += Out::load(y, j);  // the stored (rounded) value is what gets summed
    }
    sum = block_fold(sum, 0.0f, FoldSum{}, scratch);
    for (int64_t j = t0; j < cols; j += kSoftmaxThreads) Out::store(y, j, normalise(Out::load(y, j), sum));
    return naive_lse(sum);
  } else {
    float m, l;
    if constexpr (V == SoftmaxVariant::safe) {
      m = neg_inf_f();
      for (int64_t j = t0; j < cols; j += kSoftmaxThreads) m = fold_max(m, In::load(x, j));
      m = block_fold(m, neg_inf_f(), FoldMax{}, scratch);
      l = 0.0f;
      for (int64_t j = t0; j < cols; j += kSoftmaxThreads) l += shifted_exp(In::load(x, j), m);
      l = block_fold(l, 0.0f, FoldSum{}, scratch);
    } else {
      constexpr bool l16 = V == SoftmaxVariant::online_l_fp16;  // the mutant (kernels/mutants/, mutant 5)
      OnlineState s = online_identity();
      for (int64_t j = t0; j < cols; j += kSoftmaxThreads) s = online_push<l16>(s, In::load(x, j));
      s = block_fold(s, online_identity(), FoldOnline<l16>{}, scratch_online);
      m = s.m;
      l = s.l;
    }
    for (int64_t j = t0; j < cols; j += kSoftmaxThreads)
      Out::store(y, j, normalise(shifted_exp(In::load(x, j), m), l));
    return safe_lse(m, l);
  }
}

}  // namespace attncheck::kern::dev
