// Host twin of the KV-cache quantiser (quantize.cu): the same per-element function of
// quantize_math.h (one fp32 division, one FP8 rounding), walked element by element. Bit-identical
// to the kernel: the division is IEEE on both sides and the encoding is integer arithmetic.
// Check: ctest -R kernels_quantize
#include <cinttypes>
#include <cstdint>

#include "common/cuda_check.h"
#include "common/storage.h"
#include "quantize/quantize.h"

namespace attncheck::kern {

int quantize_check_args(const ac_quantize_args& a, char* err, size_t err_len) {
  const int dtype = raw_enum(a.dtype), out = raw_enum(a.out_dtype);
  if (dtype != AC_DTYPE_F32 && dtype != AC_DTYPE_F16 && dtype != AC_DTYPE_BF16)
    AC_REFUSE("quantize: unsupported dtype %d (fp32, fp16, bf16 only)", dtype);
  if (out != AC_DTYPE_E4M3 && out != AC_DTYPE_E5M2 && out != AC_DTYPE_E4M3FNUZ)
    AC_REFUSE("quantize: unsupported out_dtype %d (e4m3fn, e5m2, e4m3fnuz only)", out);
  if (a.num_tokens < 0 || a.num_heads < 1 || a.head_size < 0)
    AC_REFUSE("quantize: impossible shape: num_tokens %d, num_heads %d, head_size %d", int(a.num_tokens),
              int(a.num_heads), int(a.head_size));
  if (a.num_scales != 1 && a.num_scales != a.num_heads)
    AC_REFUSE("quantize: num_scales %d is neither 1 nor num_heads (%d)", int(a.num_scales), int(a.num_heads));
  if (a.num_tokens == 0 || a.head_size == 0) return AC_OK;
  if (!a.x || !a.y || !a.scale) AC_REFUSE("quantize: null pointer (x, y, scale)");
  return AC_OK;
}

int quantize_host(const ac_quantize_args& a, const QuantizeOptions& o, char* err, size_t err_len) {
  if (const int rc = quantize_check_args(a, err, err_len); rc != AC_OK) return rc;
  const DType t = DType(a.dtype);
  const int kv = int(a.out_dtype);
  const int64_t n = int64_t(a.num_tokens) * a.num_heads * a.head_size;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    if (t == DType::f32) {
      bits = static_cast<const uint32_t*>(a.x)[i];
    } else {
      bits = static_cast<const uint16_t*>(a.x)[i];
    }
    const float x = load_as_float(t, bits);
    const float s = a.scale[a.num_scales == 1 ? 0 : (i / a.head_size) % a.num_heads];
    a.y[i] = o.mutation == QuantizeMutation::nan_cast
                 ? quantize_element<QuantizeMutation::nan_cast>(kv, x, s, o.saturate)
                 : quantize_element(kv, x, s, o.saturate);
  }
  return AC_OK;
}

}  // namespace attncheck::kern
