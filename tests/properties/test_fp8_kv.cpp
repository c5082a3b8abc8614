// An FP8 KV cache (plugin_abi.h AC_FP8_*) outside the kernels: the case file's fields and their
// refusals, the generators quantising K and V into a declared format only, the judge's reference
// of the codes times their descales, a subject refused an FP8 cache it does not declare, and the
// two budget increments. Expected values are derived in the comments, never read off the code
// under test.
#include <rapidcheck.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>

#include "attncheck/budgets.hpp"
#include "attncheck/case.hpp"
#include "attncheck/generators.hpp"
#include "attncheck/properties.hpp"
#include "attncheck/reference/exact.hpp"
#include "expect_refused.hpp"
#include "fakes.hpp"
#include "internal.hpp"
#include "property.hpp"

using namespace attncheck;

namespace {

uint32_t f32(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// Two sequences (1 and 2 queries over 2 and 1 keys), 2 query heads over 2 KV heads, d = 1; q = 1
// (fp32), K and V e4m3fn codes: 0x38 = 1.0, 0x40 = 2.0, 0x30 = 0.5, 0x44 = 3.0 (exponent field e,
// mantissa m: (1 + m / 8) 2^(e - 7)).
AttentionInput fp8_case() {
  AttentionInput a;
  a.dtype = AC_DTYPE_F32;
  a.kv_dtype = AC_DTYPE_E4M3;
  a.num_heads = 2;
  a.num_kv_heads = 2;
  a.head_size = 1;
  a.seqlens_q = {1, 2};
  a.seqlens_k = {2, 1};
  a.softmax_scale = 1.0f;
  a.q.assign(3 * 2, f32(1.0f));
  // keys 0..2, each [KV head 0, KV head 1]
  a.k = {0x38, 0x40, 0x30, 0x38, 0x40, 0x30};
  a.v = {0x44, 0x38, 0x40, 0x30, 0x38, 0x44};
  a.k_descale = {0.25f, 2.0f};
  a.v_descale = {1.5f, 0.125f};
  return a;
}

}  // namespace

TEST_CASE("FP8 KV: the judge's reference is the attention of the codes times their descales",
          "[properties][fp8]") {
  // Sequence 0, query head 0 (KV head 0): keys 1.0 and 0.5 times 0.25 -> scores 0.25 and 0.125;
  // values 3.0 and 2.0 times 1.5 -> 4.5 and 3. O = (4.5 e^0.25 + 3 e^0.125) / (e^0.25 + e^0.125).
  // Query head 1 (KV head 1): keys 2.0 and 1.0 times 2 -> scores 4 and 2; values 1.0 and 0.5 times
  // 0.125 -> 0.125 and 0.0625.
  const AttentionInput a = fp8_case();
  REQUIRE(attention_variant_problem(a).empty());
  const ref::AttentionProblem p = detail::problem_of(a);
  const long double e1 = std::exp(0.25L), e2 = std::exp(0.125L);
  const double o0 = double((4.5L * e1 + 3.0L * e2) / (e1 + e2));
  const long double f1 = std::exp(4.0L), f2 = std::exp(2.0L);
  const double o1 = double((0.125L * f1 + 0.0625L * f2) / (f1 + f2));
  const ref::ExactRow r0 = ref::exact_attention_row(p, 0, 0), r1 = ref::exact_attention_row(p, 0, 1);
  CHECK(std::fabs(r0.o[0].convert_to<double>() - o0) <= 1e-15 * o0);
  CHECK(std::fabs(r1.o[0].convert_to<double>() - o1) <= 1e-15 * o1);
  CHECK(std::fabs(r1.lse.convert_to<double>() - double(std::log(f1 + f2))) <= 1e-15);
  // Per tensor: one descale for both heads.
  AttentionInput t = a;
  t.k_descale = {0.25f};
  t.v_descale = {1.5f};
  const ref::ExactRow t1 = ref::exact_attention_row(detail::problem_of(t), 0, 1);
  const long double g1 = std::exp(0.5L), g2 = std::exp(0.25L);  // keys 2, 1 times 0.25
  CHECK(std::fabs(t1.o[0].convert_to<double>() - double((1.5L * g1 + 0.75L * g2) / (g1 + g2))) <= 1e-15);
}

TEST_CASE("FP8 KV: case files carry the format and the descales and refuse bad ones in one line",
          "[properties][fp8]") {
  Case c;
  c.op = "attention";
  c.input = fp8_case();
  const Case back = case_from_json(case_to_json(c));
  const auto& b = std::get<AttentionInput>(back.input);
  const auto& a = std::get<AttentionInput>(c.input);
  CHECK(b.kv_dtype == AC_DTYPE_E4M3);
  CHECK(b.k == a.k);
  CHECK(b.v == a.v);
  CHECK(b.k_descale == a.k_descale);
  CHECK(b.v_descale == a.v_descale);
  CHECK(case_to_json(c).find("\"kv_dtype\": \"e4m3fn\"") != std::string::npos);
  const struct {
    const char* what;
    void (*spoil)(AttentionInput&);
    const char* named;
  } bad[] = {
      {"a zero descale", [](AttentionInput& x) { x.k_descale[1] = 0.0f; }, "k_descale[1]"},
      {"a negative descale", [](AttentionInput& x) { x.v_descale[0] = -1.0f; }, "v_descale[0]"},
      {"a NaN descale", [](AttentionInput& x) { x.v_descale[1] = NAN; }, "v_descale[1]"},
      {"an infinite descale", [](AttentionInput& x) { x.k_descale[0] = INFINITY; }, "k_descale[0]"},
      // Past 2^32 a code times its descale, or a head's sum of their products, can leave fp32
      // (plugin_abi.h AC_MAX_DESCALE); 2^32 itself is the bound, kept below.
      {"a descale past 2^32", [](AttentionInput& x) { x.k_descale[1] = 0x1.000002p32f; },
       "k_descale[1] 4.29497e+09 is not in (0, 2^32]"},
      {"three descales for two KV heads",
       [](AttentionInput& x) {
         x.k_descale = {1, 1, 1};
       },
       "k_descale has 3"},
      {"no descale", [](AttentionInput& x) { x.v_descale.clear(); }, "v_descale has 0"},
      {"granularities that differ", [](AttentionInput& x) { x.v_descale = {1.0f}; }, "differ in granularity"},
      {"descales without an FP8 cache", [](AttentionInput& x) { x.kv_dtype = AC_DTYPE_F32; }, "need an FP8"},
  };
  AttentionInput at_bound = fp8_case();
  at_bound.k_descale = {0x1p32f, 0x1p32f};
  at_bound.v_descale = {0x1p-149f, 0x1p32f};  // the smallest positive float is a descale too
  CHECK(attention_variant_problem(at_bound).empty());
  for (const auto& spoiled : bad) {
    AttentionInput x = fp8_case();
    spoiled.spoil(x);
    INFO(spoiled.what);
    const std::string why = attention_variant_problem(x);
    CHECK(why.find(spoiled.named) != std::string::npos);
    CHECK(why.find('\n') == std::string::npos);
    // The reader refuses such a file (the writer never writes descales without an FP8 cache).
    if (x.fp8_kv()) {
      Case bc;
      bc.op = "attention";
      bc.input = x;
      CHECK_THROWS_AS(case_from_json(case_to_json(bc)), CaseError);
    }
  }
}

TEST_CASE("FP8 KV: a subject that does not declare the cache's format or its granularity is not called",
          "[properties][fp8]") {
  const AttentionInput a = fp8_case();
  AttentionInput storage;
  ac_caps caps{};
  caps.ops = AC_OP_ATTENTION;
  CHECK_THROWS_WITH(input_for_subject(a, 0, caps, "s", storage),
                    Catch::Contains("s does not declare an FP8 KV cache in e4m3fn (caps.kv_dtypes)"));
  caps.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E5M2);
  CHECK_THROWS_WITH(input_for_subject(a, 0, caps, "s", storage), Catch::Contains("e4m3fn"));
  caps.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3);
  CHECK_THROWS_WITH(input_for_subject(a, 0, caps, "s", storage),
                    Catch::Contains("descales per KV head (AC_FP8_DESCALE_PER_KV_HEAD)"));
  caps.fp8 = AC_FP8_DESCALE_PER_KV_HEAD;
  CHECK(&input_for_subject(a, 0, caps, "s", storage) == &a);
  AttentionInput per_tensor = a;
  per_tensor.k_descale = {1.0f};
  per_tensor.v_descale = {1.0f};
  caps.fp8 = 0;
  CHECK(&input_for_subject(per_tensor, 0, caps, "s", storage) == &per_tensor);
}

TEST_CASE("FP8 KV: the generators quantise K and V into a declared format only", "[properties][fp8]") {
  gen::Domain dom;
  dom.dtypes = {AC_DTYPE_F16, AC_DTYPE_BF16};
  dom.head_sizes = {64};
  dom.features = AC_FEAT_CAUSAL | AC_FEAT_MASK | AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE;
  dom.tile_keys = 64;
  dom.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3) | AC_DTYPE_BIT(AC_DTYPE_E5M2);
  dom.fp8 = AC_FP8_DESCALE_PER_KV_HEAD;
  std::set<std::string> seen;
  rc::Random random(11);
  for (int i = 0; i < 150; ++i) {
    const AttentionInput a = gen::attention_input(dom)(random.split(), i).value();
    REQUIRE(attention_variant_problem(a).empty());
    if (!a.fp8_kv()) continue;
    seen.insert(a.kv_dtype == AC_DTYPE_E4M3 ? "e4m3fn" : "e5m2");
    seen.insert(a.k_descale.size() == 1 ? "per tensor" : "per KV head");
    for (const auto* t : {&a.k, &a.v})
      for (uint32_t b : *t) REQUIRE(b <= 0xffu);
    // Saturated codes (the largest finite) appear where the scale was drawn below amax / largest.
    for (uint32_t b : a.k)
      if ((b & 0x7fu) == (a.kv_dtype == AC_DTYPE_E4M3 ? 0x7eu : 0x7bu)) seen.insert("largest code");
  }
  CHECK(seen == std::set<std::string>{"e4m3fn", "e5m2", "per tensor", "per KV head", "largest code"});
  // Only e5m2 declared, per tensor: no e4m3fn and no per-head descales.
  dom.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E5M2);
  dom.fp8 = 0;
  rc::Random narrow(11);
  for (int i = 0; i < 100; ++i) {
    const AttentionInput a = gen::attention_input(dom)(narrow.split(), i).value();
    CHECK((!a.fp8_kv() || (a.kv_dtype == AC_DTYPE_E5M2 && a.k_descale.size() == 1)));
  }
  // Undeclared: none.
  dom.kv_dtypes = 0;
  rc::Random plain(11);
  for (int i = 0; i < 100; ++i) CHECK_FALSE(gen::attention_input(dom)(plain.split(), i).value().fp8_kv());
}

TEST_CASE("FP8 KV budget: the descales' roundings add abs_dot to a score and S to O, per 2^-24",
          "[properties][budgets][fp8]") {
  // A kernel that folds k_descale into the softmax scale rounds fl(scale * ds) once: the score t
  // moves by |t| 2^-24 <= abs_dot 2^-24 (abs_dot = |scale ds| sum |q k| >= |t|); one that forms
  // k * ds in fp32 moves each of the d products by 2^-24 of itself: abs_dot 2^-24 again. Measured:
  // the folded scale's error on t, over scales and descales, within abs_dot 2^-24.
  double worst = 0;
  for (int i = 1; i < 2000; ++i) {
    const float scale = 1.0f / std::sqrt(float(1 + i % 256)), ds = float(i) * 0.000731f;
    const float dot = float(i % 97) - 48.3f;
    const double exact = double(scale) * double(ds) * double(dot);
    const float folded = (scale * ds) * dot;  // the fold, then the product: two fp32 roundings
    const double abs_dot = std::fabs(double(scale) * double(ds) * double(dot));
    // The product's own rounding is the plain score's (in d abs_dot); the fold's is the new term.
    const double fold_err = std::fabs(double(folded) - exact) - std::fabs(exact) * 0x1p-24;
    worst = std::max(worst, fold_err / (fp8_kv_score_conditioning(abs_dot) * 0x1p-24));
  }
  CHECK(worst <= 1.0);
  // The allowances: with the flag, exactly those increments.
  Budget b;
  AttentionRow r;
  r.dtype = AC_DTYPE_F16;
  r.keys = 8;
  r.head_size = 64;
  r.sum_exp_scaled = 1;
  const double S = 3.0, plain = attention_o_allowance(b, r, 0x1p-10, S, 0, 0);
  r.fp8_kv = true;
  CHECK(attention_o_allowance(b, r, 0x1p-10, S, 0, 0) - plain == S * 0x1p-24 * fp8_kv_o_terms());
  CHECK(fp8_kv_o_terms() == 1);
  CHECK(fp8_kv_score_conditioning(5.0) == 5.0);
}

namespace {

// An FP8 KV cache subject built on fakes::Fake: each K / V value is its code times its descale
// (kv_value), rounded once to fp32 like q, attended in fp32 by the fake, and O rounded to the call's
// dtype. Declares e4m3fn and e5m2, descales per tensor and per KV head (and per (sequence, KV head)
// where asked). The bugs: a descale read at the next KV head's index, V's descale applied twice,
// V's descale ignored, descales per sequence read at sequence 0's; `refuse` names a format it
// declares and refuses.
class Fp8Fake final : public fakes::Wrapping {
 public:
  // nan_saturated: a NaN code decoded as the format's largest value (a saturating decode);
  // nan_spread_heads: a NaN in one query head's O spread to every head of that token;
  // nan_k_saturated: K's NaN codes alone decoded as the largest value; fnuz_as_fn: e4m3fnuz codes
  // decoded as e4m3fn (twice their value, 0x80 as -0, 0x7f and 0xff as NaN).
  enum class Bug {
    none,
    descale_next_head,
    v_descale_twice,
    v_descale_ignored,
    nan_saturated,
    nan_k_saturated,
    fnuz_as_fn,
    nan_spread_heads,
    descale_of_sequence_0,
    // e4m3fn's 0xff decoded as -480 (the sign bit, then 0x7f's bits as a normal number): a decoder
    // that knows 0x7f alone as NaN.
    negative_nan_finite,
    // Paged (declared with `paged`): the pool decoded page by page with the descales of the first
    // sequence naming each page, so a page two sequences share is read with the first one's.
    shared_page_owner_descale,
    // After its first launch, O's last bit flipped wherever 0 < |O| < 2^-124: what fp32's gradual
    // underflow inside a kernel can do to an element that small when the inputs are exchanged or
    // V's descale doubled (fp8_descales.cpp underflow_floor).
    jitter_tiny
  };
  // per_sequence: declares descales per (sequence, KV head) as well; kv_dtypes: the formats declared;
  // paged: declares paged K / V in pages of 16 (gathered before decoding, but for
  // shared_page_owner_descale).
  explicit Fp8Fake(Bug bug = Bug::none, ac_dtype refuse = AC_DTYPE_F32, bool per_sequence = false,
                   uint32_t kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3) | AC_DTYPE_BIT(AC_DTYPE_E5M2),
                   bool paged = false)
      : Wrapping("attn-fp8"), bug_(bug), refuse_(refuse) {
    caps_.kv_dtypes = kv_dtypes;
    caps_.fp8 = AC_FP8_DESCALE_PER_KV_HEAD | (per_sequence ? AC_FP8_DESCALE_PER_SEQUENCE : 0u);
    if (paged) {
      caps_.variants = AC_VAR_PAGED_KV;
      caps_.page_sizes = kPages;
      caps_.num_page_sizes = 1;
    }
  }
  // How the refused format is refused: unsupported (a refusal), or internal (a crash).
  SubjectError::Kind refusal = SubjectError::Kind::unsupported;
  // Refuses descales per KV head (granularity 1) though it declares them.
  bool refuse_per_kv_head = false;
  AttentionOutput attention(const AttentionInput& given, const AttentionOptions& o) override {
    AttentionInput gathered, decoded;
    if (!given.fp8_kv()) return inner_.attention(contiguous_kv(given, gathered), o);
    if (given.kv_dtype == refuse_) throw SubjectError(refusal, "this format is not compiled in");
    if (refuse_per_kv_head && given.descale_granularity() == 1)
      throw SubjectError(SubjectError::Kind::unsupported, "descales per KV head are not compiled in");
    const AttentionInput& a = bug_ == Bug::shared_page_owner_descale ? given : contiguous_kv(given, gathered);
    AttentionInput f = a;
    f.dtype = AC_DTYPE_F32;
    f.kv_dtype = AC_DTYPE_F32;
    f.k_descale.clear();
    f.v_descale.clear();
    for (uint32_t& x : f.q) x = detail::round_bits(AC_DTYPE_F32, detail::decode(a.dtype, x));
    const std::vector<int32_t> rows = a.kv_row_sequences();
    auto values = [&](Bits& t, const Bits& codes, const std::vector<float>& ds, int64_t width, bool is_v) {
      for (size_t i = 0; i < codes.size(); ++i) {
        const int32_t head = a.kv_head_of_element(i, width),
                      seq = rows[size_t(int64_t(i) / (width * a.num_kv_heads))];
        const int32_t read = bug_ == Bug::descale_next_head ? (head + 1) % a.num_kv_heads : head;
        // descale_of_sequence_0: descales per (sequence, KV head) read at the first sequence's.
        double d = a.descale(ds, bug_ == Bug::descale_of_sequence_0 ? 0 : seq, read);
        if (is_v && bug_ == Bug::v_descale_twice) d *= a.descale(ds, seq, read);
        if (is_v && bug_ == Bug::v_descale_ignored) d = 1;
        const bool as_fn = bug_ == Bug::fnuz_as_fn && a.kv_dtype == AC_DTYPE_E4M3FNUZ;
        double x = detail::decode(as_fn ? AC_DTYPE_E4M3 : a.kv_dtype, codes[i]);
        if (bug_ == Bug::negative_nan_finite && a.kv_dtype == AC_DTYPE_E4M3 && codes[i] == 0xffu) x = -480.0;
        if ((bug_ == Bug::nan_saturated || (bug_ == Bug::nan_k_saturated && !is_v)) && std::isnan(x))
          x = ref::fp8_spec(detail::fp8_format(a.kv_dtype)).largest;
        t[i] = detail::round_bits(AC_DTYPE_F32, x * d);
      }
    };
    values(f.k, a.k, a.k_descale, a.head_size, false);
    values(f.v, a.v, a.v_descale, a.dv(), true);
    AttentionOutput out = inner_.attention(contiguous_kv(f, decoded), o);
    for (uint32_t& x : out.out) x = detail::round_bits(a.dtype, detail::decode(AC_DTYPE_F32, x));
    if (bug_ == Bug::jitter_tiny && launches_++ > 0)
      for (uint32_t& x : out.out) {
        const double y = std::fabs(detail::decode(a.dtype, x));
        if (y > 0 && y < 0x1p-124) x ^= 1u;
      }
    if (bug_ == Bug::nan_spread_heads) {
      const size_t row = size_t(a.num_heads) * size_t(a.dv());
      for (size_t t = 0; t * row < out.out.size(); ++t) {
        bool any = false;
        for (size_t i = 0; i < row; ++i)
          any = any || std::isnan(detail::decode(a.dtype, out.out[t * row + i]));
        if (any)
          for (size_t i = 0; i < row; ++i) out.out[t * row + i] = detail::round_bits(a.dtype, NAN);
      }
    }
    return out;
  }

 private:
  static constexpr int32_t kPages[] = {16};
  Bug bug_;
  ac_dtype refuse_;
  int launches_ = 0;
};

// 60 of the generator's cases, unshrunk.
RunConfig sixty_cases() {
  RunConfig cfg;
  cfg.shrink = false;
  cfg.num_cases = 60;
  return cfg;
}

Case fp8_descales_case(std::vector<float> k_descale, std::vector<float> v_descale) {
  Case c;
  c.op = "attention";
  c.property = "fp8_descales";
  AttentionInput a = fp8_case();
  a.k_descale = std::move(k_descale);
  a.v_descale = std::move(v_descale);
  c.input = a;
  return c;
}

}  // namespace

TEST_CASE("fp8_descales: each descale bug fails bit for bit where accuracy cannot see it",
          "[properties][fp8]") {
  // Descales equal across KV heads: a descale read at the other head's index gives the same values,
  // within every budget; the exchange (head 0's codes times 2, head 1's times 4, descales divided
  // alike) no longer cancels there. V's descale of 1: applied twice or ignored, O is unchanged;
  // exchanged, V's descales are 1/2 and 1/4, and O moves.
  const Case equal = fp8_descales_case({0.5f, 0.5f}, {1.0f, 1.0f});
  Fp8Fake correct;
  const ReplayResult ok = replay_case(equal, correct);
  INFO(ok.verdict);
  CHECK(ok.passed);
  for (const Fp8Fake::Bug bug :
       {Fp8Fake::Bug::descale_next_head, Fp8Fake::Bug::v_descale_twice, Fp8Fake::Bug::v_descale_ignored}) {
    Fp8Fake wrong(bug);
    // Accuracy alone passes each of them on this case.
    Case plain = equal;
    plain.property = "accuracy";
    CHECK(replay_case(plain, wrong).passed);
    const ReplayResult r = replay_case(equal, wrong);
    INFO(r.verdict);
    CHECK_FALSE(r.passed);
    CHECK(r.failure_class == "fp8_descale_exchange");
  }
  // O elements small enough for fp32's gradual underflow to reach their last bit are not compared:
  // V's descales of 2^-127 (a float subnormal: V is not exchanged, K is) make O fp8_case's values
  // (0.5 to 3) times 2^-127: some normal fp32 numbers, every one below the floor max_keys 2^-125 =
  // 2^-124 (2 keys, descales below 1/4). A launch that moves their last bit after
  // the first passes; the same jitter on fp8_case's O of order 1 is no jitter at all (above 2^-124
  // nothing moves), so the exchange there still fails the bugs above.
  const Case tiny = fp8_descales_case({0.5f, 0.5f}, {0x1p-127f, 0x1p-127f});
  {
    Fp8Fake jitter(Fp8Fake::Bug::jitter_tiny);
    const ReplayResult r = replay_case(tiny, jitter);
    INFO(r.verdict);
    CHECK(r.passed);
    const auto& t = std::get<AttentionInput>(tiny.input);
    AttentionOptions opt;
    Fp8Fake probe(Fp8Fake::Bug::jitter_tiny);
    const AttentionOutput first = probe.attention(t, opt), second = probe.attention(t, opt);
    CHECK(first.out != second.out);  // the jitter moved bits a bitwise comparison would see
    int normal = 0;                  // elements the comparisons would read without the floor (normal, finite)
    for (const uint32_t x : first.out) {
      const double y = std::fabs(detail::decode(t.dtype, x));
      CHECK(y < 0x1p-124);
      normal += y >= 0x1p-126;
    }
    CHECK(normal > 0);
  }
  // V's codes pinned at 448 on both heads, so that no exponent keeps V's codes exact and V is not
  // exchanged: the V bugs then fail the doubling alone.
  Case pinned = equal;
  std::get<AttentionInput>(pinned.input).v[0] = 0x7e;
  std::get<AttentionInput>(pinned.input).v[1] = 0x7e;
  CHECK(replay_case(pinned, correct).passed);
  for (const Fp8Fake::Bug bug : {Fp8Fake::Bug::v_descale_twice, Fp8Fake::Bug::v_descale_ignored}) {
    Fp8Fake wrong(bug);
    const ReplayResult r = replay_case(pinned, wrong);
    INFO(r.verdict);
    CHECK(r.failure_class == "fp8_v_descale_linear");
  }
  // Over the generator's cases: the correct subject passes every one, each bug fails.
  const RunConfig cfg = sixty_cases();
  const PropertyResult run = run_property("fp8_descales", correct, cfg);
  INFO(run.message);
  CHECK(run.status == PropertyResult::Status::passed);
  for (const Fp8Fake::Bug bug :
       {Fp8Fake::Bug::descale_next_head, Fp8Fake::Bug::v_descale_twice, Fp8Fake::Bug::v_descale_ignored}) {
    Fp8Fake wrong(bug);
    const PropertyResult r = run_property("fp8_descales", wrong, cfg);
    INFO(r.message);
    CHECK(r.status == PropertyResult::Status::failed);
  }
}

TEST_CASE("fp8_descales: a NaN V code shows in its column on the rows that see it, and nowhere else",
          "[properties][fp8]") {
  // fp8_case's sequence 0 (one query, keys 0 and 1, no mask, not causal) is the site: V's code at
  // key 0, KV head 0, column 0 becomes 0x7f. Query head 0's O must then be NaN (its weight on key 0
  // is e^0.25 / (e^0.25 + e^0.125) of the row), query head 1's (KV head 1) and sequence 1's not.
  const Case c = fp8_descales_case({0.5f, 0.5f}, {1.0f, 1.0f});
  Fp8Fake correct;
  CHECK(replay_case(c, correct).passed);
  // The negative NaN 0xff, set after 0x7f, is a NaN the same way.
  const std::pair<Fp8Fake::Bug, const char*> bugs[] = {
      {Fp8Fake::Bug::nan_saturated, "O[token 0][head 0][0] is not NaN where it must be NaN"},
      {Fp8Fake::Bug::nan_spread_heads, "O[token 0][head 1][0] is NaN where it must not be"},
      {Fp8Fake::Bug::negative_nan_finite, "(0xff): O[token 0][head 0][0] is not NaN where it must be NaN"}};
  for (const auto& [bug, where] : bugs) {
    Fp8Fake wrong(bug);
    Case plain = c;
    plain.property = "accuracy";
    CHECK(replay_case(plain, wrong).passed);  // no NaN code in the case itself
    const ReplayResult r = replay_case(c, wrong);
    INFO(r.verdict);
    CHECK(r.failure_class == "fp8_nan_code");
    CHECK(r.verdict.find(where) != std::string::npos);
  }
  // Over the generator's cases: the correct subject passes, each bug fails.
  const RunConfig cfg = sixty_cases();
  CHECK(run_property("fp8_descales", correct, cfg).status == PropertyResult::Status::passed);
  for (const auto& [bug, where] : bugs) {
    Fp8Fake wrong(bug);
    const PropertyResult r = run_property("fp8_descales", wrong, cfg);
    INFO(r.message);
    CHECK(r.status == PropertyResult::Status::failed);
    CHECK(r.failure_class == "fp8_nan_code");
  }
}

TEST_CASE("fp8_descales: a NaN K code makes O and the LSE NaN on the rows that see it, and nothing else",
          "[properties][fp8]") {
  // The same site, K's code at key 0, KV head 0, column 0 set to 0x7f: query head 0's logit on key 0
  // is NaN, so its weight e^(NaN - m) is, and with it every column of its O and its LSE. Query head
  // 1 (KV head 1) and sequence 1 see no NaN.
  const Case c = fp8_descales_case({0.5f, 0.5f}, {1.0f, 1.0f});
  Fp8Fake correct;
  const ReplayResult ok = replay_case(c, correct);
  INFO(ok.verdict);
  CHECK(ok.passed);
  Fp8Fake wrong(Fp8Fake::Bug::nan_k_saturated);
  Case plain = c;
  plain.property = "accuracy";
  CHECK(replay_case(plain, wrong).passed);
  const ReplayResult r = replay_case(c, wrong);
  INFO(r.verdict);
  CHECK(r.failure_class == "fp8_nan_k_code");
  CHECK(r.verdict.find("K's code at key 0 of sequence 0, KV head 0, column 0 set to NaN (0x7f): O[token "
                       "0][head 0][0] is not NaN where it must be NaN") != std::string::npos);
  // Over the generator's cases: the correct subject passes (above), the bug fails on K's check.
  const PropertyResult run = run_property("fp8_descales", wrong, sixty_cases());
  INFO(run.message);
  CHECK(run.status == PropertyResult::Status::failed);
  CHECK(run.failure_class == "fp8_nan_k_code");
}

TEST_CASE("e4m3fnuz: decoded at bias 8, 0x80 its only NaN, 240 its largest; judged, generated and refused",
          "[properties][fp8]") {
  // fp8_case's codes in e4m3fnuz are half their e4m3fn values: 0x38 = 0.5, 0x40 = 1.0, 0x30 = 0.25,
  // 0x44 = 1.5 ((1 + m / 8) 2^(e - 8)). Sequence 0, query head 0: keys 0.5 and 0.25 times 0.25 ->
  // scores 0.125 and 0.0625; values 1.5 and 1.0 times 1.5 -> 2.25 and 1.5.
  AttentionInput a = fp8_case();
  a.kv_dtype = AC_DTYPE_E4M3FNUZ;
  REQUIRE(attention_variant_problem(a).empty());
  const ref::ExactRow r0 = ref::exact_attention_row(detail::problem_of(a), 0, 0);
  const long double e1 = std::exp(0.125L), e2 = std::exp(0.0625L);
  const double o0 = double((2.25L * e1 + 1.5L * e2) / (e1 + e2));
  CHECK(std::fabs(r0.o[0].convert_to<double>() - o0) <= 1e-15 * o0);
  CHECK(detail::decode(AC_DTYPE_E4M3FNUZ, 0x7f) == 240.0);
  CHECK(detail::decode(AC_DTYPE_E4M3FNUZ, 0xff) == -240.0);
  CHECK(std::isnan(detail::decode(AC_DTYPE_E4M3FNUZ, 0x80)));
  CHECK(detail::decode(AC_DTYPE_E4M3FNUZ, 0x01) == 0x1p-10);
  // The case file names it, and reads it back.
  Case c;
  c.op = "attention";
  c.input = a;
  CHECK(case_to_json(c).find("\"kv_dtype\": \"e4m3fnuz\"") != std::string::npos);
  CHECK(std::get<AttentionInput>(case_from_json(case_to_json(c)).input).kv_dtype == AC_DTYPE_E4M3FNUZ);
  // A subject declaring e4m3fn alone is never given it.
  Fp8Fake fn_only(Fp8Fake::Bug::none, AC_DTYPE_F32, false, AC_DTYPE_BIT(AC_DTYPE_E4M3));
  AttentionInput storage;
  CHECK_THROWS_WITH(input_for_subject(a, 0, fn_only.caps(), "s", storage),
                    "s does not declare an FP8 KV cache in e4m3fnuz (caps.kv_dtypes)");
  // The NaN check sets 0x80 (0x7f is 240 here): a decode that saturates NaN codes hides it.
  Case nan = fp8_descales_case({0.5f, 0.5f}, {1.0f, 1.0f});
  std::get<AttentionInput>(nan.input).kv_dtype = AC_DTYPE_E4M3FNUZ;
  const uint32_t fnuz = AC_DTYPE_BIT(AC_DTYPE_E4M3FNUZ);
  Fp8Fake correct(Fp8Fake::Bug::none, AC_DTYPE_F32, false, fnuz);
  const ReplayResult ok = replay_case(nan, correct);
  INFO(ok.verdict);
  CHECK(ok.passed);
  Fp8Fake saturating(Fp8Fake::Bug::nan_saturated, AC_DTYPE_F32, false, fnuz);
  const ReplayResult r = replay_case(nan, saturating);
  INFO(r.verdict);
  CHECK(r.failure_class == "fp8_nan_code");
  CHECK(r.verdict.find("set to NaN (0x80)") != std::string::npos);
  // Over the generator's cases, all in e4m3fnuz: the correct subject passes, one that decodes the
  // codes as e4m3fn fails.
  const RunConfig cfg = sixty_cases();
  const PropertyResult good = run_property("fp8_descales", correct, cfg);
  INFO(good.message);
  CHECK(good.status == PropertyResult::Status::passed);
  CHECK(good.cases_run == 60);
  Fp8Fake as_fn(Fp8Fake::Bug::fnuz_as_fn, AC_DTYPE_F32, false, fnuz);
  const PropertyResult bad = run_property("fp8_descales", as_fn, cfg);
  INFO(bad.message);
  CHECK(bad.status == PropertyResult::Status::failed);
  CHECK(run_property("declared_variants", correct, cfg).status == PropertyResult::Status::passed);
  const PropertyResult item = run_property("declared_variants", as_fn, cfg);
  INFO(item.message);
  CHECK(item.status == PropertyResult::Status::failed);
  CHECK(item.message.find("e4m3fnuz") != std::string::npos);
}

TEST_CASE("fp8_descales: V = 1 cases hold O = 1 exactly on every row that sees a key", "[properties][fp8]") {
  // The generator's V = 1 cases: codes of 1.0 with descale 1, so that O is the softmax's total mass.
  int ones = 0;
  gen::Domain dom;
  dom.dtypes = {AC_DTYPE_BF16};
  dom.head_sizes = {16};
  dom.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3);
  rc::Random r(7);
  for (int i = 0; i < 200; ++i) {
    const AttentionInput a = gen::attention_fp8_kv_input(dom)(r.split(), 10).value();
    REQUIRE(a.fp8_kv());
    bool all_one = !a.v.empty();
    for (size_t j = 0; j < a.v.size(); ++j)
      all_one = all_one && detail::kv_value(a, a.kv_row_sequences(), a.v, a.dv(), j) == 1.0;
    ones += all_one;
    // Every code of K and V within a quarter of the format's largest: the exchange stays exact.
    for (const Bits* t : {&a.k, &a.v})
      for (const uint32_t code : *t) CHECK(std::fabs(detail::decode(a.kv_dtype, code)) <= 448.0 / 4);
  }
  CHECK(ones > 20);
  CHECK(ones < 100);
}

TEST_CASE("declared_variants: a subject refusing an FP8 format it declares fails, naming it",
          "[properties][fp8][refusals]") {
  RunConfig cfg;
  cfg.shrink = false;
  Fp8Fake accepts;
  const PropertyResult ok = run_property("declared_variants", accepts, cfg);
  INFO(ok.message);
  CHECK(ok.status == PropertyResult::Status::passed);
  Fp8Fake refuses(Fp8Fake::Bug::none, AC_DTYPE_E5M2);
  expect_refused_declared(
      refuses,
      "the subject refused its declared FP8 KV cache e5m2, which it must accept: this format is not "
      "compiled in");
  // Every other property takes the same refusal for a skipped case.
  CHECK(run_property("fp8_descales", refuses, cfg).status == PropertyResult::Status::passed);
}

TEST_CASE("declared_variants: a GQA subject declaring descales per KV head is called with them",
          "[properties][fp8][refusals]") {
  // The fake declares GQA, so the plain case has one KV head, where one descale is per tensor: the
  // item takes two KV heads (four query heads) to call granularity 1 at all.
  Fp8Fake refuses;
  refuses.refuse_per_kv_head = true;
  expect_refused_declared(
      refuses,
      "the subject refused its declared FP8 KV cache e4m3fn (descales per KV head), which it "
      "must accept: descales per KV head are not compiled in");
}

TEST_CASE("declared_variants: a crash on a declared item's launch is a crash that names the item",
          "[properties][fp8][refusals]") {
  RunConfig cfg;
  cfg.shrink = false;
  Fp8Fake crashes(Fp8Fake::Bug::none, AC_DTYPE_E5M2);
  crashes.refusal = SubjectError::Kind::internal;
  const PropertyResult r = run_property("declared_variants", crashes, cfg);
  INFO(r.message);
  CHECK(r.status == PropertyResult::Status::crashed);
  CHECK(r.failure_class == "internal");
  // The base case is plain (no FP8 cache): without the item's name the message would not say that
  // the e5m2 call crashed.
  CHECK(r.message.find("with its declared FP8 KV cache e5m2: this format is not compiled in") !=
        std::string::npos);
}

TEST_CASE("FP8 KV: descales per (sequence, KV head), judged, checked and exchanged per sequence",
          "[properties][fp8]") {
  // fp8_case with sequence 1's descales of its own: K (1.0, 0.5), V (2.0, 4.0) per KV head.
  // Sequence 1 has one key (key 2: K codes 2.0 and 0.5, V codes 1.0 and 3.0), so each of its rows
  // is that key's: head 0 score 2.0 x 1.0 = 2, O = 1.0 x 2.0 = 2; head 1 score 0.5 x 0.5 = 0.25,
  // O = 3.0 x 4.0 = 12; the LSE is the score. Sequence 0's rows are the first test's.
  AttentionInput a = fp8_case();
  a.k_descale = {0.25f, 2.0f, 1.0f, 0.5f};
  a.v_descale = {1.5f, 0.125f, 2.0f, 4.0f};
  REQUIRE(attention_variant_problem(a).empty());
  CHECK(a.descale_granularity() == 2);
  const ref::AttentionProblem p = detail::problem_of(a);
  const long double e1 = std::exp(0.25L), e2 = std::exp(0.125L);
  const ref::ExactRow s0 = ref::exact_attention_row(p, 0, 0);
  CHECK(std::fabs(s0.o[0].convert_to<double>() - double((4.5L * e1 + 3.0L * e2) / (e1 + e2))) <= 1e-15);
  for (int t : {1, 2}) {
    const ref::ExactRow h0 = ref::exact_attention_row(p, t, 0), h1 = ref::exact_attention_row(p, t, 1);
    CHECK(h0.o[0].convert_to<double>() == 2.0);
    CHECK(h1.o[0].convert_to<double>() == 12.0);
    CHECK(h0.lse.convert_to<double>() == 2.0);
    CHECK(h1.lse.convert_to<double>() == 0.25);
  }
  // The case file keeps the four values; three are one line naming all three granularities.
  Case c;
  c.op = "attention";
  c.property = "fp8_descales";
  c.input = a;
  CHECK(std::get<AttentionInput>(case_from_json(case_to_json(c)).input).k_descale == a.k_descale);
  AttentionInput three = a;
  three.k_descale.pop_back();
  three.v_descale.pop_back();
  CHECK(attention_variant_problem(three) ==
        "k_descale has 3 values: one (per tensor), one per KV head (2) or one per (sequence, KV head) (4) "
        "needed");
  // Offered only where declared; one sequence's descales per KV head are its per-sequence ones.
  auto undeclared_fp8 = [](const AttentionInput& in, const ac_caps& caps) -> std::string {
    AttentionInput storage;
    try {
      input_for_subject(in, caps.variants, caps, "s", storage);
    } catch (const SubjectError& e) {
      return std::string(e.what()).substr(std::string("s does not declare ").size());
    }
    return "";
  };
  Fp8Fake heads_only, per_sequence(Fp8Fake::Bug::none, AC_DTYPE_F32, true);
  CHECK(undeclared_fp8(a, heads_only.caps()) ==
        "descales per (sequence, KV head) (AC_FP8_DESCALE_PER_SEQUENCE)");
  CHECK(undeclared_fp8(a, per_sequence.caps()).empty());
  ac_caps only_sequences = per_sequence.caps();
  only_sequences.fp8 = AC_FP8_DESCALE_PER_SEQUENCE;
  AttentionInput one = fp8_case();
  one.seqlens_q = {1};
  one.seqlens_k = {2};
  one.q.resize(2);
  one.k.resize(4);
  one.v.resize(4);
  REQUIRE(attention_variant_problem(one).empty());
  CHECK(undeclared_fp8(one, only_sequences).empty());
  CHECK_FALSE(undeclared_fp8(fp8_case(), only_sequences).empty());
  // AC_FP8_Q_REQUIRED: an FP8 cache beside Q in its input type is never offered (a case with Q in
  // FP8 would be).
  ac_caps q_required = per_sequence.caps();
  q_required.fp8 |= AC_FP8_Q | AC_FP8_Q_REQUIRED;
  REQUIRE(!a.fp8_q());
  CHECK(undeclared_fp8(a, q_required) ==
        "an FP8 cache beside Q in its input type (it declares AC_FP8_Q_REQUIRED)");
  // The correct subject passes; reading sequence 0's descales everywhere fails accuracy where the
  // sequences' descales differ, and fails the exchange where they are equal (the exchange's
  // exponents alternate over sequences too).
  CHECK(replay_case(c, per_sequence).passed);
  Fp8Fake seq0(Fp8Fake::Bug::descale_of_sequence_0, AC_DTYPE_F32, true);
  const ReplayResult differ = replay_case(c, seq0);
  INFO(differ.verdict);
  CHECK_FALSE(differ.passed);
  CHECK(differ.failure_class != "fp8_descale_exchange");
  AttentionInput same = a;
  same.k_descale = {0.25f, 2.0f, 0.25f, 2.0f};
  same.v_descale = {1.5f, 0.125f, 1.5f, 0.125f};
  c.input = same;
  CHECK(replay_case(c, per_sequence).passed);
  Case plain = c;
  plain.property = "accuracy";
  CHECK(replay_case(plain, seq0).passed);
  const ReplayResult r = replay_case(c, seq0);
  INFO(r.verdict);
  CHECK(r.failure_class == "fp8_descale_exchange");
  CHECK(r.verdict.find("per (sequence, KV head)") != std::string::npos);
  // Over the generator's cases: some draw descales per sequence; the correct subject passes, the
  // bug fails.
  gen::Domain dom;
  dom.dtypes = {AC_DTYPE_BF16};
  dom.head_sizes = {16};
  dom.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3);
  dom.fp8 = per_sequence.caps().fp8;
  dom.features = AC_FEAT_VARLEN;  // batches of several sequences
  rc::Random rnd(11);
  int per_seq = 0;
  for (int i = 0; i < 100; ++i)
    per_seq += gen::attention_fp8_kv_input(dom)(rnd.split(), 100).value().descale_granularity() == 2;
  CHECK(per_seq > 10);
  const RunConfig cfg = sixty_cases();
  const PropertyResult ok = run_property("fp8_descales", per_sequence, cfg);
  INFO(ok.message);
  CHECK(ok.status == PropertyResult::Status::passed);
  const PropertyResult bad = run_property("fp8_descales", seq0, cfg);
  INFO(bad.message);
  CHECK(bad.status == PropertyResult::Status::failed);
  // Shrunk, the failure keeps a case whose descales match its sequences and KV heads: it reads back,
  // holds the contract, and replays as the same failure.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ac_fp8_seq_corpus_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  RunConfig shrinking = cfg;
  shrinking.shrink = true;
  shrinking.corpus_dir = dir.string();
  const PropertyResult shrunk = run_property("fp8_descales", seq0, shrinking);
  REQUIRE_FALSE(shrunk.corpus_files.empty());
  for (const std::string& file : shrunk.corpus_files) {  // one per distinct failure
    const Case back = read_case_file(file);
    const auto& in = std::get<AttentionInput>(back.input);
    INFO(file << ": " << shrunk.message);
    CHECK(attention_variant_problem(in).empty());
    CHECK_FALSE(replay_case(back, seq0).passed);
    const ReplayResult good = replay_case(back, per_sequence);
    INFO(good.verdict);
    CHECK(good.passed);
  }
  std::filesystem::remove_all(dir);
  // declared_variants' item of two sequences whose descales differ at the second one's last head.
  CHECK(run_property("declared_variants", per_sequence, cfg).status == PropertyResult::Status::passed);
  const PropertyResult item = run_property("declared_variants", seq0, cfg);
  INFO(item.message);
  CHECK(item.status == PropertyResult::Status::failed);
  CHECK(item.message.find("descales per (sequence, KV head)") != std::string::npos);
  // Paged as well: declared_variants' item of two sequences sharing their first page of 16, each
  // reading it with its own descales (its second sequence's last KV head has a descale of its own).
  const uint32_t formats = AC_DTYPE_BIT(AC_DTYPE_E4M3) | AC_DTYPE_BIT(AC_DTYPE_E5M2);
  Fp8Fake paged(Fp8Fake::Bug::none, AC_DTYPE_F32, true, formats, true);
  const PropertyResult paged_ok = run_property("declared_variants", paged, cfg);
  INFO(paged_ok.message);
  CHECK(paged_ok.status == PropertyResult::Status::passed);
  Fp8Fake owner(Fp8Fake::Bug::shared_page_owner_descale, AC_DTYPE_F32, true, formats, true);
  const PropertyResult shared = run_property("declared_variants", owner, cfg);
  INFO(shared.message);
  CHECK(shared.status == PropertyResult::Status::failed);
  CHECK(shared.message.find("(descales per (sequence, KV head)) over pages of 16, the first shared by 2 "
                            "sequences") != std::string::npos);
}

TEST_CASE("FP8 KV: an fp16 O past 65504 is correctly +inf; -inf, NaN or the largest finite fail",
          "[properties][fp8]") {
  // One query over one key, d = 1: K code 0x38 = 1.0, V code 0x7e = (1 + 6/8) 2^8 = 448 (e4m3fn),
  // v_descale 256: O = 448 * 256 = 114688 exactly, past fp16's largest finite 65504 and past the
  // midpoint 65520 where round to nearest goes to infinity; the LSE is the one score, q k = 1.
  AttentionInput a;
  a.dtype = AC_DTYPE_F16;
  a.kv_dtype = AC_DTYPE_E4M3;
  a.head_size = 1;
  a.seqlens_q = {1};
  a.seqlens_k = {1};
  a.q = {0x3c00};  // fp16 1.0
  a.k = {0x38};
  a.v = {0x7e};
  a.k_descale = {1.0f};
  a.v_descale = {256.0f};
  REQUIRE(attention_variant_problem(a).empty());
  auto outcome = [&](uint32_t o_bits, bool finite_only) {
    AttentionOutput out;
    out.out = {o_bits};
    out.lse = {1.0f};
    const detail::Judgement J = detail::judge_attention(a, out, detail::Conventions{}, Budget{});
    detail::Outcome o;
    detail::rule_accuracy(o, J, finite_only);
    return o;
  };
  for (const bool finite_only : {false, true}) {                       // accuracy, no_spurious_nonfinite
    CHECK(outcome(0x7c00, finite_only).ok);                            // +inf: the rounding of 114688
    CHECK(outcome(0xfc00, finite_only).failure_class == "nonfinite");  // -inf
    CHECK(outcome(0x7e00, finite_only).failure_class == "nonfinite");  // NaN
  }
  CHECK(!outcome(0x7bff, false).ok);  // 65504: 49184 off, far past any budget
}
