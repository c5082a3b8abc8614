// Host twin of the merge (kernels/merge) against the fp64 merge written in kb_support.hpp:
// the guards (+inf read as empty; both empty give out = +0 and LSE = -inf exactly, never NaN),
// both LSE layouts, padded strides, base 2, every dtype, head sizes 1..512 (odd ones included),
// the scale-then-multiply order at extreme LSEs, and refusal of bad arguments.
#include <catch2/catch.hpp>
#include <cstring>

#include "merge/merge_math.h"
#include "merge_cases.hpp"

using namespace attncheck::kern;
using kb::DType;

namespace {
void run_host(kb::MergeCase& c) {
  char err[256] = {0};
  MergeOptions o;
  o.lse_base = c.lse_base;
  const ac_merge_args a = c.host_args();
  REQUIRE(merge_host(a, o, err, sizeof err) == AC_OK);
}
}  // namespace

TEST_CASE("merge twin: guards for empty states and FA2's +inf sentinel") {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    kb::MergeCase c;
    c.type = t;
    c.tokens = 6;
    c.heads = 1;
    c.d = 4;
    std::mt19937_64 rng(1);
    c.fill(rng);
    const float cases[6][2] = {{-INFINITY, -INFINITY}, {INFINITY, INFINITY}, {INFINITY, -INFINITY},
                               {INFINITY, 2.5f},       {-INFINITY, -3.0f},   {1.0f, 1.0f}};
    for (int tok = 0; tok < 6; ++tok) {
      c.p_lse[c.lse_at(tok, 0)] = cases[tok][0];
      c.s_lse[c.lse_at(tok, 0)] = cases[tok][1];
    }
    // garbage in the empty states' outputs must not leak: NaN in rows 0..2 (all empty)
    for (int tok = 0; tok < 3; ++tok)
      for (int e = 0; e < 4; ++e) {
        c.prefix.set(c.at(tok, 0, e), NAN);
        c.suffix.set(c.at(tok, 0, e), NAN);
      }
    run_host(c);
    for (int tok = 0; tok < 3; ++tok) {
      REQUIRE(c.out_lse[c.lse_at(tok, 0)] == -INFINITY);
      for (int e = 0; e < 4; ++e) REQUIRE(c.out.bits(c.at(tok, 0, e)) == 0u);
    }
    // one side empty (+inf or -inf): the other state comes through exactly
    for (int tok = 3; tok < 5; ++tok) {
      REQUIRE(c.out_lse[c.lse_at(tok, 0)] == c.s_lse[c.lse_at(tok, 0)]);
      for (int e = 0; e < 4; ++e) REQUIRE(c.out.bits(c.at(tok, 0, e)) == c.suffix.bits(c.at(tok, 0, e)));
    }
    // equal LSEs: weights 1/2 each, LSE + log 2
    REQUIRE(c.out_lse[c.lse_at(5, 0)] == Approx(1.0 + std::log(2.0)).epsilon(1e-6));
    c.check_against_exact("guards");
  }
}

TEST_CASE("merge twin: random states against fp64, layouts, strides, bases, head sizes") {
  std::mt19937_64 rng(2024);
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (ac_lse_layout layout : {AC_LSE_HEADS_TOKENS, AC_LSE_TOKENS_HEADS})
      for (int base : {0, 2})
        for (int d : {1, 3, 7, 8, 13, 64, 100, 128, 256, 257, 512}) {
          kb::MergeCase c;
          c.type = t;
          c.layout = layout;
          c.lse_base = base;
          c.d = d;
          c.tokens = 5;
          c.heads = 3;
          c.pad = d % 2 ? 1 : 8;
          c.fill(rng);
          run_host(c);
          c.check_against_exact("random");
        }
}

TEST_CASE("merge twin: scale first keeps outputs bounded at extreme LSEs") {
  // e^(LSE) alone would overflow fp32 (LSE 200 > 88.7): the convex combination must not.
  kb::MergeCase c;
  c.type = DType::f16;
  c.tokens = 2;
  c.heads = 1;
  c.d = 8;
  std::mt19937_64 rng(3);
  c.fill(rng);
  c.p_lse = {200.0f, -200.0f};
  c.s_lse = {199.0f, -200.5f};
  for (int e = 0; e < 8; ++e) {
    c.prefix.set(c.at(0, 0, e), 60000.0f);
    c.suffix.set(c.at(0, 0, e), 60000.0f);
  }
  run_host(c);
  for (int e = 0; e < 8; ++e) REQUIRE(c.out.get(c.at(0, 0, e)) == 60000.0);
  c.check_against_exact("extreme");
}

TEST_CASE("merge twin: NULL out_lse, zero tokens, and refusals naming the problem") {
  kb::MergeCase c;
  std::mt19937_64 rng(4);
  c.fill(rng);
  char err[256] = {0};
  ac_merge_args a = c.host_args();
  a.out_lse = nullptr;
  REQUIRE(merge_host(a, {}, err, sizeof err) == AC_OK);
  a.num_tokens = 0;
  REQUIRE(merge_host(a, {}, err, sizeof err) == AC_OK);
  a = c.host_args();
  a.head_size = 513;
  REQUIRE(merge_host(a, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  REQUIRE(std::strstr(err, "head_size") != nullptr);
  a.head_size = 0;
  REQUIRE(merge_host(a, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  a = c.host_args();
  a.dtype = ac_dtype(7);
  REQUIRE(merge_host(a, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  REQUIRE(std::strstr(err, "dtype") != nullptr);
  a = c.host_args();
  MergeOptions bad;
  bad.lse_base = 10;
  REQUIRE(merge_host(a, bad, err, sizeof err) == AC_ERR_UNSUPPORTED);
  REQUIRE(std::strstr(err, "lse_base") != nullptr);
  a.prefix_out = static_cast<const char*>(a.prefix_out) + 1;  // odd address for a 2-byte element
  REQUIRE(merge_host(a, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  REQUIRE(std::strstr(err, "aligned") != nullptr);
}

TEST_CASE("merge subjects: four per backend with the declared conventions") {
  std::vector<ac_subject> subjects;
  append_merge_subjects(subjects, false);
  REQUIRE(subjects.size() == 4);
  REQUIRE(std::string(subjects[3].name) == "merge-fp8");
  REQUIRE(subjects[3].caps.fp8 == AC_FP8_SATURATE);
  REQUIRE(subjects[3].caps.kv_dtypes != 0);
  REQUIRE(std::string(subjects[0].name) == "merge");
  REQUIRE(subjects[0].caps.lse_layout == AC_LSE_HEADS_TOKENS);
  REQUIRE(std::string(subjects[1].name) == "merge-th");
  REQUIRE(subjects[1].caps.lse_layout == AC_LSE_TOKENS_HEADS);
  REQUIRE(std::string(subjects[2].name) == "merge-log2");
  REQUIRE(subjects[2].caps.lse_base == 2);
  for (const ac_subject& s : subjects) {
    REQUIRE(s.caps.memory == AC_MEMORY_HOST);
    REQUIRE(s.caps.head_size_max == 512);
    REQUIRE(s.merge != nullptr);
  }
  // the base-2 subject really merges in base 2: equal LSEs L give L + 1
  kb::MergeCase c;
  c.tokens = 1;
  c.heads = 1;
  std::mt19937_64 rng(5);
  c.fill(rng);
  c.p_lse = {3.0f};
  c.s_lse = {3.0f};
  ac_merge_args a = c.host_args();
  char err[128];
  REQUIRE(subjects[2].merge(subjects[2].self, &a, err, sizeof err) == AC_OK);
  REQUIRE(c.out_lse[0] == 4.0f);
  REQUIRE(subjects[0].merge(subjects[0].self, &a, err, sizeof err) == AC_OK);
  REQUIRE(c.out_lse[0] == Approx(3.0 + std::log(2.0)).epsilon(1e-6));
}

TEST_CASE("merge twin: an FP8 output, the merged value divided by output_scale and cast, saturating") {
  // Two tokens, one head, d = 2, fp32 states. Token 0: the prefix (LSE 0, O = (3, -1000)) beside an
  // empty suffix (LSE -inf): the merge is the prefix itself, exactly. Divided by 2: 1.5 = 1.5 2^0,
  // e4m3fn exponent field 7, mantissa 4: 0x3c; -500 saturates to -448: 0xfe. Token 1: both states
  // empty: O = 0 exactly, code 0x00.
  const std::vector<float> prefix = {3.0f, -1000.0f, 7.0f, 7.0f}, suffix = {0.0f, 0.0f, 7.0f, 7.0f};
  const std::vector<float> p_lse = {0.0f, -INFINITY}, s_lse = {-INFINITY, -INFINITY};
  std::vector<uint8_t> out(4, 0xaa);
  std::vector<float> out_lse(2);
  const float scale = 2.0f;
  ac_merge_args a{};
  a.dtype = AC_DTYPE_F32;
  a.num_tokens = 2;
  a.num_heads = 1;
  a.head_size = 2;
  a.out = out.data();
  a.out_stride_token = 2;
  a.out_stride_head = 2;
  a.out_lse = out_lse.data();
  a.prefix_out = prefix.data();
  a.prefix_stride_token = a.suffix_stride_token = 2;
  a.prefix_stride_head = a.suffix_stride_head = 2;
  a.prefix_lse = p_lse.data();
  a.suffix_out = suffix.data();
  a.suffix_lse = s_lse.data();
  a.lse_stride_token = 1;
  a.lse_stride_head = 2;
  a.out_dtype = AC_DTYPE_E4M3;
  a.output_scale = &scale;
  char err[256] = {0};
  REQUIRE(merge_host(a, MergeOptions{}, err, sizeof err) == AC_OK);
  CHECK(out == std::vector<uint8_t>{0x3c, 0xfe, 0x00, 0x00});
  CHECK(out_lse[0] == 0.0f);
  CHECK(out_lse[1] == -INFINITY);
  // The mutant's store: 3 itself (1.5 2^1: 0x44), the scale never applied.
  MergeOptions m;
  m.mutation = MergeMutation::fp8_scale_ignored;
  REQUIRE(merge_host(a, m, err, sizeof err) == AC_OK);
  CHECK(out[0] == 0x44);
  // An FP8 output without its scale is refused before any work.
  a.output_scale = nullptr;
  CHECK(merge_host(a, MergeOptions{}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  CHECK(std::string(err).find("without output_scale") != std::string::npos);
}
