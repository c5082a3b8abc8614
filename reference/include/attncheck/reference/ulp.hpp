// Fractional ulp error of an output against the exact value.
//
// Definition (quoted by reference/README.md):
//   ulp_at(F, x) for finite x: the spacing of format F in the binade of the EXACT value x, i.e.
//   2^(floor(log2|x|) - p + 1) for a format with p significand bits, but never less than the
//   format's minimum subnormal 2^(emin-1) (so for subnormal and zero x it is exactly that minimum:
//   2^-24 fp16, 2^-133 bf16, 2^-149 fp32). Exact values beyond the largest finite keep the formula
//   (the binade of 70000 in fp16 has ulp 64).
//   ulp_error(F, y, x) classifies, then measures:
//     finite            both finite, or both the same infinity, or both NaN; ulps = |y - x| / ulp_at(F, x)
//                       computed exactly and rounded to double (0 for equal infinities / NaNs).
//                       Also: x finite but beyond the overflow threshold (its correct rounding is an
//                       infinity) and y is that same infinity: the correctly rounded answer, 0 ulps.
//     nonfinite_output  y is Inf or NaN where x is finite (and y is not x's correct rounding):
//                       an unbounded error, in its own class; ulps = +inf.
//     wrong_nonfinite   x is +-inf or NaN and y differs (finite, the other infinity, NaN vs inf);
//                       ulps = +inf.
//   A correctly rounded output is at most 0.5 ulp; a faithful one below 1 ulp.
#pragma once
#include <cstdint>

#include "attncheck/reference/format.hpp"

namespace attncheck::ref {

enum class ErrorClass { finite, nonfinite_output, wrong_nonfinite };
const char* error_class_name(ErrorClass);

struct UlpError {
  ErrorClass cls;
  double ulps;  // +inf unless cls == finite
};

Real ulp_at(Format, const Real& exact);
UlpError ulp_error(Format, uint32_t output_bits, const Real& exact);
// For outputs held as a value (an fp32 LSE read as double, ...): the same definition, measured in
// the ulps of Format.
UlpError ulp_error_value(Format, double output_value, const Real& exact);

}  // namespace attncheck::ref
