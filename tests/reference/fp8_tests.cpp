// FP8 decoding and rounding (reference/fp8.hpp).
//
// Independent oracles: (1) code values derived by hand from each format's definition (the tables
// below); (2) rounding by search: for a value x, the nearest of all 256 codes' values plus a
// virtual code one ulp above the largest (the first value an unbounded exponent would give, whose
// last mantissa bit is the opposite of the largest's), ties to the even last bit; a result at the
// virtual code is an overflow. The code under test computes neither way.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "attncheck/reference/reference.hpp"

using namespace attncheck::ref;

namespace {

constexpr Fp8Format kFormats[] = {Fp8Format::e4m3fn, Fp8Format::e5m2, Fp8Format::e4m3fnuz};

struct Known {
  uint8_t code;
  double value;  // NaN for a NaN code
};

// Hand derivations: value = (-1)^s 2^(field - bias) 1.mant, or 2^(1 - bias) 0.mant for field 0.
const std::vector<Known>& known(Fp8Format f) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  constexpr double inf = std::numeric_limits<double>::infinity();
  static const std::vector<Known> e4m3fn = {
      {0x00, 0.0},   {0x01, 0x1p-9}, {0x07, 7 * 0x1p-9}, {0x08, 0x1p-6}, {0x38, 1.0},    {0x39, 1.125},
      {0x3F, 1.875}, {0x40, 2.0},    {0x77, 240.0},      {0x78, 256.0},  {0x7E, 448.0},  {0x7F, nan},
      {0x80, -0.0},  {0xB8, -1.0},   {0xFE, -448.0},     {0xFF, nan},    {0x81, -0x1p-9}};
  static const std::vector<Known> e5m2 = {
      {0x00, 0.0},  {0x01, 0x1p-16}, {0x03, 3 * 0x1p-16}, {0x04, 0x1p-14}, {0x3C, 1.0},
      {0x3D, 1.25}, {0x7B, 57344},   {0x7C, inf},         {0x7D, nan},     {0x7E, nan},
      {0x7F, nan},  {0xFC, -inf},    {0xFB, -57344},      {0x80, -0.0}};
  static const std::vector<Known> e4m3fnuz = {{0x00, 0.0},   {0x01, 0x1p-10}, {0x08, 0x1p-7}, {0x40, 1.0},
                                              {0x41, 1.125}, {0x7F, 240.0},   {0x78, 128.0},  {0x80, nan},
                                              {0xC0, -1.0},  {0xFF, -240.0}};
  switch (f) {
    case Fp8Format::e4m3fn:
      return e4m3fn;
    case Fp8Format::e5m2:
      return e5m2;
    case Fp8Format::e4m3fnuz:
      break;
  }
  return e4m3fnuz;
}

bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// Oracle (2). Returns the expected code, or -1 for an overflow (the virtual code won).
int search_round(Fp8Format f, double x) {
  const Fp8Spec& s = fp8_spec(f);
  const double above =
      s.largest + std::ldexp(1.0, static_cast<int>(std::floor(std::log2(s.largest))) - s.mantissa_bits);
  const int above_parity = 1 - (s.largest_code & 1);
  int best = -2;
  double best_dist = std::numeric_limits<double>::infinity();
  int best_parity = 0;
  const double ax = std::fabs(x);
  if (ax >= above) return -1;      // every code is farther (and the distances below would round)
  for (int c = 0; c < 128; ++c) {  // magnitudes; the sign is attached below
    const double v = decode_fp8(f, static_cast<uint8_t>(c));
    if (std::isnan(v) || std::isinf(v)) continue;
    const double d = std::fabs(v - ax);  // exact: both sides are short dyadic values
    if (d < best_dist || (d == best_dist && (c & 1) == 0 && best_parity == 1)) {
      best = c, best_dist = d, best_parity = c & 1;
    }
  }
  const double d = std::fabs(above - ax);
  if (d < best_dist || (d == best_dist && above_parity == 0 && best_parity == 1)) return -1;
  if (best == 0) return std::signbit(x) && !s.unsigned_zero ? 0x80 : 0x00;
  return (std::signbit(x) ? 0x80 : 0) | best;
}

int expected_code(Fp8Format f, double x, Fp8Overflow o) {
  const Fp8Spec& s = fp8_spec(f);
  const int c = search_round(f, x);
  if (c >= 0) return c;
  const int sign = std::signbit(x) ? 0x80 : 0;
  if (o == Fp8Overflow::saturate) return sign | s.largest_code;
  if (s.has_inf) return sign | 0x7C;
  return s.unsigned_zero ? 0x80 : (sign | 0x7F);
}

}  // namespace

TEST_CASE("every hand-derived FP8 code decodes to its value") {
  for (Fp8Format f : kFormats)
    for (const Known& k : known(f)) {
      INFO(fp8_spec(f).name << " code " << int(k.code));
      CHECK(same(decode_fp8(f, k.code), k.value));
      CHECK(is_fp8_nan(f, k.code) == std::isnan(k.value));
    }
}

TEST_CASE("FP8 NaN codes: e4m3fn two, e5m2 six, e4m3fnuz one; infinities only in e5m2") {
  for (Fp8Format f : kFormats) {
    int nans = 0, infs = 0;
    for (int c = 0; c < 256; ++c) {
      const double v = decode_fp8(f, static_cast<uint8_t>(c));
      nans += std::isnan(v);
      infs += std::isinf(v);
    }
    INFO(fp8_spec(f).name);
    CHECK(nans == (f == Fp8Format::e4m3fn ? 2 : f == Fp8Format::e5m2 ? 6 : 1));
    CHECK(infs == (f == Fp8Format::e5m2 ? 2 : 0));
  }
}

TEST_CASE("FP8 rounding matches the search at every code, every midpoint and either side of it") {
  for (Fp8Format f : kFormats) {
    std::vector<double> values;
    for (int c = 0; c < 128; ++c) {
      const double v = decode_fp8(f, static_cast<uint8_t>(c));
      if (std::isfinite(v)) values.push_back(v);
    }
    std::sort(values.begin(), values.end());
    const Fp8Spec& s = fp8_spec(f);
    values.push_back(s.largest + std::ldexp(1.0, static_cast<int>(std::floor(std::log2(s.largest))) -
                                                     s.mantissa_bits));  // the virtual code
    std::vector<double> xs;
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      const double mid = (values[i] + values[i + 1]) / 2;  // exact
      for (double x : {values[i], mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300)}) xs.push_back(x);
    }
    xs.push_back(1e300);
    xs.push_back(std::numeric_limits<double>::denorm_min());
    for (double x : xs)
      for (double sx : {x, -x})
        for (Fp8Overflow o : {Fp8Overflow::saturate, Fp8Overflow::nonfinite}) {
          INFO(s.name << " x " << sx << " saturate " << (o == Fp8Overflow::saturate));
          CHECK(int(encode_fp8(f, sx, o)) == expected_code(f, sx, o));
          CHECK(int(encode_fp8(f, Real(sx), o)) == expected_code(f, sx, o));
        }
  }
}

TEST_CASE("FP8 rounding matches the search on random doubles across and past the range") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(-20.0, 18.0), mant(1.0, 2.0);
  for (Fp8Format f : kFormats)
    for (int i = 0; i < 20000; ++i) {
      const double x = std::ldexp(mant(rng), static_cast<int>(exponent(rng))) * (i % 2 ? -1 : 1);
      for (Fp8Overflow o : {Fp8Overflow::saturate, Fp8Overflow::nonfinite}) {
        INFO(fp8_spec(f).name << " x " << x);
        REQUIRE(int(encode_fp8(f, x, o)) == expected_code(f, x, o));
      }
    }
}

TEST_CASE("FP8 overflow: the thresholds derived by hand") {
  using F = Fp8Format;
  constexpr auto sat = Fp8Overflow::saturate, nosat = Fp8Overflow::nonfinite;
  // e4m3fn: 448 = 1.110b 2^8 (even), the next value 480 would be odd, so 464 ties to 448.
  CHECK(encode_fp8(F::e4m3fn, 464.0, nosat) == 0x7E);
  CHECK(encode_fp8(F::e4m3fn, std::nextafter(464.0, 1e9), nosat) == 0x7F);  // NaN: no infinity
  CHECK(encode_fp8(F::e4m3fn, std::nextafter(464.0, 1e9), sat) == 0x7E);
  CHECK(encode_fp8(F::e4m3fn, -1e6, sat) == 0xFE);
  CHECK(encode_fp8(F::e4m3fn, -1e6, nosat) == 0xFF);
  // e5m2: 57344 = 1.11b 2^15 (odd), so the tie 61440 goes up to 2^16: overflow.
  CHECK(encode_fp8(F::e5m2, std::nextafter(61440.0, 0.0), nosat) == 0x7B);
  CHECK(encode_fp8(F::e5m2, 61440.0, nosat) == 0x7C);
  CHECK(encode_fp8(F::e5m2, 61440.0, sat) == 0x7B);
  // e4m3fnuz: 240 = 1.111b 2^7 (odd): the tie 248 overflows; its only NaN is 0x80.
  CHECK(encode_fp8(F::e4m3fnuz, std::nextafter(248.0, 0.0), nosat) == 0x7F);
  CHECK(encode_fp8(F::e4m3fnuz, -248.0, nosat) == 0x80);
  CHECK(encode_fp8(F::e4m3fnuz, -248.0, sat) == 0xFF);
}

TEST_CASE("FP8 specials: infinities saturate or stay, NaN is canonical, zero's sign") {
  using F = Fp8Format;
  constexpr double inf = std::numeric_limits<double>::infinity(),
                   nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(encode_fp8(F::e4m3fn, inf, Fp8Overflow::saturate) == 0x7E);
  CHECK(encode_fp8(F::e4m3fn, -inf, Fp8Overflow::nonfinite) == 0xFF);
  CHECK(encode_fp8(F::e5m2, -inf, Fp8Overflow::nonfinite) == 0xFC);
  CHECK(encode_fp8(F::e5m2, -inf, Fp8Overflow::saturate) == 0xFB);
  CHECK(encode_fp8(F::e4m3fn, nan, Fp8Overflow::saturate) == 0x7F);
  CHECK(encode_fp8(F::e5m2, nan, Fp8Overflow::saturate) == 0x7E);
  CHECK(encode_fp8(F::e4m3fnuz, nan, Fp8Overflow::saturate) == 0x80);
  CHECK(encode_fp8(F::e4m3fn, -0.0, Fp8Overflow::saturate) == 0x80);
  CHECK(encode_fp8(F::e4m3fnuz, -0.0, Fp8Overflow::saturate) == 0x00);
  CHECK(encode_fp8(F::e4m3fnuz, -0x1p-12, Fp8Overflow::saturate) == 0x00);  // below half 2^-10
  CHECK(encode_fp8(F::e4m3fn, -0x1p-11, Fp8Overflow::saturate) == 0x80);    // 2^-11 < 2^-10: -0
  CHECK(encode_fp8(F::e4m3fn, 0x1p-10, Fp8Overflow::saturate) == 0x00);     // a tie: to 0 (even)
  CHECK(encode_fp8(F::e4m3fn, 3 * 0x1p-11, Fp8Overflow::saturate) == 0x01);
}

TEST_CASE("FP8 rounding of an MPFR value rounds once (no double rounding through double)") {
  // 1 + 2^-4 + 2^-70 is above the e4m3 midpoint 1.0625 between 1 and 1.125 by less than a double
  // can hold: through double it would tie to 1 (0x38); once, it is 1.125 (0x39).
  const Real x = parse_real("0x1.10000000000000004p0");
  CHECK(encode_fp8(Fp8Format::e4m3fn, x, Fp8Overflow::saturate) == 0x39);
  CHECK(encode_fp8(Fp8Format::e4m3fn, static_cast<double>(x), Fp8Overflow::saturate) == 0x38);
  // Far outside double's range.
  const Real huge = parse_real("0x1p+5000"), tiny = parse_real("-0x1p-5000");
  CHECK(encode_fp8(Fp8Format::e5m2, huge, Fp8Overflow::nonfinite) == 0x7C);
  CHECK(encode_fp8(Fp8Format::e5m2, tiny, Fp8Overflow::nonfinite) == 0x80);
}

TEST_CASE("FP8 format names parse; others are refused") {
  CHECK(parse_fp8_format("E4M3FN") == Fp8Format::e4m3fn);
  CHECK(parse_fp8_format("e5m2") == Fp8Format::e5m2);
  CHECK(parse_fp8_format("e4m3fnuz") == Fp8Format::e4m3fnuz);
  CHECK_THROWS_AS(parse_fp8_format("e4m3"), ReferenceError);
}
