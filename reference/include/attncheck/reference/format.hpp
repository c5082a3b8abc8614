// Storage formats (fp16, bf16, fp32): exact decoding, correct single rounding, parsing, printing.
//
// round_to_format rounds an exact value once, to nearest with ties to even, with gradual underflow
// (subnormals), overflow to infinity (at and above the rounding threshold max + ulp/2, e.g. 65520
// for fp16), NaN to the canonical quiet NaN, and the sign of zero kept. It never goes through
// float or double (which would round twice: 1+2^-11+2^-40 must give 0x1.004p0 in fp16, not 1).
// Bit patterns: one uint32 per element, fp16/bf16 in the low 16 bits.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "attncheck/reference/precision.hpp"

namespace attncheck::ref {

enum class Format { fp16, bf16, fp32 };

// MPFR-style exponent range: a value is m * 2^e with m in [1/2, 1); the smallest subnormal is
// 2^(emin-1), the largest finite (1 - 2^-p) 2^emax.
//   binary16: p=11, emin=-23,  emax=16
//   bfloat16: p=8,  emin=-132, emax=128
//   binary32: p=24, emin=-148, emax=128
struct FormatSpec {
  int precision;
  int emin;
  int emax;
  const char* name;
  int storage_bits;   // 16 or 32
  int exponent_bits;  // 5, 8, 8
};
const FormatSpec& spec(Format);
Format parse_format(const std::string&);  // "fp16" | "bf16" | "fp32", else ReferenceError

double decode(Format, uint32_t bits);  // exact value of a stored element (doubles hold all three)
bool is_nan_bits(Format, uint32_t bits);
bool is_inf_bits(Format, uint32_t bits);

uint32_t round_to_format(Format, const Real& x);  // correct single rounding (see above)
uint32_t round_to_format(Format, double x);       // same, exactly (no rounding through float)

// round_to_format(F, x)'s bits where the result is a normal number of F, on the double's bits
// alone: adding half an ulp of the target (less one, plus the kept last bit: ties to even) to the
// exponent and significand together carries a round-up into the exponent, and the shift drops the
// rest. Inputs whose exponent lies in [Emin, Emax) give a normal result (at most 2^Emax, still
// finite). False for anything else (zero, subnormal results, overflow, inf, NaN), which
// round_to_format's general path takes. Inline, with the format a template argument, so that a
// loop rounding millions of values keeps neither a call nor a switch per value.
template <Format F>
inline bool round_normal(double x, uint32_t& bits) {
  constexpr int mant = F == Format::fp16 ? 10 : F == Format::bf16 ? 7 : 23;
  constexpr int bias = F == Format::fp16 ? 15 : 127;
  constexpr int emin = 1 - bias, emax = bias;
  constexpr int sign_shift = F == Format::fp32 ? 31 : 15;
  uint64_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  const uint64_t mag = u & ~(uint64_t{1} << 63);
  const int e = static_cast<int>(mag >> 52) - 1023;
  if (e < emin || e >= emax) return false;
  constexpr int shift = 52 - mant;
  const uint64_t r = (mag + ((uint64_t{1} << (shift - 1)) - 1) + ((mag >> shift) & 1)) >> shift;
  bits = static_cast<uint32_t>(r - (static_cast<uint64_t>(1023 - bias) << mant)) |
         (static_cast<uint32_t>(u >> 63) << sign_shift);
  return true;
}

// Decimal or hexfloat ("0x1.8p-3"), rounded once to the working precision (exact when the value
// fits); also "inf", "-inf", "+inf", "nan". Throws ReferenceError on anything else.
Real parse_real(const std::string& s);

std::string to_hexfloat(Format, uint32_t bits);  // "0x1.004p+0", "0x1p-24", "-0x0p+0", "inf", "-inf", "nan"
std::string to_hexfloat(double x);
std::string to_decimal(const Real& x, int digits = 36);  // `digits` significant digits; inf, -inf, nan

}  // namespace attncheck::ref
