// Judging a KV-cache quantiser (plugin_abi.h, AC_OP_QUANTIZE): each code of y against the codes the
// contract allows for its x and scale. No budget: the contract is a rounding, met exactly or not.
//
// The allowed codes. Two quotients are correct, and each is rounded once to the format (to nearest,
// ties to even, overflow as declared; reference/fp8.hpp encode_fp8):
//   - the real x / s, which a kernel computing in wider arithmetic rounds;
//   - fl32(x / s), the correctly rounded fp32 quotient, which a kernel dividing in fp32 rounds.
// They differ only where fl32(x / s) lands on a tie of the format that x / s is not on: x has at most
// 24 significant bits and s 24, a tie m at most 5 (e4m3: 3 stored bits, one implicit, one more for
// the half), so m s has at most 29 and a nonzero x - m s is at least 2^-29 |m s| in magnitude. The
// fp32 quotient may be off by 2^-24 relatively, more than that; the fp64 quotient only by 2^-53, less
// than that. So the fp64 quotient is a tie exactly when x / s is, and rounding it gives the real
// quotient's code (tests/properties/test_quantize.cpp checks it against MPFR's quotient). Both
// quotients stay inside fp64's normal range (|x / s| within 2^-277 .. 2^277 for fp32 x and s).
//
// Codes compared as values: either zero for a zero (e4m3fnuz has one), any NaN code for a NaN.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "internal.hpp"

namespace attncheck::detail {

Judgement judge_quantize(const QuantizeInput& q, const QuantizeOutput& out, const Conventions& cv) {
  const AddSeconds timed(thread_time_split().judge);
  Judgement J;
  const int64_t T = q.num_tokens, H = q.num_heads, D = q.head_size;
  J.num_rows = T * H;
  J.num_heads = H;
  J.rows.resize(size_t(T * H));
  const ref::Fp8Overflow ov = cv.saturate ? ref::Fp8Overflow::saturate : ref::Fp8Overflow::nonfinite;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = t * H + h;
      const float s = q.scale_of_head(h);
      J.rows[size_t(row)].visible = D;
      for (int64_t c = 0; c < D; ++c) {
        const size_t i = size_t(row * D + c);
        const double x = decode(q.dtype, q.x[i]);
        // The two quotients (the fp64 one standing for the real one, as argued above).
        const double q_real = x / double(s), q_fp32 = double(float(x) / s);
        // A missing code (a short output) is judged as no value at all.
        const bool returned = i < out.y.size();
        Elem e;
        e.out = Out::Y;
        e.row = row;
        e.where = where_th("Y", t, h, c);
        e.exact = Real(x) / Real(double(s));
        e.exact_finite = std::isfinite(x);
        const auto [c_lo, c_hi] = measure_fp8(e, q.out_dtype, returned ? (out.y[i] & 0xffu) : 0u,
                                              std::min(q_real, q_fp32), std::max(q_real, q_fp32), ov);
        e.within = e.within && returned;
        char sb[16];
        uint32_t sbits;
        std::memcpy(&sbits, &s, 4);
        std::snprintf(sb, sizeof sb, "0x%08x", sbits);
        e.inputs =
            "x=" + hexfloat(q.dtype, q.x[i]) + " scale=" + sb + " (" + hexfloat(double(s)) + "): allowed " +
            (std::isnan(x) ? std::string("any NaN code") : fp8_code_text(q.out_dtype, c_lo)) +
            (c_hi == c_lo ? ""
                          : " or " + fp8_code_text(q.out_dtype, c_hi) + " (the real and the fp32 quotient)") +
            (cv.saturate ? " (saturating)" : " (overflow to NaN / inf)") +
            (returned ? "" : "; no code returned");
        J.elems.push_back(std::move(e));
      }
    }
  return J;
}

const char* quantize_failure_class(const QuantizeInput& q, const Elem& e) {
  if (isnan(e.exact)) return "nan_hidden";
  // Past the largest finite value (the rounding there decides between it and the overflow code) or
  // infinite: what the saturation declaration governs.
  if (isinf(e.exact) || abs(e.exact) > ref::fp8_spec(fp8_format(q.out_dtype)).largest) return "overflow";
  return "rounding";
}

}  // namespace attncheck::detail
