// Storage formats of kernel inputs and outputs, as bit patterns, shared by device and host code.
// Conversions float -> fp16 / bf16 round to nearest, ties to even, with subnormals and overflow
// to infinity: the same single rounding __float2half_rn / __float2bfloat16_rn perform, so a
// host twin rounds exactly where and how its kernel does. The bit casts are hd.h's.
#pragma once
#include <cstdint>

#include "hd.h"

namespace attncheck::kern {

enum class DType : int { f32 = 0, f16 = 1, bf16 = 2 };  // values match ac_dtype

AC_HD float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf, nan
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // subnormal: value = mant * 2^-24, exact in float
    float v = float(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

AC_HD uint16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((au >> 13) & 0x3ffu));  // nan, quiet
  if (au >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520: rounds to infinity
  const int e = int(au >> 23) - 127;
  if (e >= -14) {  // normal fp16
    uint32_t m = au & 0x7fffffu;
    uint32_t r = ((uint32_t(e + 15)) << 10) | (m >> 13);
    const uint32_t rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r += 1;  // carry may bump the exponent
    return uint16_t(sign | r);
  }
  if (e < -25) return sign;  // below half the smallest subnormal (2^-25): zero
  // subnormal: quantum 2^-24; value = (1.m) * 2^e, shift the 24-bit significand
  const uint32_t sig = (au & 0x7fffffu) | 0x800000u;
  const int shift = -e - 14 + 13;  // 14..25 - ... bits dropped
  uint32_t r = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) r += 1;
  return uint16_t(sign | r);
}

AC_HD float bf16_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

AC_HD uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // nan, quiet
  const uint32_t lsb = (u >> 16) & 1u;
  return uint16_t((u + 0x7fffu + lsb) >> 16);  // ties to even; overflow carries into infinity
}

// Decode one stored element (bits in the low 16 or all 32 bits) to float.
AC_HD float load_as_float(DType t, uint32_t bits) {
  return t == DType::f32   ? bits_float(bits)
         : t == DType::f16 ? f16_to_float(uint16_t(bits))
                           : bf16_to_float(uint16_t(bits));
}
// Round a float to the storage format, as the kernel's final store does.
AC_HD uint32_t store_from_float(DType t, float f) {
  return t == DType::f32 ? float_bits(f) : t == DType::f16 ? float_to_f16(f) : float_to_bf16(f);
}
// Round a float to the storage format and back: the value a kernel holds after rounding an
// intermediate (for example P before P V) to its input type.
AC_HD float round_through(DType t, float f) { return load_as_float(t, store_from_float(t, f)); }

inline int dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

// An FP8 KV cache's codes (ac_dtype AC_DTYPE_E4M3 = 3: e4m3fn, 4 exponent bits with bias 7, 3
// mantissa bits, no infinity, NaN 0x7f / 0xff, largest 448; AC_DTYPE_E5M2 = 4: 5 and 2 bits, bias
// 15, IEEE infinities and NaNs, largest 57344), decoded exactly: every value is a float.
AC_HD float fp8_to_float(int kv_dtype, uint8_t code) {
  const bool e5m2 = kv_dtype == 4;
  const int mant_bits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  const uint32_t sign = uint32_t(code & 0x80u) << 24;
  const uint32_t exp = (code & 0x7fu) >> mant_bits, mant = code & ((1u << mant_bits) - 1u);
  if (e5m2 && exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 21));  // inf, nan
  if (!e5m2 && (code & 0x7fu) == 0x7fu) return bits_float(0x7fc00000u);            // nan
  if (exp == 0) {  // subnormal: mant 2^(1 - bias - mant_bits), exact in float
    const float v = float(mant) * (e5m2 ? 0x1p-16f : 0x1p-9f);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp - uint32_t(bias) + 127u) << 23) | (mant << (23 - mant_bits)));
}

// The e4m3fn value nearest to a finite x, ties to even, saturating to +-448 (a kernel's P cast,
// AC_FP8_P_E4M3): 3 bits after the leading one down to 2^-6, then subnormals in steps of 2^-9;
// below half of 2^-9 a zero of x's sign.
AC_HD float round_to_e4m3(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t sign = u & 0x80000000u, au = u & 0x7fffffffu;
  if (au >= 0x7f800000u) return x;              // inf, nan: not a weight; left alone
  const int e = int(au >> 23) - 127;            // |x| in [2^e, 2^(e+1)) for a normal float
  const int keep = e >= -6 ? 3 : 3 - (-6 - e);  // bits kept after the leading one (fewer below 2^-6)
  if (keep < -1 || au < 0x00800000u) return bits_float(sign);  // below 2^-10, or an fp32 subnormal
  const uint32_t sig = (au & 0x7fffffu) | 0x800000u;           // |x| = sig 2^(e - 23)
  const int shift = 23 - keep;                                 // 20 .. 24 bits dropped
  uint32_t r = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) r += 1;
  // |result| = r 2^(e - keep), r <= 16: exact in float; past 448 the cast saturates.
  float v = float(r) * bits_float(uint32_t(e - keep + 127) << 23);
  if (v > 448.0f) v = 448.0f;
  return bits_float(sign | float_bits(v));
}

}  // namespace attncheck::kern
