// Launchers of the KV-cache quantiser (plugin_abi.h, AC_OP_QUANTIZE): y[t, h, c] = FP8(x[t, h, c] /
// scale[h]), x in fp32 / fp16 / bf16, y one byte per code, both [num_tokens, num_heads, head_size]
// contiguous; one scale per tensor or per head. The math and its two roundings: quantize_math.h.
// Return AC_OK, AC_ERR_UNSUPPORTED (refused before launch, reason in err) or AC_ERR_DEVICE.
#pragma once
#include <cstddef>
#include <vector>

#include "attncheck/plugin_abi.h"
#include "quantize/quantize_math.h"

namespace attncheck::kern {

struct QuantizeOptions {
  bool saturate = true;         // AC_FP8_SATURATE: overflow and infinities give the largest value
  QuantizeMutation mutation{};  // none (0); another value runs a deliberately broken variant
};

// The checks both launchers run before touching memory: dtype, out_dtype, negative counts,
// num_scales 1 or num_heads, null pointers where there are elements. AC_OK or AC_ERR_UNSUPPORTED.
int quantize_check_args(const ac_quantize_args& a, char* err, size_t err_len);

// Host twin: tensors in host memory.
int quantize_host(const ac_quantize_args& a, const QuantizeOptions& o, char* err, size_t err_len);

#if defined(ATTNCHECK_HAVE_CUDA)
// CUDA kernel: tensors in device memory, launched on a.stream and synchronized before returning.
int quantize_cuda(const ac_quantize_args& a, const QuantizeOptions& o, char* err, size_t err_len);
#endif

void append_quantize_subjects(std::vector<ac_subject>& out, bool cuda);

}  // namespace attncheck::kern
