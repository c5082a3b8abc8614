// FP8 storage formats: exact decoding of every code and correct single rounding into them.
//
//   e4m3fn    4 exponent bits, bias 7, 3 mantissa bits; no infinity; NaN is S.1111.111 (0x7F, 0xFF);
//             largest 448 (0x7E), smallest subnormal 2^-9.
//   e5m2      5 exponent bits, bias 15, 2 mantissa bits; IEEE-like: infinities 0x7C / 0xFC, NaN
//             above them; largest 57344 (0x7B), smallest subnormal 2^-16.
//   e4m3fnuz  4 exponent bits, bias 8, 3 mantissa bits; no infinity and no negative zero: 0x80 is
//             the only NaN; largest 240 (0x7F), smallest subnormal 2^-10.
//
// encode_fp8 rounds an exact value once, to nearest with ties to even (the code with the even
// last mantissa bit), with gradual underflow. Overflow is the rounded magnitude (with an unbounded
// exponent) above the largest finite value: 464 rounds to 448 in e4m3fn (a tie, 448 is even),
// anything above 464 overflows. Fp8Overflow says what overflow gives:
//   saturate   +-largest finite; an infinite input too (PTX cvt .satfinite, CUDA __NV_SATFINITE,
//              the engines' KV-cache quantisers); NaN stays NaN;
//   nonfinite  e5m2 +-inf, e4m3fn NaN (it has no infinity), e4m3fnuz its NaN 0x80 (__NV_NOSAT).
// Zero keeps its sign but in e4m3fnuz (0x80 is NaN, so -0 and negative underflow give 0x00).
// NaN encodes as the positive canonical NaN: 0x7F (e4m3fn), 0x7E (e5m2), 0x80 (e4m3fnuz).
#pragma once
#include <cstdint>
#include <string>

#include "attncheck/reference/precision.hpp"

namespace attncheck::ref {

enum class Fp8Format { e4m3fn, e5m2, e4m3fnuz };
enum class Fp8Overflow { saturate, nonfinite };

struct Fp8Spec {
  const char* name;
  int exponent_bits, mantissa_bits, bias;
  double largest;        // the largest finite value
  uint8_t largest_code;  // its positive code
  int quantum_min;       // the smallest subnormal is 2^quantum_min
  bool has_inf;          // e5m2
  bool unsigned_zero;    // e4m3fnuz: 0x80 is NaN, not -0
  uint8_t nan_code;      // the canonical NaN encode_fp8 writes
};
const Fp8Spec& fp8_spec(Fp8Format);
Fp8Format parse_fp8_format(const std::string&);  // "e4m3fn" | "e5m2" | "e4m3fnuz", else ReferenceError
bool is_fp8_format_name(const std::string&);

double decode_fp8(Fp8Format, uint8_t code);  // exact (every FP8 value is a double); NaN, +-inf
bool is_fp8_nan(Fp8Format, uint8_t code);
uint8_t encode_fp8(Fp8Format, double x, Fp8Overflow);       // one rounding from x, exactly
uint8_t encode_fp8(Fp8Format, const Real& x, Fp8Overflow);  // the same from an MPFR value

}  // namespace attncheck::ref
