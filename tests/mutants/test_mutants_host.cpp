// Each host-twin mutant (kernels/mutants/) differs from its correct twin on one
// hand-built input that exposes its bug, and the correct twin is right on that same input. The
// expected values are derived here by hand (in the comments), never read off the code under test.
// Subjects are called through their registered ac_subject entries, as the harness calls them.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "mutant_cases.hpp"
#include "mutants/mutants.h"

using mt::subject;

namespace {
constexpr float kInf = INFINITY;
}

TEST_CASE("every mutant has a description, a correct twin and an expected killer", "[mutants]") {
  const auto table = attncheck::kern::mutant_table();
  REQUIRE(table.size() == 37);
  for (size_t i = 0; i < table.size(); ++i) {
    const auto& m = table[i];
    CHECK(m.number == int(i) + 1);
    CHECK(std::string(m.name).rfind("mutant-", 0) == 0);
    CHECK(std::string(m.bug).size() > 10);
    CHECK(std::string(m.expected_killer).size() > 3);
    CHECK_NOTHROW(subject(m.correct_subject, false));
    if (!m.gpu_only) CHECK_NOTHROW(subject(m.name, true));
  }
  // The GPU-only mutants have no host twin registered.
  CHECK_THROWS(subject("mutant-fused-missing-barrier", true));
  CHECK_THROWS(subject("mutant-fused-offsets-32bit", true));
}

TEST_CASE("mutant 1: +inf read as a mass, not as empty", "[mutants][merge]") {
  // Prefix is FlashAttention-2's empty sentinel (LSE +inf, O = 0); the merge is the suffix itself:
  // O = 3, LSE = 0.5.
  const auto good = mt::run_merge(subject("merge", false), AC_DTYPE_F32, {0.0f}, kInf, {3.0f}, 0.5f);
  CHECK(good.out[0] == 3.0f);
  CHECK(good.out_lse == 0.5f);
  // Without the mapping M = +inf and e^(+inf - +inf) = NaN.
  const auto bad =
      mt::run_merge(subject("mutant-merge-no-inf-map", true), AC_DTYPE_F32, {0.0f}, kInf, {3.0f}, 0.5f);
  CHECK(std::isnan(bad.out[0]));
}

TEST_CASE("mutant 2: two empty states give NaN without the guard", "[mutants][merge]") {
  // Merge of two empty states is the identity: O = 0 exactly, LSE = -inf.
  const auto good =
      mt::run_merge(subject("merge", false), AC_DTYPE_F16, {0.0f, 0.0f}, -kInf, {0.0f, 0.0f}, -kInf);
  CHECK(good.out[0] == 0.0f);
  CHECK(good.out[1] == 0.0f);
  CHECK(good.out_lse == -kInf);
  const auto bad = mt::run_merge(subject("mutant-merge-no-empty-guard", true), AC_DTYPE_F16, {0.0f, 0.0f},
                                 -kInf, {0.0f, 0.0f}, -kInf);
  CHECK(std::isnan(bad.out[0]));
  CHECK(std::isnan(bad.out_lse));
}

TEST_CASE("mutant 3: multiply-then-divide overflows where it can: fp32 and bf16, not fp16",
          "[mutants][merge]") {
  // Equal LSEs: both weights are 1/2, O = (p + s) / 2. With p = s = 2^127 the exact result is
  // 2^127, but the unbounded intermediate p * 1 + s * 1 = 2^128 > FLT_MAX overflows fp32.
  const float big = std::ldexp(1.0f, 127);
  for (ac_dtype dt : {AC_DTYPE_F32, AC_DTYPE_BF16}) {
    const auto good = mt::run_merge(subject("merge", false), dt, {big}, 1.0f, {big}, 1.0f);
    CHECK(good.out[0] == big);
    const auto bad = mt::run_merge(subject("mutant-merge-mul-then-div", true), dt, {big}, 1.0f, {big}, 1.0f);
    CHECK(std::isinf(bad.out[0]));
  }
  // fp16's largest values (65504) are nowhere near fp32's range: the intermediate 131008 is
  // finite in fp32, so an fp16 merge cannot expose this bug (the gate must draw fp32 / bf16).
  const auto f16 = mt::run_merge(subject("mutant-merge-mul-then-div", true), AC_DTYPE_F16, {65504.0f}, 1.0f,
                                 {65504.0f}, 1.0f);
  CHECK(f16.out[0] == 65504.0f);
}

TEST_CASE("mutant 4: base-2 arithmetic under a natural-log declaration", "[mutants][merge]") {
  // Natural log: LSE_p = 0, LSE_s = ln 3 give weights 1/4 and 3/4; with O_p = 1, O_s = 0 the merge
  // is 1/4 and its LSE ln 4. Read in base 2 the weights would be 2^-1.0986 / (1 + 2^-1.0986) =
  // 0.318: off by 0.068.
  const float ln3 = float(std::log(3.0)), ln4 = float(std::log(4.0));
  const auto good = mt::run_merge(subject("merge", false), AC_DTYPE_F32, {1.0f}, 0.0f, {0.0f}, ln3);
  CHECK(std::fabs(good.out[0] - 0.25f) < 1e-6f);
  CHECK(std::fabs(good.out_lse - ln4) < 1e-6f);
  const auto bad =
      mt::run_merge(subject("mutant-merge-base2-as-e", true), AC_DTYPE_F32, {1.0f}, 0.0f, {0.0f}, ln3);
  CHECK(std::fabs(bad.out[0] - 0.25f) > 0.05f);
}

TEST_CASE("mutant 5: the running sum kept in fp16 loses what fp32 keeps", "[mutants][softmax]") {
  // Row [0, ln 1e-4]: l = 1 + 1e-4 exactly, so y0 = 1 / 1.0001 = 0.99990001. In fp16 the sum
  // 1.0001 rounds to 1 (its ulp at 1 is 2^-10), so y0 comes out as exactly 1: an error of 1e-4,
  // about 840 fp32 ulps.
  const std::vector<float> x = {0.0f, float(std::log(1e-4))};
  const double want = 1.0 / (1.0 + 1e-4);
  const auto good = mt::run_softmax(subject("softmax-online", false), AC_DTYPE_F32, x);
  CHECK(std::fabs(good[0] - want) < 1e-6);
  const auto bad = mt::run_softmax(subject("mutant-softmax-l-fp16", true), AC_DTYPE_F32, x);
  CHECK(bad[0] == 1.0f);
}

TEST_CASE("mutant 6: O not rescaled when the max moves", "[mutants][fused]") {
  // One query, 65 keys: tile 1 (keys 0..63, Bc = 64) has logit 0 and V = 1; tile 2 (key 64) has
  // logit 4 and V = 0. Exact O = 64 / (64 + e^4) = 0.539640.
  // Forgetting alpha = e^-4 on O leaves O~ = 64 against l = 64 e^-4 + 1: O = 29.5.
  mt::Attention a(1, 1, 1, 65);
  for (int j = 0; j < 64; ++j) a.set_value(j, 0, 1.0f);
  a.set_logit(64, 0, 4.0f);
  const double want = 64.0 / (64.0 + std::exp(4.0));
  a.run(subject("fused", false));
  CHECK(std::fabs(a.o(0, 0) - want) < 1e-3);
  a.run(subject("mutant-fused-no-o-rescale", true));
  CHECK(a.o(0, 0) > 10.0f);
}

TEST_CASE("mutant 7: a finite mask sentinel leaks", "[mutants][fused]") {
  SECTION("a fully masked row is empty: O = 0, LSE = -inf") {
    // Both keys masked. The sentinel makes both "visible" with equal weight: O = (1 + 3) / 2 = 2.
    mt::Attention a(1, 1, 1, 2);
    a.mask = {0, 0};
    a.set_value(0, 0, 1.0f);
    a.set_value(1, 0, 3.0f);
    a.run(subject("fused", false));
    CHECK(a.o(0, 0) == 0.0f);
    CHECK(a.lse_of(0, 0) == -kInf);
    a.run(subject("mutant-fused-finite-mask", true));
    CHECK(a.o(0, 0) == 2.0f);
    CHECK(std::isfinite(a.lse_of(0, 0)));
  }
  SECTION("a masked key wins against an extreme real logit") {
    // Key 0 visible with logit -60000 (exact in fp16) and V = 1; key 1 masked, V = 5. The only
    // visible key takes all the weight: O = 1. A -5e4 sentinel is larger than -6e4: O = 5.
    mt::Attention a(1, 1, 1, 2);
    a.mask = {1, 0};
    a.set_logit(0, 0, -60000.0f);
    a.set_value(0, 0, 1.0f);
    a.set_value(1, 0, 5.0f);
    a.run(subject("fused", false));
    CHECK(a.o(0, 0) == 1.0f);
    a.run(subject("mutant-fused-finite-mask", true));
    CHECK(a.o(0, 0) == 5.0f);
  }
}

TEST_CASE("mutant 8: no max subtraction overflows fp16 at 11.09375, undeclared", "[mutants][softmax]") {
  // e^11.0859375 = 65247.1 rounds to 65248 (finite), e^11.09375 = 65758.9 >= 65520 rounds
  // to inf. Row [x, 0]: the exact y0 = 1 / (1 + e^-x) is finite (about 0.99998) either way.
  const std::vector<float> over = {11.09375f, 0.0f}, under = {11.0859375f, 0.0f};
  const auto good = mt::run_softmax(subject("softmax-safe", false), AC_DTYPE_F16, over);
  CHECK(std::fabs(good[0] - 1.0f) < 1e-3f);
  const auto bad = mt::run_softmax(subject("mutant-softmax-no-max", true), AC_DTYPE_F16, over);
  CHECK(std::isnan(bad[0]));  // inf / inf
  const auto edge = mt::run_softmax(subject("mutant-softmax-no-max", true), AC_DTYPE_F16, under);
  CHECK(std::isfinite(edge[0]));
  // And the mutant does not declare the hazard (that is the bug the gate must catch).
  CHECK((subject("mutant-softmax-no-max", true).caps.features & AC_FEAT_NAIVE_EXP) == 0);
}

TEST_CASE("mutant 9: GQA head i reads KV head i mod h_kv", "[mutants][fused]") {
  // 4 query heads over 2 KV heads: heads 0, 1 read KV head 0 (V = 1), heads 2, 3 KV head 1 (V = 2).
  // One key, so O is V exactly: [1, 1, 2, 2]. i mod 2 gives [1, 2, 1, 2].
  mt::Attention a(4, 2, 1, 1);
  a.set_value(0, 0, 1.0f);
  a.set_value(0, 1, 2.0f);
  a.run(subject("fused", false));
  CHECK(a.o(0, 0) == 1.0f);
  CHECK(a.o(0, 1) == 1.0f);
  CHECK(a.o(0, 2) == 2.0f);
  CHECK(a.o(0, 3) == 2.0f);
  a.run(subject("mutant-fused-gqa-mod", true));
  CHECK(a.o(0, 1) == 2.0f);
  CHECK(a.o(0, 2) == 1.0f);
}

TEST_CASE("mutant 10: causal sees one key too many", "[mutants][fused]") {
  // Tq = Tk = 2, bottom-right causal: row 0 sees key 0 only (O = V0 = 1), row 1 both keys with
  // equal logits (O = (1 + 3) / 2 = 2). Off by one, row 0 also sees key 1: O = 2.
  mt::Attention a(1, 1, 2, 2);
  a.causal = true;
  a.set_value(0, 0, 1.0f);
  a.set_value(1, 0, 3.0f);
  a.run(subject("fused", false));
  CHECK(a.o(0, 0) == 1.0f);
  CHECK(a.o(1, 0) == 2.0f);
  a.run(subject("mutant-fused-causal-off-by-one", true));
  CHECK(a.o(0, 0) == 2.0f);
}

TEST_CASE("mutant 11: split-KV combine writes +inf for an all-empty row", "[mutants][splitkv]") {
  // Tq = 2, Tk = 1, causal bottom-right: row 0 sees keys <= 0 + 1 - 2 = -1, none: O = 0, LSE
  // = -inf (the declared sentinel). Row 1 sees key 0: O = V0 = 1, LSE = logit 0 = 0.
  mt::Attention a(1, 1, 2, 1);
  a.causal = true;
  a.num_splits = 2;
  a.set_value(0, 0, 1.0f);
  a.run(subject("splitkv", false));
  CHECK(a.o(0, 0) == 0.0f);
  CHECK(a.lse_of(0, 0) == -kInf);
  CHECK(a.o(1, 0) == 1.0f);
  CHECK(a.lse_of(1, 0) == 0.0f);
  a.run(subject("mutant-splitkv-combine-plus-inf", true));
  CHECK(a.o(0, 0) == 0.0f);
  CHECK(a.lse_of(0, 0) == kInf);
  CHECK(a.lse_of(1, 0) == 0.0f);
}

TEST_CASE("mutant 17: the key tile follows the call's longest query range times the group",
          "[mutants][attention]") {
  // Two query heads on one KV head (group 2): 33 queries make 66, past 64, where the mutant runs
  // the correct kernel with tiling 3 (Br 64, Bc 32); 32 queries make 64, not past it: tiling 0
  // (64 x 64), the one it declares. q, k and v uniform on [-1, 1) from a fixed linear
  // congruential stream (high entropy over every row and column): the row sums and O accumulators
  // are sums of 4 tile sums under one width and of 8 under the other, and across 66 rows and 4224
  // outputs their roundings show in some output's bits.
  constexpr int kKeys = 256;
  for (int tq : {32, 33}) {
    auto fill = [&](mt::Attention& x) {
      uint32_t state = 12345;
      auto next = [&] {
        state = state * 1664525u + 1013904223u;
        return mt::h(float(state >> 8) * 0x1p-23f - 1.0f);
      };
      for (auto* t : {&x.q, &x.k, &x.v})
        for (uint16_t& e : *t) e = next();
    };
    mt::Attention mutant(2, 1, tq, kKeys), wide(2, 1, tq, kKeys), narrow(2, 1, tq, kKeys);
    for (auto* x : {&mutant, &wide, &narrow}) fill(*x);
    narrow.tiling = 3;
    mutant.run(subject("mutant-fused-batch-tile", true));
    wide.run(subject("fused", false));
    narrow.run(subject("fused", false));
    CHECK((wide.lse != narrow.lse || wide.out != narrow.out));  // the widths are told apart here
    const mt::Attention& expected = tq == 33 ? narrow : wide;
    CHECK(mutant.out == expected.out);
    CHECK(mutant.lse == expected.lse);
  }
}

TEST_CASE("mutants 18 and 24: the adaptive engine modes' outputs under a declaration of batch invariance",
          "[mutants][attention]") {
  // The correct adaptive subjects do not declare invariance and the fixed ones do; each mutant is
  // its adaptive kernel, bit for bit, with the declaration (so only batch_invariance can tell).
  const char* const modes[][3] = {
      {"splitkv-packed-adaptive", "splitkv-packed-fixed", "mutant-splitkv-adaptive-invariant"},
      {"splitkv-adaptive", "splitkv-fixed", "mutant-splitkv-engine-adaptive-invariant"},
  };
  for (const auto& m : modes) {
    INFO(m[0]);
    const ac_subject& adaptive = subject(m[0], false);
    const ac_subject& mutant = subject(m[2], true);
    CHECK((adaptive.caps.flags & AC_CAP_BATCH_INVARIANT) == 0);
    CHECK((subject(m[1], false).caps.flags & AC_CAP_BATCH_INVARIANT) != 0);
    CHECK((mutant.caps.flags & AC_CAP_BATCH_INVARIANT) != 0);
    mt::Attention a(4, 2, 2, 300), b(4, 2, 2, 300);
    for (auto* x : {&a, &b})
      for (int key = 0; key < 300; ++key) {
        x->set_logit(key, key % 2, float(key % 7) * 0.5f);
        x->set_value(key, key % 2, float(key % 5) - 2.0f);
      }
    a.run(adaptive);
    b.run(mutant);
    CHECK(a.out == b.out);
    CHECK(a.lse == b.lse);
  }
}

TEST_CASE("mutant 19: the last page read from the table entry before it", "[mutants][fused][variants]") {
  // Three keys in pages of 1: keys 0, 1, 2 in pool pages 2, 0, 1; page 3 is poisoned (NaN) and named
  // by the table's spare entry. Logits 0, V = 1, 2, 4: O = 7 / 3. The mutant reads the last page
  // (key 2) from the entry before it, page 0: key 1 again (V = 2), O = 5 / 3.
  mt::Attention a(1, 1, 1, 3);
  a.set_value(0, 0, 1.0f);
  a.set_value(1, 0, 2.0f);
  a.set_value(2, 0, 4.0f);
  a.page(1, {2, 0, 1}, 4, 4, 3);
  a.run(subject("fused", false));
  CHECK(a.o(0, 0) == Approx(7.0 / 3).epsilon(1e-3));
  a.run(subject("mutant-fused-page-off-by-one", true));
  CHECK(a.o(0, 0) == Approx(5.0 / 3).epsilon(1e-3));
}

TEST_CASE("mutant 20: a read of the slot after the sequence's last key", "[mutants][fused][variants]") {
  // Two keys in pages of 1 (pool pages 0 and 1); the table's third entry names page 2, all NaN.
  // Logits 0, V = 1, 2: O = 1.5 exactly. The mutant also reads key 2, page 2: a NaN logit.
  mt::Attention a(1, 1, 1, 2);
  a.set_value(0, 0, 1.0f);
  a.set_value(1, 0, 2.0f);
  a.page(1, {0, 1}, 3, 3, 2);
  a.run(subject("fused", false));
  CHECK(a.o(0, 0) == 1.5f);
  a.run(subject("mutant-fused-read-past-end", true));
  CHECK(std::isnan(a.o(0, 0)));
}

TEST_CASE("mutant 21: the left window edge off by one", "[mutants][fused][variants]") {
  // Tq = Tk = 3, window_left 1 (right unbounded): row 2 (diagonal key 2) sees keys 1 and 2. Logits
  // 0, V = 1, 2, 4: O = (2 + 4) / 2 = 3 exactly. Off by one it also sees key 0: O = 7 / 3.
  mt::Attention a(1, 1, 3, 3);
  a.window_left = 1;
  a.set_value(0, 0, 1.0f);
  a.set_value(1, 0, 2.0f);
  a.set_value(2, 0, 4.0f);
  a.run(subject("fused", false));
  CHECK(a.o(2, 0) == 3.0f);
  a.run(subject("mutant-fused-window-off-by-one", true));
  CHECK(a.o(2, 0) == Approx(7.0 / 3).epsilon(1e-3));
}

TEST_CASE("mutant 22: the softcap applied before the scale", "[mutants][fused][variants]") {
  // Scale 0.5, cap 5; logits (dot products) 0 and 10, V = 0 and 1. Scale first: scores 0 and
  // 5 tanh(5 / 5) = 3.8080, O = e^3.808 / (1 + e^3.808) = 0.97830. Cap first: 5 tanh(10 / 5) 0.5 =
  // 2.4101, O = 0.91763.
  mt::Attention a(1, 1, 1, 2);
  a.scale = 0.5f;
  a.softcap = 5.0f;
  a.set_logit(1, 0, 10.0f);
  a.set_value(1, 0, 1.0f);
  a.run(subject("fused", false));
  CHECK(a.o(0, 0) == Approx(0.97830).epsilon(2e-3));
  a.run(subject("mutant-fused-softcap-before-scale", true));
  CHECK(a.o(0, 0) == Approx(0.91763).epsilon(2e-3));
}

TEST_CASE("mutant 23: the sink counted in every split", "[mutants][splitkv][variants]") {
  // Two keys of logit 0 and V = 1, a sink of 0, two splits. Counted once: O = 2 / (1 + 1 + 1) = 2/3,
  // LSE = ln 3. Counted per split: each part is (O = 1/2, LSE = ln 2) and their merge O = 1/2,
  // LSE = ln 4.
  mt::Attention a(1, 1, 1, 2);
  a.num_splits = 2;
  a.sinks = {0.0f};
  a.set_value(0, 0, 1.0f);
  a.set_value(1, 0, 1.0f);
  a.run(subject("splitkv", false));
  CHECK(a.o(0, 0) == Approx(2.0 / 3).epsilon(1e-3));
  CHECK(a.lse_of(0, 0) == Approx(std::log(3.0)).epsilon(1e-6));
  a.run(subject("mutant-splitkv-sink-every-split", true));
  CHECK(a.o(0, 0) == Approx(0.5).epsilon(1e-3));
  CHECK(a.lse_of(0, 0) == Approx(std::log(4.0)).epsilon(1e-6));
}

TEST_CASE("mutant 25: V's rows read at the QK head size", "[mutants][fused][variants]") {
  // d = 64, dv = 32 (a declared twin pair), four keys of logit 0, V = 1, 2, 4, 8: O = 15 / 4 = 3.75
  // exactly. The mutant reads key j's V row at 64 j elements, V row 2 j: key 1 reads key 2's row (4)
  // and key 2 reads past V's 128 elements (NaN), so O is NaN.
  mt::Attention a(1, 1, 1, 4);
  a.set_head_size_v(32);
  a.set_value(0, 0, 1.0f);
  a.set_value(1, 0, 2.0f);
  a.set_value(2, 0, 4.0f);
  a.set_value(3, 0, 8.0f);
  a.run(subject("fused", false));
  CHECK(a.o(0, 0) == 3.75f);
  CHECK(a.o(0, 0, 31) == 3.75f);
  a.run(subject("mutant-fused-v-head-from-qk", true));
  CHECK(std::isnan(a.o(0, 0)));
}

TEST_CASE("mutants 26 and 28: V's FP8 codes read without v_descale, or times it twice",
          "[mutants][fused][fp8]") {
  // One key, K codes 0 (logit 0), V codes 0x44: e4m3fn exponent field 8, mantissa 4: (1 + 4/8) 2 =
  // 3. v_descale 0.5: O = 1.5. Mutant 26 leaves the descale out: O = 3; mutant 28 multiplies by it
  // twice: O = 0.75.
  mt::Attention a(1, 1, 1, 1);
  a.set_fp8(AC_DTYPE_E4M3, 0x00, 0x44);
  a.k_descale = {1.0f};
  a.v_descale = {0.5f};
  a.run(subject("fused-fp8kv", false));
  CHECK(a.o(0, 0) == 1.5f);
  a.run(subject("mutant-fused-fp8-v-descale-ignored", true));
  CHECK(a.o(0, 0) == 3.0f);
  a.run(subject("mutant-fused-fp8-v-descale-twice", true));
  CHECK(a.o(0, 0) == 0.75f);
}

TEST_CASE("mutant 27: k_descale read at the query head, not its KV head", "[mutants][fused][fp8]") {
  // 4 query heads over 2 KV heads; q = e_0. Key 0's K codes 0x40 (2.0) in every element, key 1's
  // 0x00; V: key 0 0x38 (1.0), key 1 0x00. k_descale per KV head {1, 0.25}, v_descale {1, 1}.
  // Query head 1 reads KV head 0: scores 2 and 0, O = e^2 / (e^2 + 1) = 0.8808. The mutant reads
  // k_descale[1] = 0.25 for it: scores 0.5 and 0, O = e^0.5 / (e^0.5 + 1) = 0.6225.
  mt::Attention a(4, 2, 1, 2);
  a.set_fp8(AC_DTYPE_E4M3, 0x00, 0x00);
  for (size_t i = 0; i < a.k8.size() / 2; ++i) a.k8[i] = 0x40;  // key 0 (both KV heads)
  for (size_t i = 0; i < a.v8.size() / 2; ++i) a.v8[i] = 0x38;
  a.k_descale = {1.0f, 0.25f};
  a.v_descale = {1.0f, 1.0f};
  a.run(subject("fused-fp8kv", false));
  CHECK(a.o(0, 1) == Approx(0.8808).epsilon(1e-3));
  a.run(subject("mutant-fused-fp8-descale-by-query-head", true));
  CHECK(a.o(0, 1) == Approx(0.6225).epsilon(1e-3));
}

TEST_CASE("mutant 29: P cast to e4m3fn without the 2^8 offset", "[mutants][fused][fp8]") {
  // FlashAttention-3's contract (fused-fp8). One query, two keys, Q one-hot on coordinate 0 with
  // code 0x38 (1.0), q_descale 1; K: key 0 codes 0x00 (logit 0), key 1's coordinate 0 0xD0 (-8.0:
  // exponent field 10, mantissa 0), k_descale 1; V: key 0 0x00, key 1 0x38 (1.0), v_descale 1.
  // p = e^-8 = 3.3546e-4, l = 1 + p. With the offset 256 p = 0.085877 is held as 11 2^-7 =
  // 0.0859375 (e4m3fn's step is 2^-7 in [2^-4, 2^-3)): O = 0.0859375 / 256 / (1 + p) = 3.3558e-4.
  // The mutant holds p itself: below 2^-10, half of e4m3fn's smallest subnormal 2^-9, so 0: O = 0.
  mt::Attention a(1, 1, 1, 2);
  a.set_fp8(AC_DTYPE_E4M3, 0x00, 0x00);
  a.k8[size_t(a.d)] = 0xD0;
  std::fill(a.v8.begin() + a.d, a.v8.end(), uint8_t(0x38));
  a.q8.assign(a.q.size(), 0x00);
  a.q8[0] = 0x38;
  a.q_descale = {1.0f};
  a.k_descale = {1.0f};
  a.v_descale = {1.0f};
  a.run(subject("fused-fp8", false));
  CHECK(a.o(0, 0) == Approx(3.3558e-4).epsilon(1e-3));
  a.run(subject("mutant-fused-fp8-p-no-offset", true));
  CHECK(a.o(0, 0) == 0.0f);
}

TEST_CASE("mutant 30: q_descale folded into the softmax scale twice", "[mutants][fused][fp8]") {
  // One query, two keys; Q one-hot with code 0x38 (1.0), q_descale 2; K: key 0's coordinate 0 0x38
  // (1.0), key 1 0x00, k_descale 1; V: key 0 0x38 (1.0), key 1 0x00, v_descale 1. Scores 2 and 0: O
  // = 1 / (1 + e^-2) = 0.88080 (key 1's V is 0, so P's rounding of e^-2 does not show; l is
  // unrounded). The mutant's q_descale squared gives scores 4 and 0: O = 1 / (1 + e^-4) = 0.98201.
  mt::Attention a(1, 1, 1, 2);
  a.set_fp8(AC_DTYPE_E4M3, 0x00, 0x00);
  a.k8[0] = 0x38;
  std::fill(a.v8.begin(), a.v8.begin() + a.d, uint8_t(0x38));
  a.q8.assign(a.q.size(), 0x00);
  a.q8[0] = 0x38;
  a.q_descale = {2.0f};
  a.k_descale = {1.0f};
  a.v_descale = {1.0f};
  a.run(subject("fused-fp8", false));
  CHECK(a.o(0, 0) == Approx(0.88080).epsilon(1e-3));
  a.run(subject("mutant-fused-fp8-q-descale-twice", true));
  CHECK(a.o(0, 0) == Approx(0.98201).epsilon(1e-3));
}

TEST_CASE("mutant 37: a row's P V kept in the e4m3 tensor cores' accumulator stalls at 2^21",
          "[mutants][hopper][fp8]") {
  // FlashAttention-3's contract (fused-hopper-fp8, d = 128, fp16 O). One query one-hot on coordinate
  // 0 (code 0x38, 1.0; q_descale 1); N = 16384 keys, key 0's coordinate 0 code 0x00 (logit 0), every
  // other key's 0x98 (-2^-4); V = 1 everywhere (0x38); descales 1. p = e^-1/16 = 0.939413, P =
  // e4m3fn(256 p) = 240 (step 16 in [128, 256)), l = 1 + (N - 1) p = 15391.14.
  // Correct (fp32 every 128 products): O = (256 + 240 (N - 1)) / 256 / l = 0.997981.
  // Mutant (the measured accumulator across the row: grid 2^(L - 13), L = max(ilogb(c), 8)): below
  // 2^18 the grid is at most 16 and 240 is on it, so about 1093 keys take c to 2^18 exactly; from
  // there until 2^21 each product adds at least 128 (240 cut to 224, 192, then 128), at most 14336
  // keys more (with at most 128 lost at each binade's crossing), so c passes 2^21 before key 15440.
  // From 2^21 on the grid is 256 and every 240 is cut to 0: c stops in [2^21, 2^21 + 32 240), the
  // instruction that crossed adding at most 32 products. O = c / 256 / l in [0.532250, 0.534198].
  constexpr int N = 16384;
  mt::Attention a(1, 1, 1, N);
  a.d = a.dv = 128;
  a.q.assign(size_t(a.d), 0);
  a.k.assign(size_t(N) * a.d, 0);
  a.v.assign(size_t(N) * a.d, 0);
  a.set_fp8(AC_DTYPE_E4M3, 0x00, 0x38);
  for (int j = 1; j < N; ++j) a.k8[size_t(j) * a.d] = 0x98;
  a.q8.assign(a.q.size(), 0x00);
  a.q8[0] = 0x38;
  a.q_descale = {1.0f};
  a.k_descale = {1.0f};
  a.v_descale = {1.0f};
  const double l = 1 + (N - 1) * std::exp(-0.0625);
  a.run(subject("fused-hopper-fp8", false));
  for (int c = 0; c < a.dv; ++c)
    CHECK(a.o(0, 0, c) == Approx((256 + 240.0 * (N - 1)) / 256 / l).epsilon(1e-3));
  a.run(subject("mutant-hopper-fp8-row-accumulator", true));
  for (int c = 0; c < a.dv; ++c) {
    CHECK(a.o(0, 0, c) >= 0x1p21 / 256 / l - 0x1p-12);  // fp16's half step at 0.53
    CHECK(a.o(0, 0, c) <= (0x1p21 + 32 * 240) / 256 / l + 0x1p-12);
  }
}

TEST_CASE("a row without keys under a sink: O = 0 and LSE = the sink, split or not", "[mutants][variants]") {
  // Tq = 2, Tk = 1, causal: row 0 sees no key. With a sink of 1.5 its LSE is 1.5 (the sink scaled
  // to base 2 and back: a few fp32 ulps), O exactly 0; row 1 sees key 0 (logit 0, V = 1): O =
  // 1 / (1 + e^1.5) = 0.18243, LSE = ln(1 + e^1.5) = 1.70141.
  for (const char* name : {"fused", "splitkv"}) {
    mt::Attention a(1, 1, 2, 1);
    a.causal = true;
    a.sinks = {1.5f};
    a.num_splits = std::string(name) == "splitkv" ? 2 : 1;
    a.set_value(0, 0, 1.0f);
    a.run(subject(name, false));
    INFO(name);
    CHECK(a.o(0, 0) == 0.0f);
    CHECK(a.lse_of(0, 0) == Approx(1.5).epsilon(1e-6));
    CHECK(a.o(1, 0) == Approx(0.18243).epsilon(2e-3));
    CHECK(a.lse_of(1, 0) == Approx(1.70141).epsilon(1e-5));
  }
}

TEST_CASE("mutant 31: a saturating quantiser whose cast overflows to NaN", "[mutants][quantize]") {
  // x = 465 (fp32), scale 1, e4m3fn: past the tie 464 between 448 (0x7e) and the 480 a wider
  // exponent would give, so it overflows. Declared saturating: 0x7e. The mutant writes NaN, 0x7f.
  const float x = 465.0f, scale = 1.0f;
  auto run = [&](const ac_subject& s) {
    uint8_t y = 0;
    ac_quantize_args a{};
    a.dtype = AC_DTYPE_F32;
    a.out_dtype = AC_DTYPE_E4M3;
    a.num_tokens = a.num_heads = a.head_size = 1;
    a.x = &x;
    a.y = &y;
    a.scale = &scale;
    a.num_scales = 1;
    char err[256] = {0};
    REQUIRE(s.quantize(s.self, &a, err, sizeof err) == AC_OK);
    return y;
  };
  CHECK(run(subject("quantize-fp8", false)) == 0x7e);
  CHECK(run(subject("mutant-quantize-nan-cast", true)) == 0x7f);
}

TEST_CASE("mutant 32: a merge's FP8 output cast without dividing by output_scale", "[mutants][merge]") {
  // Prefix O = 3 at LSE 0 beside an empty suffix: the merge is 3. Divided by output_scale 2: 1.5, the
  // e4m3fn code 0x3c (exponent field 7, mantissa 4); without the division 3 = 1.5 2^1, 0x44.
  const float prefix = 3.0f, suffix = 0.0f, p_lse = 0.0f, s_lse = -INFINITY, scale = 2.0f;
  auto run = [&](const ac_subject& s) {
    uint8_t out = 0;
    float out_lse = 0;
    ac_merge_args a{};
    a.dtype = AC_DTYPE_F32;
    a.num_tokens = a.num_heads = a.head_size = 1;
    a.out = &out;
    a.out_stride_token = a.out_stride_head = a.prefix_stride_token = a.prefix_stride_head = 1;
    a.suffix_stride_token = a.suffix_stride_head = a.lse_stride_token = a.lse_stride_head = 1;
    a.out_lse = &out_lse;
    a.prefix_out = &prefix;
    a.prefix_lse = &p_lse;
    a.suffix_out = &suffix;
    a.suffix_lse = &s_lse;
    a.out_dtype = AC_DTYPE_E4M3;
    a.output_scale = &scale;
    char err[256] = {0};
    REQUIRE(s.merge(s.self, &a, err, sizeof err) == AC_OK);
    return out;
  };
  CHECK(run(subject("merge-fp8", false)) == 0x3c);
  CHECK(run(subject("mutant-merge-fp8-scale-ignored", true)) == 0x44);
}
