// FP8 outputs outside the kernels. The KV-cache quantiser's contract (plugin_abi.h AC_OP_QUANTIZE):
// the judge's allowed codes on hand-derived elements, the argument that rounding the fp64 quotient
// gives the real quotient's code (checked against MPFR's quotient), quantize_exact against a correct
// fake and one broken fake per failure class, and the case file's fields and refusals. A merge's FP8
// output (ac_merge_args.out_dtype): its interval's division term, the judge's codes, the case fields.
// Expected codes are derived in the comments from the formats' definitions (reference/fp8.hpp), never read
// off the code under test.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "attncheck/case.hpp"
#include "attncheck/properties.hpp"
#include "attncheck/reference/fp8.hpp"
#include "expect_refused.hpp"
#include "fakes.hpp"
#include "internal.hpp"

using namespace attncheck;

namespace {

uint32_t f32(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

QuantizeInput one(float x, float scale, ac_dtype out = AC_DTYPE_E4M3) {
  QuantizeInput q;
  q.dtype = AC_DTYPE_F32;
  q.out_dtype = out;
  q.num_tokens = q.num_heads = q.head_size = 1;
  q.x = {f32(x)};
  q.scales = {scale};
  return q;
}

detail::Conventions conv(bool saturate) {
  detail::Conventions cv;
  cv.saturate = saturate;
  return cv;
}

// Whether code `y` passes for x / scale.
bool passes(float x, float scale, uint32_t y, bool saturate, ac_dtype out = AC_DTYPE_E4M3) {
  const QuantizeInput q = one(x, scale, out);
  return detail::judge_quantize(q, QuantizeOutput{{y}}, conv(saturate)).elems.at(0).within;
}

std::string failure_class(float x, float scale, uint32_t y, bool saturate, ac_dtype out = AC_DTYPE_E4M3) {
  const QuantizeInput q = one(x, scale, out);
  const detail::Judgement J = detail::judge_quantize(q, QuantizeOutput{{y}}, conv(saturate));
  return detail::quantize_failure_class(q, J.elems.at(0));
}

// A quantiser in plain code: the fp32 quotient, then the reference's rounding; or one bug.
enum class QBug { none, nan_cast, truncate, first_scale, ties_away, reciprocal };

class FakeQuantizer final : public Subject {
 public:
  FakeQuantizer(QBug bug, bool saturate) : bug_(bug), name_("fake-quantizer") {
    caps_.ops = AC_OP_QUANTIZE;
    caps_.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32) | AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
    caps_.memory = AC_MEMORY_HOST;
    caps_.head_size_min = 1;
    caps_.head_size_max = 1024;
    caps_.empty_lse_sign = -1;
    caps_.kv_dtypes =
        AC_DTYPE_BIT(AC_DTYPE_E4M3) | AC_DTYPE_BIT(AC_DTYPE_E5M2) | AC_DTYPE_BIT(AC_DTYPE_E4M3FNUZ);
    caps_.fp8 = AC_FP8_DESCALE_PER_KV_HEAD | (saturate ? AC_FP8_SATURATE : 0u);
  }
  const std::string& name() const override { return name_; }
  const std::string& description() const override { return name_; }
  const ac_caps& caps() const override { return caps_; }
  std::string backend() const override { return "host"; }
  std::string origin() const override { return "test"; }
  MergeOutput merge(const MergeInput&) override { throw SubjectError(SubjectError::Kind::unsupported, "no"); }
  SoftmaxOutput softmax(const SoftmaxInput&) override {
    throw SubjectError(SubjectError::Kind::unsupported, "no");
  }
  AttentionOutput attention(const AttentionInput&, const AttentionOptions&) override {
    throw SubjectError(SubjectError::Kind::unsupported, "no");
  }
  // A format it refuses though it declares it (AC_DTYPE_F32: none), and scales per head refused.
  ac_dtype refuse = AC_DTYPE_F32;
  bool refuse_per_head = false;
  QuantizeOutput quantize(const QuantizeInput& in) override {
    if (in.out_dtype == refuse)
      throw SubjectError(SubjectError::Kind::unsupported, "this format is not compiled in");
    if (refuse_per_head && in.scales.size() > 1)
      throw SubjectError(SubjectError::Kind::unsupported, "scales per head are not compiled in");
    const ref::Fp8Format f = detail::fp8_format(in.out_dtype);
    const bool saturate = (caps_.fp8 & AC_FP8_SATURATE) && bug_ != QBug::nan_cast;
    const ref::Fp8Overflow ov = saturate ? ref::Fp8Overflow::saturate : ref::Fp8Overflow::nonfinite;
    QuantizeOutput out;
    for (size_t i = 0; i < in.x.size(); ++i) {
      const int64_t h = int64_t(i / size_t(in.head_size)) % in.num_heads;
      const float s = bug_ == QBug::first_scale ? in.scales[0] : in.scale_of_head(h);
      // The reciprocal bug multiplies by fl32(1 / s): two roundings, off next to ties.
      const float q = bug_ == QBug::reciprocal ? float(detail::decode(in.dtype, in.x[i])) * (1.0f / s)
                                               : float(detail::decode(in.dtype, in.x[i])) / s;
      const double v = double(q);
      const uint8_t rn = ref::encode_fp8(f, v, ov);
      const double r = ref::decode_fp8(f, rn);
      const uint32_t sign = rn & 0x80u, mag = rn & 0x7fu;
      // Truncation: the code one step nearer zero where rounding went away from it.
      if (bug_ == QBug::truncate && std::fabs(r) > std::fabs(v) && mag != 0) {
        out.y.push_back(sign | (mag - 1));
        continue;
      }
      // Ties away from zero: the code one step farther out where v sits halfway.
      if (bug_ == QBug::ties_away && std::fabs(r) < std::fabs(v)) {
        const double next = ref::decode_fp8(f, uint8_t(sign | (mag + 1)));
        if (std::fabs(next - v) == std::fabs(v - r)) {
          out.y.push_back(sign | (mag + 1));
          continue;
        }
      }
      out.y.push_back(ref::encode_fp8(f, v, ov));
    }
    return out;
  }

 private:
  QBug bug_;
  std::string name_;
  ac_caps caps_{};
};

// A merge declaring saturating FP8 outputs in every format: fakes::Fake's merge in fp32, each value
// divided by the scale and rounded once more into the format; or a format it refuses.
class Fp8MergeFake final : public Subject {
 public:
  explicit Fp8MergeFake(ac_dtype refuse = AC_DTYPE_F32)
      : inner_("fp8-merge", AC_OP_MERGE), caps_(inner_.caps()), refuse_(refuse) {
    caps_.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32);
    caps_.kv_dtypes = kFp8DtypeBits;
    caps_.fp8 = AC_FP8_SATURATE;
  }
  const std::string& name() const override { return inner_.name(); }
  const std::string& description() const override { return inner_.description(); }
  const ac_caps& caps() const override { return caps_; }
  std::string backend() const override { return "host"; }
  std::string origin() const override { return "test"; }
  MergeOutput merge(const MergeInput& in) override {
    if (!in.fp8_out()) return inner_.merge(in);
    if (in.out_dtype == refuse_)
      throw SubjectError(SubjectError::Kind::unsupported, "this output format is not compiled in");
    MergeInput wide = in;
    wide.out_dtype = AC_DTYPE_F32;
    MergeOutput out = inner_.merge(wide);
    for (uint32_t& y : out.out)
      y = ref::encode_fp8(detail::fp8_format(in.out_dtype), detail::decode(AC_DTYPE_F32, y) / in.output_scale,
                          ref::Fp8Overflow::saturate);
    return out;
  }
  SoftmaxOutput softmax(const SoftmaxInput&) override {
    throw SubjectError(SubjectError::Kind::unsupported, "no");
  }
  AttentionOutput attention(const AttentionInput&, const AttentionOptions&) override {
    throw SubjectError(SubjectError::Kind::unsupported, "no");
  }

 private:
  fakes::Fake inner_;
  ac_caps caps_;
  ac_dtype refuse_;
};

RunConfig cases(int n) {
  RunConfig cfg;
  cfg.shrink = false;
  cfg.num_cases = n;
  return cfg;
}

}  // namespace

TEST_CASE("judge_quantize: hand-derived codes at the contract's edges", "[properties][quantize]") {
  // e4m3fn, bias 7: 448 = 1.75 2^8 is 0x7e; 464, halfway to the 480 a wider exponent would give,
  // rounds to the even 448; 465 overflows: 0x7e saturating, a NaN (0x7f or 0xff) otherwise.
  CHECK(passes(464.0f, 1.0f, 0x7e, false));
  CHECK_FALSE(passes(464.0f, 1.0f, 0x7f, false));
  CHECK(failure_class(464.0f, 1.0f, 0x7f, false) == "overflow");
  CHECK(passes(465.0f, 1.0f, 0x7e, true));
  CHECK_FALSE(passes(465.0f, 1.0f, 0x7f, true));
  CHECK(passes(465.0f, 1.0f, 0x7f, false));
  CHECK(passes(465.0f, 1.0f, 0xff, false));  // any NaN code
  CHECK_FALSE(passes(465.0f, 1.0f, 0x7e, false));
  // -inf: -448 (0xfe) saturating, NaN otherwise.
  CHECK(passes(-INFINITY, 1.0f, 0xfe, true));
  CHECK(passes(-INFINITY, 1.0f, 0xff, false));
  CHECK(failure_class(-INFINITY, 1.0f, 0x7f, true) == "overflow");
  // NaN stays NaN, saturating or not.
  CHECK(passes(NAN, 1.0f, 0x7f, true));
  CHECK_FALSE(passes(NAN, 1.0f, 0x7e, true));
  CHECK(failure_class(NAN, 1.0f, 0x00, true) == "nan_hidden");
  // e4m3fn's smallest subnormal is 2^-9 (0x01): 2^-10 ties to the even 0, either zero passes; 0x01
  // does not.
  CHECK(passes(0x1p-10f, 1.0f, 0x00, false));
  CHECK(passes(0x1p-10f, 1.0f, 0x80, false));
  CHECK_FALSE(passes(0x1p-10f, 1.0f, 0x01, false));
  CHECK(failure_class(0x1p-10f, 1.0f, 0x01, false) == "rounding");
  // e5m2: 57344 = 1.75 2^15 is 0x7b; 61440 ties with 65536, the even one, past the largest: inf
  // (0x7c), or 0x7b saturating.
  CHECK(passes(61440.0f, 1.0f, 0x7c, false, AC_DTYPE_E5M2));
  CHECK(passes(61440.0f, 1.0f, 0x7b, true, AC_DTYPE_E5M2));
  CHECK(passes(61439.0f, 1.0f, 0x7b, false, AC_DTYPE_E5M2));
  CHECK_FALSE(passes(61440.0f, 1.0f, 0x7b, false, AC_DTYPE_E5M2));
  // e4m3fnuz: no -0 (0x80 is its NaN): -2^-12 rounds to zero, 0x00 only.
  CHECK(passes(-0x1p-12f, 1.0f, 0x00, false, AC_DTYPE_E4M3FNUZ));
  CHECK_FALSE(passes(-0x1p-12f, 1.0f, 0x80, false, AC_DTYPE_E4M3FNUZ));
  // A report's "rounded" value follows the declaration: 465 saturates to 448 (0x1.cp+8), and without
  // saturation it is NaN.
  {
    const QuantizeInput q = one(465.0f, 1.0f);
    CHECK(detail::to_worst(detail::judge_quantize(q, QuantizeOutput{{0x7f}}, conv(true)).elems.at(0))
              .rounded_exact == "0x1.cp+8");
    CHECK(detail::to_worst(detail::judge_quantize(q, QuantizeOutput{{0x7e}}, conv(false)).elems.at(0))
              .rounded_exact == "nan");
  }
  // The scale divides: 6 / 2 = 3 = 1.5 2^1, exponent field 8, mantissa 4: 0x44.
  CHECK(passes(6.0f, 2.0f, 0x44, false));
  CHECK_FALSE(passes(6.0f, 2.0f, 0x4c, false));  // 6 itself: a scale ignored
}

TEST_CASE("judge_quantize: the fp32 quotient's code is allowed beside the real quotient's",
          "[properties][quantize]") {
  // x = 1.1875 + 2^-23 and s = 1 + 2^-23 (both fp32). x / s = 1.1875 - 0.1875 2^-23 / (1 + 2^-23),
  // just below the tie 1.1875 between 1.125 (0x39) and 1.25 (0x3a): the real quotient's code is
  // 0x39. Its fp32 rounding is 1.1875 itself (0.1875 2^-23 is under half of fp32's ulp 2^-23 there),
  // a tie, which goes to the even 0x3a. A kernel dividing in fp32 writes 0x3a; one dividing in wider
  // arithmetic 0x39. Both pass; 0x38 and 0x3b do not.
  const float x = 1.1875f + 0x1p-23f, s = 1.0f + 0x1p-23f;
  CHECK(x / s == 1.1875f);
  CHECK(ref::encode_fp8(ref::Fp8Format::e4m3fn, ref::Real(double(x)) / ref::Real(double(s)),
                        ref::Fp8Overflow::saturate) == 0x39);
  CHECK(passes(x, s, 0x39, false));
  CHECK(passes(x, s, 0x3a, false));
  CHECK_FALSE(passes(x, s, 0x38, false));
  CHECK_FALSE(passes(x, s, 0x3b, false));
  CHECK(failure_class(x, s, 0x3b, false) == "rounding");
}

TEST_CASE("judge_quantize: the fp64 quotient rounds to the real quotient's code", "[properties][quantize]") {
  // judge_quantize.cpp's argument, checked: for fp32 / fp16 / bf16 x and fp32 s, rounding x / s in
  // fp64 and then to the format gives MPFR's quotient's code, in every format and both overflow
  // modes. Inputs: random values, and values built to sit on and next to the formats' ties.
  std::mt19937 rng(5);
  int checked = 0, differ = 0;
  for (int i = 0; i < 40000; ++i) {
    const float s = std::ldexp(1.0f + float(rng() % (1u << 23)) * 0x1p-23f, int(rng() % 24) - 12);
    float x;
    if (i % 2) {
      x = std::ldexp(1.0f + float(rng() % (1u << 23)) * 0x1p-23f, int(rng() % 40) - 20);
    } else {
      // A tie of e4m3 / e5m2 (5 significant bits) times s, rounded to fp32, fp16 or bf16.
      const double tie = std::ldexp(double(16 + 2 * (rng() % 8) + 1), int(rng() % 30) - 22);
      x = float(tie * double(s));
      if (i % 4 == 2)
        x = float(detail::decode(AC_DTYPE_F16, ref::round_to_format(ref::Format::fp16, double(x))));
    }
    if (!std::isfinite(x)) continue;
    for (ref::Fp8Format f : {ref::Fp8Format::e4m3fn, ref::Fp8Format::e5m2, ref::Fp8Format::e4m3fnuz})
      for (ref::Fp8Overflow ov : {ref::Fp8Overflow::saturate, ref::Fp8Overflow::nonfinite}) {
        ++checked;
        const uint8_t fast = ref::encode_fp8(f, double(x) / double(s), ov);
        const uint8_t exact = ref::encode_fp8(f, ref::Real(double(x)) / ref::Real(double(s)), ov);
        differ += fast != exact;
      }
  }
  INFO(differ << " of " << checked << " differ");
  CHECK(differ == 0);
  CHECK(checked > 200000);
}

TEST_CASE("declared_variants: a quantiser refusing a declared format or its scales per head fails, naming it",
          "[properties][quantize]") {
  FakeQuantizer good(QBug::none, true);
  const PropertyResult ok = run_property("declared_variants", good, cases(1));
  INFO(ok.message);
  CHECK(ok.status == PropertyResult::Status::passed);
  // quantize_exact takes either refusal for a skipped case and passes: declared_variants calls each.
  FakeQuantizer fnuz(QBug::none, true);
  fnuz.refuse = AC_DTYPE_E4M3FNUZ;
  CHECK(run_property("quantize_exact", fnuz, cases(60)).status == PropertyResult::Status::passed);
  expect_refused_declared(fnuz,
                          "the subject refused its declared codes in e4m3fnuz, which it must accept: this "
                          "format is not compiled in",
                          cases(1));
  FakeQuantizer per_head(QBug::none, true);
  per_head.refuse_per_head = true;
  CHECK(run_property("quantize_exact", per_head, cases(60)).status == PropertyResult::Status::passed);
  expect_refused_declared(
      per_head,
      "the subject refused its declared codes in e4m3fn (a scale per head), which it must "
      "accept: scales per head are not compiled in",
      cases(1));
}

TEST_CASE("declared_variants: a merge refusing one of its declared FP8 outputs fails, naming it",
          "[properties][merge][fp8]") {
  Fp8MergeFake good;
  const PropertyResult ok = run_property("declared_variants", good, cases(1));
  INFO(ok.message);
  CHECK(ok.status == PropertyResult::Status::passed);
  // accuracy takes the refusal for a skipped case and passes: declared_variants calls each format.
  Fp8MergeFake e5m2(AC_DTYPE_E5M2);
  CHECK(run_property("accuracy", e5m2, cases(60)).status == PropertyResult::Status::passed);
  expect_refused_declared(e5m2,
                          "the subject refused its declared output in e5m2 (output_scale 0.5), which it must "
                          "accept: this output format is not compiled in",
                          cases(1));
}

TEST_CASE("quantize_exact: a correct quantiser passes, each broken one fails with its class",
          "[properties][quantize]") {
  for (bool saturate : {true, false}) {
    FakeQuantizer good(QBug::none, saturate);
    const PropertyResult r = run_property("quantize_exact", good, cases(200));
    INFO(r.message);
    CHECK(r.status == PropertyResult::Status::passed);
    CHECK(r.cases_run == 200);
  }
  struct Expect {
    QBug bug;
    bool saturate;
    const char* cls;
  };
  for (const Expect& e :
       {Expect{QBug::nan_cast, true, "overflow"}, Expect{QBug::truncate, false, "rounding"},
        Expect{QBug::first_scale, false, "rounding"}, Expect{QBug::ties_away, false, "rounding"},
        Expect{QBug::reciprocal, false, "rounding"}}) {
    FakeQuantizer bad(e.bug, e.saturate);
    const PropertyResult r = run_property("quantize_exact", bad, cases(60));
    INFO("bug " << int(e.bug) << ": " << r.message);
    CHECK(r.status == PropertyResult::Status::failed);
    CHECK(r.failure_class == e.cls);
  }
}

TEST_CASE("quantize cases: the file's fields round-trip and bad ones are refused", "[properties][quantize]") {
  Case c;
  c.op = "quantize";
  c.subject = "quantize-fp8";
  c.property = "quantize_exact";
  QuantizeInput q;
  q.dtype = AC_DTYPE_BF16;
  q.out_dtype = AC_DTYPE_E5M2;
  q.num_tokens = 2;
  q.num_heads = 2;
  q.head_size = 1;
  q.x = {0x3f80, 0xc000, 0x7f80, 0x0001};
  q.scales = {0.5f, 3.0f};
  c.input = q;
  const Case back = case_from_json(case_to_json(c));
  const auto& r = std::get<QuantizeInput>(back.input);
  CHECK(r.dtype == q.dtype);
  CHECK(r.out_dtype == q.out_dtype);
  CHECK(r.x == q.x);
  CHECK(r.scales == q.scales);
  auto refused = [&](QuantizeInput bad, const std::string& why) {
    Case b = c;
    b.input = std::move(bad);
    try {
      case_from_json(case_to_json(b));
      FAIL("accepted: " << why);
    } catch (const CaseError& e) {
      CHECK(std::string(e.what()).find(why) != std::string::npos);
    }
  };
  QuantizeInput zero = q;
  zero.scales = {0.0f, 1.0f};
  refused(zero, "each scale is positive and finite");
  QuantizeInput inf = q;
  inf.scales = {INFINITY, 1.0f};
  refused(inf, "each scale is positive and finite");
  QuantizeInput negative = q;  // quoted as itself, not as -0.000000
  negative.scales = {-1e-20f, 1.0f};
  refused(negative, "input.scales holds -1e-20: each scale is positive and finite");
  QuantizeInput three = q;
  three.scales = {1.0f, 1.0f, 1.0f};
  refused(three, "not 1 or num_heads");
  QuantizeInput short_x = q;
  short_x.x.pop_back();
  refused(short_x, "input.x");
  QuantizeInput nothing = q;  // a quantise of no element judges nothing
  nothing.head_size = 0;
  nothing.x.clear();
  refused(nothing, "head_size");
}

// ---- FP8 outputs of a merge (ac_merge_args.out_dtype) ----------------------------------------------

TEST_CASE("fp8_output_interval: the division's fp32 rounding widens the interval",
          "[properties][quantize][budget]") {
  // exact 1, no merge error, scale 1: the kernel's fp32 value is 1 and 1 / 1 is exact, but the
  // allowance must still hold the division's half ulp (2^-24 relatively) for any quotient, so both
  // ends move by at least 2^-24.
  const Fp8Interval iv = fp8_output_interval(1.0, 0.0, 1.0);
  CHECK(iv.lo <= 1.0 - 0x1p-24);
  CHECK(iv.hi >= 1.0 + 0x1p-24);
  // And by no more than a few parts in 2^24 beside the merge's allowance, divided by the scale.
  const Fp8Interval w = fp8_output_interval(3.0, 0.5, 2.0);
  CHECK(w.lo == Approx(1.25).epsilon(1e-6));
  CHECK(w.hi == Approx(1.75).epsilon(1e-6));
  CHECK(w.lo < 1.25);
  CHECK(w.hi > 1.75);
}

namespace {

// A one-token, one-head merge of fp32 states of head size 1: prefix (o, LSE 0) and an empty suffix
// (the merge is o exactly), or both empty; output in `out` divided by `scale`.
MergeInput fp8_merge(float o, bool both_empty, float scale, ac_dtype out = AC_DTYPE_E4M3) {
  MergeInput m;
  m.dtype = AC_DTYPE_F32;
  m.num_tokens = m.num_heads = m.head_size = 1;
  m.prefix_out = {f32(o)};
  m.suffix_out = {f32(0.0f)};
  m.prefix_lse = {both_empty ? -INFINITY : 0.0f};
  m.suffix_lse = {-INFINITY};
  m.out_dtype = out;
  m.output_scale = scale;
  return m;
}

bool merge_passes(const MergeInput& m, uint32_t code) {
  const detail::Judgement J = detail::judge_merge(m, MergeOutput{{code}, {m.prefix_lse[0]}}, conv(true),
                                                  default_budget(AC_OP_MERGE, m.dtype));
  return J.elems.at(0).within;
}

}  // namespace

TEST_CASE("judge_merge: an FP8 output passes the codes of the merged value over the scale",
          "[properties][quantize]") {
  // 3 / 2 = 1.5 = 1.5 2^0: e4m3fn exponent field 7, mantissa 4, 0x3c. Its neighbours 0x3b and 0x3d
  // (1.375, 1.625) are farther than the merge's budget; 0x44 (3.0) is the scale ignored.
  CHECK(merge_passes(fp8_merge(3.0f, false, 2.0f), 0x3c));
  CHECK_FALSE(merge_passes(fp8_merge(3.0f, false, 2.0f), 0x3b));
  CHECK_FALSE(merge_passes(fp8_merge(3.0f, false, 2.0f), 0x3d));
  CHECK_FALSE(merge_passes(fp8_merge(3.0f, false, 2.0f), 0x44));
  // 1000 past 448: the saturating cast's 0x7e; NaN (0x7f) is a non-finite output.
  CHECK(merge_passes(fp8_merge(1000.0f, false, 1.0f), 0x7e));
  CHECK_FALSE(merge_passes(fp8_merge(1000.0f, false, 1.0f), 0x7f));
  // Two empty states: O = 0 exactly, either zero's code.
  CHECK(merge_passes(fp8_merge(5.0f, true, 1.0f), 0x00));
  CHECK(merge_passes(fp8_merge(5.0f, true, 1.0f), 0x80));
  CHECK_FALSE(merge_passes(fp8_merge(5.0f, true, 1.0f), 0x01));
  // The tie 1.1875 between 0x39 (odd) and 0x3a (even). Beside an empty suffix the merge returns
  // the prefix's O itself (weights 1 and 0, exact in fp32) and 1.1875 / 1 is exact: only the even
  // 0x3a passes, ties away from it fail.
  CHECK(merge_passes(fp8_merge(1.1875f, false, 1.0f), 0x3a));
  CHECK_FALSE(merge_passes(fp8_merge(1.1875f, false, 1.0f), 0x39));
  CHECK_FALSE(merge_passes(fp8_merge(1.1875f, false, 1.0f), 0x3b));
  // Two visible states of 1.1875 at equal LSEs: the same merged value, but reached through weights of
  // 1/2 whose fp32 error may put it on either side; the budget, not a rounding rule, decides: both.
  MergeInput two = fp8_merge(1.1875f, false, 1.0f);
  two.suffix_out = two.prefix_out;
  two.suffix_lse = {0.0f};
  CHECK(merge_passes(two, 0x39));
  CHECK(merge_passes(two, 0x3a));
  CHECK_FALSE(merge_passes(two, 0x3b));
}

TEST_CASE("merge cases: an FP8 output's fields round-trip and a bad scale is refused",
          "[properties][quantize]") {
  Case c;
  c.op = "merge";
  c.input = fp8_merge(3.0f, false, 0.375f, AC_DTYPE_E5M2);
  const Case back = case_from_json(case_to_json(c));
  const auto& m = std::get<MergeInput>(back.input);
  CHECK(m.out_dtype == AC_DTYPE_E5M2);
  CHECK(m.output_scale == 0.375f);
  c.input = fp8_merge(3.0f, false, -1.0f);
  try {
    case_from_json(case_to_json(c));
    FAIL("a negative output_scale was accepted");
  } catch (const CaseError& e) {
    CHECK(std::string(e.what()).find("output_scale") != std::string::npos);
  }
  // A scale without its format is refused, not read as the plain merge.
  {
    Case stale = c;
    stale.input = fp8_merge(3.0f, false, 0.5f);
    std::string text = case_to_json(stale);
    const size_t at = text.find("\"out_dtype\"");
    REQUIRE(at != std::string::npos);
    text.erase(at, text.find(',', at) + 1 - at);  // the field and its comma
    try {
      case_from_json(text);
      FAIL("output_scale_bits without out_dtype was accepted");
    } catch (const CaseError& e) {
      CHECK(std::string(e.what()).find("output_scale_bits without out_dtype") != std::string::npos);
    }
  }
  // A merge without the field is the plain one.
  MergeInput plain = fp8_merge(3.0f, false, 1.0f);
  plain.out_dtype = AC_DTYPE_F32;
  c.input = plain;
  CHECK_FALSE(std::get<MergeInput>(case_from_json(case_to_json(c)).input).fp8_out());
}
