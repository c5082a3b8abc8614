// Exact attention forward: grouped-query mapping, bottom-right causal alignment, per-sequence key
// lengths, explicit masks, empty rows, NaN/inf meaning, exact scores, the merge of attention over
// disjoint key ranges, and the variants (softcap, window, sinks, head_size_v, their validation). Expected
// values are derived by hand in each case (one-hot keys, equal scores whose softmax is a plain mean) or
// computed independently in double where that suffices.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "attncheck/reference/reference.hpp"

using namespace attncheck::ref;

namespace {

uint32_t h16(double x) { return round_to_format(Format::fp16, x); }

std::vector<uint32_t> h16v(std::initializer_list<double> xs) {
  std::vector<uint32_t> r;
  for (double x : xs) r.push_back(h16(x));
  return r;
}

AttentionProblem problem(int32_t h, int32_t hkv, int32_t d, std::vector<int32_t> tq,
                         std::vector<int32_t> tk) {
  AttentionProblem pb{
      Format::fp16, h,  hkv, d, std::move(tq), std::move(tk), false, {}, 1.0f, {}, {}, {}, 0, 0.0f, -1, -1,
      {},           {}, {},  {}};
  int64_t nq = 0, nk = 0;
  for (auto t : pb.seqlens_q) nq += t;
  for (auto t : pb.seqlens_k) nk += t;
  pb.q.assign(static_cast<size_t>(nq * h * d), h16(0));
  pb.k.assign(static_cast<size_t>(nk * hkv * d), h16(0));
  pb.v.assign(static_cast<size_t>(nk * hkv * d), h16(0));
  return pb;
}

void set_k(AttentionProblem& pb, int64_t key, int32_t g, int c, double x) {
  pb.k[(static_cast<size_t>(key) * pb.num_kv_heads + g) * pb.head_size + c] = round_to_format(pb.dtype, x);
}
// V rows have head_size_v elements (head_size when it is 0).
void set_v(AttentionProblem& pb, int64_t key, int32_t g, int c, double x) {
  const int32_t dv = pb.head_size_v > 0 ? pb.head_size_v : pb.head_size;
  pb.v[(static_cast<size_t>(key) * pb.num_kv_heads + g) * dv + c] = round_to_format(pb.dtype, x);
}
void set_q(AttentionProblem& pb, int64_t tok, int32_t i, int c, double x) {
  pb.q[(static_cast<size_t>(tok) * pb.num_heads + i) * pb.head_size + c] = round_to_format(pb.dtype, x);
}

bool near(const Real& a, double b, double rel = 1e-15) {
  return abs(a - b) <= rel * std::max(1.0, std::abs(b));
}

bool is_empty_row(const ExactRow& r) {
  if (!r.empty || !(isinf(r.lse) && r.lse < 0)) return false;
  for (const auto& x : r.o)
    if (x != 0) return false;
  return true;
}

// Random problem in `f`, values N(0, 1), one sequence.
AttentionProblem random_problem(Format f, int32_t h, int32_t hkv, int32_t d, int32_t tq, int32_t tk,
                                uint64_t seed) {
  AttentionProblem pb = problem(h, hkv, d, {tq}, {tk});
  pb.dtype = f;
  pb.softmax_scale = 0.35f;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n01;
  for (auto* t : {&pb.q, &pb.k, &pb.v})
    for (auto& b : *t) b = round_to_format(f, n01(rng));
  return pb;
}

}  // namespace

TEST_CASE("one-hot keys: scores are the query's coordinates, scaled", "[attention]") {
  // k_j = e_j, q = (0, 1, 2, 3): s_j = scale * j. v_j = (j, 1, -j, 0).
  for (float scale : {1.0f, 0.5f}) {
    AttentionProblem pb = problem(1, 1, 4, {1}, {4});
    pb.softmax_scale = scale;
    for (int j = 0; j < 4; ++j) {
      set_k(pb, j, 0, j, 1.0);
      set_q(pb, 0, 0, j, j);
      set_v(pb, j, 0, 0, j);
      set_v(pb, j, 0, 1, 1);
      set_v(pb, j, 0, 2, -j);
    }
    double z = 0, jw = 0;
    for (int j = 0; j < 4; ++j) {
      z += std::exp(double{scale} * j);
      jw += j * std::exp(double{scale} * j);
    }
    const ExactRow r = exact_attention_row(pb, 0, 0);
    CHECK(!r.empty);
    CHECK(near(r.o[0], jw / z));
    CHECK(near(r.o[1], 1.0));
    CHECK(near(r.o[2], -jw / z));
    CHECK(r.o[3] == 0);
    CHECK(near(r.lse, std::log(z)));
    CHECK(near(exact_attention_row(pb, 0, 0, LseBase::two).lse, std::log(z) / std::log(2.0)));
  }
}

TEST_CASE("grouped-query: query head i reads KV head i / (h / h_kv)", "[attention]") {
  // h = 4, h_kv = 2: heads 0, 1 read KV head 0 (values (1, 1)), heads 2, 3 read KV head 1 (values
  // (2, -2)); the mapping i % h_kv would send head 1 to KV head 1.
  AttentionProblem pb = problem(4, 2, 2, {1}, {3});
  for (int j = 0; j < 3; ++j) {
    for (int c = 0; c < 2; ++c) {
      set_v(pb, j, 0, c, 1.0);
      set_v(pb, j, 1, c, c == 0 ? 2.0 : -2.0);
      set_k(pb, j, 0, c, j + c);  // KV head 0 keys differ from KV head 1 keys
      set_k(pb, j, 1, c, -j);
    }
  }
  for (int i = 0; i < 4; ++i) set_q(pb, 0, i, 0, 0.25 * (i + 1));
  const auto rows = exact_attention(pb);
  REQUIRE(rows.size() == 4);
  for (int i = 0; i < 4; ++i) {
    const int g = i / 2;
    CHECK(near(rows[i].o[0], g == 0 ? 1.0 : 2.0));
    CHECK(near(rows[i].o[1], g == 0 ? 1.0 : -2.0));
    // LSE from the scores against the right KV head, in double: s_j = q0 * k_j0.
    double z = 0;
    for (int j = 0; j < 3; ++j) z += std::exp(0.25 * (i + 1) * (g == 0 ? j : -j));
    CHECK(near(rows[i].lse, std::log(z), 1e-14));
  }
}

TEST_CASE("causal masking is bottom-right aligned", "[attention]") {
  // All scores 0 (q = 0), v_j = j: each output is the mean of the visible keys' indices.
  SECTION("fewer queries than keys (chunked prefill): Tq = 2, Tk = 4") {
    AttentionProblem pb = problem(1, 1, 1, {2}, {4});
    pb.causal = true;
    for (int j = 0; j < 4; ++j) set_v(pb, j, 0, 0, j);
    const auto rows = exact_attention(pb);
    CHECK(near(rows[0].o[0], 1.0));  // keys 0..2
    CHECK(near(rows[0].lse, std::log(3.0)));
    CHECK(near(rows[1].o[0], 1.5));  // keys 0..3
    CHECK(near(rows[1].lse, std::log(4.0)));
  }
  SECTION("more queries than keys: the first rows see nothing") {
    AttentionProblem pb = problem(1, 1, 1, {3}, {1});
    pb.causal = true;
    set_v(pb, 0, 0, 0, 5.0);
    const auto rows = exact_attention(pb);
    CHECK(is_empty_row(rows[0]));  // sees j <= 0 + 1 - 3 = -2
    CHECK(is_empty_row(rows[1]));
    CHECK(!rows[2].empty);
    CHECK(near(rows[2].o[0], 5.0));
    CHECK(near(rows[2].lse, 0.0));
  }
  SECTION("square: lower triangle") {
    AttentionProblem pb = problem(1, 1, 1, {3}, {3});
    pb.causal = true;
    for (int j = 0; j < 3; ++j) set_v(pb, j, 0, 0, j);
    const auto rows = exact_attention(pb);
    CHECK(near(rows[0].o[0], 0.0));
    CHECK(near(rows[1].o[0], 0.5));
    CHECK(near(rows[2].o[0], 1.0));
  }
}

TEST_CASE("per-sequence key lengths and offsets", "[attention]") {
  // seq 0: 1 query over 3 keys (v = 10, 20, 30); seq 1: 2 queries over 1 key (v = 7);
  // seq 2: 1 query over 0 keys (empty row).
  AttentionProblem pb = problem(1, 1, 1, {1, 2, 1}, {3, 1, 0});
  set_v(pb, 0, 0, 0, 10);
  set_v(pb, 1, 0, 0, 20);
  set_v(pb, 2, 0, 0, 30);
  set_v(pb, 3, 0, 0, 7);
  const auto rows = exact_attention(pb);
  REQUIRE(rows.size() == 4);
  CHECK(near(rows[0].o[0], 20.0));
  CHECK(near(rows[0].lse, std::log(3.0)));
  CHECK(near(rows[1].o[0], 7.0));
  CHECK(near(rows[2].o[0], 7.0));
  CHECK(rows[2].lse == 0);
  CHECK(is_empty_row(rows[3]));
  CHECK(is_empty_row(exact_attention_row(pb, 3, 0)));
}

TEST_CASE("explicit mask: per sequence [Tq, Tk], AND-ed with causal", "[attention]") {
  AttentionProblem pb = problem(2, 1, 1, {2}, {3});        // two heads share the mask
  for (int j = 0; j < 3; ++j) set_v(pb, j, 0, 0, 1 << j);  // 1, 2, 4
  pb.mask = {1, 0, 1,                                      // row 0: keys 0 and 2
             0, 0, 0};                                     // row 1: nothing
  auto rows = exact_attention(pb);
  for (int i = 0; i < 2; ++i) {
    CHECK(near(rows[0 * 2 + i].o[0], 2.5));
    CHECK(near(rows[0 * 2 + i].lse, std::log(2.0)));
    CHECK(is_empty_row(rows[1 * 2 + i]));
  }
  pb.causal = true;  // row 0 sees keys <= 1, row 1 keys <= 2
  pb.mask = {1, 1, 1, 0, 1, 1};
  rows = exact_attention(pb);
  CHECK(near(rows[0].o[0], 1.5));  // keys {0, 1}
  CHECK(near(rows[2].o[0], 3.0));  // keys {1, 2}
}

TEST_CASE("scores are exact: cancellation a double dot product would lose", "[attention]") {
  // fp16: q.k = 65504^2 + 2^-24 - 65504^2 = 2^-24 for key 0, 0 for key 1, so
  // LSE = ln(e^d + 1) = ln 2 + d/2 + d^2/8 + O(d^4), d = 2^-24. In double the dot is 0.
  AttentionProblem pb = problem(1, 1, 3, {1}, {2});
  pb.q = h16v({65504, 1, -65504});
  pb.k = h16v({65504, std::ldexp(1.0, -24), 65504, 0, 0, 0});
  const Real d = ldexp(Real(1), -24);
  const Real want = log(Real(2)) + d / 2 + d * d / 8;
  CHECK(abs(exact_attention_row(pb, 0, 0).lse - want) < ldexp(Real(1), -90));
  // fp32 (the mpfr_sum path): 2^60 * 2^60 + 1 * 2^-60 - 2^60 * 2^60 = 2^-60.
  AttentionProblem p32 = problem(1, 1, 3, {1}, {2});
  p32.dtype = Format::fp32;
  for (auto* t : {&p32.q, &p32.k, &p32.v})
    for (auto& b : *t) b = round_to_format(Format::fp32, 0.0);
  set_q(p32, 0, 0, 0, std::ldexp(1.0, 60));
  set_q(p32, 0, 0, 1, 1.0);
  set_q(p32, 0, 0, 2, -std::ldexp(1.0, 60));
  set_k(p32, 0, 0, 0, std::ldexp(1.0, 60));
  set_k(p32, 0, 0, 1, std::ldexp(1.0, -60));
  set_k(p32, 0, 0, 2, std::ldexp(1.0, 60));
  const Real e = ldexp(Real(1), -60);
  CHECK(abs(exact_attention_row(p32, 0, 0).lse - (log(Real(2)) + e / 2 + e * e / 8)) < ldexp(Real(1), -180));
}

TEST_CASE("NaN and infinity have their documented meaning", "[attention]") {
  AttentionProblem pb = problem(1, 1, 2, {1}, {3});
  for (int j = 0; j < 3; ++j) {
    set_k(pb, j, 0, 0, 1.0);
    set_v(pb, j, 0, 0, j);
    set_v(pb, j, 0, 1, 1.0);
  }
  pb.mask = {1, 1, 0};
  SECTION("NaN in a masked key's value changes nothing") {
    set_v(pb, 2, 0, 0, NAN);
    const ExactRow r = exact_attention_row(pb, 0, 0);
    CHECK(near(r.o[0], 0.5));
  }
  SECTION("NaN in a visible value: that element only") {
    set_v(pb, 1, 0, 0, NAN);
    const ExactRow r = exact_attention_row(pb, 0, 0);
    CHECK(isnan(r.o[0]));
    CHECK(near(r.o[1], 1.0));
    CHECK(near(r.lse, std::log(2.0)));
  }
  SECTION("NaN in the query: the whole row is NaN") {
    set_q(pb, 0, 0, 1, NAN);
    const ExactRow r = exact_attention_row(pb, 0, 0);
    CHECK((isnan(r.o[0]) && isnan(r.o[1]) && isnan(r.lse)));
  }
  SECTION("+inf scores share the mass; inf * 0 is NaN") {
    set_q(pb, 0, 0, 0, INFINITY);  // scores +inf for keys 0, 1 (k = 1)
    const ExactRow r = exact_attention_row(pb, 0, 0);
    CHECK(near(r.o[0], 0.5));
    CHECK((isinf(r.lse) && r.lse > 0));
    set_k(pb, 0, 0, 0, 0.0);  // inf * 0
    CHECK(isnan(exact_attention_row(pb, 0, 0).lse));
  }
  SECTION("-inf score: weight zero") {
    set_q(pb, 0, 0, 0, 1.0);
    set_k(pb, 0, 0, 0, -INFINITY);
    const ExactRow r = exact_attention_row(pb, 0, 0);
    CHECK(near(r.o[0], 1.0));
    CHECK(r.lse == 1);
  }
}

TEST_CASE("attention over two disjoint key ranges merges to attention over the union", "[attention][merge]") {
  for (Format f : {Format::fp16, Format::bf16, Format::fp32}) {
    for (bool causal : {false, true}) {
      AttentionProblem full = random_problem(f, 2, 1, 8, 3, 10, 99 + static_cast<int>(f));
      full.causal = causal;
      AttentionProblem a = full, b = full;
      a.mask.assign(3 * 10, 0);
      b.mask.assign(3 * 10, 0);
      for (int t = 0; t < 3; ++t)
        for (int j = 0; j < 10; ++j) (j < 4 ? a : b).mask[t * 10 + j] = 1;
      const auto rf = exact_attention(full), ra = exact_attention(a), rb = exact_attention(b);
      for (size_t r = 0; r < rf.size(); ++r) {
        const ExactState m = exact_merge({{ra[r].o, ra[r].lse}, {rb[r].o, rb[r].lse}});
        CHECK(abs(m.lse - rf[r].lse) < ldexp(Real(1), -180));
        for (size_t c = 0; c < m.o.size(); ++c) CHECK(abs(m.o[c] - rf[r].o[c]) < ldexp(Real(1), -180));
      }
    }
  }
}

TEST_CASE("exact_attention and exact_attention_row agree on every row", "[attention]") {
  AttentionProblem pb = random_problem(Format::bf16, 4, 2, 16, 5, 7, 5);
  pb.causal = true;
  const auto rows = exact_attention(pb, LseBase::two);
  for (int64_t t = 0; t < 5; ++t)
    for (int32_t i = 0; i < 4; ++i) {
      const ExactRow r = exact_attention_row(pb, t, i, LseBase::two);
      const ExactRow& w = rows[static_cast<size_t>(t * 4 + i)];
      CHECK(r.lse == w.lse);
      CHECK(r.o == w.o);
    }
}

TEST_CASE("validate names the problem", "[attention][validate]") {
  const AttentionProblem good = problem(4, 2, 8, {2, 1}, {3, 2});
  REQUIRE_NOTHROW(validate(good));
  auto fails_with = [](AttentionProblem pb, const std::string& words) {
    CHECK_THROWS_WITH(validate(pb), Catch::Contains(words));
    CHECK_THROWS_AS(exact_attention(pb), ReferenceError);
  };
  AttentionProblem pb = good;
  pb.num_kv_heads = 3;
  fails_with(pb, "not divisible by num_kv_heads");
  pb = good;
  pb.num_heads = 0;
  fails_with(pb, "num_heads = 0");
  pb = good;
  pb.head_size = 0;
  fails_with(pb, "head_size = 0");
  pb = good;
  pb.seqlens_k[1] = -1;
  fails_with(pb, "negative key length");
  pb = good;
  pb.seqlens_q[0] = -2;
  fails_with(pb, "negative query length");
  pb = good;
  pb.seqlens_k.pop_back();
  fails_with(pb, "sequences");
  pb = good;
  pb.q.pop_back();
  fails_with(pb, "q has");
  pb = good;
  pb.v.push_back(0);
  fails_with(pb, "v has");
  pb = good;
  pb.mask.assign(5, 1);
  fails_with(pb, "mask has");
  pb = good;
  pb.k[0] = 0x10000;
  fails_with(pb, "above 16 bits");
  pb = good;
  pb.softmax_scale = INFINITY;
  fails_with(pb, "softmax_scale");
  // The variants' fields.
  pb = good;
  pb.head_size_v = -1;
  fails_with(pb, "head_size_v = -1");
  pb = good;
  pb.head_size_v = 3;  // v still holds head_size = 8 elements per key
  fails_with(pb, "v has");
  pb.v.assign(static_cast<size_t>(5 * 2 * 3), 0);
  REQUIRE_NOTHROW(validate(pb));
  for (float cap : {-1.0f, NAN, INFINITY}) {
    pb = good;
    pb.softcap = cap;
    fails_with(pb, "softcap");
  }
  pb = good;
  pb.window_left = -2;
  fails_with(pb, "window_left = -2");
  pb = good;
  pb.window_right = -3;
  fails_with(pb, "window_right = -3");
  pb = good;
  pb.sinks = {0.0f, 1.0f};
  fails_with(pb, "sinks has 2 values, num_heads is 4");
  pb.sinks = {0.0f, 1.0f, NAN, 2.0f};
  fails_with(pb, "sinks[2] is not finite");
  pb.sinks = {0.0f, 1.0f, 2.0f, -INFINITY};
  fails_with(pb, "sinks[3] is not finite");
  pb = good;
  pb.softcap = 30.0f;
  pb.window_left = 0;
  pb.window_right = -1;
  pb.sinks = {0.0f, -1.0f, 1e30f, -1e30f};
  REQUIRE_NOTHROW(validate(pb));
  CHECK_THROWS_WITH(exact_attention_row(good, 3, 0), Catch::Contains("token 3 outside"));
  CHECK_THROWS_WITH(exact_attention_row(good, 0, 4), Catch::Contains("head 4 outside"));
}

TEST_CASE("cancellation to a tiny output is resolved exactly", "[attention]") {
  // Equal scores, v = 65504, -65504, 2^-24: O = 2^-24 / 3 exactly (the fp16 fixed-point path), and the
  // same through the fp32 (MPFR) path.
  for (Format f : {Format::fp16, Format::fp32}) {
    AttentionProblem pb = problem(1, 1, 1, {1}, {3});
    pb.dtype = f;
    for (auto* t : {&pb.q, &pb.k})
      for (auto& b : *t) b = round_to_format(f, 0.0);
    pb.v = {round_to_format(f, 65504.0), round_to_format(f, -65504.0),
            round_to_format(f, std::ldexp(1.0, -24))};
    const ExactRow r = exact_attention_row(pb, 0, 0);
    const Real want = ldexp(Real(1), -24) / 3;
    CHECK(abs(r.o[0] - want) <= ldexp(Real(1), -190) * want);
    CHECK(near(r.lse, std::log(3.0)));
  }
}

TEST_CASE("the fixed-point accumulation agrees with the rounded-add path", "[attention]") {
  // Two independent computations of the same numbers: exact fixed-point sums (automatic) and
  // correctly rounded adds of exact products (forced). fp16 problems are also restated in fp32,
  // whose scores go through mpfr_sum instead of the integer dot product.
  std::mt19937_64 rng(17);
  std::normal_distribution<double> n01;
  for (Format f : {Format::fp16, Format::bf16, Format::fp32}) {
    for (double score_spread : {0.1, 3.0, 40.0}) {
      AttentionProblem pb = problem(2, 1, 16, {2}, {50});
      pb.dtype = f;
      pb.softmax_scale = static_cast<float>(score_spread / 4.0);
      for (auto& b : pb.q) b = round_to_format(f, n01(rng));
      for (auto& b : pb.k) b = round_to_format(f, n01(rng));
      for (size_t i = 0; i < pb.v.size(); ++i) {
        // Wide magnitudes and both signs: large, tiny (subnormal in fp16), ordinary.
        const int kind = static_cast<int>(i % 5);
        const double x = kind == 0   ? std::clamp(30000.0 * n01(rng), -65504.0, 65504.0)
                         : kind == 1 ? std::ldexp(n01(rng), -20)
                                     : n01(rng);
        pb.v[i] = round_to_format(f, x);
      }
      set_accumulation(Accumulation::automatic);
      const auto a = exact_attention(pb);
      set_accumulation(Accumulation::rounded_adds);
      const auto b = exact_attention(pb);
      std::vector<ExactRow> c;
      if (f == Format::fp16) {
        AttentionProblem p32 = pb;
        p32.dtype = Format::fp32;
        for (auto* t : {&p32.q, &p32.k, &p32.v})
          for (auto& bits : *t) bits = round_to_format(Format::fp32, decode(Format::fp16, bits));
        c = exact_attention(p32);
      }
      set_accumulation(Accumulation::automatic);
      for (size_t r = 0; r < a.size(); ++r) {
        CHECK(abs(a[r].lse - b[r].lse) <= ldexp(Real(1), -180) * (1 + abs(b[r].lse)));
        for (size_t k = 0; k < a[r].o.size(); ++k) {
          CHECK(abs(a[r].o[k] - b[r].o[k]) <= ldexp(Real(1), -170) * (1 + abs(b[r].o[k])) * 65504);
          if (!c.empty())
            CHECK(abs(a[r].o[k] - c[r].o[k]) <= ldexp(Real(1), -170) * (1 + abs(c[r].o[k])) * 65504);
        }
      }
    }
  }
}

TEST_CASE("values spanning more than 62 bits take the rounded-add path, exactly", "[attention]") {
  // Equal scores, v = 2^100 and 2^-100 (fp32): O = 2^99 + 2^-101, which 201 bits hold exactly.
  AttentionProblem pb = problem(1, 1, 1, {1}, {2});
  pb.dtype = Format::fp32;
  for (auto* t : {&pb.q, &pb.k})
    for (auto& b : *t) b = round_to_format(Format::fp32, 0.0);
  pb.v = {round_to_format(Format::fp32, std::ldexp(1.0, 100)),
          round_to_format(Format::fp32, std::ldexp(1.0, -100))};
  const ExactRow r = exact_attention_row(pb, 0, 0);
  CHECK(r.o[0] == ldexp(Real(1), 99) + ldexp(Real(1), -101));
}

// The variants (exact.hpp, AttentionProblem): softcap, the window, sinks, head_size_v. Expected
// values are derived by hand; where they involve tanh or exp they are evaluated in long double,
// whose error (about 1e-18 relative) is far below the 1e-14 tolerance, itself far below an fp16 ulp.

TEST_CASE("softcap caps the scaled score: s = cap tanh(scale dot / cap)", "[attention][variants]") {
  // d = 1, q = 1, k = (3, -2), scale 0.5, cap 1.25: scaled scores 1.5 and -1, capped
  // 1.25 tanh(1.2) and 1.25 tanh(-0.8). v = (4, -2).
  AttentionProblem pb = problem(1, 1, 1, {1}, {2});
  pb.softmax_scale = 0.5f;
  pb.softcap = 1.25f;
  set_q(pb, 0, 0, 0, 1.0);
  set_k(pb, 0, 0, 0, 3.0);
  set_k(pb, 1, 0, 0, -2.0);
  set_v(pb, 0, 0, 0, 4.0);
  set_v(pb, 1, 0, 0, -2.0);
  auto expect = [](long double c0, long double c1, long double v0, long double v1) {
    const long double e0 = std::exp(c0), e1 = std::exp(c1);
    return std::pair<double, double>{static_cast<double>((v0 * e0 + v1 * e1) / (e0 + e1)),
                                     static_cast<double>(std::log(e0 + e1))};
  };
  const auto [o, lse] = expect(1.25L * std::tanh(1.2L), 1.25L * std::tanh(-0.8L), 4, -2);
  const ExactRow r = exact_attention_row(pb, 0, 0);
  CHECK(!r.empty);
  CHECK(near(r.o[0], o, 1e-14));
  CHECK(near(r.lse, lse, 1e-14));
  CHECK(near(exact_attention_row(pb, 0, 0, LseBase::two).lse, lse / std::log(2.0), 1e-14));
  // The other order (cap the dot product, then scale) gives 0.5 * 1.25 tanh(3 / 1.25) etc.: another
  // row, far from this one.
  const auto [o_wrong, lse_wrong] = expect(0.625L * std::tanh(2.4L), 0.625L * std::tanh(-1.6L), 4, -2);
  CHECK(!near(r.o[0], o_wrong, 1e-3));
  CHECK(!near(r.lse, lse_wrong, 1e-3));
  // Without the cap: plain scores 1.5 and -1.
  pb.softcap = 0.0f;
  const auto [o_plain, lse_plain] = expect(1.5L, -1.0L, 4, -2);
  CHECK(near(exact_attention_row(pb, 0, 0).o[0], o_plain, 1e-14));
  CHECK(near(exact_attention_row(pb, 0, 0).lse, lse_plain, 1e-14));

  SECTION("large logits saturate at +-cap") {
    // q = 100, k = +-100: scores +-10000, cap 5: 5 tanh(2000) = 5 - 10 e^-4000 (5 at 200 bits).
    pb.softmax_scale = 1.0f;
    pb.softcap = 5.0f;
    set_q(pb, 0, 0, 0, 100.0);
    set_k(pb, 0, 0, 0, 100.0);
    set_k(pb, 1, 0, 0, -100.0);
    const auto [o5, lse5] = expect(5, -5, 4, -2);
    const ExactRow r5 = exact_attention_row(pb, 0, 0);
    CHECK(near(r5.o[0], o5, 1e-14));
    CHECK(near(r5.lse, lse5, 1e-14));
  }
  SECTION("an infinite score caps to +-cap; NaN stays NaN") {
    // q = +inf, k = (1, -1): scores +inf and -inf, capped to +1 and -1 (cap 1).
    pb.softmax_scale = 1.0f;
    pb.softcap = 1.0f;
    set_q(pb, 0, 0, 0, INFINITY);
    set_k(pb, 0, 0, 0, 1.0);
    set_k(pb, 1, 0, 0, -1.0);
    const auto [o1, lse1] = expect(1, -1, 4, -2);
    const ExactRow ri = exact_attention_row(pb, 0, 0);
    CHECK(near(ri.o[0], o1, 1e-14));
    CHECK(near(ri.lse, lse1, 1e-14));
    set_k(pb, 1, 0, 0, 0.0);  // inf * 0 = NaN: tanh(NaN) is NaN, the row is NaN
    const ExactRow rn = exact_attention_row(pb, 0, 0);
    CHECK((isnan(rn.o[0]) && isnan(rn.lse)));
  }
}

TEST_CASE("window: keys within [diag - left, diag + right] of the bottom-right diagonal",
          "[attention][variants]") {
  SECTION("a window of one key gives O = v_j and LSE = s_j exactly") {
    // Tq = 3, Tk = 5: query t's diagonal key is t + 2. q = 0.5, k_j = j + 1, v_j = 10 j + 1.
    AttentionProblem pb = problem(1, 1, 1, {3}, {5});
    pb.window_left = pb.window_right = 0;
    for (int t = 0; t < 3; ++t) set_q(pb, t, 0, 0, 0.5);
    for (int j = 0; j < 5; ++j) {
      set_k(pb, j, 0, 0, j + 1);
      set_v(pb, j, 0, 0, 10 * j + 1);
    }
    const auto rows = exact_attention(pb);
    for (int t = 0; t < 3; ++t) {
      const int j = t + 2;
      CHECK(rows[t].o[0] == 10 * j + 1);
      CHECK(rows[t].lse == 0.5 * (j + 1));
      CHECK(!rows[t].empty);
    }
  }
  // All scores 0 (q = 0), v_j = 2^j: O is the mean of the visible keys' values, LSE the log of their
  // count, and together they name the visible set. Tq = 3, Tk = 6: diag = t + 3.
  auto run = [](int left, int right, bool causal, std::vector<uint8_t> mask = {}) {
    AttentionProblem pb = problem(1, 1, 1, {3}, {6});
    for (int j = 0; j < 6; ++j) set_v(pb, j, 0, 0, 1 << j);
    pb.window_left = left;
    pb.window_right = right;
    pb.causal = causal;
    pb.mask = std::move(mask);
    return exact_attention(pb);
  };
  auto check_keys = [](const ExactRow& r, std::initializer_list<int> keys) {
    double sum = 0;
    for (int j : keys) sum += 1 << j;
    CHECK(near(r.o[0], sum / static_cast<double>(keys.size())));
    CHECK(near(r.lse, std::log(static_cast<double>(keys.size()))));
  };
  SECTION("left only (right unbounded, not causal): keys t + 2 .. 5") {
    const auto r = run(1, -1, false);
    check_keys(r[0], {2, 3, 4, 5});
    check_keys(r[1], {3, 4, 5});
    check_keys(r[2], {4, 5});
  }
  SECTION("right only: keys 0 .. t + 3 + right") {
    const auto r = run(-1, 1, false);
    check_keys(r[0], {0, 1, 2, 3, 4});
    check_keys(r[1], {0, 1, 2, 3, 4, 5});
    check_keys(r[2], {0, 1, 2, 3, 4, 5});
  }
  SECTION("both sides, AND-ed with causal: keys t + 2 .. t + 3") {
    const auto r = run(1, 1, true);
    check_keys(r[0], {2, 3});
    check_keys(r[1], {3, 4});
    check_keys(r[2], {4, 5});
  }
  SECTION("right of the diagonal: keys t + 3 .. t + 5, clipped at Tk") {
    const auto r = run(0, 2, false);
    check_keys(r[0], {3, 4, 5});
    check_keys(r[1], {4, 5});
    check_keys(r[2], {5});
  }
  SECTION("AND-ed with the mask") {
    std::vector<uint8_t> mask(18, 1);
    mask[0 * 6 + 3] = 0;  // row 0 loses key 3
    const auto r = run(1, 1, false, mask);
    check_keys(r[0], {2, 4});
    check_keys(r[1], {3, 4, 5});
  }
  SECTION("a window wider than the sequence changes nothing") {
    const auto wide = run(100, 100, true), plain = run(-1, -1, true);
    for (int t = 0; t < 3; ++t) {
      CHECK(wide[t].o == plain[t].o);
      CHECK(wide[t].lse == plain[t].lse);
    }
  }
  SECTION("a window that hides every key gives the empty row") {
    // Tq = 3, Tk = 1, window 0 / 0: rows 0 and 1 have their diagonal at keys -2 and -1.
    AttentionProblem pb = problem(1, 1, 1, {3}, {1});
    pb.window_left = pb.window_right = 0;
    set_v(pb, 0, 0, 0, 5.0);
    auto rows = exact_attention(pb);
    CHECK(is_empty_row(rows[0]));
    CHECK(is_empty_row(rows[1]));
    CHECK(rows[2].o[0] == 5);
    CHECK(rows[2].lse == 0);
    // The mask hides the one key the window leaves.
    pb.mask = {1, 1, 0};
    rows = exact_attention(pb);
    CHECK(is_empty_row(rows[2]));
    CHECK(is_empty_row(exact_attention_row(pb, 2, 0)));
  }
}

TEST_CASE("sinks join the softmax denominator only", "[attention][variants]") {
  // One key, d = 1: q = 1, k = 0.5 (score 0.5), v = 3; sink z:
  // O = 3 e^0.5 / (e^0.5 + e^z), LSE = log(e^0.5 + e^z).
  AttentionProblem pb = problem(1, 1, 1, {1}, {1});
  set_q(pb, 0, 0, 0, 1.0);
  set_k(pb, 0, 0, 0, 0.5);
  set_v(pb, 0, 0, 0, 3.0);
  for (float z : {1.25f, -2.0f, 0.5f, 40.0f}) {
    pb.sinks = {z};
    const long double es = std::exp(0.5L), ez = std::exp(static_cast<long double>(z));
    const double o = static_cast<double>(3 * es / (es + ez));
    const double lse = static_cast<double>(std::log(es + ez));
    const ExactRow r = exact_attention_row(pb, 0, 0);
    CHECK(!r.empty);
    CHECK(near(r.o[0], o, 1e-14));
    CHECK(near(r.lse, lse, 1e-14));
    CHECK(near(exact_attention_row(pb, 0, 0, LseBase::two).lse, lse / std::log(2.0), 1e-14));
  }
  SECTION("a sink far above the scores: the keys' weights vanish, LSE = sink") {
    // z = 1e30: O = 3 e^(0.5 - z) / (1 + e^(0.5 - z)), positive and below every format's smallest
    // subnormal; LSE = z + log(1 + e^(0.5 - z)), z to within far less than its ulp. The shift must
    // be the sink here: e^(z - 0.5) overflows any exponent range.
    pb.sinks = {1e30f};
    const ExactRow r = exact_attention_row(pb, 0, 0);
    CHECK(!r.empty);
    CHECK(r.o[0] >= 0);
    CHECK(round_to_format(Format::fp32, r.o[0]) == 0u);  // +0
    CHECK(near(r.lse, static_cast<double>(1e30f), 1e-15));
  }
  SECTION("a row with no visible key: O = +0, LSE = sink") {
    pb.sinks = {1.25f};
    pb.mask = {0};
    for (LseBase base : {LseBase::e, LseBase::two}) {
      const ExactRow r = exact_attention_row(pb, 0, 0, base);
      CHECK(r.empty);
      CHECK(r.o[0] == 0);
      CHECK(!signbit(r.o[0]));
      if (base == LseBase::e)
        CHECK(r.lse == 1.25);
      else
        CHECK(abs(r.lse - Real(1.25) / log(Real(2))) < ldexp(Real(1), -190));
    }
    // Without sinks the same row has LSE = -inf.
    pb.sinks.clear();
    CHECK(is_empty_row(exact_attention_row(pb, 0, 0)));
  }
  SECTION("a sink is a key of value zero; each query head has its own") {
    // Two keys of score 0 and values 1 and 2; head 0's sink 0 weighs like a third key:
    // O = (1 + 2) / 3 = 1, LSE = log 3. Head 1's sink log 2 (as a float s1) weighs e^s1.
    AttentionProblem p2 = problem(2, 1, 1, {1}, {2});
    set_v(p2, 0, 0, 0, 1.0);
    set_v(p2, 1, 0, 0, 2.0);
    const float s1 = static_cast<float>(std::log(2.0));
    p2.sinks = {0.0f, s1};
    const auto rows = exact_attention(p2);
    CHECK(near(rows[0].o[0], 1.0));
    CHECK(near(rows[0].lse, std::log(3.0)));
    const long double w = std::exp(static_cast<long double>(s1));
    CHECK(near(rows[1].o[0], static_cast<double>(3 / (2 + w)), 1e-14));
    CHECK(near(rows[1].lse, static_cast<double>(std::log(2 + w)), 1e-14));
  }
  SECTION("+inf scores keep their meaning: uniform over them, LSE = +inf") {
    pb.sinks = {100.0f};
    set_q(pb, 0, 0, 0, INFINITY);
    const ExactRow r = exact_attention_row(pb, 0, 0);
    CHECK(r.o[0] == 3);
    CHECK((isinf(r.lse) && r.lse > 0));
  }
}

TEST_CASE("head_size_v: V and O have their own head size", "[attention][variants]") {
  // GQA h = 2, h_kv = 1, d = 2, dv = 3. k_0 = (1, 0), k_1 = (0, 1); head 0's q = (1, 0) scores
  // (1, 0), head 1's q = 0 scores (0, 0). v_0 = (1, 2, 3), v_1 = (-1, 0.5, 8).
  AttentionProblem pb = problem(2, 1, 2, {1}, {2});
  pb.head_size_v = 3;
  pb.v.assign(2 * 3, h16(0));
  set_k(pb, 0, 0, 0, 1.0);
  set_k(pb, 1, 0, 1, 1.0);
  set_q(pb, 0, 0, 0, 1.0);
  const double v[2][3] = {{1, 2, 3}, {-1, 0.5, 8}};
  for (int j = 0; j < 2; ++j)
    for (int c = 0; c < 3; ++c) set_v(pb, j, 0, c, v[j][c]);
  const auto rows = exact_attention(pb);
  REQUIRE(rows.size() == 2);
  const double e = std::exp(1.0);
  for (int i = 0; i < 2; ++i) {
    REQUIRE(rows[i].o.size() == 3);
    REQUIRE(exact_attention_row(pb, 0, i).o.size() == 3);
    for (int c = 0; c < 3; ++c) {
      const double want = i == 0 ? (e * v[0][c] + v[1][c]) / (e + 1) : (v[0][c] + v[1][c]) / 2;
      CHECK(near(rows[i].o[c], want));
      CHECK(exact_attention_row(pb, 0, i).o[c] == rows[i].o[c]);
    }
  }
  CHECK(near(rows[0].lse, std::log(e + 1)));
  CHECK(near(rows[1].lse, std::log(2.0)));
  SECTION("dv smaller than d") {
    AttentionProblem p1 = problem(1, 1, 3, {1}, {2});
    p1.head_size_v = 1;
    p1.v.assign(2, h16(0));
    set_v(p1, 0, 0, 0, 6.0);
    set_v(p1, 1, 0, 0, -2.0);
    const ExactRow r = exact_attention_row(p1, 0, 0);
    REQUIRE(r.o.size() == 1);
    CHECK(near(r.o[0], 2.0));
  }
}

TEST_CASE("every variant at once: rows agree, and so do both accumulations", "[attention][variants]") {
  // Two independent computations (fixed-point sums and rounded adds; the batched and the single-row
  // entries) must agree with softcap, window, sinks, dv != d, GQA and causal all on.
  for (Format f : {Format::fp16, Format::bf16, Format::fp32}) {
    AttentionProblem pb = random_problem(f, 4, 2, 16, 6, 9, 31 + static_cast<int>(f));
    pb.head_size_v = 5;
    std::mt19937_64 rng(7);
    std::normal_distribution<double> n01;
    pb.v.resize(static_cast<size_t>(9 * 2 * 5));
    for (auto& b : pb.v) b = round_to_format(f, n01(rng));
    pb.causal = true;
    pb.softcap = 1.5f;
    pb.softmax_scale = 2.0f;  // scores of a few units: the cap bites
    pb.window_left = 3;
    pb.window_right = 0;
    pb.sinks = {0.5f, -1.0f, 3.0f, 0.0f};
    set_accumulation(Accumulation::automatic);
    const auto a = exact_attention(pb, LseBase::two);
    set_accumulation(Accumulation::rounded_adds);
    const auto b = exact_attention(pb, LseBase::two);
    set_accumulation(Accumulation::automatic);
    for (int64_t t = 0; t < 6; ++t)
      for (int32_t i = 0; i < 4; ++i) {
        const size_t at = static_cast<size_t>(t * 4 + i);
        const ExactRow r = exact_attention_row(pb, t, i, LseBase::two);
        CHECK(r.lse == a[at].lse);
        CHECK(r.o == a[at].o);
        CHECK(r.o.size() == 5);
        CHECK(abs(a[at].lse - b[at].lse) <= ldexp(Real(1), -180) * (1 + abs(b[at].lse)));
        for (size_t c = 0; c < 5; ++c) CHECK(abs(a[at].o[c] - b[at].o[c]) <= ldexp(Real(1), -170));
      }
  }
}

TEST_CASE("k_scale and v_scale: the attention of the scaled values, per KV head", "[attention][scales]") {
  // One query, two keys, d = 1: q = 1, k = (1, 0), v = (2, 4), softmax scale 1. With k_scale c and
  // v_scale w the kernel was given k = (c, 0) and v = (2w, 4w): scores (c, 0), so
  // O = w (2 e^c + 4) / (e^c + 1) and LSE = log(e^c + 1); w leaves the LSE alone.
  AttentionProblem pb = problem(1, 1, 1, {1}, {2});
  set_q(pb, 0, 0, 0, 1.0);
  set_k(pb, 0, 0, 0, 1.0);
  set_k(pb, 1, 0, 0, 0.0);
  set_v(pb, 0, 0, 0, 2.0);
  set_v(pb, 1, 0, 0, 4.0);
  for (const auto& [c, w] : {std::pair{0.1f, 3.0f}, std::pair{2.0f, 0.0078125f}, std::pair{1.7f, 0.3f}}) {
    pb.k_scale = {c};
    pb.v_scale = {w};
    const long double ec = std::exp(static_cast<long double>(c));
    const double o = static_cast<double>(static_cast<long double>(w) * (2 * ec + 4) / (ec + 1));
    const double lse = static_cast<double>(std::log(ec + 1));
    const ExactRow r = exact_attention_row(pb, 0, 0);
    INFO("k_scale " << c << ", v_scale " << w);
    CHECK(near(r.o[0], o, 1e-14));
    CHECK(near(r.lse, lse, 1e-14));
  }
}

TEST_CASE("k_scale and v_scale equal the same values stored pre-scaled, bit for bit", "[attention][scales]") {
  // Two KV heads with their own factors (0.75 and 1.5 for K, 1.25 and 0.5 for V; GQA group 2):
  // fp32 values of at most 8 significant bits times those factors are exact in fp32, so a
  // problem holding the products must give the same exact rows. A factor read at the query head
  // (or the other KV head) would change them.
  const AttentionProblem base = random_problem(Format::fp32, 4, 2, 8, 3, 5, 77);
  AttentionProblem scaled = base, stored = base;
  for (auto* t : {&scaled.q, &scaled.k, &scaled.v})
    for (auto& b : *t) b = round_to_format(Format::bf16, decode(Format::fp32, b)) << 16;  // 8 bits
  stored = scaled;
  scaled.k_scale = {0.75f, 1.5f};
  scaled.v_scale = {1.25f, 0.5f};
  const int d = base.head_size;
  for (size_t i = 0; i < stored.k.size(); ++i) {
    const size_t g = (i / static_cast<size_t>(d)) % 2;
    stored.k[i] = round_to_format(Format::fp32, decode(Format::fp32, stored.k[i]) * scaled.k_scale[g]);
    stored.v[i] = round_to_format(Format::fp32, decode(Format::fp32, stored.v[i]) * scaled.v_scale[g]);
    CHECK(decode(Format::fp32, stored.k[i]) == decode(Format::fp32, scaled.k[i]) * scaled.k_scale[g]);
  }
  const std::vector<ExactRow> a = exact_attention(scaled), b = exact_attention(stored);
  REQUIRE(a.size() == b.size());
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    differ += a[i].lse != b[i].lse;
    for (size_t c = 0; c < a[i].o.size(); ++c) differ += a[i].o[c] != b[i].o[c];
  }
  CHECK(differ == 0);
  // Swapping the two heads' factors changes the rows.
  AttentionProblem swapped = scaled;
  std::swap(swapped.k_scale[0], swapped.k_scale[1]);
  CHECK(exact_attention(swapped)[0].lse != a[0].lse);
}

TEST_CASE("k_scale and v_scale are validated", "[attention][validate][scales]") {
  AttentionProblem pb = problem(2, 2, 1, {1}, {1});
  const auto message = [&] {
    try {
      validate(pb);
    } catch (const ReferenceError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  pb.k_scale = {1.0f};
  CHECK(message().find("k_scale has 1 values, num_kv_heads is 2") != std::string::npos);
  pb.k_scale = {1.0f, 0.0f};
  CHECK(message().find("k_scale[1] = 0.000000 (must be finite and > 0)") != std::string::npos);
  pb.k_scale = {1.0f, 2.0f};
  pb.v_scale = {-1.0f, 1.0f};
  CHECK(message().find("v_scale[0] = -1.000000") != std::string::npos);
  pb.v_scale = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK(message().find("v_scale[1]") != std::string::npos);
  pb.v_scale = {1.0f, 2.0f};
  CHECK(message().empty());
}
