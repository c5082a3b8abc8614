// Storage formats (fp16, bf16, fp32): exact decoding, correct single rounding, parsing, printing.
//
// round_to_format rounds an exact value once, to nearest with ties to even, with gradual underflow
// (subnormals), overflow to infinity (at and above the rounding threshold max + ulp/2, e.g. 65520
// for fp16), NaN to the canonical quiet NaN, and the sign of zero kept. It never goes through
// float or double (which would round twice: 1+2^-11+2^-40 must give 0x1.004p0 in fp16, not 1).
// Bit patterns: one uint32 per element, fp16/bf16 in the low 16 bits.
#pragma once
#include <cstdint>
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

// Decimal or hexfloat ("0x1.8p-3"), rounded once to the working precision (exact when the value
// fits); also "inf", "-inf", "+inf", "nan". Throws ReferenceError on anything else.
Real parse_real(const std::string& s);

std::string to_hexfloat(Format, uint32_t bits);  // "0x1.004p+0", "0x1p-24", "-0x0p+0", "inf", "-inf", "nan"
std::string to_hexfloat(double x);
std::string to_decimal(const Real& x, int digits = 36);  // `digits` significant digits; inf, -inf, nan

}  // namespace attncheck::ref
