// The KV-cache quantiser's shared math (kernels/quantize/quantize_math.h) against the reference's
// single rounding into each FP8 format (reference/fp8.hpp encode_fp8, itself checked against a
// search over all 256 codes in tests/reference): every code, every tie between neighbours and the
// fp32 values on either side of it, the overflow thresholds, and random fp32 values, in all three
// formats, saturating or not. Then the host twin through its registered ac_subject entry on
// hand-derived values (fp16 input, a scale per head).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attncheck/reference/fp8.hpp"
#include "common/registry.h"
#include "quantize/quantize.h"

using namespace attncheck;
using kern::float_to_fp8;

namespace {

struct Format {
  int kv_dtype;
  ref::Fp8Format f;
};
constexpr Format kFormats[] = {{AC_DTYPE_E4M3, ref::Fp8Format::e4m3fn},
                               {AC_DTYPE_E5M2, ref::Fp8Format::e5m2},
                               {AC_DTYPE_E4M3FNUZ, ref::Fp8Format::e4m3fnuz}};

// The shared math's code against the reference's for one fp32 value; returns whether they agree.
bool agrees(const Format& fm, float q, bool saturate) {
  const uint8_t got = float_to_fp8(fm.kv_dtype, q, saturate);
  const uint8_t want =
      ref::encode_fp8(fm.f, double(q), saturate ? ref::Fp8Overflow::saturate : ref::Fp8Overflow::nonfinite);
  // A NaN is any NaN code: the reference writes the canonical positive one.
  if (std::isnan(q)) return std::isnan(ref::decode_fp8(fm.f, got));
  if (got != want) {
    UNSCOPED_INFO("q = " << q << " (" << std::hexfloat << q << std::defaultfloat << "), format "
                         << ref::fp8_spec(fm.f).name << (saturate ? " saturating" : "") << ": got 0x"
                         << std::hex << int(got) << ", reference 0x" << int(want) << std::dec);
    return false;
  }
  return true;
}

}  // namespace

TEST_CASE("quantize math: every code, tie and neighbour agrees with the reference's rounding",
          "[kernels][quantize]") {
  for (const Format& fm : kFormats)
    for (bool saturate : {false, true}) {
      int bad = 0, checked = 0;
      const ref::Fp8Spec& sp = ref::fp8_spec(fm.f);
      const double step_past = std::ldexp(1.0, std::ilogb(sp.largest) - sp.mantissa_bits);
      for (int c = 0; c <= int(sp.largest_code); ++c) {
        const double v = ref::decode_fp8(fm.f, uint8_t(c));
        const double next =
            c == int(sp.largest_code) ? sp.largest + step_past : ref::decode_fp8(fm.f, uint8_t(c + 1));
        const float mid = float((v + next) / 2);  // exact: at most 5 significant bits
        for (float q : {float(v), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), float(next)})
          for (float s : {1.0f, -1.0f}) {
            ++checked;
            bad += !agrees(fm, s * q, saturate);
          }
      }
      for (float q : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 0x1p-149f, 0x1p-126f, 3.4e38f, -3.4e38f}) {
        ++checked;
        bad += !agrees(fm, q, saturate);
      }
      std::mt19937 rng(7);
      for (int i = 0; i < 200000; ++i) {
        // Random bit patterns, exponents spread over the whole fp32 range and over the format's.
        uint32_t u = rng();
        if (i % 2) u = (u & 0x807fffffu) | (uint32_t(127 - 20 + int(rng() % 40)) << 23);
        float q;
        std::memcpy(&q, &u, 4);
        ++checked;
        bad += !agrees(fm, q, saturate);
      }
      INFO(sp.name << (saturate ? " saturating" : " nonfinite") << ": " << bad << " of " << checked
                   << " differ");
      CHECK(bad == 0);
    }
}

TEST_CASE("quantize math: hand-derived codes at the contract's edges", "[kernels][quantize]") {
  // e4m3fn: 448 = 1.75 2^8 is 0x7e (exponent field 15, mantissa 6); 464 is the tie between 448 and
  // the 480 a wider format would have, and rounds to the even 448; 465 overflows: 0x7e saturating,
  // NaN 0x7f not. -inf: 0xfe saturating, 0xff not.
  CHECK(float_to_fp8(AC_DTYPE_E4M3, 448.0f, false) == 0x7e);
  CHECK(float_to_fp8(AC_DTYPE_E4M3, 464.0f, false) == 0x7e);
  CHECK(float_to_fp8(AC_DTYPE_E4M3, 465.0f, true) == 0x7e);
  CHECK(float_to_fp8(AC_DTYPE_E4M3, 465.0f, false) == 0x7f);
  CHECK(float_to_fp8(AC_DTYPE_E4M3, -INFINITY, true) == 0xfe);
  CHECK(float_to_fp8(AC_DTYPE_E4M3, -INFINITY, false) == 0xff);
  // The smallest subnormal 2^-9 is 0x01; 2^-10 is the tie between 0 and it: the even 0, its sign kept.
  CHECK(float_to_fp8(AC_DTYPE_E4M3, 0x1p-9f, false) == 0x01);
  CHECK(float_to_fp8(AC_DTYPE_E4M3, -0x1p-10f, false) == 0x80);
  CHECK(float_to_fp8(AC_DTYPE_E4M3, 0x1.8p-10f, false) == 0x01);
  // 1.1875 is the tie between 1.125 (0x39, odd) and 1.25 (0x3a, even).
  CHECK(float_to_fp8(AC_DTYPE_E4M3, 1.1875f, false) == 0x3a);
  // e5m2: 57344 = 1.75 2^15 is 0x7b; 61440 is the tie with 65536 (even, the exponent of inf): inf
  // 0x7c, or 0x7b saturating.
  CHECK(float_to_fp8(AC_DTYPE_E5M2, 61439.0f, false) == 0x7b);
  CHECK(float_to_fp8(AC_DTYPE_E5M2, 61440.0f, false) == 0x7c);
  CHECK(float_to_fp8(AC_DTYPE_E5M2, 61440.0f, true) == 0x7b);
  // e4m3fnuz: 240 = 1.875 2^7 is 0x7f; -0 and a negative underflow give 0x00 (0x80 is its NaN).
  CHECK(float_to_fp8(AC_DTYPE_E4M3FNUZ, 240.0f, false) == 0x7f);
  CHECK(float_to_fp8(AC_DTYPE_E4M3FNUZ, 250.0f, false) == 0x80);
  CHECK(float_to_fp8(AC_DTYPE_E4M3FNUZ, -0.0f, false) == 0x00);
  CHECK(float_to_fp8(AC_DTYPE_E4M3FNUZ, -0x1p-13f, false) == 0x00);
  // The mutant's cast: saturation declared, overflow code written.
  CHECK(float_to_fp8<kern::QuantizeMutation::nan_cast>(AC_DTYPE_E4M3, 465.0f, true) == 0x7f);
}

TEST_CASE("quantize-fp8 host twin through its ac_subject: fp16 input, a scale per head",
          "[kernels][quantize]") {
  const std::vector<ac_subject> subjects = kern::builtin_subjects(false);
  const ac_subject* sat = nullptr;
  for (const ac_subject& s : subjects)
    if (std::string(s.name) == "quantize-fp8") sat = &s;
  REQUIRE(sat);
  REQUIRE(sat->quantize);
  // One token, two heads of two: x = (6, -1000 | 6, 0.3) in fp16 (0x4600, 0xe3d0, 0x4600, 0x34cd =
  // 0.30004883), scales 2 and 0.5, e4m3fn. Head 0: 3 = 1.5 2^1 -> 0x44; -500 saturates -> 0xfe.
  // Head 1: 12 = 1.5 2^3 -> 0x54; 0.6000977 lies between 0.5625 (0x31) and 0.625 (0x32), nearer
  // 0.625 -> 0x32.
  const std::vector<uint16_t> x = {0x4600, 0xe3d0, 0x4600, 0x34cd};
  const std::vector<float> scales = {2.0f, 0.5f};
  std::vector<uint8_t> y(4, 0xaa);
  ac_quantize_args a{};
  a.dtype = AC_DTYPE_F16;
  a.out_dtype = AC_DTYPE_E4M3;
  a.num_tokens = 1;
  a.num_heads = 2;
  a.head_size = 2;
  a.x = x.data();
  a.y = y.data();
  a.scale = scales.data();
  a.num_scales = 2;
  char err[256] = {0};
  REQUIRE(sat->quantize(sat->self, &a, err, sizeof err) == AC_OK);
  CHECK(y == std::vector<uint8_t>{0x44, 0xfe, 0x54, 0x32});
  // Refusals before any work: a scale count that is neither 1 nor num_heads, an FP8 input dtype.
  a.num_scales = 3;
  CHECK(sat->quantize(sat->self, &a, err, sizeof err) == AC_ERR_UNSUPPORTED);
  CHECK(std::string(err).find("num_scales 3") != std::string::npos);
  a.num_scales = 2;
  a.dtype = AC_DTYPE_E4M3;
  CHECK(sat->quantize(sat->self, &a, err, sizeof err) == AC_ERR_UNSUPPORTED);
}
