// Per-element math and fold order of the row softmax, shared by the CUDA kernels (softmax.cu,
// and the softmax step of textbook.cu) and their host twins.
//
// What it computes, y[j] = e^(x[j]) / sum_k e^(x[k]) for one row, three ways:
//   naive   e[j] = exp(x[j]) rounded to the output storage type and stored (the intermediate the
//           textbook kernels materialise); sum the stored e[j] in fp32; y[j] = e[j] / sum.
//           The hazard is real: in fp16, exp(11.09375) = 65758.9 >= 65520 stores +inf, the sum is
//           +inf, that entry becomes inf/inf = NaN and every other entry 0 (11.0859375
//           is the largest fp16 logit that survives). Declared as AC_FEAT_NAIVE_EXP.
//   safe    three passes: m = max x; l = sum exp(x - m); y = exp(x - m) / l.
//   online  two passes (Milakov and Gimelshein, arXiv:1805.02867): one pass keeps (m, l) with
//           l rescaled by exp(m_old - m_new) when the max moves; then y = exp(x - m) / l.
// Accumulators: max, sum and (m, l) are fp32 for every storage type; inputs are widened to fp32
// on load; exp and log are hd.h's exp_f / log_f (expf / logf on the device, the float overloads of
// <cmath> on the host). Rounding: the output store (y rounded once to the storage type, nearest-even); in the
// naive variant also e[j], rounded to the storage type before the sum (that is the hazard).
// Fold order (kept identical on host and device): a block of kSoftmaxThreads threads, thread t
// folds columns t, t + kSoftmaxThreads, ... in order; then each warp of 32 combines its lanes by
// an xor butterfly (offsets 16, 8, 4, 2, 1), and warp 0 combines the warps' results by the same
// butterfly. block_fold_host() replays exactly that tree on the host.
// Conventions: an all -inf row (fully masked) gives y = 0 everywhere and LSE = -inf in every
// variant (the sum is 0; dividing would give 0/0, so the row is written as zeros). For the naive
// variant a row whose e[j] all underflow to 0 in the storage type takes the same path (zeros):
// that underflow is part of its hazard. Inputs are finite or -inf; +inf or NaN gives NaN.
// LSE (textbook attention): natural log, m + log(l) (naive: log(sum)), -inf for an empty row.
// Mutation switch (kernels/mutants/, mutant 5): online_push / online_combine take a compile-time
// flag that keeps l in fp16 (rounded after every update): the "What has to be fp32" hazard, l
// stalls at 2048 for unit terms and overflows at 65504. The correct kernels never set it.
// Check: ctest -R kernels_basic_softmax
#pragma once
#include "common/hd.h"
#include "common/storage.h"

namespace attncheck::kern {

constexpr int kSoftmaxThreads = 256;
constexpr int kSoftmaxWarps = kSoftmaxThreads / 32;

// Online (m, l): l is the sum of exp(x - m) over the folded entries, m their max.
struct OnlineState {
  float m;
  float l;
};
AC_HD OnlineState online_identity() { return OnlineState{neg_inf_f(), 0.0f}; }
template <bool kLInFp16 = false>
AC_HD OnlineState online_push(OnlineState s, float x) {
  if (x == neg_inf_f()) return s;  // contributes nothing, and exp((-inf) - (-inf)) would be NaN
  const float m_new = s.m > x ? s.m : x;
  s.l = s.l * exp_f(s.m - m_new) + exp_f(x - m_new);  // s.m = -inf: the first term is 0
  if constexpr (kLInFp16) s.l = round_through(DType::f16, s.l);
  s.m = m_new;
  return s;
}
// Symmetric in a and b (bitwise), so the xor butterfly's operand order does not matter.
template <bool kLInFp16 = false>
AC_HD OnlineState online_combine(OnlineState a, OnlineState b) {
  if (a.m == neg_inf_f()) return b;
  if (b.m == neg_inf_f()) return a;
  const float m = a.m > b.m ? a.m : b.m;
  float l = a.l * exp_f(a.m - m) + b.l * exp_f(b.m - m);
  if constexpr (kLInFp16) l = round_through(DType::f16, l);
  return OnlineState{m, l};
}

// exp(x - m) with the fully-masked guard (m = -inf means every x is -inf).
AC_HD float shifted_exp(float x, float m) { return m == neg_inf_f() ? 0.0f : exp_f(x - m); }

// Naive: exp(x) rounded to the storage type (+inf once the exact value rounds past the format).
AC_HD float naive_stored_exp(DType storage, float x) { return round_through(storage, exp_f(x)); }

// The normalisation, with the empty-row convention (sum 0: zeros, not 0/0).
AC_HD float normalise(float e, float sum) { return sum == 0.0f ? 0.0f : e / sum; }

AC_HD float safe_lse(float m, float l) { return l == 0.0f ? neg_inf_f() : m + log_f(l); }
AC_HD float naive_lse(float sum) { return log_f(sum); }  // log 0 = -inf; log inf = inf

AC_HD float fold_max(float a, float b) { return a > b ? a : b; }
AC_HD float fold_sum(float a, float b) { return a + b; }

#if !defined(__CUDA_ARCH__)
// Host replay of the device block reduction: per-thread partials in, lane 0's result out.
template <typename T, typename Op>
T block_fold_host(const T (&partials)[kSoftmaxThreads], T identity, Op op) {
  T warp_result[32];
  for (int w = 0; w < 32; ++w) warp_result[w] = identity;
  for (int w = 0; w < kSoftmaxWarps; ++w) {
    T v[32];
    for (int i = 0; i < 32; ++i) v[i] = partials[w * 32 + i];
    for (int off = 16; off >= 1; off /= 2) {
      T n[32];
      for (int i = 0; i < 32; ++i) n[i] = op(v[i], v[i ^ off]);
      for (int i = 0; i < 32; ++i) v[i] = n[i];
    }
    warp_result[w] = v[0];
  }
  for (int off = 16; off >= 1; off /= 2) {
    T n[32];
    for (int i = 0; i < 32; ++i) n[i] = op(warp_result[i], warp_result[i ^ off]);
    for (int i = 0; i < 32; ++i) warp_result[i] = n[i];
  }
  return warp_result[0];
}
#endif

}  // namespace attncheck::kern
