// The host/device shim every kernel's math header includes: the __host__ __device__ marker, so
// one header of math serves the CUDA kernel and its host twin and the twin builds without nvcc,
// and the one place where a math function is chosen per side.
//
// Each wrapper calls the single-precision function of its side and nothing else: on the device
// CUDA's expf / exp2f / logf / log2f / fmaf / tanhf (full-precision versions, never the __expf-style
// intrinsics), on the host the float overloads of <cmath> (std::exp(float) is expf, and so on).
// The host's libm and CUDA's library may differ by an ulp in exp and log, so a twin need not match
// its kernel bit for bit there; fma is correctly rounded on both sides and matches exactly. The fma
// is spelled out because nvcc contracts a * b + c into an fma and g++ does not: a twin that writes
// fma_f rounds where its kernel rounds.
// mul_rn_f / div_rn_f are one correctly rounded product / quotient on both sides: on the device
// __fmul_rn / __fdiv_rn, which nvcc never contracts into an fma with a later addition (a plain
// product feeding x - m would be), on the host the operator itself (no addition to contract with).
// Bit casts (float_bits / bits_float) are exact on both sides; the infinities come from
// __builtin_huge_valf (equal to INFINITY), which host and device compilers both fold to a constant.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define AC_HD __host__ __device__ __forceinline__
#define AC_DEVICE_CODE 1
#else
#define AC_HD inline
#endif

namespace attncheck::kern {

AC_HD float neg_inf_f() { return -__builtin_huge_valf(); }
AC_HD float pos_inf_f() { return __builtin_huge_valf(); }

#if defined(__CUDA_ARCH__)
AC_HD float exp_f(float x) { return expf(x); }
AC_HD float exp2_f(float x) { return exp2f(x); }
AC_HD float log_f(float x) { return logf(x); }
AC_HD float log2_f(float x) { return log2f(x); }
AC_HD float fma_f(float a, float b, float c) { return fmaf(a, b, c); }
AC_HD float tanh_f(float x) { return tanhf(x); }
AC_HD float mul_rn_f(float a, float b) { return __fmul_rn(a, b); }
AC_HD float div_rn_f(float a, float b) { return __fdiv_rn(a, b); }
AC_HD uint32_t float_bits(float f) { return __float_as_uint(f); }
AC_HD float bits_float(uint32_t u) { return __uint_as_float(u); }
#else
AC_HD float exp_f(float x) { return std::exp(x); }
AC_HD float exp2_f(float x) { return std::exp2(x); }
AC_HD float log_f(float x) { return std::log(x); }
AC_HD float log2_f(float x) { return std::log2(x); }
AC_HD float fma_f(float a, float b, float c) { return std::fma(a, b, c); }
AC_HD float tanh_f(float x) { return std::tanh(x); }
AC_HD float mul_rn_f(float a, float b) { return a * b; }
AC_HD float div_rn_f(float a, float b) { return a / b; }
AC_HD uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
AC_HD float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
#endif

}  // namespace attncheck::kern
