// ac_subject adapters (plugin ABI) of the KV-cache quantiser, for the host twin and, in a CUDA
// build, the CUDA kernel: `quantize-fp8` saturates (AC_FP8_SATURATE, as the engines' cache writers
// do) and `quantize-fp8-nonfinite` does not (overflow gives NaN, or e5m2's infinity). Both: x in
// fp32 / fp16 / bf16, codes e4m3fn / e5m2 / e4m3fnuz, one scale per tensor or per head, head sizes
// 1..1024.
#include "quantize/quantize.h"

namespace attncheck::kern {

namespace {

struct QuantizeSubjectSelf {
  QuantizeOptions options;
  bool cuda;
};

int quantize_entry(void* self, const ac_quantize_args* args, char* err, size_t err_len) {
  const auto* s = static_cast<const QuantizeSubjectSelf*>(self);
#if defined(ATTNCHECK_HAVE_CUDA)
  if (s->cuda) return quantize_cuda(*args, s->options, err, err_len);
#endif
  return quantize_host(*args, s->options, err, err_len);
}

QuantizeSubjectSelf g_host_sat{{true, {}}, false}, g_host_nonfinite{{false, {}}, false};
QuantizeSubjectSelf g_cuda_sat{{true, {}}, true}, g_cuda_nonfinite{{false, {}}, true};

ac_caps quantize_caps(bool cuda, bool saturate) {
  ac_caps c{};
  c.ops = AC_OP_QUANTIZE;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32) | AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
  c.memory = cuda ? AC_MEMORY_CUDA : AC_MEMORY_HOST;
  c.head_size_min = 1;
  c.head_size_max = 1024;
  c.empty_lse_sign = -1;
  c.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3) | AC_DTYPE_BIT(AC_DTYPE_E5M2) | AC_DTYPE_BIT(AC_DTYPE_E4M3FNUZ);
  c.fp8 = AC_FP8_DESCALE_PER_KV_HEAD | (saturate ? AC_FP8_SATURATE : 0u);
  return c;
}

}  // namespace

void append_quantize_subjects(std::vector<ac_subject>& out, bool cuda) {
  ac_subject sat{};
  sat.name = "quantize-fp8";
  sat.description = cuda ? "KV-cache quantiser to e4m3fn / e5m2 / e4m3fnuz, saturating (CUDA)"
                         : "KV-cache quantiser to e4m3fn / e5m2 / e4m3fnuz, saturating (host twin)";
  sat.caps = quantize_caps(cuda, true);
  sat.self = cuda ? &g_cuda_sat : &g_host_sat;
  sat.quantize = quantize_entry;
  out.push_back(sat);
  ac_subject nonfinite = sat;
  nonfinite.name = "quantize-fp8-nonfinite";
  nonfinite.description = cuda ? "KV-cache quantiser, overflow to NaN (e4m3) or inf (e5m2) (CUDA)"
                               : "KV-cache quantiser, overflow to NaN (e4m3) or inf (e5m2) (host twin)";
  nonfinite.caps = quantize_caps(cuda, false);
  nonfinite.self = cuda ? &g_cuda_nonfinite : &g_host_nonfinite;
  out.push_back(nonfinite);
}

}  // namespace attncheck::kern
