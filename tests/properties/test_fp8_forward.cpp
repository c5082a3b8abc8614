// Q in FP8 (plugin_abi.h AC_FP8_Q) and P in e4m3fn (AC_FP8_P_E4M3) outside the kernels: the judge's
// reference of Q's codes times q_descale, the case file's q_descale and its refusals, a subject not
// declaring FP8 Q never called with one, the generators quantising Q only where declared, the
// budget increment of q_descale and the conventions' P flag. Expected values are derived in the
// comments, never read off the code under test.
#include <rapidcheck.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>

#include "attncheck/budgets.hpp"
#include "attncheck/case.hpp"
#include "attncheck/generators.hpp"
#include "attncheck/reference/exact.hpp"
#include "attncheck/reference/fast.hpp"
#include "internal.hpp"

using namespace attncheck;

namespace {

// One sequence (1 query over 2 keys), 2 query heads over 1 KV head, d = 1, all of Q, K and V in
// e4m3fn codes: 0x38 = 1.0, 0x40 = 2.0, 0x30 = 0.5, 0x44 = 3.0 (exponent field e, mantissa m:
// (1 + m / 8) 2^(e - 7)).
AttentionInput fp8_q_case() {
  AttentionInput a;
  a.dtype = AC_DTYPE_BF16;
  a.kv_dtype = AC_DTYPE_E4M3;
  a.num_heads = 2;
  a.num_kv_heads = 1;
  a.head_size = 1;
  a.seqlens_q = {1};
  a.seqlens_k = {2};
  a.softmax_scale = 0.5f;
  a.q = {0x40, 0x30};  // query heads 0 and 1
  a.k = {0x38, 0x44};
  a.v = {0x40, 0x38};
  a.k_descale = {0.25f};
  a.v_descale = {2.0f};
  a.q_descale = {1.5f};
  return a;
}

// A subject's domain with an e4m3fn cache: bf16, d = 64, causal, varlen, GQA, LSE; fp8 bits set by
// the caller.
gen::Domain e4m3_domain() {
  gen::Domain dom;
  dom.dtypes = {AC_DTYPE_BF16};
  dom.head_sizes = {64};
  dom.features = AC_FEAT_CAUSAL | AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE;
  dom.tile_keys = 64;
  dom.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3);
  return dom;
}

// The same input without its FP8 cache: K and V read as dtype, no descales.
AttentionInput without_cache(AttentionInput a) {
  a.kv_dtype = AC_DTYPE_F32;
  a.k_descale.clear();
  a.v_descale.clear();
  a.q_descale.clear();
  return a;
}

// An attention subject's caps with an e4m3fn cache and Q in FP8, nothing more.
ac_caps e4m3_q_caps() {
  ac_caps caps{};
  caps.ops = AC_OP_ATTENTION;
  caps.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3);
  caps.fp8 = AC_FP8_Q;
  return caps;
}

}  // namespace

TEST_CASE("FP8 Q: the judge's reference is the attention of Q's codes times q_descale", "[properties][fp8]") {
  // Query head 0: q = 2.0 * 1.5 = 3; keys 1.0 and 3.0 times 0.25 -> 0.25 and 0.75; scale 0.5:
  // scores 0.375 and 1.125. Values 2.0 and 1.0 times 2 -> 4 and 2. Query head 1: q = 0.5 * 1.5 =
  // 0.75: scores 0.09375 and 0.28125.
  const AttentionInput a = fp8_q_case();
  REQUIRE(attention_variant_problem(a).empty());
  const ref::AttentionProblem p = detail::problem_of(a);
  auto o_of = [](long double s0, long double s1) {
    const long double e0 = std::exp(s0), e1 = std::exp(s1);
    return double((4 * e0 + 2 * e1) / (e0 + e1));
  };
  const ref::ExactRow r0 = ref::exact_attention_row(p, 0, 0), r1 = ref::exact_attention_row(p, 0, 1);
  CHECK(std::fabs(r0.o[0].convert_to<double>() - o_of(0.375L, 1.125L)) <= 1e-15);
  CHECK(std::fabs(r1.o[0].convert_to<double>() - o_of(0.09375L, 0.28125L)) <= 1e-15);
  CHECK(std::fabs(r1.lse.convert_to<double>() - double(std::log(std::exp(0.09375L) + std::exp(0.28125L)))) <=
        1e-15);
  // The certified fast path agrees (q_scale rounds its scale once more; its bound covers that).
  ref::FastOptions fo;
  fo.threads = 1;
  const ref::FastAttentionReference fast(p, fo);
  fast.for_each_row([&](int64_t token, int32_t head, const ref::FastRow& fr) {
    const double want = head == 0 ? o_of(0.375L, 1.125L) : o_of(0.09375L, 0.28125L);
    CHECK(fr.certified);
    CHECK(std::fabs(fr.o[0] - want) <= fr.o_bound[0] + 1e-15);
    (void)token;
  });
}

TEST_CASE("FP8 Q: case files carry q_descale and refuse a bad one in one line", "[properties][fp8]") {
  Case c;
  c.op = "attention";
  c.input = fp8_q_case();
  const std::string text = case_to_json(c);
  const Case back = case_from_json(text);
  const auto& b = std::get<AttentionInput>(back.input);
  CHECK(b.q == std::get<AttentionInput>(c.input).q);
  CHECK(b.q_descale == std::vector<float>{1.5f});
  CHECK(b.fp8_q());
  const struct {
    const char* what;
    void (*spoil)(AttentionInput&);
    const char* named;
  } bad[] = {
      {"a zero q_descale", [](AttentionInput& x) { x.q_descale = {0.0f}; }, "q_descale[0]"},
      {"a NaN q_descale", [](AttentionInput& x) { x.q_descale = {NAN}; }, "q_descale[0]"},
      {"two q_descales for one KV head",
       [](AttentionInput& x) {
         x.q_descale = {1, 1};
       },
       "q_descale has 2"},
      {"q_descale without an FP8 cache",
       [](AttentionInput& x) {
         x.kv_dtype = AC_DTYPE_F32;
         x.k_descale.clear();
         x.v_descale.clear();
       },
       "need an FP8"},
  };
  for (const auto& spoiled : bad) {
    AttentionInput x = fp8_q_case();
    spoiled.spoil(x);
    INFO(spoiled.what);
    const std::string why = attention_variant_problem(x);
    CHECK(why.find(spoiled.named) != std::string::npos);
    CHECK(why.find('\n') == std::string::npos);
  }
  // Granularities that differ, per KV head for K / V and per tensor for Q: two KV heads.
  AttentionInput two = fp8_q_case();
  two.num_kv_heads = 2;
  two.k = {0x38, 0x38, 0x44, 0x44};
  two.v = {0x40, 0x40, 0x38, 0x38};
  two.k_descale = {0.25f, 0.5f};
  two.v_descale = {2.0f, 2.0f};
  CHECK(attention_variant_problem(two).find("q_descale and k_descale differ in granularity") !=
        std::string::npos);
}

TEST_CASE("FP8 Q: a subject that does not declare it is never called with one", "[properties][fp8]") {
  const AttentionInput a = fp8_q_case();
  AttentionInput storage;
  ac_caps caps{};
  caps.ops = AC_OP_ATTENTION;
  caps.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3);
  CHECK_THROWS_WITH(input_for_subject(a, 0, caps, "s", storage),
                    Catch::Contains("s does not declare Q in FP8 (AC_FP8_Q)"));
  caps.fp8 = AC_FP8_Q;
  CHECK(&input_for_subject(a, 0, caps, "s", storage) == &a);
}

TEST_CASE("FP8 Q: the generators quantise Q only for a subject declaring it", "[properties][fp8]") {
  gen::Domain dom = e4m3_domain();
  dom.fp8 = AC_FP8_DESCALE_PER_KV_HEAD | AC_FP8_Q;
  int fp8 = 0, with_q = 0, per_head = 0;
  rc::Random random(5);
  for (int i = 0; i < 200; ++i) {
    const AttentionInput a = gen::attention_input(dom)(random.split(), i).value();
    REQUIRE(attention_variant_problem(a).empty());
    if (!a.fp8_kv()) continue;
    ++fp8;
    if (!a.fp8_q()) continue;
    ++with_q;
    per_head += a.q_descale.size() > 1;
    for (const uint32_t b : a.q) REQUIRE(b <= 0xffu);
  }
  // FP8 in a third of the cases, Q among them in three quarters.
  CHECK(fp8 > 30);
  CHECK(with_q > fp8 / 2);
  CHECK(with_q < fp8);
  CHECK(per_head > 0);
  dom.fp8 = AC_FP8_DESCALE_PER_KV_HEAD;
  rc::Random again(5);
  for (int i = 0; i < 100; ++i) CHECK_FALSE(gen::attention_input(dom)(again.split(), i).value().fp8_q());
}

TEST_CASE("FP8 Q budget: q_descale's rounding adds abs_dot to a score, per 2^-24",
          "[properties][budgets][fp8]") {
  // FlashAttention-3 folds q_descale and k_descale into the softmax scale, fl(fl(scale qd) kd): two
  // fp32 roundings, each moving the score t by up to |t| 2^-24 <= abs_dot 2^-24 (abs_dot = |scale
  // qd kd| sum |q k| >= |t|). The K one is fp8_kv_score_conditioning's; q_descale's is the new term.
  // Measured over scales and descales: the two folds' error on t within both terms together, and
  // past the K term alone somewhere (so the Q term is needed).
  double worst = 0;
  for (int i = 1; i < 4000; ++i) {
    const float scale = 1.0f / std::sqrt(float(1 + i % 256)), qd = float(i) * 0.000917f,
                kd = float(4001 - i) * 0.000731f;
    const float dot = float(i % 97) - 48.3f;
    const double exact = double(scale) * double(qd) * double(kd) * double(dot);
    const float folded = ((scale * qd) * kd) * dot;  // the folds, then the product: three roundings
    const double abs_dot = std::fabs(exact);
    const double fold_err = std::fabs(double(folded) - exact) - abs_dot * 0x1p-24;  // the product's own
    worst = std::max(worst, fold_err / (fp8_kv_score_conditioning(abs_dot) * 0x1p-24));
  }
  CHECK(worst > 1.0);  // K's term alone is not enough
  CHECK(worst <= 1.0 + fp8_q_score_conditioning(1.0));
  CHECK(fp8_q_score_conditioning(5.0) == 5.0);
}

TEST_CASE("FP8 P: the subject's declaration reaches the judge's conventions", "[properties][fp8]") {
  // A subject that is only its caps: conventions_of reads nothing else.
  struct CapsOnly final : Subject {
    ac_caps c{};
    std::string n = "caps-only";
    const std::string& name() const override { return n; }
    const std::string& description() const override { return n; }
    const ac_caps& caps() const override { return c; }
    std::string backend() const override { return "host"; }
    std::string origin() const override { return "test"; }
    MergeOutput merge(const MergeInput&) override { return {}; }
    SoftmaxOutput softmax(const SoftmaxInput&) override { return {}; }
    AttentionOutput attention(const AttentionInput&, const AttentionOptions&) override { return {}; }
  } s;
  s.c.ops = AC_OP_ATTENTION;
  s.c.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3);
  CHECK_FALSE(detail::conventions_of(s).p_e4m3);
  s.c.fp8 = AC_FP8_P_E4M3;
  CHECK(detail::conventions_of(s).p_e4m3);
}

TEST_CASE("FP8 P scale: case files carry p_scale bit-exactly and refuse a bad one in one line",
          "[properties][fp8][p_scale]") {
  Case c;
  c.op = "attention";
  c.input = fp8_q_case();
  std::get<AttentionInput>(c.input).p_scale = 300.5f;
  const Case back = case_from_json(case_to_json(c));
  const auto& b = std::get<AttentionInput>(back.input);
  CHECK(b.p_scale == 300.5f);
  CHECK(b.p_scale_or_fixed() == 300.5);
  // Without one, the fixed 2^8 (and no field in the file).
  Case plain;
  plain.op = "attention";
  plain.input = fp8_q_case();
  CHECK(case_to_json(plain).find("p_scale") == std::string::npos);
  CHECK(std::get<AttentionInput>(case_from_json(case_to_json(plain)).input).p_scale_or_fixed() == 256.0);
  for (const float bad : {-1.0f, 448.5f, float(INFINITY), float(NAN)}) {
    AttentionInput x = fp8_q_case();
    x.p_scale = bad;
    INFO("p_scale " << bad);
    const std::string why = attention_variant_problem(x);
    CHECK(why.find("p_scale") != std::string::npos);
    CHECK(why.find('\n') == std::string::npos);
  }
  AttentionInput largest = fp8_q_case();
  largest.p_scale = 448.0f;  // a weight of 1 on e4m3fn's largest code: in range
  CHECK(attention_variant_problem(largest).empty());
  AttentionInput no_cache = fp8_q_case();
  no_cache.kv_dtype = AC_DTYPE_F32;
  no_cache.k_descale.clear();
  no_cache.v_descale.clear();
  no_cache.q_descale.clear();
  no_cache.p_scale = 2.0f;
  CHECK(attention_variant_problem(no_cache) == "p_scale needs an FP8 kv_dtype");
}

TEST_CASE("FP8 P scale: only a subject declaring it is given one, and only it is drawn one",
          "[properties][fp8][p_scale]") {
  AttentionInput a = fp8_q_case();
  a.p_scale = 96.0f;
  AttentionInput storage;
  ac_caps caps{};
  caps.ops = AC_OP_ATTENTION;
  caps.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3);
  caps.fp8 = AC_FP8_Q | AC_FP8_P_E4M3;
  CHECK_THROWS_WITH(input_for_subject(a, 0, caps, "s", storage),
                    Catch::Contains("s does not declare P's scale per call (AC_FP8_P_SCALE)"));
  caps.fp8 |= AC_FP8_P_SCALE;
  CHECK(&input_for_subject(a, 0, caps, "s", storage) == &a);

  gen::Domain dom = e4m3_domain();
  dom.fp8 = AC_FP8_Q | AC_FP8_P_E4M3 | AC_FP8_P_SCALE;
  int fp8 = 0, scaled = 0, small = 0;
  rc::Random random(7);
  for (int i = 0; i < 300; ++i) {
    const AttentionInput x = gen::attention_input(dom)(random.split(), i).value();
    REQUIRE(attention_variant_problem(x).empty());
    if (!x.fp8_kv()) {
      CHECK(x.p_scale == 0.0f);
      continue;
    }
    ++fp8;
    scaled += x.p_scale > 0.0f && x.p_scale != 256.0f;
    small += x.p_scale > 0.0f && x.p_scale <= 16.0f;
  }
  CHECK(fp8 > 50);
  CHECK(scaled > fp8 / 2);  // six of the seven scales differ from 2^8
  CHECK(small > 0);         // the scales under which P underflows are drawn too
  dom.fp8 = AC_FP8_Q | AC_FP8_P_E4M3;
  rc::Random again(7);
  for (int i = 0; i < 100; ++i) CHECK(gen::attention_input(dom)(again.split(), i).value().p_scale == 0.0f);
}

TEST_CASE("FP8 O: each code judged against the exact O over output_scale, saturation as declared",
          "[properties][fp8][fp8_out]") {
  // fp8_q_case's O, derived in the first test: head 0 (4 e^0.375 + 2 e^1.125) / (e^0.375 + e^1.125)
  // = 2.64164, head 1 (4 e^0.09375 + 2 e^0.28125) / (e^0.09375 + e^0.28125) = 2.90648.
  AttentionInput a = fp8_q_case();
  a.out_dtype = AC_DTYPE_E4M3;
  a.output_scale = 0.5f;
  REQUIRE(attention_variant_problem(a).empty());
  detail::Conventions cv;
  cv.saturate = true;
  auto within = [&](std::vector<uint32_t> codes) {
    AttentionOutput out;
    out.out = Bits(codes.begin(), codes.end());
    const detail::Judgement J = detail::judge_attention(a, out, cv, Budget{});
    std::vector<bool> w;
    for (const detail::Elem& e : J.elems) w.push_back(e.within);
    return w;
  };
  // Over 0.5: 5.28328 and 5.81296. e4m3fn's step in [4, 8) is 0.5: 5.28 is nearer 5.5 (0x4b) than 5
  // (0x4a), 5.81 nearer 6 (0x4c). The fp32 budget is far below half a step: only those codes pass.
  CHECK(within({0x4b, 0x4c}) == std::vector<bool>{true, true});
  CHECK(within({0x4a, 0x4c}) == std::vector<bool>{false, true});
  CHECK(within({0x4b, 0x4d}) == std::vector<bool>{true, false});
  // Over 2^-8: 676 and 744, past e4m3fn's largest 448: saturating, 0x7e (448) for both; declared
  // overflowing instead, the format's NaN (0x7f) and nothing else.
  a.output_scale = 0x1p-8f;
  CHECK(within({0x7e, 0x7e}) == std::vector<bool>{true, true});
  CHECK(within({0x7f, 0x7d}) == std::vector<bool>{false, false});
  cv.saturate = false;
  CHECK(within({0x7f, 0x7f}) == std::vector<bool>{true, true});
  CHECK(within({0x7e, 0x7e}) == std::vector<bool>{false, false});
}

TEST_CASE(
    "FP8 O: case files carry out_dtype and output_scale, refuse a bad one, and only a declaring "
    "subject is given one",
    "[properties][fp8][fp8_out]") {
  Case c;
  c.op = "attention";
  AttentionInput a = fp8_q_case();
  a.out_dtype = AC_DTYPE_E5M2;
  a.output_scale = 0.3f;
  c.input = a;
  const Case back = case_from_json(case_to_json(c));
  const auto& b = std::get<AttentionInput>(back.input);
  CHECK(b.out_dtype == AC_DTYPE_E5M2);
  CHECK(b.output_scale == 0.3f);
  CHECK(b.o_dtype() == AC_DTYPE_E5M2);
  for (const float bad : {0.0f, -2.0f, float(INFINITY), float(NAN)}) {
    AttentionInput x = a;
    x.output_scale = bad;
    INFO("output_scale " << bad);
    CHECK(attention_variant_problem(x).find("output_scale") != std::string::npos);
  }
  AttentionInput tiny = a;  // quoted as itself, not as -0.000000
  tiny.output_scale = -1e-30f;
  CHECK(attention_variant_problem(tiny) == "output_scale -1e-30 is not positive and finite");
  const AttentionInput no_cache = without_cache(a);
  CHECK(attention_variant_problem(no_cache) == "out_dtype e5m2 needs an FP8 kv_dtype");
  AttentionInput storage;
  ac_caps caps = e4m3_q_caps();
  CHECK_THROWS_WITH(input_for_subject(a, 0, caps, "s", storage),
                    Catch::Contains("s does not declare O in FP8 (AC_FP8_OUT)"));
  caps.fp8 |= AC_FP8_OUT;
  CHECK_THROWS_WITH(input_for_subject(a, 0, caps, "s", storage),
                    Catch::Contains("s does not declare O in e5m2"));
  caps.kv_dtypes |= AC_DTYPE_BIT(AC_DTYPE_E5M2);
  AttentionInput e5 = a;
  e5.kv_dtype = AC_DTYPE_E5M2;  // the same codes read as e5m2: any FP8 cache will do here
  CHECK(&input_for_subject(e5, 0, caps, "s", storage) == &e5);
}

TEST_CASE("FP8 O: the generator draws scales at, past and below the largest code",
          "[properties][fp8][fp8_out]") {
  gen::Domain dom = e4m3_domain();
  dom.fp8 = AC_FP8_Q | AC_FP8_OUT | AC_FP8_SATURATE;
  int past = 0, low = 0;
  rc::Random random(3);
  for (int i = 0; i < 200; ++i) {
    const AttentionInput x = gen::attention_fp8_output_input(dom)(random.split(), i).value();
    REQUIRE(attention_variant_problem(x).empty());
    REQUIRE(x.fp8_out());
    REQUIRE(x.out_dtype == AC_DTYPE_E4M3);
    // max |V| (decoded, descaled) over the scale: past 448 where the rows that weight the largest V
    // most saturate; below 448 / 64 where most codes are low.
    double vmax = 0;
    const std::vector<int32_t> rows = x.kv_row_sequences();
    for (size_t e = 0; e < x.v.size(); ++e) {
      const double v = ref::decode_fp8(ref::Fp8Format::e4m3fn, uint8_t(x.v[e])) *
                       double(x.v_descale[x.kv_descale_slot(x.v_descale.size(), rows, e, x.dv())]);
      if (std::isfinite(v)) vmax = std::max(vmax, std::fabs(v));
    }
    past += vmax / double(x.output_scale) > 448;
    low += vmax > 0 && vmax / double(x.output_scale) < 448.0 / 64;
  }
  CHECK(past > 10);
  CHECK(low > 10);
}

TEST_CASE("FP8 maxima: the exact largest weight and |O|, and the intervals about them",
          "[properties][fp8][amax]") {
  // fp8_q_case's weights, derived in the first test: head 0 e^0.375 and e^1.125, head 1 e^0.09375
  // and e^0.28125. The largest normalised weight is head 0's second, 1 / (1 + e^-0.75) = 0.679179;
  // the largest |O| head 1's, (4 e^0.09375 + 2 e^0.28125) / (e^0.09375 + e^0.28125) = 2.90648.
  AttentionInput a = fp8_q_case();
  a.want_amax = true;
  REQUIRE(attention_variant_problem(a).empty());
  const double w = 1 / (1 + std::exp(-0.75));
  const double o = (4 * std::exp(0.09375) + 2 * std::exp(0.28125)) / (std::exp(0.09375) + std::exp(0.28125));
  auto bounds = [&](const AttentionInput& in) {
    AttentionOutput out;
    // In-budget codes for either output format; the maxima judged do not depend on them.
    out.out = in.fp8_out()
                  ? Bits{0x4b, 0x4c}
                  : Bits{detail::round_bits(AC_DTYPE_BF16, 2.64164), detail::round_bits(AC_DTYPE_BF16, o)};
    out.lse.assign(2, 0.0f);
    out.amax = {float(w), float(o)};
    detail::Conventions cv;
    cv.saturate = true;
    return detail::judge_attention(in, out, cv, Budget{}).amax;
  };
  // The two allowances by hand (budgets.cpp): a weight's log within the LSE's allowance plus 2^-24
  // (c_j + 4); |O| stored in bf16 within its allowance a plus u_bf16 (|x| + a) plus half of bf16's
  // smallest subnormal 2^-133; an FP8 output's fp32 value within a itself.
  CHECK(amax_weight_log_allowance(1e-6, 10.0) == Approx(1e-6 + 14 * 0x1p-24).epsilon(1e-15));
  CHECK(amax_o_allowance(AC_DTYPE_BF16, false, 2.0, 0.01) ==
        Approx(0.01 + 0x1p-8 * 2.01 + 0x1p-134).epsilon(1e-15));
  CHECK(amax_o_allowance(AC_DTYPE_BF16, true, 2.0, 0.01) == 0.01);
  const detail::AmaxBounds m = bounds(a);
  REQUIRE(m.asked);
  REQUIRE(m.complete);
  CHECK(m.p_exact == Approx(w).epsilon(1e-14));
  CHECK(m.o_exact == Approx(o).epsilon(1e-12));
  CHECK(m.p_row == 0);  // token 0, head 0
  CHECK(m.o_row == 1);  // token 0, head 1
  // The weight's interval: the LSE's allowance plus 2^-24 (c_j + 4) in the log (budgets.cpp). The
  // fp32 value of w is not w, so an interval without the term would refuse a correct kernel; the
  // four fp32 roundings alone are 4 2^-24 relatively, and the whole stays below 2^-14.
  CHECK(double(float(w)) != w);
  CHECK(m.p_lo <= double(float(w)));
  CHECK(m.p_hi >= double(float(w)));
  CHECK(m.p_hi >= w * (1 + 4 * 0x1p-24));
  CHECK(m.p_lo <= w * (1 - 4 * 0x1p-24));
  CHECK(m.p_hi <= w * (1 + 0x1p-14));
  // Neither the unnormalised maximum (1) nor head 1's weight (1 / (1 + e^-0.1875) = 0.546738) is it.
  CHECK(m.p_hi < 1.0);
  CHECK(m.p_lo > 1 / (1 + std::exp(-0.1875)));
  // |O|'s interval: O stored in bf16 allows the value before that rounding half a bf16 ulp more,
  // at least 2^-9 |O| past its own allowance; O in FP8 judges the fp32 value itself: no such term.
  CHECK(m.o_hi - o >= o * 0x1p-9);
  AttentionInput f = a;
  f.out_dtype = AC_DTYPE_E4M3;
  f.output_scale = 0.5f;
  const detail::AmaxBounds mf = bounds(f);
  CHECK(mf.o_exact == Approx(o).epsilon(1e-12));
  CHECK(mf.o_hi - o < o * 0x1p-16);
  CHECK(mf.o_lo > o * (1 - 0x1p-16));
  CHECK(mf.o_hi - o > 0);
}

TEST_CASE("FP8 maxima: case files carry the request, only an FP8 call of a declaring subject gets it",
          "[properties][fp8][amax]") {
  Case c;
  c.op = "attention";
  AttentionInput a = fp8_q_case();
  a.want_amax = true;
  c.input = a;
  CHECK(std::get<AttentionInput>(case_from_json(case_to_json(c)).input).want_amax);
  AttentionInput not_asked = fp8_q_case();
  c.input = not_asked;
  CHECK(case_to_json(c).find("\"amax\"") == std::string::npos);
  const AttentionInput no_cache = without_cache(a);
  CHECK(attention_variant_problem(no_cache) == "amax needs an FP8 kv_dtype");
  AttentionInput storage;
  ac_caps caps = e4m3_q_caps();
  CHECK_THROWS_WITH(input_for_subject(a, 0, caps, "s", storage),
                    Catch::Contains("s does not declare the maxima of P and O (AC_FP8_AMAX)"));
  caps.fp8 |= AC_FP8_AMAX;
  CHECK(&input_for_subject(a, 0, caps, "s", storage) == &a);
}

TEST_CASE("FP8 maxima: the generator asks in every case, with O in FP8 only where declared",
          "[properties][fp8][amax]") {
  for (const uint32_t fp8 : {uint32_t(AC_FP8_Q), uint32_t(AC_FP8_Q | AC_FP8_OUT | AC_FP8_SATURATE)}) {
    gen::Domain dom = e4m3_domain();
    dom.fp8 = fp8 | AC_FP8_AMAX;
    int fp8_out = 0;
    rc::Random random(5);
    for (int i = 0; i < 100; ++i) {
      const AttentionInput x = gen::attention_fp8_amax_input(dom)(random.split(), i).value();
      REQUIRE(attention_variant_problem(x).empty());
      REQUIRE(x.want_amax);
      REQUIRE(x.fp8_kv());
      fp8_out += x.fp8_out();
    }
    INFO("fp8 bits " << fp8);
    if (fp8 & AC_FP8_OUT)
      CHECK((fp8_out > 25 && fp8_out < 75));
    else
      CHECK(fp8_out == 0);
  }
}

TEST_CASE("FP8 maxima: weights below fp32's normal range are allowed their absolute rounding",
          "[properties][fp8][amax]") {
  // A sink of 200 on both heads of fp8_q_case: every weight is about e^(1.125 - 200) = 3.7e-87, far
  // below fp32's smallest subnormal 2^-149: an fp32 kernel writes 0 (or, rounding up, 2^-149). Four
  // roundings in the subnormal range allow 2^-148 absolutely (budgets.cpp amax_weight_interval).
  AttentionInput a = fp8_q_case();
  a.want_amax = true;
  a.sinks = {200.0f, 200.0f};
  AttentionOutput out;
  out.out = Bits{detail::round_bits(AC_DTYPE_BF16, 0.0), detail::round_bits(AC_DTYPE_BF16, 0.0)};
  out.lse.assign(2, 0.0f);
  out.amax = {0.0f, 0.0f};
  const detail::AmaxBounds m = detail::judge_attention(a, out, detail::Conventions{}, Budget{}).amax;
  CHECK(m.p_exact == Approx(std::exp(1.125 - 200)).epsilon(1e-12));  // the sink holds the whole sum
  CHECK(m.p_lo == 0.0);
  CHECK(m.p_hi >= 0x1p-149);
  CHECK(m.p_hi < 0x1p-147);
  // A normal weight keeps its relative interval and gains only the absolute 2^-148.
  const AmaxWeightInterval w = amax_weight_interval(0.5, 1e-6, true);
  CHECK(w.lo == Approx(0.5 * std::exp(-1e-6)).epsilon(1e-14));
  CHECK(w.hi == Approx(0.5 * std::exp(1e-6)).epsilon(1e-14));
  // A weight of 2^-130 (subnormal in fp32): 2^-148 either way, or 0 for a subject that flushes.
  CHECK(amax_weight_interval(0x1p-130, 0, false).lo == Approx(0x1p-130 - 0x1p-148).epsilon(1e-12));
  CHECK(amax_weight_interval(0x1p-130, 0, false).hi == Approx(0x1p-130 + 0x1p-148).epsilon(1e-12));
  CHECK(amax_weight_interval(0x1p-130, 0, true).lo == 0.0);
}

TEST_CASE("fp8_output's scale: max|V| / largest times the factor, never 0 for an fp32 V near underflow",
          "[properties][fp8]") {
  // unit 3 / 448, factor 4: 12 / 448 rounded to fp32; factor 0: the power of two above the unit,
  // 2^(floor(log2(3/448)) + 1) = 2^-7 (3/448 = 0.0067 lies in [2^-8, 2^-7)).
  CHECK(gen::fp8_output_scale(3.0 / 448, 4.0) == float(12.0 / 448));
  CHECK(gen::fp8_output_scale(3.0 / 448, 0.0) == 0x1p-7f);
  // An fp32 V of 4 2^-149 over e4m3fn's 448, times 1/4: 2^-149 / 448, below half the smallest
  // subnormal, rounds to 0 in fp32: a scale the contract and the case reader refuse. The floor is
  // fp32's smallest normal.
  CHECK(float(0x1p-147 / 448 * 0.25) == 0.0f);
  CHECK(gen::fp8_output_scale(0x1p-147 / 448, 0.25) == 0x1p-126f);
  AttentionInput a;
  a.output_scale = gen::fp8_output_scale(0x1p-147 / 448, 0.25);
  CHECK(std::isfinite(1.0f / a.output_scale));
}
