// ac_subject adapters (plugin ABI) of the row softmax: `softmax-naive` (declares
// AC_FEAT_NAIVE_EXP: exp without the max shift, rounded to the storage type, overflows by
// design), `softmax-safe` (three passes) and `softmax-online` (two passes), each for the host
// twin and, in a CUDA build, the CUDA kernel. fp32 / fp16 / bf16; any row length.
#include <climits>

#include "softmax/softmax.h"

namespace attncheck::kern {

namespace {

struct SoftmaxSubjectSelf {
  SoftmaxVariant variant;
  bool cuda;
};

int softmax_entry(void* self, const ac_softmax_args* args, char* err, size_t err_len) {
  const auto* s = static_cast<const SoftmaxSubjectSelf*>(self);
#if defined(ATTNCHECK_HAVE_CUDA)
  if (s->cuda) return softmax_cuda(*args, s->variant, err, err_len);
#endif
  return softmax_host(*args, s->variant, err, err_len);
}

ac_caps softmax_caps(bool cuda, uint32_t features) {
  ac_caps c{};
  c.ops = AC_OP_SOFTMAX;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32) | AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
  c.memory = cuda ? AC_MEMORY_CUDA : AC_MEMORY_HOST;
  c.head_size_min = 1;  // no head size: a row of any length
  c.head_size_max = INT_MAX;
  c.lse_base = 0;
  c.lse_layout = AC_LSE_HEADS_TOKENS;
  c.empty_lse_sign = -1;
  c.features = features;
  return c;
}

SoftmaxSubjectSelf g_self[2][3] = {
    {{SoftmaxVariant::naive, false}, {SoftmaxVariant::safe, false}, {SoftmaxVariant::online, false}},
    {{SoftmaxVariant::naive, true}, {SoftmaxVariant::safe, true}, {SoftmaxVariant::online, true}}};

}  // namespace

void append_softmax_subjects(std::vector<ac_subject>& out, bool cuda) {
  SoftmaxSubjectSelf* self = g_self[cuda ? 1 : 0];
  out.push_back(ac_subject{"softmax-naive",
                           cuda ? "row softmax without the max shift, exp rounded to storage (CUDA)"
                                : "row softmax without the max shift, exp rounded to storage (host twin)",
                           softmax_caps(cuda, AC_FEAT_NAIVE_EXP), nullptr, softmax_entry, nullptr, &self[0],
                           nullptr});
  out.push_back(ac_subject{
      "softmax-safe",
      cuda ? "row softmax, safe three passes (CUDA)" : "row softmax, safe three passes (host twin)",
      softmax_caps(cuda, 0), nullptr, softmax_entry, nullptr, &self[1], nullptr});
  out.push_back(ac_subject{"softmax-online",
                           cuda ? "row softmax, online two passes (Milakov-Gimelshein) (CUDA)"
                                : "row softmax, online two passes (Milakov-Gimelshein) (host twin)",
                           softmax_caps(cuda, 0), nullptr, softmax_entry, nullptr, &self[2], nullptr});
}

}  // namespace attncheck::kern
