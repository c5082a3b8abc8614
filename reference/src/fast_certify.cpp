// Deciding rounded values and ulp errors from an interval known to contain the exact value.
//
// round_double_to_format is the exact integer algorithm of format.cpp carried out in double
// arithmetic: for finite nonzero x = m 2^e (m in [1/2, 1)), the quantum is 2^q with
// q = max(e - p, emin - 1); |x| 2^-q is exact (a power-of-two scaling that neither overflows nor
// underflows: it lies in [2^(p-1), 2^p) for normal results and above |x| otherwise) and is rounded
// once to an integer by nearbyint, to nearest with ties to even under the default rounding mode
// (which this file assumes and never changes).
//
// Rounding is monotone, so when both ends of an interval round to the same value every point in
// between does: that is the whole certificate for a rounded value. The ends are widened outward by
// one double ulp so that computing approx +- bound in double cannot shrink the interval.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attncheck/reference/fast.hpp"

namespace attncheck::ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Bits {
  int precision, emin, mant_bits, bias;
  uint32_t exp_max, sign_bit;
};

Bits bits_of(Format f) {
  const FormatSpec& s = spec(f);
  Bits b{};
  b.precision = s.precision;
  b.emin = s.emin;
  b.mant_bits = s.precision - 1;
  b.bias = (1 << (s.exponent_bits - 1)) - 1;
  b.exp_max = (1u << s.exponent_bits) - 1;
  b.sign_bit = 1u << (s.storage_bits - 1);
  return b;
}

// log2 of ulp_at(f, x) (ulp.hpp) for finite x: the binade's ulp, never below the minimum subnormal.
int ulp_exponent(Format f, double x) {
  const Bits b = bits_of(f);
  if (x == 0) return b.emin - 1;
  return std::max(std::ilogb(x) + 1 - b.precision, b.emin - 1);  // |x| in [2^(e-1), 2^e), e = ilogb + 1
}

struct Interval {
  double lo, hi;
};
// [approx - bound, approx + bound], widened by one double ulp each way unless it is a point.
Interval widen(double approx, double bound) {
  if (bound == 0) return {approx, approx};
  return {std::nextafter(approx - bound, -kInf), std::nextafter(approx + bound, kInf)};
}

}  // namespace

uint32_t round_double_to_format(Format f, double x) {
  const Bits b = bits_of(f);
  if (std::isnan(x)) return (b.exp_max << b.mant_bits) | (1u << (b.mant_bits - 1));
  const uint32_t sign = std::signbit(x) ? b.sign_bit : 0u;
  if (std::isinf(x)) return sign | (b.exp_max << b.mant_bits);
  if (x == 0) return sign;
  const double ax = std::fabs(x);
  int e = 0;
  (void)std::frexp(ax, &e);
  int q = std::max(e - b.precision, b.emin - 1);
  const double scaled = std::ldexp(ax, -q);  // exact, see the header
  uint64_t n = static_cast<uint64_t>(std::nearbyint(scaled));
  if (n == 0) return sign;
  if (n == (uint64_t{1} << b.precision)) {  // carried into the next binade
    n >>= 1;
    ++q;
  }
  if (n < (uint64_t{1} << b.mant_bits)) return sign | static_cast<uint32_t>(n);  // subnormal
  const int64_t biased = int64_t{q} + b.mant_bits + b.bias;
  if (biased >= static_cast<int64_t>(b.exp_max)) return sign | (b.exp_max << b.mant_bits);  // overflow
  return sign | (static_cast<uint32_t>(biased) << b.mant_bits) |
         static_cast<uint32_t>(n - (uint64_t{1} << b.mant_bits));
}

std::optional<uint32_t> certain_rounding(Format f, double approx, double bound) {
  if (!std::isfinite(approx) || !(bound >= 0) || !std::isfinite(bound)) return std::nullopt;
  const Interval iv = widen(approx, bound);
  const uint32_t lo = round_double_to_format(f, iv.lo);
  if (round_double_to_format(f, iv.hi) != lo) return std::nullopt;
  return lo;
}

std::optional<UlpError> certain_ulp_error(Format f, double y, double approx, double bound,
                                          double resolution) {
  if (!std::isfinite(approx) || !(bound >= 0) || !std::isfinite(bound)) return std::nullopt;
  // The exact value is finite here, so a NaN output is always the nonfinite class.
  if (std::isnan(y)) return UlpError{ErrorClass::nonfinite_output, kInf};
  const Interval iv = widen(approx, bound);
  if (std::isinf(y)) {
    // Infinity is an exact answer only when it is the correct rounding (beyond the threshold).
    const Bits b = bits_of(f);
    const uint32_t inf_bits = (y < 0 ? b.sign_bit : 0u) | (b.exp_max << b.mant_bits);
    const uint32_t r_lo = round_double_to_format(f, iv.lo), r_hi = round_double_to_format(f, iv.hi);
    const uint32_t inner = y > 0 ? r_lo : r_hi;  // the end farthest from y's infinity
    const uint32_t outer = y > 0 ? r_hi : r_lo;
    if (inner == inf_bits) return UlpError{ErrorClass::finite, 0.0};
    if (outer != inf_bits) return UlpError{ErrorClass::nonfinite_output, kInf};
    return std::nullopt;
  }
  int q = 0;
  if (iv.lo <= 0 && iv.hi >= 0) {
    // Straddles zero: the ulp is the minimum subnormal throughout only if the larger end's is.
    q = ulp_exponent(f, std::max(-iv.lo, iv.hi));
    if (q != bits_of(f).emin - 1) return std::nullopt;
  } else {
    q = ulp_exponent(f, iv.lo);
    if (ulp_exponent(f, iv.hi) != q) return std::nullopt;  // straddles a binade: two different ulps
  }
  const double diff = std::fabs(y - approx);  // relative rounding error <= 2^-53
  // |y - x| lies within bound of |y - approx|; the double subtraction adds at most diff 2^-52.
  const double uncertainty = std::ldexp(bound + diff * 0x1p-52, -q);
  if (!(uncertainty <= resolution / 2)) return std::nullopt;
  return UlpError{ErrorClass::finite, std::ldexp(diff, -q)};
}

}  // namespace attncheck::ref
