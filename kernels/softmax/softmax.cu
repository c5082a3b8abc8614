// CUDA row softmax, variants naive / safe / online, storage fp16 / bf16 / fp32.
//
// One block of kSoftmaxThreads (256) threads per row; thread t folds columns t, t + 256, ... in
// fp32, then the block folds the per-thread values by warp xor butterflies (softmax_block.cuh).
// Accumulators (max, sum, online (m, l)) are fp32; inputs are widened to fp32 on load. Rounding:
// y is rounded once to the storage type on its store; the naive variant also rounds e = exp(x)
// to the storage type, stores it in y (the materialised intermediate) and sums the stored values,
// so in fp16 it overflows exactly where exp(x) >= 65520 (x = 11.09375, not 11.0859375).
// Conventions: an all -inf row gives y = 0 (every variant); see softmax_math.h.
// The host twin (softmax_host.cpp) replays the same fold tree.
// Check: ctest -R kernels_basic_softmax_gpu
#include "common/cuda_check.h"
#include "softmax/softmax_block.cuh"

namespace attncheck::kern {

namespace {

template <SoftmaxVariant V, int DT>
__global__ void __launch_bounds__(kSoftmaxThreads) softmax_kernel(const ac_softmax_args a) {
  constexpr int64_t kElem = DT == AC_DTYPE_F32 ? 4 : 2;
  const int64_t row_offset_bytes = int64_t(blockIdx.x) * a.row_stride * kElem;
  dev::softmax_row_block<V, DT, DT>(static_cast<const char*>(a.x) + row_offset_bytes,
                                    static_cast<char*>(a.y) + row_offset_bytes, a.cols);
}

template <SoftmaxVariant V>
void launch_variant(const ac_softmax_args& a, cudaStream_t stream) {
  const dim3 grid(unsigned(a.rows));
  switch (a.dtype) {
    case AC_DTYPE_F32:
      softmax_kernel<V, AC_DTYPE_F32><<<grid, kSoftmaxThreads, 0, stream>>>(a);
      break;
    case AC_DTYPE_F16:
      softmax_kernel<V, AC_DTYPE_F16><<<grid, kSoftmaxThreads, 0, stream>>>(a);
      break;
    case AC_DTYPE_BF16:
      softmax_kernel<V, AC_DTYPE_BF16><<<grid, kSoftmaxThreads, 0, stream>>>(a);
      break;
    case AC_DTYPE_E4M3:  // FP8 is refused by the argument checks before this point
    case AC_DTYPE_E5M2:
    case AC_DTYPE_E4M3FNUZ:
      break;
  }
}

}  // namespace

int softmax_cuda(const ac_softmax_args& a, SoftmaxVariant v, char* err, size_t err_len) {
  if (const int rc = softmax_check_args(a, err, err_len); rc != AC_OK) return rc;
  if (a.rows == 0 || a.cols == 0) return AC_OK;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  switch (v) {
    case SoftmaxVariant::naive:
      launch_variant<SoftmaxVariant::naive>(a, stream);
      break;
    case SoftmaxVariant::safe:
      launch_variant<SoftmaxVariant::safe>(a, stream);
      break;
    case SoftmaxVariant::online:
      launch_variant<SoftmaxVariant::online>(a, stream);
      break;
    case SoftmaxVariant::online_l_fp16:
      launch_variant<SoftmaxVariant::online_l_fp16>(a, stream);
      break;
  }
  AC_CUDA_TRY_LAUNCH();
  AC_CUDA_TRY(cudaStreamSynchronize(stream));
  return AC_OK;
}

}  // namespace attncheck::kern
