// kernels/common/storage.h against an independent derivation: fp16 / bf16 values decoded here
// from their bit fields with ldexp, and rounding decided by comparing with the exact midpoint of
// the two neighbouring representable values (in double, where midpoints are exact), ties to the
// even significand. Covers every fp16 and bf16 bit pattern, every midpoint, the overflow
// threshold (65520 -> inf in fp16) and random floats.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/storage.h"

using namespace attncheck::kern;

namespace {

// Independent decoders (bit fields, ldexp): exact in double.
double decode_f16(uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31)
    v = m ? std::nan("") : INFINITY;
  else if (e == 0)
    v = std::ldexp(double(m), -24);
  else
    v = std::ldexp(double(1024 + m), e - 25);
  return sign ? -v : v;
}
double decode_bf16(uint16_t b) {
  const int sign = b >> 15, e = (b >> 7) & 255, m = b & 127;
  double v;
  if (e == 255)
    v = m ? std::nan("") : INFINITY;
  else if (e == 0)
    v = std::ldexp(double(m), -133);
  else
    v = std::ldexp(double(128 + m), e - 134);
  return sign ? -v : v;
}

// Nearest-even rounding of x >= 0 to the sorted positive values `grid` (bit pattern = index),
// decided by the exact midpoint; above the last finite value the next "value" is the overflow
// point max + ulp (which rounds to inf at and above the midpoint).
uint16_t round_by_search(const std::vector<double>& grid, double overflow_next, double x) {
  auto it = std::upper_bound(grid.begin(), grid.end(), x);
  const size_t hi = size_t(it - grid.begin());  // grid[hi-1] <= x < grid[hi]
  const size_t lo = hi - 1;
  const double lo_v = grid[lo], hi_v = hi < grid.size() ? grid[hi] : overflow_next;
  if (x == lo_v) return uint16_t(lo);
  const double mid = (lo_v + hi_v) / 2;  // exact: both have few significant bits
  if (x < mid) return uint16_t(lo);
  if (x > mid) return uint16_t(hi);
  return uint16_t((lo & 1) ? hi : lo);  // tie: even significand (hi == grid.size() is inf, even)
}

}  // namespace

TEST_CASE("fp16: every bit pattern decodes exactly and round-trips") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const double want = decode_f16(uint16_t(b));
    const float got = f16_to_float(uint16_t(b));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
      const uint16_t back = float_to_f16(got);
      REQUIRE((back & 0x7c00u) == 0x7c00u);
      REQUIRE((back & 0x3ffu) != 0);
      continue;
    }
    REQUIRE(double(got) == want);
    REQUIRE(float_to_f16(got) == uint16_t(b));
  }
}

TEST_CASE("bf16: every bit pattern decodes exactly and round-trips") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const double want = decode_bf16(uint16_t(b));
    const float got = bf16_to_float(uint16_t(b));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
      continue;
    }
    REQUIRE(double(got) == want);
    REQUIRE(float_to_bf16(got) == uint16_t(b));
  }
}

TEST_CASE("fp16 and bf16: midpoints round to even, neighbours of midpoints to the nearer value") {
  for (int fmt = 0; fmt < 2; ++fmt) {
    const uint32_t max_finite = fmt == 0 ? 0x7bffu : 0x7f7fu;
    auto dec = [&](uint32_t b) { return fmt == 0 ? decode_f16(uint16_t(b)) : decode_bf16(uint16_t(b)); };
    auto enc = [&](float f) { return fmt == 0 ? float_to_f16(f) : float_to_bf16(f); };
    for (uint32_t b = 0; b <= max_finite; ++b) {
      const double lo = dec(b);
      // the value after the largest finite one is max + ulp, the point overflow rounds toward
      const double hi = b < max_finite ? dec(b + 1) : lo + (lo - dec(b - 1));
      const double mid = (lo + hi) / 2;
      const float midf = float(mid);
      REQUIRE(double(midf) == mid);                // midpoints of fp16 / bf16 neighbours are exact in float
      const uint32_t even = (b & 1u) ? b + 1 : b;  // b + 1 past max_finite is 0x7c00 / 0x7f80 = inf
      for (int sign = 0; sign < 2; ++sign) {
        const uint32_t s = sign ? 0x8000u : 0u;
        const float m = sign ? -midf : midf;
        REQUIRE(enc(m) == uint16_t(s | even));
        REQUIRE(enc(std::nextafter(m, 0.0f)) == uint16_t(s | b));
        REQUIRE(enc(std::nextafter(m, sign ? -INFINITY : INFINITY)) == uint16_t(s | (b + 1)));
      }
    }
  }
  // the published thresholds: 65520 is fp16's overflow rounding threshold
  REQUIRE(float_to_f16(65520.0f) == 0x7c00u);
  REQUIRE(float_to_f16(std::nextafter(65520.0f, 0.0f)) == 0x7bffu);
  REQUIRE(f16_to_float(0x7bffu) == 65504.0f);
}

TEST_CASE("fp16 and bf16: random floats round to nearest-even by independent search") {
  std::vector<double> f16_grid, bf16_grid;
  for (uint32_t b = 0; b <= 0x7bffu; ++b) f16_grid.push_back(decode_f16(uint16_t(b)));
  for (uint32_t b = 0; b <= 0x7f7fu; ++b) bf16_grid.push_back(decode_bf16(uint16_t(b)));
  const double f16_next = 65504.0 + 32.0, bf16_next = decode_bf16(0x7f7f) + std::ldexp(1.0, 120);
  std::mt19937_64 rng(12345);
  std::uniform_int_distribution<uint32_t> bits(0, 0x7f7fffffu);  // every finite positive float
  std::uniform_real_distribution<double> near_one(-30, 17);      // and fp16's own range, densely
  for (int n = 0; n < 200000; ++n) {
    float x;
    const uint32_t u = bits(rng);
    std::memcpy(&x, &u, 4);
    if (n % 2) x = float(std::exp2(near_one(rng)));
    const double xd = x;
    const uint16_t want16 = xd >= f16_next ? uint16_t(0x7c00) : round_by_search(f16_grid, f16_next, xd);
    const uint16_t wantb = xd >= bf16_next ? uint16_t(0x7f80) : round_by_search(bf16_grid, bf16_next, xd);
    INFO("x = " << std::hexfloat << xd);
    REQUIRE(float_to_f16(x) == want16);
    REQUIRE(float_to_f16(-x) == uint16_t(0x8000u | want16));
    REQUIRE(float_to_bf16(x) == wantb);
  }
}

TEST_CASE("round_through and load/store agree with the per-format conversions") {
  REQUIRE(round_through(DType::f16, 1.0f + std::ldexp(1.0f, -11)) == 1.0f);  // tie, to even
  REQUIRE(round_through(DType::f16, 1.0f + 3 * std::ldexp(1.0f, -11)) == 1.0f + std::ldexp(1.0f, -9));
  REQUIRE(round_through(DType::bf16, 1.0f + std::ldexp(1.0f, -8)) == 1.0f);
  REQUIRE(round_through(DType::f32, 0.1f) == 0.1f);
  REQUIRE(std::isinf(round_through(DType::f16, 65520.0f)));
  REQUIRE(round_through(DType::f16, std::ldexp(1.0f, -25)) == 0.0f);  // tie with 0: to even (0)
  REQUIRE(round_through(DType::f16, std::ldexp(1.5f, -25)) == std::ldexp(1.0f, -24));
}
