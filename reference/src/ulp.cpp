// Fractional ulp error: definition in ulp.hpp (quoted in reference/README.md).
#include "attncheck/reference/ulp.hpp"

#include <cmath>
#include <limits>

#include "precision_internal.hpp"

namespace attncheck::ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// log2 of the ulp of format f at the finite value x.
long ulp_exponent(Format f, mpfr_srcptr x) {
  const FormatSpec& s = spec(f);
  const long min_sub = static_cast<long>(s.emin) - 1;
  if (mpfr_zero_p(x)) return min_sub;
  return std::max<long>(mpfr_get_exp(x) - s.precision, min_sub);  // |x| in [2^(e-1), 2^e)
}

}  // namespace

const char* error_class_name(ErrorClass c) {
  switch (c) {
    case ErrorClass::finite:
      return "finite";
    case ErrorClass::nonfinite_output:
      return "nonfinite_output";
    case ErrorClass::wrong_nonfinite:
      return "wrong_nonfinite";
  }
  return "?";
}

Real ulp_at(Format f, const Real& exact) {
  detail::working_prec();
  Real r;
  mpfr_srcptr x = exact.backend().data();
  if (mpfr_nan_p(x) || mpfr_inf_p(x)) {
    mpfr_set_nan(r.backend().data());
    return r;
  }
  mpfr_set_ui_2exp(r.backend().data(), 1, ulp_exponent(f, x), MPFR_RNDN);
  return r;
}

UlpError ulp_error_value(Format f, double y, const Real& exact) {
  const mpfr_prec_t prec = detail::working_prec();
  mpfr_srcptr x = exact.backend().data();
  if (mpfr_nan_p(x))
    return std::isnan(y) ? UlpError{ErrorClass::finite, 0.0} : UlpError{ErrorClass::wrong_nonfinite, kInf};
  if (mpfr_inf_p(x)) {
    const bool same = std::isinf(y) && (std::signbit(y) != 0) == (mpfr_signbit(x) != 0);
    return same ? UlpError{ErrorClass::finite, 0.0} : UlpError{ErrorClass::wrong_nonfinite, kInf};
  }
  if (std::isnan(y)) return {ErrorClass::nonfinite_output, kInf};
  if (std::isinf(y)) {
    // Exact finite but past the overflow threshold: infinity IS the correct rounding.
    const uint32_t r = round_to_format(f, exact);
    if (is_inf_bits(f, r) && (decode(f, r) > 0) == (y > 0)) return {ErrorClass::finite, 0.0};
    return {ErrorClass::nonfinite_output, kInf};
  }
  // |y - x| rounded once at working precision + 64 bits (relative error 2^-264 of the measure), then
  // divided by a power of two (exact) and rounded to double.
  detail::Mp diff(prec + 64);
  mpfr_d_sub(diff, y, x, MPFR_RNDN);
  mpfr_abs(diff, diff, MPFR_RNDN);
  mpfr_mul_2si(diff, diff, -ulp_exponent(f, x), MPFR_RNDN);
  return {ErrorClass::finite, mpfr_get_d(diff, MPFR_RNDN)};
}

UlpError ulp_error(Format f, uint32_t output_bits, const Real& exact) {
  return ulp_error_value(f, decode(f, output_bits), exact);  // decode is exact
}

}  // namespace attncheck::ref
