// Per-element math of the KV-cache quantiser, shared by the CUDA kernel (quantize.cu) and its host
// twin (quantize_host.cpp), so the two cannot drift apart.
//
// What it computes (plugin_abi.h, AC_OP_QUANTIZE): code = FP8(x / scale[h]).
//   - x is widened to fp32 exactly (storage.h load_as_float);
//   - the quotient is one fp32 division rounded to nearest (div_rn_f: IEEE division on both sides,
//     whatever the compiler's fast-math flags), the first rounding;
//   - the quotient is rounded once more, to the FP8 format: to nearest with ties to even, with
//     gradual underflow (float_to_fp8), the second and last rounding.
// The contract allows exactly these two roundings (judge_quantize.cpp shows why the fp32 quotient's
// code can differ from the real quotient's only next to a tie, and accepts both).
// Conventions: e4m3fn (kv_dtype 3: bias 7, NaN 0x7f / 0xff, largest 448), e5m2 (4: bias 15, IEEE
// infinities, largest 57344), e4m3fnuz (5: bias 8, 0x80 its only NaN and no -0, largest 240).
// Overflow (a rounded magnitude past the largest) and infinite x give the signed largest value when
// saturating (vLLM's cache writer: clamp, then cast), else NaN (e4m3fn, e4m3fnuz) or the signed
// infinity (e5m2). NaN gives a NaN of the format, with x's sign (e4m3fn 0x7f / 0xff, e5m2 0x7e /
// 0xfe), or 0x80 (e4m3fnuz). A zero keeps its sign, but in e4m3fnuz.
// Mutation switch (kernels/mutants/): QuantizeMutation::nan_cast makes a saturating cast produce the
// overflow code instead (a NaN-producing cast behind a saturating declaration).
#pragma once
#include <cstdint>

#include "common/hd.h"

namespace attncheck::kern {

enum class QuantizeMutation : int { none = 0, nan_cast = 1 };

struct Fp8Layout {
  int mant_bits, exp_bits, bias;
  uint32_t largest_code;  // the positive code of the largest finite value
  bool has_inf, fnuz;
};

AC_HD Fp8Layout fp8_layout(int kv_dtype) {
  return kv_dtype == 4   ? Fp8Layout{2, 5, 15, 0x7bu, true, false}
         : kv_dtype == 5 ? Fp8Layout{3, 4, 8, 0x7fu, false, true}
                         : Fp8Layout{3, 4, 7, 0x7eu, false, false};
}

// The code of the fp32 value q in format kv_dtype (3, 4 or 5), rounded to nearest even.
template <QuantizeMutation M = QuantizeMutation::none>
AC_HD uint8_t float_to_fp8(int kv_dtype, float q, bool saturate) {
  const Fp8Layout L = fp8_layout(kv_dtype);
  const uint32_t u = float_bits(q);
  const uint32_t sign = (u >> 24) & 0x80u, au = u & 0x7fffffffu;
  const uint32_t zero = L.fnuz ? 0u : sign;
  const bool saturating = saturate && M != QuantizeMutation::nan_cast;
  const uint32_t overflow = saturating  ? (sign | L.largest_code)
                            : L.has_inf ? (sign | 0x7cu)
                            : L.fnuz    ? 0x80u
                                        : (sign | 0x7fu);
  if (au > 0x7f800000u) return uint8_t(L.fnuz ? 0x80u : L.has_inf ? (sign | 0x7eu) : (sign | 0x7fu));
  if (au == 0x7f800000u) return uint8_t(overflow);
  // An fp32 subnormal lies far below half the smallest FP8 subnormal (2^-10 at most): a zero.
  if (au < 0x00800000u) return uint8_t(zero);
  const int e = int(au >> 23) - 127;  // |q| = sig 2^(e - 23), sig in [2^23, 2^24)
  const uint32_t sig = (au & 0x7fffffu) | 0x800000u;
  // The result's quantum 2^qexp: the binade's ulp, or the subnormals' below the normal range.
  const int emin = 1 - L.bias;
  int qexp = (e > emin ? e : emin) - L.mant_bits;
  const int shift = qexp - (e - 23);  // bits of sig below the quantum: 21 or more
  // |q| / 2^qexp = sig / 2^shift < 2^(24 - shift): below one half from shift 25 on, a zero.
  if (shift >= 25) return uint8_t(zero);
  uint32_t n = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (n & 1u))) n += 1;
  if (n == (2u << L.mant_bits)) {  // carried into the next binade
    n >>= 1;
    ++qexp;
  }
  if (n == 0) return uint8_t(zero);                       // rounded to zero: e4m3fnuz has no -0
  if (n < (1u << L.mant_bits)) return uint8_t(sign | n);  // subnormal (qexp = emin - mant_bits)
  const int64_t exp_field = int64_t(qexp) + L.mant_bits + L.bias;
  if (exp_field >= (int64_t(1) << L.exp_bits)) return uint8_t(overflow);
  const uint32_t code = (uint32_t(exp_field) << L.mant_bits) | (n - (1u << L.mant_bits));
  if (code > L.largest_code) return uint8_t(overflow);
  return uint8_t(sign | code);
}

// One element: x (fp32, widened from its storage) divided by its head's scale, then encoded.
template <QuantizeMutation M = QuantizeMutation::none>
AC_HD uint8_t quantize_element(int kv_dtype, float x, float scale, bool saturate) {
  return float_to_fp8<M>(kv_dtype, div_rn_f(x, scale), saturate);
}

}  // namespace attncheck::kern
