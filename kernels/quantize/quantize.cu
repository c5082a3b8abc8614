// The KV-cache quantiser on the GPU: one thread per element, grid-stride; each reads its element,
// widens it to fp32, divides by its head's scale (IEEE division) and encodes the code
// (quantize_math.h, shared with the host twin quantize_host.cpp, which it matches bit for bit).
// Memory-bound and simple by design: a reference quantiser whose contract is checked, not a
// benchmark kernel.
#include "common/cuda_check.h"
#include "common/storage.h"
#include "quantize/quantize.h"

namespace attncheck::kern {

namespace {

constexpr int kThreads = 256;

template <QuantizeMutation M>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const void* x, uint8_t* y, const float* scale, int num_scales, int64_t n,
                    int64_t head_size, int64_t num_heads, int dtype, int kv_dtype, bool saturate) {
  const DType t = DType(dtype);
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
    const uint32_t bits =
        t == DType::f32 ? static_cast<const uint32_t*>(x)[i] : static_cast<const uint16_t*>(x)[i];
    const float s = scale[num_scales == 1 ? 0 : (i / head_size) % num_heads];
    y[i] = quantize_element<M>(kv_dtype, load_as_float(t, bits), s, saturate);
  }
}

}  // namespace

int quantize_cuda(const ac_quantize_args& a, const QuantizeOptions& o, char* err, size_t err_len) {
  if (const int rc = quantize_check_args(a, err, err_len); rc != AC_OK) return rc;
  const int64_t n = int64_t(a.num_tokens) * a.num_heads * a.head_size;
  if (n == 0) return AC_OK;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const unsigned grid = unsigned(blocks < 65535 ? blocks : 65535);
  if (o.mutation == QuantizeMutation::nan_cast)
    quantize_kernel<QuantizeMutation::nan_cast>
        <<<grid, kThreads, 0, stream>>>(a.x, a.y, a.scale, a.num_scales, n, a.head_size, a.num_heads,
                                        int(a.dtype), int(a.out_dtype), o.saturate);
  else
    quantize_kernel<QuantizeMutation::none>
        <<<grid, kThreads, 0, stream>>>(a.x, a.y, a.scale, a.num_scales, n, a.head_size, a.num_heads,
                                        int(a.dtype), int(a.out_dtype), o.saturate);
  AC_CUDA_TRY_LAUNCH();
  AC_CUDA_TRY(cudaStreamSynchronize(stream));
  return AC_OK;
}

}  // namespace attncheck::kern
