// Two merge conventions settled by the judge, checked against hand-derived values:
//  - a weight below fp32's normal range is an fp32 subnormal whatever the kernel does: with
//    L_prefix = -104, L_suffix = 0 the prefix weight e^-104 = 6.8e-46 is below half the smallest
//    spacing (2^-150 = 7.0e-46) and rounds to 0, so O = 0 while the exact O is e^-104 * 16 = 1.09e-44
//    = 7.77 spacings of 2^-149 (the suffix's O is 0): more than the 4 ulps of O that relative terms
//    allow. A merge that rounds the weight once is within budget (20 spacings: 16 for the weight,
//    4 ulps of O); one 30 spacings off (22.2 from the exact value) is not;
//  - a NaN LSE on either side is propagated (O and LSE NaN), never read as an empty state.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "attncheck/properties.hpp"
#include "fakes.hpp"

using namespace attncheck;
using namespace fakes;

namespace {

// fp32 "scale then multiply", the engines' merge: w_i = exp(L_i - L) in fp32, O = sum w_i O_i.
// `extra` spacings of 2^-149 are added to O (a deliberately wrong result).
class Fp32Merge : public Fake {
 public:
  Fp32Merge(std::string name, int extra, bool nan_as_empty = false)
      : Fake(std::move(name), AC_OP_MERGE), extra_(extra), nan_as_empty_(nan_as_empty) {}
  MergeOutput merge(const MergeInput& in) override {
    MergeOutput out;
    const int64_t rows = int64_t(in.num_tokens) * in.num_heads, D = in.head_size;
    out.out.resize(size_t(rows * D));
    out.lse.resize(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
      float a = in.prefix_lse[size_t(r)], b = in.suffix_lse[size_t(r)];
      if (a == INFINITY) a = -INFINITY;
      if (b == INFINITY) b = -INFINITY;
      if (nan_as_empty_) {
        if (std::isnan(a)) a = -INFINITY;
        if (std::isnan(b)) b = -INFINITY;
      }
      const float m =
          std::fmax(a, b) == -INFINITY ? 0.0f : (std::isnan(a) || std::isnan(b) ? NAN : std::fmax(a, b));
      const float l = std::log(std::exp(a - m) + std::exp(b - m)) + m;
      const float wa = std::exp(a - l), wb = std::exp(b - l);
      for (int64_t c = 0; c < D; ++c) {
        float o = wa * float(dec(in.dtype, in.prefix_out[size_t(r * D + c)])) +
                  wb * float(dec(in.dtype, in.suffix_out[size_t(r * D + c)]));
        o += float(extra_) * 0x1p-149f;
        out.out[size_t(r * D + c)] = enc(in.dtype, o);
      }
      out.lse[size_t(r)] = l;
    }
    return out;
  }

 private:
  int extra_;
  bool nan_as_empty_;
};

Case merge_case(float prefix_lse, float suffix_lse, double prefix_o, double suffix_o) {
  MergeInput m;
  m.dtype = AC_DTYPE_F32;
  m.num_tokens = 1;
  m.num_heads = 1;
  m.head_size = 1;
  m.prefix_lse = {prefix_lse};
  m.suffix_lse = {suffix_lse};
  m.prefix_out = {enc(AC_DTYPE_F32, prefix_o)};
  m.suffix_out = {enc(AC_DTYPE_F32, suffix_o)};
  Case c;
  c.op = "merge";
  c.property = "accuracy";
  c.input = m;
  return c;
}

}  // namespace

TEST_CASE("merge: a weight in fp32's subnormal range costs its rounding, and no more",
          "[properties][merge]") {
  const Case c = merge_case(-104.0f, 0.0f, 16.0, 0.0);
  // The hand derivation above: the engines' order gives 0 where the exact value is 4 spacings.
  Fp32Merge engine("fp32-merge", 0);
  const MergeOutput got = engine.merge(std::get<MergeInput>(c.input));
  float o;
  std::memcpy(&o, &got.out[0], 4);
  REQUIRE(o == 0.0f);
  CHECK(std::fabs(std::exp(-104.0) * 16.0 / 0x1p-149 - 7.77) < 0.01);
  CHECK(replay_case(c, engine).passed);
  Fp32Merge off("fp32-merge-off", 30);
  CHECK_FALSE(replay_case(c, off).passed);
}

TEST_CASE("merge: a NaN LSE is propagated, never read as an empty side", "[properties][merge]") {
  for (float other : {float(INFINITY), -float(INFINITY), 0.5f}) {
    INFO("other LSE " << other);
    const Case c = merge_case(NAN, other, 1.0, 2.0);
    Fp32Merge propagate("fp32-merge", 0);
    CHECK(replay_case(c, propagate).passed);
    Fp32Merge hide("fp32-merge-nan-as-empty", 0, /*nan_as_empty=*/true);
    CHECK_FALSE(replay_case(c, hide).passed);
  }
}
