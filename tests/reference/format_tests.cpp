// Rounding to fp16 / bf16 / fp32, decoding, parsing, printing, and the ulp-error definition.
//
// Independent oracles: (1) exhaustive derivation over every fp16 and bf16 value: each value, the
// midpoint to its successor (exact in double) which must go to the even bit pattern, and the doubles
// just either side of the midpoint; (2) MPFR's own subnormal emulation (mpfr_check_range +
// mpfr_subnormalize in the format's exponent range), fed 200-bit values that double doubles cannot
// hold; (3) hand-derived traps and edges.
#include <mpfr.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "attncheck/reference/reference.hpp"

using namespace attncheck::ref;

namespace {

float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Oracle (2): MPFR's documented emulation of a binary format with subnormals.
double mpfr_emulated(Format f, const Real& x) {
  const FormatSpec& s = spec(f);
  mpfr_t y;
  mpfr_init2(y, s.precision);
  const mpfr_exp_t old_min = mpfr_get_emin(), old_max = mpfr_get_emax();
  int t = mpfr_set(y, x.backend().data(), MPFR_RNDN);
  mpfr_set_emin(s.emin);
  mpfr_set_emax(s.emax);
  t = mpfr_check_range(y, t, MPFR_RNDN);
  mpfr_subnormalize(y, t, MPFR_RNDN);
  mpfr_set_emin(old_min);
  mpfr_set_emax(old_max);
  const double r = mpfr_get_d(y, MPFR_RNDN);  // exact: at most 24 bits, in double's range
  mpfr_clear(y);
  return r;
}

bool same_double(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// Oracle (1) over all 2^16 patterns of a 16-bit format.
void exhaustive_16bit(Format f) {
  const uint32_t sign = 0x8000;
  const uint32_t exp_mask = f == Format::fp16 ? 0x7c00 : 0x7f80;
  const uint32_t inf = exp_mask;
  int failures = 0;
  for (uint32_t b = 0; b < inf; ++b) {  // every finite non-negative pattern, in increasing order
    for (uint32_t s : {0u, sign}) {
      const uint32_t lo = b | s, hi = (b + 1) | s;  // b + 1 == inf for the largest finite
      const double a = decode(f, lo), c = decode(f, hi);
      const double mid = c == std::copysign(INFINITY, a)
                             ? a + (a - decode(f, (b - 1) | s)) / 2  // the overflow threshold max + ulp/2
                             : (a + c) / 2;                          // exact in double
      const uint32_t even = (lo & 1) == 0 ? lo : hi;
      const double toward_hi = std::nextafter(mid, std::copysign(INFINITY, a));
      const double toward_lo = std::nextafter(mid, std::copysign(0.0, a));
      if (round_to_format(f, a) != lo) ++failures;
      if (round_to_format(f, mid) != even) ++failures;
      if (round_to_format(f, toward_hi) != hi) ++failures;
      if (round_to_format(f, toward_lo) != lo) ++failures;
      if (failures && failures < 5) INFO(spec(f).name << " failure near bits " << lo);
    }
  }
  CHECK(failures == 0);
}

}  // namespace

TEST_CASE("format specs are the MPFR-style ranges", "[format]") {
  CHECK(spec(Format::fp16).precision == 11);
  CHECK(spec(Format::fp16).emin == -23);
  CHECK(spec(Format::fp16).emax == 16);
  CHECK(spec(Format::bf16).precision == 8);
  CHECK(spec(Format::bf16).emin == -132);
  CHECK(spec(Format::bf16).emax == 128);
  CHECK(spec(Format::fp32).precision == 24);
  CHECK(spec(Format::fp32).emin == -148);
  CHECK(spec(Format::fp32).emax == 128);
  CHECK(parse_format("fp16") == Format::fp16);
  CHECK(parse_format("bf16") == Format::bf16);
  CHECK(parse_format("fp32") == Format::fp32);
  CHECK_THROWS_AS(parse_format("fp8"), ReferenceError);
}

TEST_CASE("decode gives the exact value of stored elements", "[format]") {
  CHECK(decode(Format::fp16, 0x3c00) == 1.0);
  CHECK(decode(Format::fp16, 0x3c01) == 1.0 + std::ldexp(1.0, -10));
  CHECK(decode(Format::fp16, 0x7bff) == 65504.0);
  CHECK(decode(Format::fp16, 0x0001) == std::ldexp(1.0, -24));
  CHECK(decode(Format::fp16, 0x0400) == std::ldexp(1.0, -14));
  CHECK(std::isinf(decode(Format::fp16, 0xfc00)));
  CHECK(std::isnan(decode(Format::fp16, 0x7e00)));
  CHECK(std::signbit(decode(Format::fp16, 0x8000)));
  CHECK(decode(Format::bf16, 0x3f80) == 1.0);
  CHECK(decode(Format::bf16, 0x0001) == std::ldexp(1.0, -133));
  CHECK(decode(Format::bf16, 0x7f7f) == std::ldexp(255.0, 120));
  CHECK(decode(Format::bf16, 0x8001) == -std::ldexp(1.0, -133));
  CHECK(decode(Format::bf16, 0x4049) == 3.140625);
  CHECK(decode(Format::bf16, 0x12344049) == 3.140625);  // bits above 16 are ignored
  CHECK(decode(Format::fp32, 0x00000001) == std::ldexp(1.0, -149));
  CHECK(decode(Format::fp32, 0x007fffff) == std::ldexp(double((1 << 23) - 1), -149));
  CHECK(decode(Format::fp32, 0x3f800001) == 1.0 + std::ldexp(1.0, -23));
  CHECK(decode(Format::fp32, 0x7f7fffff) == std::ldexp(double((1 << 24) - 1), 104));
  CHECK(decode(Format::fp32, 0xc0400000) == -3.0);
  // fp32 against the compiler's own reading of the bit pattern.
  std::mt19937 rng(7);
  for (int i = 0; i < 10000; ++i) {
    const uint32_t b = rng();
    const double want = static_cast<double>(bits_to_float(b));
    CHECK(same_double(decode(Format::fp32, b), want));
  }
}

TEST_CASE("double-rounding traps round once", "[format][rounding]") {
  // 1 + 2^-11 + 2^-40: above the fp16 midpoint 1 + 2^-11; through float it lands exactly on the midpoint.
  CHECK(round_to_format(Format::fp16, parse_real("0x1.00200000001p0")) == 0x3c01);
  CHECK(round_to_format(Format::fp16, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)) == 0x3c01);
  CHECK(round_to_format(Format::fp16, static_cast<double>(static_cast<float>(
                                          1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)))) == 0x3c00);
  // 0x1.000001p-25: just above half the fp16 minimum subnormal.
  CHECK(round_to_format(Format::fp16, parse_real("0x1.000001p-25")) == 0x0001);
  CHECK(round_to_format(Format::fp16, std::ldexp(1.0 + std::ldexp(1.0, -24), -25)) == 0x0001);
  // A value only 200 bits can hold: 1 + 2^-11 + 2^-150 must still round up.
  CHECK(round_to_format(Format::fp16, parse_real("1") + ldexp(Real(1), -11) + ldexp(Real(1), -150)) ==
        0x3c01);
  CHECK(round_to_format(Format::fp16, parse_real("1") + ldexp(Real(1), -11) - ldexp(Real(1), -150)) ==
        0x3c00);
}

TEST_CASE("fp16 edges: overflow threshold 65520, subnormal boundaries", "[format][rounding]") {
  CHECK(round_to_format(Format::fp16, parse_real("65519.99")) == 0x7bff);
  CHECK(round_to_format(Format::fp16, parse_real("65520")) == 0x7c00);
  CHECK(round_to_format(Format::fp16, parse_real("-65520")) == 0xfc00);
  CHECK(round_to_format(Format::fp16, parse_real("65504")) == 0x7bff);
  CHECK(round_to_format(Format::fp16, parse_real("1e10")) == 0x7c00);
  CHECK(round_to_format(Format::fp16, parse_real("0x1p-24")) == 0x0001);
  CHECK(round_to_format(Format::fp16, parse_real("0x1p-25")) == 0x0000);      // tie to even: zero
  CHECK(round_to_format(Format::fp16, parse_real("-0x1p-25")) == 0x8000);     // sign of zero kept
  CHECK(round_to_format(Format::fp16, parse_real("0x3p-25")) == 0x0002);      // 1.5 min sub: tie to even (2)
  CHECK(round_to_format(Format::fp16, parse_real("0x1p-14")) == 0x0400);      // smallest normal
  CHECK(round_to_format(Format::fp16, parse_real("0x1.ff8p-15")) == 0x03ff);  // largest subnormal
  CHECK(round_to_format(Format::fp16, parse_real("0x1.ffcp-15")) ==
        0x0400);  // largest subnormal + half: tie up to even
  CHECK(round_to_format(Format::fp16, parse_real("0x1p-100")) == 0x0000);
  CHECK(round_to_format(Format::fp16, parse_real("-0")) == 0x8000);
  CHECK(round_to_format(Format::fp16, parse_real("nan")) == 0x7e00);
  CHECK(round_to_format(Format::fp16, parse_real("-inf")) == 0xfc00);
}

TEST_CASE("bf16 and fp32 edges", "[format][rounding]") {
  CHECK(round_to_format(Format::bf16, parse_real("0x1.fep127")) == 0x7f7f);  // largest finite
  CHECK(round_to_format(Format::bf16, parse_real("0x1.feffffp127")) == 0x7f7f);
  CHECK(round_to_format(Format::bf16, parse_real("0x1.ffp127")) == 0x7f80);  // threshold: tie, to even = inf
  CHECK(round_to_format(Format::bf16, parse_real("0x1.01p0")) == 0x3f80);    // tie to even
  CHECK(round_to_format(Format::bf16, parse_real("0x1.03p0")) == 0x3f82);    // tie to even
  CHECK(round_to_format(Format::bf16, parse_real("0x1p-133")) == 0x0001);    // min subnormal
  CHECK(round_to_format(Format::bf16, parse_real("0x1p-134")) == 0x0000);    // half of it: tie to zero
  CHECK(round_to_format(Format::bf16, parse_real("0x1.0001p-134")) == 0x0001);
  CHECK(round_to_format(Format::bf16, parse_real("nan")) == 0x7fc0);
  CHECK(round_to_format(Format::fp32, parse_real("0x1.fffffep127")) == 0x7f7fffff);
  CHECK(round_to_format(Format::fp32, parse_real("0x1.fffffefffffp127")) == 0x7f7fffff);
  CHECK(round_to_format(Format::fp32, parse_real("0x1.ffffffp127")) == 0x7f800000);
  CHECK(round_to_format(Format::fp32, parse_real("0x1p-149")) == 0x00000001);
  CHECK(round_to_format(Format::fp32, parse_real("0x1p-150")) == 0x00000000);
  CHECK(round_to_format(Format::fp32, parse_real("-0x1p-150")) == 0x80000000);
  CHECK(round_to_format(Format::fp32, parse_real("0x1.0000000000001p-150")) == 0x00000001);
  CHECK(round_to_format(Format::fp32, parse_real("0x3p-150")) == 0x00000002);      // tie to even
  CHECK(round_to_format(Format::fp32, parse_real("0x1.000001p0")) == 0x3f800000);  // tie to even (down)
  CHECK(round_to_format(Format::fp32, parse_real("0x1.000003p0")) == 0x3f800002);  // tie to even (up)
  CHECK(round_to_format(Format::fp32, parse_real("nan")) == 0x7fc00000);
  CHECK(round_to_format(Format::fp32, -0.0) == 0x80000000);
}

TEST_CASE("every fp16 value, midpoint and neighbour of a midpoint rounds as derived",
          "[format][rounding][exhaustive]") {
  exhaustive_16bit(Format::fp16);
}

TEST_CASE("every bf16 value, midpoint and neighbour of a midpoint rounds as derived",
          "[format][rounding][exhaustive]") {
  exhaustive_16bit(Format::bf16);
}

TEST_CASE("fp32 rounding of doubles agrees with the hardware conversion", "[format][rounding]") {
  // double -> float conversion in hardware is a single correct rounding (RNE, subnormals, overflow).
  std::mt19937_64 rng(11);
  int failures = 0;
  for (int i = 0; i < 100000; ++i) {
    uint64_t b = rng();
    // Bias the exponent towards fp32's range and its edges.
    const uint64_t e = 1023 - 160 + (rng() % 300);
    b = (b & 0x800fffffffffffffull) | (e << 52);
    double x;
    std::memcpy(&x, &b, 8);
    const float want = static_cast<float>(x);
    uint32_t wb;
    std::memcpy(&wb, &want, 4);
    if (round_to_format(Format::fp32, x) != wb) ++failures;
  }
  CHECK(failures == 0);
}

TEST_CASE("rounding a double (no MPFR) agrees with rounding the same value through MPFR",
          "[format][rounding]") {
  // round_to_format(Format, double) repeats round_mp's steps in double arithmetic; any double,
  // from double's subnormals to its largest values, must give the MPFR path's bits.
  std::mt19937_64 rng(17);
  for (Format f : {Format::fp16, Format::bf16, Format::fp32}) {
    int failures = 0;
    for (int i = 0; i < 200000; ++i) {
      uint64_t b = rng();
      if (i % 2) b = (b & 0x800fffffffffffffull) | ((1023 - 160 + rng() % 320) << 52);  // formats' range
      if (i % 7 == 0) b &= 0xffffffffff000000ull;  // short significands: exact values and midpoints
      if (i % 5 == 0) b &= 0xffffff0000000000ull;  // shorter: fp16 and bf16 midpoints, ties to even
      double x;
      std::memcpy(&x, &b, 8);
      if (round_to_format(f, x) != round_to_format(f, Real(x))) ++failures;
    }
    INFO(spec(f).name);
    CHECK(failures == 0);
  }
}

TEST_CASE("rounding agrees with MPFR's subnormal emulation on 200-bit values", "[format][rounding]") {
  std::mt19937_64 rng(3);
  for (Format f : {Format::fp16, Format::bf16, Format::fp32}) {
    const FormatSpec& s = spec(f);
    int failures = 0;
    for (int i = 0; i < 20000; ++i) {
      // A random format value, moved by a random half ulp (near midpoints) plus a tiny 200-bit tail.
      const int e = s.emin - 3 + static_cast<int>(rng() % static_cast<uint64_t>(s.emax - s.emin + 5));
      Real x = ldexp(Real(static_cast<double>(rng() % (1ull << s.precision))), e - s.precision);
      x += ldexp(Real(1), e - s.precision - 1) * static_cast<double>(rng() % 3);  // 0, 1 or 2 half-ulps
      const int tail_sign = static_cast<int>(rng() % 3) - 1;
      x += ldexp(Real(tail_sign), e - s.precision - 1 - 20 - static_cast<int>(rng() % 150));
      if (rng() & 1) x = -x;
      const double got = decode(f, round_to_format(f, x));
      if (!same_double(got, mpfr_emulated(f, x))) {
        ++failures;
        if (failures < 4) INFO(s.name << " mismatch at " << to_decimal(x, 40));
      }
    }
    CHECK(failures == 0);
  }
}

TEST_CASE("parse_real reads decimal, hexfloat and specials; rejects junk", "[format]") {
  CHECK(parse_real("0x1.8p-3") == Real(0.1875));
  CHECK(parse_real("-0x1p0") == Real(-1));
  CHECK(parse_real(" 2.5e3 ") == Real(2500));
  CHECK(parse_real("1e-3") == Real(1) / 1000);
  CHECK((isinf(parse_real("inf")) && parse_real("inf") > 0));
  CHECK((isinf(parse_real("-inf")) && parse_real("-inf") < 0));
  CHECK(isnan(parse_real("nan")));
  CHECK_THROWS_AS(parse_real("abc"), ReferenceError);
  CHECK_THROWS_AS(parse_real("1.5x"), ReferenceError);
  CHECK_THROWS_AS(parse_real(""), ReferenceError);
  CHECK_THROWS_WITH(parse_real("1,2"), Catch::Contains("cannot parse"));
}

TEST_CASE("to_hexfloat and to_decimal print as documented", "[format]") {
  CHECK(to_hexfloat(Format::fp16, 0x3c01) == "0x1.004p+0");
  CHECK(to_hexfloat(Format::fp16, 0x0001) == "0x1p-24");
  CHECK(to_hexfloat(Format::fp16, 0x8000) == "-0x0p+0");
  CHECK(to_hexfloat(Format::fp16, 0x7c00) == "inf");
  CHECK(to_hexfloat(Format::fp16, 0xfc00) == "-inf");
  CHECK(to_hexfloat(Format::fp16, 0x7e00) == "nan");
  CHECK(to_hexfloat(Format::bf16, 0x3f80) == "0x1p+0");
  CHECK(to_hexfloat(Format::fp32, 0x00000001) == "0x1p-149");
  CHECK(to_decimal(log(Real(2)), 36) == "0.693147180559945309417232121458176568");
  CHECK(to_decimal(parse_real("-inf")) == "-inf");
  CHECK(to_decimal(parse_real("nan")) == "nan");
}

TEST_CASE("ulp_at: binade of the exact value, subnormal floor", "[ulp]") {
  CHECK(ulp_at(Format::fp16, Real(1)) == ldexp(Real(1), -10));
  CHECK(ulp_at(Format::fp16, Real(1.999)) == ldexp(Real(1), -10));
  CHECK(ulp_at(Format::fp16, Real(0.999)) == ldexp(Real(1), -11));
  CHECK(ulp_at(Format::fp16, Real(-3)) == ldexp(Real(1), -9));
  CHECK(ulp_at(Format::fp16, Real(65504)) == Real(32));
  CHECK(ulp_at(Format::fp16, Real(70000)) == Real(64));  // beyond the largest finite: formula kept
  CHECK(ulp_at(Format::fp16, ldexp(Real(1), -14)) == ldexp(Real(1), -24));  // smallest normal
  CHECK(ulp_at(Format::fp16, ldexp(Real(1), -20)) == ldexp(Real(1), -24));  // subnormal: the minimum
  CHECK(ulp_at(Format::fp16, Real(0)) == ldexp(Real(1), -24));
  CHECK(ulp_at(Format::bf16, Real(1)) == ldexp(Real(1), -7));
  CHECK(ulp_at(Format::bf16, Real(0)) == ldexp(Real(1), -133));
  CHECK(ulp_at(Format::fp32, Real(1)) == ldexp(Real(1), -23));
  CHECK(ulp_at(Format::fp32, ldexp(Real(1), -130)) == ldexp(Real(1), -149));
  CHECK(isnan(ulp_at(Format::fp32, parse_real("inf"))));
}

TEST_CASE("ulp_error: values and classes", "[ulp]") {
  const Real one(1);
  UlpError e = ulp_error(Format::fp16, 0x3c01, one);
  CHECK(e.cls == ErrorClass::finite);
  CHECK(e.ulps == 1.0);
  e = ulp_error(Format::fp16, 0x3c00, one + ldexp(Real(1), -11));  // correctly rounded tie: half an ulp
  CHECK(e.ulps == 0.5);
  e = ulp_error(Format::fp16, 0x3bff, one);  // one below 1 is 2^-11 away: half an ulp of 1's binade
  CHECK(e.ulps == 0.5);
  e = ulp_error(Format::fp16, 0x0003, ldexp(Real(1), -24));  // subnormal: ulp is the minimum subnormal
  CHECK(e.ulps == 2.0);
  e = ulp_error(Format::fp16, 0x0000, ldexp(Real(1), -26));
  CHECK(e.ulps == 0.25);
  e = ulp_error(Format::fp16, 0x7bff, Real(70000));
  CHECK(e.cls == ErrorClass::finite);
  CHECK(e.ulps == (70000.0 - 65504.0) / 64.0);

  // Classes.
  CHECK(ulp_error(Format::fp16, 0x7c00, one).cls == ErrorClass::nonfinite_output);
  CHECK(std::isinf(ulp_error(Format::fp16, 0x7c00, one).ulps));
  CHECK(ulp_error(Format::fp16, 0x7e00, one).cls == ErrorClass::nonfinite_output);
  CHECK(ulp_error(Format::fp16, 0x7c00, Real(65519)).cls == ErrorClass::nonfinite_output);
  const UlpError over = ulp_error(Format::fp16, 0x7c00, Real(70000));  // inf IS the correct rounding
  CHECK(over.cls == ErrorClass::finite);
  CHECK(over.ulps == 0.0);
  CHECK(ulp_error(Format::fp16, 0xfc00, Real(70000)).cls == ErrorClass::nonfinite_output);
  const Real pinf = parse_real("inf"), ninf = parse_real("-inf"), nan = parse_real("nan");
  CHECK(ulp_error(Format::fp16, 0x7c00, pinf).cls == ErrorClass::finite);
  CHECK(ulp_error(Format::fp16, 0x7c00, pinf).ulps == 0.0);
  CHECK(ulp_error(Format::fp16, 0xfc00, pinf).cls == ErrorClass::wrong_nonfinite);
  CHECK(ulp_error(Format::fp16, 0x7bff, pinf).cls == ErrorClass::wrong_nonfinite);
  CHECK(ulp_error(Format::fp16, 0x7e00, ninf).cls == ErrorClass::wrong_nonfinite);
  CHECK(ulp_error(Format::fp16, 0x7e00, nan).cls == ErrorClass::finite);
  CHECK(ulp_error(Format::fp16, 0x3c00, nan).cls == ErrorClass::wrong_nonfinite);
  CHECK(std::isinf(ulp_error(Format::fp16, 0x3c00, nan).ulps));

  // Values (fp32 LSEs read as double) measured in fp32 ulps.
  const UlpError v = ulp_error_value(Format::fp32, 1.0 + std::ldexp(1.0, -24), one);
  CHECK(v.cls == ErrorClass::finite);
  CHECK(v.ulps == 0.5);
  CHECK(ulp_error_value(Format::fp32, -INFINITY, ninf).cls == ErrorClass::finite);
  CHECK(ulp_error_value(Format::fp32, INFINITY, ninf).cls == ErrorClass::wrong_nonfinite);
  CHECK(ulp_error_value(Format::fp32, INFINITY, Real(3)).cls == ErrorClass::nonfinite_output);
  CHECK(std::string(error_class_name(ErrorClass::nonfinite_output)) == "nonfinite_output");
}
