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

namespace {

// Two codes of one FP8 format stand for the same value (NaN for NaN, either zero for zero).
bool same_value(ac_dtype d, uint32_t a, uint32_t b) {
  const double va = decode(d, a), vb = decode(d, b);
  return (std::isnan(va) && std::isnan(vb)) || va == vb;
}

// The count of FP8 values between two codes (sign-magnitude on a line of integers, both zeros at 0,
// an infinity one step past the largest); +inf when either is NaN.
double fp8_steps(ac_dtype d, uint32_t a, uint32_t b) {
  if (std::isnan(decode(d, a)) || std::isnan(decode(d, b))) return std::numeric_limits<double>::infinity();
  auto line = [](uint32_t x) { return (x & 0x80u) ? -int64_t(x & 0x7fu) : int64_t(x & 0x7fu); };
  return double(std::llabs(line(a) - line(b)));
}

std::string code_text(ac_dtype d, uint32_t code) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%02x", code);
  return std::string(b) + " (" + hexfloat(d, code) + ")";
}

}  // namespace

Judgement judge_quantize(const QuantizeInput& q, const QuantizeOutput& out, const Conventions& cv) {
  const AddSeconds timed(thread_time_split().judge);
  Judgement J;
  const int64_t T = q.num_tokens, H = q.num_heads, D = q.head_size;
  J.num_rows = T * H;
  J.num_heads = H;
  J.rows.resize(size_t(T * H));
  const ref::Fp8Format f = fp8_format(q.out_dtype);
  const ref::Fp8Overflow ov = cv.saturate ? ref::Fp8Overflow::saturate : ref::Fp8Overflow::nonfinite;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = t * H + h;
      const float s = q.scale_of_head(h);
      J.rows[size_t(row)].visible = D;
      for (int64_t c = 0; c < D; ++c) {
        const size_t i = size_t(row * D + c);
        const double x = decode(q.dtype, q.x[i]);
        const uint32_t want = ref::encode_fp8(f, x / double(s), ov);
        const uint32_t want32 = ref::encode_fp8(f, double(float(x) / s), ov);
        // A missing code (a short output) is judged as no value at all.
        const bool returned = i < out.y.size();
        const uint32_t got = returned ? (out.y[i] & 0xffu) : 0u;
        Elem e;
        e.out = Out::Y;
        e.dtype = q.out_dtype;
        e.row = row;
        e.where = where_th("Y", t, h, c);
        e.exact = Real(x) / Real(double(s));
        e.exact_finite = std::isfinite(x);
        e.out_bits = got;
        e.out_value = decode(q.out_dtype, got);
        e.out_finite = std::isfinite(e.out_value);
        e.within = returned && (same_value(q.out_dtype, got, want) || same_value(q.out_dtype, got, want32));
        e.ulp =
            e.within ? 0 : std::min(fp8_steps(q.out_dtype, got, want), fp8_steps(q.out_dtype, got, want32));
        e.cancel = e.ulp;
        e.ratio = e.within ? 0 : e.ulp;
        char sb[16];
        uint32_t sbits;
        std::memcpy(&sbits, &s, 4);
        std::snprintf(sb, sizeof sb, "0x%08x", sbits);
        e.inputs = "x=" + hexfloat(q.dtype, q.x[i]) + " scale=" + sb + " (" + hexfloat(double(s)) +
                   "): allowed " + code_text(q.out_dtype, want) +
                   (same_value(q.out_dtype, want, want32)
                        ? ""
                        : " or, from the fp32 quotient, " + code_text(q.out_dtype, want32)) +
                   (cv.saturate ? " (saturating)" : " (overflow to NaN / inf)") +
                   (returned ? "" : "; no code returned");
        J.elems.push_back(std::move(e));
      }
    }
  return J;
}

const char* quantize_failure_class(const QuantizeInput& q, const Elem& e, const Conventions&) {
  if (isnan(e.exact)) return "nan_hidden";
  // Past the largest finite value (the rounding there decides between it and the overflow code) or
  // infinite: what the saturation declaration governs.
  if (isinf(e.exact) || abs(e.exact) > ref::fp8_spec(fp8_format(q.out_dtype)).largest) return "overflow";
  return "rounding";
}

}  // namespace attncheck::detail
