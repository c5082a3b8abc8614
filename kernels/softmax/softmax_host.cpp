// Host twin of the row softmax (softmax.cu): the per-element math of softmax_math.h, and the
// same fold order: 256 per-"thread" partials over columns t, t + 256, ..., combined by the same
// xor-butterfly tree (block_fold_host). Accumulators fp32; y rounded once to the storage type on
// store; the naive variant rounds e = exp(x) to the storage type and sums the rounded values.
// Conventions: all -inf row -> y = 0, LSE -inf (softmax_math.h). Need not match the GPU bit for
// bit (libm exp vs CUDA expf), but has the same hazards at the same thresholds.
// Check: ctest -R kernels_basic_softmax_host
#include <cstdint>

#include "common/cuda_check.h"
#include "common/host_tensor.h"
#include "softmax/softmax.h"
#include "softmax/softmax_math.h"

namespace attncheck::kern {

int softmax_check_args(const ac_softmax_args& a, char* err, size_t err_len) {
  const int dtype = raw_enum(a.dtype);
  if (dtype != AC_DTYPE_F32 && dtype != AC_DTYPE_F16 && dtype != AC_DTYPE_BF16)
    AC_REFUSE("softmax: unsupported dtype %d (fp32, fp16, bf16 only)", dtype);
  if (a.rows < 0 || a.cols < 0)
    AC_REFUSE("softmax: impossible shape: rows %d, cols %d", int(a.rows), int(a.cols));
  if (a.rows == 0 || a.cols == 0) return AC_OK;
  if (a.rows > 1 && a.row_stride < a.cols)
    AC_REFUSE("softmax: impossible shape: row_stride %lld < cols %d", (long long)a.row_stride, int(a.cols));
  if (!a.x || !a.y) AC_REFUSE("softmax: null tensor pointer (x, y)");
  const uintptr_t elem = uintptr_t(dtype_size(DType(a.dtype)));
  if (!aligned_to(a.x, elem) || !aligned_to(a.y, elem))
    AC_REFUSE("softmax: pointer not aligned to its %d-byte element", int(elem));
  return AC_OK;
}

float softmax_row_host(SoftmaxVariant v, DType in, const void* x, DType out, void* y, int64_t cols) {
  constexpr int64_t kT = kSoftmaxThreads;
  if (v == SoftmaxVariant::naive) {
    float partial[kSoftmaxThreads];
    for (int64_t t = 0; t < kT; ++t) {
      float sum = 0.0f;
      for (int64_t j = t; j < cols; j += kT) {
        store_host(y, out, j, exp_f(load_host(x, in, j)));
        sum += load_host(y, out, j);  // the stored (rounded) e[j] is what gets summed
      }
      partial[t] = sum;
    }
    const float sum = block_fold_host(partial, 0.0f, fold_sum);
    for (int64_t j = 0; j < cols; ++j) store_host(y, out, j, normalise(load_host(y, out, j), sum));
    return naive_lse(sum);
  }
  float m, l;
  if (v == SoftmaxVariant::safe) {
    float partial[kSoftmaxThreads];
    for (int64_t t = 0; t < kT; ++t) {
      float mt = neg_inf_f();
      for (int64_t j = t; j < cols; j += kT) mt = fold_max(mt, load_host(x, in, j));
      partial[t] = mt;
    }
    m = block_fold_host(partial, neg_inf_f(), fold_max);
    for (int64_t t = 0; t < kT; ++t) {
      float lt = 0.0f;
      for (int64_t j = t; j < cols; j += kT) lt += shifted_exp(load_host(x, in, j), m);
      partial[t] = lt;
    }
    l = block_fold_host(partial, 0.0f, fold_sum);
  } else {
    const bool l16 = v == SoftmaxVariant::online_l_fp16;  // the mutant (kernels/mutants/, mutant 5)
    OnlineState partial[kSoftmaxThreads];
    for (int64_t t = 0; t < kT; ++t) {
      OnlineState s = online_identity();
      for (int64_t j = t; j < cols; j += kT)
        s = l16 ? online_push<true>(s, load_host(x, in, j)) : online_push(s, load_host(x, in, j));
      partial[t] = s;
    }
    const OnlineState s = l16 ? block_fold_host(partial, online_identity(), online_combine<true>)
                              : block_fold_host(partial, online_identity(), online_combine<false>);
    m = s.m;
    l = s.l;
  }
  for (int64_t j = 0; j < cols; ++j) store_host(y, out, j, normalise(shifted_exp(load_host(x, in, j), m), l));
  return safe_lse(m, l);
}

int softmax_host(const ac_softmax_args& a, SoftmaxVariant v, char* err, size_t err_len) {
  if (const int rc = softmax_check_args(a, err, err_len); rc != AC_OK) return rc;
  const DType t = DType(a.dtype);
  const int64_t elem = dtype_size(t);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t off = r * a.row_stride * elem;
    softmax_row_host(v, t, static_cast<const char*>(a.x) + off, t, static_cast<char*>(a.y) + off, a.cols);
  }
  return AC_OK;
}

}  // namespace attncheck::kern
