// The engines' variants (plugin_abi.h AC_VAR_*) outside the kernels: the budget terms of a softcap
// and a sink, each checked against the error it exists for and shown to fail without its term;
// the case file's fields; paged K / V built, gathered and shrunk; the generators drawing every
// declared variant, and only those; declared_variants failing a subject that refuses a declared
// page size. Expected values are derived in the comments or computed by an
// independent long-double evaluation, never read off the code under test.
#include <rapidcheck.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <string>

#include "attncheck/budgets.hpp"
#include "attncheck/case.hpp"
#include "attncheck/generators.hpp"
#include "attncheck/properties.hpp"
#include "expect_refused.hpp"
#include "fakes.hpp"
#include "shrink.hpp"

using namespace attncheck;

namespace {

constexpr double kU = 0x1p-24;

// The capped score as a kernel forms it in fp32 from its fp32 score t (scale already applied):
// u = fl(t / cap), th = tanh(u) off by `ulps` fp32 ulps (a tanhf within its documented error),
// c = fl(cap th).
float kernel_capped(float t, float cap, int ulps) {
  const float u = t / cap;
  float th = std::tanh(u);
  // tanh(0) = 0 exactly; elsewhere within `ulps` of its result.
  for (int i = 0; th != 0.0f && i < std::abs(ulps); ++i) th = std::nextafter(th, ulps > 0 ? 2.0f : -2.0f);
  return cap * th;
}
long double exact_capped(long double t, long double cap) { return cap * std::tanh(t / cap); }

}  // namespace

TEST_CASE("softcap budget: the tanh and cap roundings of a saturating cap need the |c| term",
          "[properties][budgets][variants]") {
  // A kernel's fp32 score t enters exactly here (d = 1, one exact product, scale 1: abs_dot = |t|),
  // so the capped score's error is the division, tanh (within 2 ulp either way) and the product.
  // Where tanh saturates, sech^2 vanishes and those roundings are about |c| 2^-24: the term 5 |c|
  // covers them, and the conditioning without it (capped = 0 drops it) does not.
  double worst_full = 0, worst_without = 0;
  for (const float cap : {1.0f, 5.0f, 30.0f, 50.0f})
    for (int i = -600; i <= 600; ++i) {
      const float t = cap * float(i) / 10.0f;
      const long double c = exact_capped(t, cap);
      for (const int ulps : {-2, 0, 2}) {
        const double err = double(std::fabs((long double)kernel_capped(t, cap, ulps) - c));
        const double full = kU * (softcap_conditioning(1, std::fabs(t), t, cap, double(c), 0) - 4);
        const double without = kU * (softcap_conditioning(1, std::fabs(t), t, cap, 0, 0) - 4);
        if (err == 0) continue;  // t = 0: nothing to cover
        worst_full = std::max(worst_full, err / full);
        if (without > 0) worst_without = std::max(worst_without, err / without);
      }
    }
  CHECK(worst_full <= 1.0);
  CHECK(worst_without > 1.0);
}

TEST_CASE("softcap budget: a dot product's own error goes through tanh's slope",
          "[properties][budgets][variants]") {
  // d = 64 products of magnitude 1 that cancel to t = 0.5: an fp32 dot product may be off by its
  // bound d abs_dot 2^-24 = 64 * 64 2^-24 (the plain score's term). Near t = 0 tanh's slope is ~1,
  // so the capped score moves by as much; the 5 |c| term (2.5 2^-24 here) cannot cover it, the
  // sech^2 (d abs_dot) term does.
  const double d = 64, abs_dot = 64, t = 0.5, cap = 30;
  const double dot_err = d * abs_dot * kU;
  const long double c = exact_capped(t, cap), c_moved = exact_capped(t + dot_err, cap);
  const double err = double(std::fabs(c_moved - c));
  CHECK(err <= kU * (softcap_conditioning(d, abs_dot, t, cap, double(c), 0) - 4));
  CHECK(err > kU * (softcap_conditioning(d, 0, t, cap, double(c), 0) - 4));
}

TEST_CASE("sink budget: the sink's own scaling to base 2 needs the |sink| term",
          "[properties][budgets][variants]") {
  // The kernel forms sink2 = fl(sink log2e_f) (log2e_f: log2 e in fp32). Back in natural units its
  // exponent is off by |sink2 ln 2 - sink|, up to 1.23 |sink| 2^-24 (half an ulp of sink2, up to
  // 2^-24 relative, and the constant's relative 0.23 2^-24): the sink term's 2 |sink| covers it;
  // without it (sink 0 in the conditioning, the distance terms alone) a large sink's rounding is not.
  const float log2e_f = 1.4426950408889634f;
  double worst_full = 0, worst_without = 0;
  for (int i = -5000; i <= 5000; i += 7) {
    const float sink = float(i) + 0.3f;
    const float sink2 = sink * log2e_f;
    const long double err =
        std::fabs((long double)sink2 * 0.693147180559945309417232121458176568L - (long double)sink);
    worst_full = std::max(worst_full, double(err) / (kU * (sink_conditioning(sink, 0) - 4)));
    worst_without = std::max(worst_without, double(err) / (kU * (sink_conditioning(0, 0))));
  }
  CHECK(worst_full <= 1.0);
  CHECK(worst_without > 1.0);
}

namespace {

// Two sequences (3 and 5 keys), 2 KV heads, d = 2, d_v = 3: K element = 100 key + 10 head + c, V the
// negative, every bit pattern distinct (fp32).
AttentionInput two_sequences() {
  AttentionInput a;
  a.dtype = AC_DTYPE_F32;
  a.num_heads = 2;
  a.num_kv_heads = 2;
  a.head_size = 2;
  a.head_size_v = 3;
  a.seqlens_q = {1, 2};
  a.seqlens_k = {3, 5};
  a.q.assign(3 * 2 * 2, 0x3f800000u);
  for (int key = 0; key < 8; ++key)
    for (int h = 0; h < 2; ++h) {
      for (int c = 0; c < 2; ++c) {
        const float x = float(100 * key + 10 * h + c);
        uint32_t b;
        std::memcpy(&b, &x, 4);
        a.k.push_back(b);
      }
      for (int c = 0; c < 3; ++c) {
        const float x = -float(100 * key + 10 * h + c);
        uint32_t b;
        std::memcpy(&b, &x, 4);
        a.v.push_back(b);
      }
    }
  return a;
}

// two_sequences in pages of 2 with a softcap, a window and sinks.
Case variants_case() {
  Case c;
  c.op = "attention";
  AttentionInput a = gen::paged_copy(two_sequences(), 2);
  a.softcap = 30.0f;
  a.window_left = 4;
  a.window_right = 0;
  a.sinks = {0.5f, -1.25f};
  c.input = a;
  return c;
}

}  // namespace

TEST_CASE("paged K / V: pages in key order gather back bit for bit, unused slots poisoned",
          "[properties][variants]") {
  const AttentionInput a = two_sequences();
  for (const int32_t P : {1, 2, 5, 16}) {
    const AttentionInput p = gen::paged_copy(a, P);
    INFO("page size " << P);
    CHECK(attention_variant_problem(p).empty());
    // Blocks: ceil(3 / P) + ceil(5 / P) pages and one poisoned; one table entry past the longest.
    const int32_t blocks0 = (3 + P - 1) / P, blocks1 = (5 + P - 1) / P;
    CHECK(p.num_pages == blocks0 + blocks1 + 1);
    CHECK(p.max_blocks == std::max(blocks0, blocks1) + 1);
    CHECK(p.k.size() == size_t(p.num_pages) * P * 2 * 2);
    CHECK(p.v.size() == size_t(p.num_pages) * P * 2 * 3);
    CHECK(p.block_table[size_t(p.max_blocks - 1)] == p.num_pages - 1);  // sequence 0's spare entry
    const AttentionInput g = gather_pages(p);
    CHECK(g.k == a.k);
    CHECK(g.v == a.v);
    CHECK_FALSE(g.paged());
    // The poisoned page: NaN in a row's first element, the largest finite value after it.
    const size_t poison_row = size_t(p.num_pages - 1) * P * 2;
    CHECK(p.k[poison_row * 2] == 0x7fc00000u);
    CHECK(p.k[poison_row * 2 + 1] == 0x7f7fffffu);
  }
}

TEST_CASE("case files carry the variants and refuse them out of range, one line each",
          "[properties][variants]") {
  Case c = variants_case();
  const AttentionInput a = std::get<AttentionInput>(c.input);
  const Case back = case_from_json(case_to_json(c));
  const auto& b = std::get<AttentionInput>(back.input);
  CHECK(b.head_size_v == 3);
  CHECK(b.softcap == 30.0f);
  CHECK(b.window_left == 4);
  CHECK(b.window_right == 0);
  CHECK(b.sinks == a.sinks);
  CHECK(b.page_size == 2);
  CHECK(b.num_pages == a.num_pages);
  CHECK(b.max_blocks == a.max_blocks);
  CHECK(b.block_table == a.block_table);
  CHECK(b.k == a.k);
  CHECK(b.v == a.v);
  // A plain case's text names none of them.
  Case plain = c;
  plain.input = two_sequences();
  std::get<AttentionInput>(plain.input).head_size_v = 0;
  std::get<AttentionInput>(plain.input).v.resize(8 * 2 * 2);
  const std::string text = case_to_json(plain);
  for (const char* field : {"softcap", "window_left", "sinks", "page_size", "block_table", "head_size_v"})
    CHECK(text.find(field) == std::string::npos);

  // Out of range, each with the field named.
  const struct {
    const char* what;
    void (*spoil)(AttentionInput&);
    const char* named;
  } bad[] = {
      {"a table entry outside the pool", [](AttentionInput& x) { x.block_table[0] = x.num_pages; },
       "block_table"},
      {"more keys than the blocks hold", [](AttentionInput& x) { x.seqlens_k[1] = 1000; }, "blocks of"},
      {"a negative window", [](AttentionInput& x) { x.window_left = -2; }, "window_left"},
      {"a cap past the bound", [](AttentionInput& x) { x.softcap = 1e6f; }, "softcap"},
      {"a sink per KV head, not per query head", [](AttentionInput& x) { x.sinks = {1.0f}; }, "sinks"},
      {"a NaN sink", [](AttentionInput& x) { x.sinks[1] = NAN; }, "sinks[1]"},
      // 3e38 is finite, but times log2(e) in fp32 it is not: a correct base-2 kernel writes NaN.
      {"a sink past the bound", [](AttentionInput& x) { x.sinks[0] = -3e38f; }, "sinks[0] -3e+38"},
  };
  for (const auto& spoiled : bad) {
    AttentionInput x = a;
    spoiled.spoil(x);
    INFO(spoiled.what);
    const std::string why = attention_variant_problem(x);
    CHECK(why.find(spoiled.named) != std::string::npos);
    CHECK(why.find('\n') == std::string::npos);
  }
  // A value too small for six decimals is quoted as itself, not as 0.000000.
  AttentionInput tiny = a;
  tiny.softcap = -1e-9f;
  CHECK(attention_variant_problem(tiny) == "softcap -1e-09 is not 0 or in (0, 65504]");
  // The sinks' bound, each side inclusive.
  AttentionInput edge = a;
  edge.sinks = {65504.0f, -65504.0f};
  CHECK(attention_variant_problem(edge).empty());
  edge.sinks[1] = -65505.0f;
  CHECK(attention_variant_problem(edge) == "sinks[1] -65505 is not finite in [-65504, 65504]");
}

TEST_CASE("case files: a variant's field that would read as nothing is refused, one line each",
          "[properties][variants][case]") {
  // Read as absent, each would run the case without the variant it names: another case, which may
  // pass.
  Case c = variants_case();
  const AttentionInput a = std::get<AttentionInput>(c.input);
  const std::string text = case_to_json(c);
  REQUIRE_NOTHROW(case_from_json(text));
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    return t.replace(at, from.size(), to);
  };
  const size_t s0 = text.find("\"sinks\": \"") + 10, s1 = text.find('"', s0);
  CHECK_THROWS_WITH(case_from_json(text.substr(0, s0) + "hex:" + text.substr(s1)),
                    Catch::Equals("input.sinks is empty: one per query head needs 2"));
  const size_t bits = text.find("\"softcap_bits\"");
  const std::string no_bits = text.substr(0, bits) + text.substr(text.find('\n', bits) + 1);
  CHECK_THROWS_WITH(
      case_from_json(no_bits),
      Catch::Equals(
          "input.softcap without softcap_bits (the bits are the value; the decimal is for the reader)"));
  // head_size_v is written only where V has a size of its own: a written 0 is refused, not "none".
  const std::string hsv = "\"head_size_v\": " + std::to_string(a.head_size_v);
  CHECK_THROWS_WITH(case_from_json(replaced(hsv, "\"head_size_v\": 0")),
                    Catch::Equals("input.head_size_v = 0 out of range [1, 16777216]"));
  const std::string blocks = "\"max_blocks\": " + std::to_string(a.max_blocks);
  CHECK_THROWS_WITH(case_from_json(replaced(blocks, "\"max_blocks\": 0")),
                    Catch::Equals("input.max_blocks = 0 out of range [1, 16777216]"));
  auto with = [&](const std::string& field) {
    return replaced("\"input\": {", "\"input\": {" + field + ", ");
  };
  CHECK_THROWS_WITH(case_from_json(with("\"p_scale_bits\": \"0x00000000\"")),
                    Catch::Equals("input.p_scale 0 is not in [2^-126, 448]"));
  CHECK_THROWS_WITH(case_from_json(with("\"p_scale_bits\": \"0x80000000\"")),
                    Catch::Equals("input.p_scale -0 is not in [2^-126, 448]"));
  // The bound is fp32's smallest normal, 2^-126 (plugin_abi.h AC_MIN_P_SCALE): 2^-128's reciprocal
  // is 2^128, infinity in fp32, and a kernel multiplying by it writes NaN; 2^-127 (0x00400000,
  // subnormal) is refused with every subnormal.
  CHECK_THROWS_WITH(case_from_json(with("\"p_scale_bits\": \"0x00400000\"")),
                    Catch::Equals("input.p_scale 5.87747e-39 is not in [2^-126, 448]"));
  CHECK_THROWS_WITH(case_from_json(with("\"q_descale\": \"hex:\"")),
                    Catch::Equals("input.q_descale is empty (Q in FP8 needs its descales)"));
  CHECK_THROWS_WITH(case_from_json(with("\"output_scale\": 0.5")),
                    Catch::Equals("input.output_scale without out_dtype (an FP8 output's format)"));

  // Sizes past the bounds name the sizes.
  AttentionInput wide = two_sequences();
  wide.seqlens_k[1] = 1 << 30;
  c.input = wide;
  CHECK_THROWS_WITH(
      case_from_json(case_to_json(c)),
      Catch::Equals("input: sequence 1's queries x keys: dimension 1073741824 is out of range 0..2^24"));

  // V inside K: V's values are checked against K's once both are read.
  AttentionInput inside = two_sequences();
  inside.head_size_v = 1;
  inside.v.clear();
  for (size_t row = 0; row < inside.k.size() / 2; ++row) inside.v.push_back(inside.k[row * 2]);
  inside.v_in_k = true;
  c.input = inside;
  REQUIRE_NOTHROW(case_from_json(case_to_json(c)));
  inside.v[1] ^= 1u;
  c.input = inside;
  CHECK_THROWS_WITH(case_from_json(case_to_json(c)),
                    Catch::Equals("input.v_in_k: v[1] is not K's row 1 column 0 (V inside K is the first "
                                  "head_size_v columns of K's rows)"));

  // A paged case's work is bounded by the pool it holds, not by the keys its table serves: one page
  // of 256 keys named 512 times serves 2^17 keys to 2048 queries, 2^34 of work at d = 64, which 2^13
  // per element of q, k and v counted as keys would allow (about 2^37) and of q and the pool held
  // does not (about 2^30).
  AttentionInput bomb;
  bomb.dtype = AC_DTYPE_F32;
  bomb.num_heads = bomb.num_kv_heads = 1;
  bomb.head_size = 64;
  bomb.seqlens_q = {2048};
  bomb.seqlens_k = {1 << 17};
  bomb.q.assign(2048 * 64, 0x3f800000u);
  bomb.page_size = 256;
  bomb.num_pages = 1;
  bomb.max_blocks = 512;
  bomb.block_table.assign(512, 0);
  bomb.k.assign(256 * 64, 0x3f800000u);
  bomb.v = bomb.k;
  REQUIRE(attention_variant_problem(bomb).empty());
  c.input = bomb;
  CHECK_THROWS_WITH(case_from_json(case_to_json(c)), Catch::StartsWith("input: attention work"));
}

TEST_CASE("shrinking a paged case keeps it paged and valid, offers smaller pages and drops variants",
          "[properties][variants][shrink]") {
  AttentionInput a = gen::paged_copy(two_sequences(), 5);
  a.softcap = 5.0f;
  a.sinks = {1.0f, 2.0f};
  const auto candidates = detail::attention_shrinks(a, {1, 2}, true, {1, 2, 5, 16});
  REQUIRE_FALSE(candidates.empty());
  int smaller_pages = 0, without_cap = 0, without_sinks = 0;
  for (const AttentionInput& x : candidates) {
    CHECK(x.paged());
    CHECK(attention_variant_problem(x).empty());
    CHECK(x.k.size() == size_t(x.kv_rows()) * x.num_kv_heads * x.head_size);
    CHECK(x.v.size() == size_t(x.kv_rows()) * x.num_kv_heads * x.dv());
    CHECK((x.sinks.empty() || x.sinks.size() == size_t(x.num_heads)));
    smaller_pages += x.page_size < 5;
    without_cap += x.softcap == 0.0f;
    without_sinks += x.sinks.empty();
  }
  CHECK(smaller_pages == 2);  // page sizes 1 and 2
  CHECK(without_cap == 1);
  CHECK(without_sinks == 1);
}

TEST_CASE("generators draw every declared variant, and none undeclared",
          "[properties][generators][variants]") {
  gen::Domain dom;
  dom.dtypes = {AC_DTYPE_F16, AC_DTYPE_BF16};
  dom.head_sizes = {64};
  dom.features = AC_FEAT_CAUSAL | AC_FEAT_MASK | AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE;
  dom.tile_keys = 64;
  dom.variants = AC_VAR_PAGED_KV | AC_VAR_SOFTCAP | AC_VAR_WINDOW | AC_VAR_SINKS;
  dom.page_sizes = {1, 5, 16};
  std::set<std::string> seen;
  std::set<int32_t> pages;
  rc::Random random(7);
  for (int i = 0; i < 100; ++i) {
    const AttentionInput a = gen::attention_input(dom)(random.split(), i).value();
    REQUIRE(attention_variant_problem(a).empty());
    if (a.softcap != 0.0f) seen.insert("softcap");
    if (a.window_left != -1 || a.window_right != -1) seen.insert("window");
    if (!a.sinks.empty()) seen.insert("sinks");
    if (a.paged()) {
      seen.insert("paged");
      pages.insert(a.page_size);
      CHECK(a.max_blocks * int64_t(a.page_size) > *std::max_element(a.seqlens_k.begin(), a.seqlens_k.end()));
    }
  }
  CHECK(seen == std::set<std::string>{"paged", "sinks", "softcap", "window"});
  CHECK(pages == std::set<int32_t>{1, 5, 16});
  // Undeclared: the same stream without variants draws none.
  dom.variants = 0;
  dom.page_sizes.clear();
  rc::Random plain(7);
  for (int i = 0; i < 100; ++i) {
    const AttentionInput a = gen::attention_input(dom)(plain.split(), i).value();
    CHECK(a.softcap == 0.0f);
    CHECK(a.window_left == -1);
    CHECK(a.sinks.empty());
    CHECK_FALSE(a.paged());
  }
}

TEST_CASE("generators draw a declared V head size, V sized by it", "[properties][generators][variants]") {
  gen::Domain dom;
  dom.dtypes = {AC_DTYPE_F16};
  dom.head_sizes = {64};
  dom.features = AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE;
  dom.variants = AC_VAR_HEAD_SIZE_V | AC_VAR_PAGED_KV;
  dom.page_sizes = {16};
  dom.head_pairs = {{192, 128}};
  rc::Random random(3);
  int pairs = 0;
  for (int i = 0; i < 60; ++i) {
    const AttentionInput a = gen::attention_input(dom)(random.split(), i).value();
    REQUIRE(attention_variant_problem(a).empty());
    CHECK(a.v.size() == size_t(a.kv_rows()) * a.num_kv_heads * a.dv());
    CHECK(a.k.size() == size_t(a.kv_rows()) * a.num_kv_heads * a.head_size);
    if (a.head_size_v > 0) {
      ++pairs;
      CHECK(a.head_size == 192);
      CHECK(a.head_size_v == 128);
    }
  }
  CHECK(pairs > 10);
}

TEST_CASE("V inside K: drawn where declared, carried by case files, checked, and un-shared for others",
          "[properties][generators][variants]") {
  gen::Domain dom;
  dom.dtypes = {AC_DTYPE_F16};
  dom.head_sizes = {64};
  dom.features = AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE;
  dom.variants = AC_VAR_HEAD_SIZE_V | AC_VAR_PAGED_KV | AC_VAR_V_IN_K;
  dom.page_sizes = {16};
  dom.head_pairs = {{192, 128}};
  dom.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3);
  rc::Random random(5);
  int inside = 0, paged = 0, fp8 = 0;
  AttentionInput drawn;
  for (int i = 0; i < 120; ++i) {
    const AttentionInput a = gen::attention_input(dom)(random.split(), i).value();
    REQUIRE(attention_variant_problem(a).empty());
    if (!a.v_in_k) continue;
    ++inside;
    paged += a.paged();
    fp8 += a.fp8_kv();
    CHECK(a.dv() < a.head_size);
    if (a.fp8_kv()) CHECK(a.v_descale == a.k_descale);
    if (drawn.k.empty() && !a.paged()) drawn = a;
  }
  INFO(inside << " inside, " << paged << " paged, " << fp8 << " FP8");
  CHECK(inside > 5);
  CHECK(paged > 0);
  CHECK(fp8 > 0);
  REQUIRE(!drawn.k.empty());
  // Round trip, then each way of breaking it named in one line.
  Case c;
  c.op = "attention";
  c.input = drawn;
  CHECK(std::get<AttentionInput>(case_from_json(case_to_json(c)).input).v_in_k);
  CHECK(case_to_json(c).find("\"v_in_k\": true") != std::string::npos);
  AttentionInput x = drawn;
  x.v[3] ^= 1u;
  CHECK(v_in_k_problem(x) ==
        "v_in_k: v[3] is not K's row 0 column 3 (V inside K is the first head_size_v "
        "columns of K's rows)");
  x = drawn;
  x.v.pop_back();
  CHECK(v_in_k_problem(x).find("v_in_k: v has") == 0);
  x = drawn;
  x.head_size_v = x.head_size + 1;
  CHECK(v_in_k_problem(x).find("v_in_k needs head_size_v") == 0);
  // A subject without AC_VAR_V_IN_K gets the same values with V as its own tensor; so does one
  // declaring it when a property changed K since (v no longer K's columns).
  ac_caps caps{};
  AttentionInput storage;
  const AttentionInput& own = input_for_subject(drawn, AC_VAR_HEAD_SIZE_V, caps, "s", storage);
  CHECK(!own.v_in_k);
  CHECK(own.v == drawn.v);
  CHECK(&input_for_subject(drawn, AC_VAR_HEAD_SIZE_V | AC_VAR_V_IN_K, caps, "s", storage) == &drawn);
  x = drawn;
  x.k[0] ^= 1u;
  CHECK(!input_for_subject(x, AC_VAR_HEAD_SIZE_V | AC_VAR_V_IN_K, caps, "s", storage).v_in_k);
}

TEST_CASE("a paged case at a page size the subject does not declare is refused before the call",
          "[properties][variants]") {
  // A replayed file (or another subject's case) may carry any page size; a subject declaring paged
  // K / V is given only those it declares. One not declaring paged K / V gets the gathered keys.
  const AttentionInput a = gen::paged_copy(two_sequences(), 5);
  const int32_t sizes[] = {16, 64};
  ac_caps caps{};
  caps.page_sizes = sizes;
  caps.num_page_sizes = 2;
  AttentionInput storage;
  CHECK_THROWS_WITH(input_for_subject(a, AC_VAR_PAGED_KV | AC_VAR_HEAD_SIZE_V, caps, "s", storage),
                    Catch::Equals("s does not declare page size 5 (caps.page_sizes: 16, 64)"));
  CHECK(!input_for_subject(a, AC_VAR_HEAD_SIZE_V, caps, "s", storage).paged());
  const int32_t five[] = {16, 5};
  caps.page_sizes = five;
  CHECK(&input_for_subject(a, AC_VAR_PAGED_KV | AC_VAR_HEAD_SIZE_V, caps, "s", storage) == &a);
}

namespace {

// A correct attention fake (fakes.hpp, over the gathered keys) declaring paged K / V at page sizes 16
// and 64; `refuse_64` makes it refuse pages of 64, a size it declares; `consecutive` makes it walk a
// sequence's pages as consecutive physical pages after its first (entry b read as entry 0 + b). It
// records the page sizes it was called with (0: contiguous).
class PagedFake final : public fakes::Wrapping {
 public:
  explicit PagedFake(bool refuse_64, bool consecutive = false)
      : Wrapping("attn-paged"), refuse_64_(refuse_64), consecutive_(consecutive) {
    caps_.variants = AC_VAR_PAGED_KV;
    caps_.page_sizes = kPages;
    caps_.num_page_sizes = 2;
  }
  AttentionOutput attention(const AttentionInput& a, const AttentionOptions& o) override {
    seen.insert(a.page_size);
    if (refuse_64_ && a.page_size == 64)
      throw SubjectError(SubjectError::Kind::unsupported, "pages of 64 are not compiled in");
    AttentionInput walked = a, storage;
    if (consecutive_ && a.paged())
      for (size_t s = 0; s < a.seqlens_k.size(); ++s)
        for (int32_t b = 1; b < a.max_blocks; ++b)
          walked.block_table[s * size_t(a.max_blocks) + size_t(b)] =
              (a.block_table[s * size_t(a.max_blocks)] + b) % a.num_pages;
    return inner_.attention(contiguous_kv(walked, storage), o);
  }
  std::set<int32_t> seen;

 private:
  static constexpr int32_t kPages[] = {16, 64};
  bool refuse_64_, consecutive_;
};

}  // namespace

TEST_CASE("declared_variants: a subject refusing a page size it declares fails, naming it",
          "[properties][variants][refusals]") {
  RunConfig cfg;
  cfg.shrink = false;
  // Control: the same subject accepting both sizes passes, having been called unpaged and at each.
  PagedFake accepts(false);
  const PropertyResult ok = run_property("declared_variants", accepts, cfg);
  INFO(ok.message);
  CHECK(ok.status == PropertyResult::Status::passed);
  CHECK(accepts.seen == std::set<int32_t>{0, 16, 64});

  PagedFake refuses(true);
  expect_refused_declared(
      refuses,
      "the subject refused its declared page size 64, which it must accept: pages of 64 are not compiled in",
      cfg);
  // Every other property takes the same refusal for a skipped case.
  CHECK(run_property("accuracy", refuses, cfg).status == PropertyResult::Status::passed);
}

TEST_CASE("declared_variants: every declared page size gets page boundaries, over shuffled and shared pages",
          "[properties][variants]") {
  // The plain case's 7 keys fit in one page of 16 or 64, where a walk of a sequence's pages as
  // consecutive after its first reads what the table names; the item over 3 pages (2P + 3 keys, and
  // P + 5 keys sharing the first page) does not.
  RunConfig cfg;
  cfg.shrink = false;
  PagedFake walker(false, true);
  const PropertyResult r = run_property("declared_variants", walker, cfg);
  INFO(r.message);
  CHECK(r.status == PropertyResult::Status::failed);
  CHECK(r.message.find("with its declared page size 16 over 3 pages, the first shared by 2 sequences: ") ==
        0);
  // The failure's words describe the item's case, which the quoted row indexes, not the drawn one
  // (a sequence of 7 keys in one page).
  INFO(r.context);
  CHECK(r.context.find("Tk=35,21") != std::string::npos);
  CHECK(r.context.find("pages of 16 (") != std::string::npos);
  // The layout itself: 2 sequences of 35 and 21 keys in pages of 16 are 3 + 2 pages, one shared, in a
  // shuffled pool with the poisoned page last; gathered, sequence 1's first 16 keys are sequence 0's.
  AttentionInput two = two_sequences();
  two.seqlens_k = {35, 21};
  const int64_t row = int64_t(two.num_kv_heads) * two.head_size, vrow = int64_t(two.num_kv_heads) * two.dv();
  two.k.resize(size_t(56 * row));
  two.v.resize(size_t(56 * vrow));
  for (size_t i = 0; i < two.k.size(); ++i) two.k[i] = detail::round_bits(two.dtype, double(i % 97));
  for (size_t i = 0; i < two.v.size(); ++i) two.v[i] = detail::round_bits(two.dtype, double(i % 89));
  std::copy_n(two.k.begin(), 16 * row, two.k.begin() + 35 * row);
  std::copy_n(two.v.begin(), 16 * vrow, two.v.begin() + 35 * vrow);
  const AttentionInput p = gen::paged_copy(two, 16, /*shuffle=*/7, /*shared=*/1);
  CHECK(p.num_pages == 3 + 2 - 1 + 1);
  CHECK(p.block_table[size_t(p.max_blocks)] == p.block_table[0]);  // the shared first page
  CHECK(p.block_table[0] != 0);                                    // shuffled (this seed)
  const AttentionInput g = gather_pages(p);
  CHECK(g.k == two.k);
  CHECK(g.v == two.v);
}
