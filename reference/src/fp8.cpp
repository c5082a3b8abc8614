// FP8 formats: exact decode by fields, one rounding by the integer algorithm of format.cpp.
//
// For finite nonzero x = m 2^e (m in [1/2, 1)) the result's quantum is 2^q, q = max(e - p,
// quantum_min) with p = mantissa_bits + 1: the binade's ulp, or the smallest subnormal below the
// normal range. |x| / 2^q is exact and is rounded once to an integer n, ties to even; n 2^q is the
// correctly rounded magnitude with an unbounded exponent, and overflow is that magnitude above the
// format's largest finite value. tests/reference checks every code and every midpoint against a
// search over all 256 codes.
#include "attncheck/reference/fp8.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>

#include "precision_internal.hpp"

namespace attncheck::ref {
namespace {

constexpr Fp8Spec kE4m3fn{"e4m3fn", 4, 3, 7, 448.0, 0x7E, -9, false, false, 0x7F};
constexpr Fp8Spec kE5m2{"e5m2", 5, 2, 15, 57344.0, 0x7B, -16, true, false, 0x7E};
constexpr Fp8Spec kE4m3fnuz{"e4m3fnuz", 4, 3, 8, 240.0, 0x7F, -10, false, true, 0x80};

// The code of (negative ? -1 : 1) n 2^q, n = |x| / 2^q rounded (0 <= n <= 2^p).
uint8_t encode_rounded(const Fp8Spec& s, bool negative, double n, long q, Fp8Overflow overflow) {
  const int p = s.mantissa_bits + 1;
  const uint8_t sign = negative && !s.unsigned_zero ? 0x80 : 0x00;
  const uint8_t sign_nonzero = negative ? 0x80 : 0x00;
  if (n == 0) return sign;
  if (std::ldexp(n, static_cast<int>(q)) > s.largest) {
    if (overflow == Fp8Overflow::saturate) return sign_nonzero | s.largest_code;
    if (s.has_inf)
      return sign_nonzero | static_cast<uint8_t>(((1u << s.exponent_bits) - 1) << s.mantissa_bits);
    return s.unsigned_zero ? s.nan_code : static_cast<uint8_t>(sign_nonzero | s.nan_code);
  }
  auto ni = static_cast<unsigned>(n);
  if (ni == (1u << p)) {  // carried into the next binade
    ni >>= 1;
    ++q;
  }
  if (ni < (1u << s.mantissa_bits)) return sign_nonzero | static_cast<uint8_t>(ni);  // subnormal
  const long biased = q + s.mantissa_bits + s.bias;
  return sign_nonzero | static_cast<uint8_t>(biased << s.mantissa_bits) |
         static_cast<uint8_t>(ni - (1u << s.mantissa_bits));
}

uint8_t encode_special(const Fp8Spec& s, bool nan, bool negative, Fp8Overflow overflow) {
  if (nan) return s.nan_code;
  // infinite
  if (overflow == Fp8Overflow::saturate) return static_cast<uint8_t>((negative ? 0x80 : 0) | s.largest_code);
  if (s.has_inf)
    return static_cast<uint8_t>((negative ? 0x80 : 0) | (((1u << s.exponent_bits) - 1) << s.mantissa_bits));
  return s.unsigned_zero ? s.nan_code : static_cast<uint8_t>((negative ? 0x80 : 0) | s.nan_code);
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const Fp8Spec& fp8_spec(Fp8Format f) {
  switch (f) {
    case Fp8Format::e4m3fn:
      return kE4m3fn;
    case Fp8Format::e5m2:
      return kE5m2;
    case Fp8Format::e4m3fnuz:
      return kE4m3fnuz;
  }
  throw ReferenceError("unknown FP8 format enumerator");
}

bool is_fp8_format_name(const std::string& name) {
  const std::string n = lower(name);
  return n == "e4m3fn" || n == "e5m2" || n == "e4m3fnuz";
}

Fp8Format parse_fp8_format(const std::string& name) {
  const std::string n = lower(name);
  if (n == "e4m3fn") return Fp8Format::e4m3fn;
  if (n == "e5m2") return Fp8Format::e5m2;
  if (n == "e4m3fnuz") return Fp8Format::e4m3fnuz;
  throw ReferenceError("unknown FP8 format '" + name + "': expected e4m3fn, e5m2 or e4m3fnuz");
}

bool is_fp8_nan(Fp8Format f, uint8_t code) { return std::isnan(decode_fp8(f, code)); }

namespace {

double decode_by_fields(Fp8Format f, uint8_t code) {
  const Fp8Spec& s = fp8_spec(f);
  const bool negative = (code & 0x80) != 0;
  const unsigned field = (code >> s.mantissa_bits) & ((1u << s.exponent_bits) - 1);
  const unsigned mant = code & ((1u << s.mantissa_bits) - 1);
  const unsigned field_max = (1u << s.exponent_bits) - 1;
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  if (s.unsigned_zero && code == 0x80) return kNaN;
  if (s.has_inf && field == field_max)
    return mant ? kNaN : (negative ? -1 : 1) * std::numeric_limits<double>::infinity();
  if (!s.has_inf && !s.unsigned_zero && field == field_max && mant == (1u << s.mantissa_bits) - 1)
    return kNaN;
  const double v = field == 0 ? std::ldexp(double(mant), s.quantum_min)
                              : std::ldexp(double(mant | (1u << s.mantissa_bits)),
                                           static_cast<int>(field) - s.bias - s.mantissa_bits);
  return negative ? -v : v;
}

using Fp8Values = std::array<double, 256>;
Fp8Values values_of(Fp8Format f) {
  Fp8Values t{};
  for (unsigned c = 0; c < 256; ++c) t[c] = decode_by_fields(f, static_cast<uint8_t>(c));
  return t;
}

}  // namespace

// By lookup: the judges decode every code of a long row's K and V, several times a case.
double decode_fp8(Fp8Format f, uint8_t code) {
  static const std::array<Fp8Values, 3> tables{values_of(Fp8Format::e4m3fn), values_of(Fp8Format::e5m2),
                                               values_of(Fp8Format::e4m3fnuz)};
  const auto i = static_cast<size_t>(f);
  if (i >= tables.size()) throw ReferenceError("unknown FP8 format enumerator");
  return tables[i][code];
}

// Doubles: frexp's exponent is MPFR's, the power-of-two scaling is exact, nearbyint (default mode)
// is the one rounding, ties to even.
uint8_t encode_fp8(Fp8Format f, double x, Fp8Overflow overflow) {
  const Fp8Spec& s = fp8_spec(f);
  if (std::isnan(x) || std::isinf(x)) return encode_special(s, std::isnan(x), std::signbit(x), overflow);
  if (x == 0) return std::signbit(x) && !s.unsigned_zero ? 0x80 : 0x00;
  int e = 0;
  (void)std::frexp(x, &e);
  const long q = std::max<long>(e - (s.mantissa_bits + 1), s.quantum_min);
  const double n = std::nearbyint(std::ldexp(std::fabs(x), static_cast<int>(-q)));
  return encode_rounded(s, std::signbit(x), n, q, overflow);
}

uint8_t encode_fp8(Fp8Format f, const Real& x, Fp8Overflow overflow) {
  const Fp8Spec& s = fp8_spec(f);
  mpfr_srcptr m = x.backend().data();
  if (mpfr_nan_p(m) || mpfr_inf_p(m)) return encode_special(s, mpfr_nan_p(m), mpfr_signbit(m), overflow);
  if (mpfr_zero_p(m)) return mpfr_signbit(m) && !s.unsigned_zero ? 0x80 : 0x00;
  const long e = mpfr_get_exp(m);
  // Far outside the format: the quotient below would not fit an integer; the result is already
  // decided (overflow, or zero by rounding: 2^(e-1) <= |x| < 2^(quantum_min - 1) is below half the
  // smallest subnormal).
  if (e > 64) return encode_rounded(s, mpfr_signbit(m), 2.0, 62, overflow);
  if (e < s.quantum_min - 1) return encode_rounded(s, mpfr_signbit(m), 0.0, s.quantum_min, overflow);
  const long q = std::max<long>(e - (s.mantissa_bits + 1), s.quantum_min);
  detail::Mp scaled(mpfr_get_prec(m));
  mpfr_abs(scaled, m, MPFR_RNDN);               // exact: same precision
  mpfr_mul_2si(scaled, scaled, -q, MPFR_RNDN);  // exact: a power of two
  detail::Mp n(64);
  mpfr_rint(n, scaled, MPFR_RNDN);  // the one rounding: to an integer, ties to even
  return encode_rounded(s, mpfr_signbit(m), mpfr_get_d(n, MPFR_RNDN), q, overflow);
}

}  // namespace attncheck::ref
