// Host twin of textbook attention (kernels/textbook) against the fp64 attention of
// kb_support.hpp: GQA, bottom-right causal (T_q < T_k and T_q > T_k), a random mask with a fully
// masked row, varlen with zero-length key and query ranges, fp16 / bf16 / fp32, head sizes 1, 16,
// 33, 64; safe (S fp32) and naive (S in the input type) variants; bytes of S and P reported.
#include <catch2/catch.hpp>
#include <cstring>

#include "textbook_cases.hpp"

using namespace attncheck::kern;
using kb::DType;

namespace {
kb::TextbookResult run_host(const kb::AttnCase& c, bool naive) {
  kb::TextbookResult r;
  r.out = kb::Tensor(c.type, size_t(c.total_q) * c.heads * c.d);
  r.lse.assign(size_t(c.total_q) * c.heads, 777.0f);
  TextbookOptions o;
  o.naive_softmax = naive;
  o.score_as_input = naive;
  o.bytes_allocated = &r.bytes;
  const ac_attention_args a =
      kb::textbook_args(c, c.q.data(), c.k.data(), c.v.data(), r.out.data(), r.lse.data(), c.mask.data(),
                        c.cu_q.data(), c.cu_k.data(), c.cu_mask.data());
  char err[256] = {0};
  INFO(err);
  REQUIRE(textbook_attention_host(a, o, err, sizeof err) == AC_OK);
  return r;
}
}  // namespace

TEST_CASE("textbook twin: GQA, causal, mask, varlen against fp64; bytes of S and P") {
  kb::check_textbook_suite(run_host, 11);
}

TEST_CASE("textbook twin: the S size formula at a small shape") {
  kb::AttnCase c;
  c.type = DType::f16;
  c.heads = 4;
  c.kv_heads = 1;
  c.d = 8;
  c.seq_q = {8, 3};
  c.seq_k = {8, 5};
  std::mt19937_64 rng(3);
  c.build(rng);
  // 4 heads x (8 x 8 + 3 x 5) scores x (4 bytes of fp32 S + 2 bytes of fp16 P), by hand
  REQUIRE(run_host(c, false).bytes == size_t(4 * (64 + 15) * (4 + 2)));
  REQUIRE(run_host(c, true).bytes == size_t(4 * (64 + 15) * (2 + 2)));
}

TEST_CASE("textbook twin: naive variant overflows where S reaches the fp16 band") {
  kb::check_naive_fp16_overflow(run_host);
}

TEST_CASE("textbook twin: refusals name the problem; subjects") {
  kb::AttnCase c;
  c.seq_q = {2};
  c.seq_k = {2};
  std::mt19937_64 rng(3);
  c.build(rng);
  kb::Tensor out(c.type, 64);
  ac_attention_args a = kb::textbook_args(c, c.q.data(), c.k.data(), c.v.data(), out.data(), nullptr, nullptr,
                                          c.cu_q.data(), c.cu_k.data(), nullptr);
  char err[256] = {0};
  a.head_size = 257;
  REQUIRE(textbook_attention_host(a, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  REQUIRE(std::strstr(err, "head_size") != nullptr);
  a.head_size = c.d;
  a.num_kv_heads = 3;
  REQUIRE(textbook_attention_host(a, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  REQUIRE(std::strstr(err, "head") != nullptr);
  a.num_kv_heads = 1;
  const int32_t bad_cu[2] = {0, -1};
  a.cu_seqlens_k_host = bad_cu;
  REQUIRE(textbook_attention_host(a, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  REQUIRE(std::strstr(err, "impossible shape") != nullptr);
  std::vector<ac_subject> s;
  append_textbook_subjects(s, false);
  REQUIRE(s.size() == 2);
  REQUIRE(std::string(s[0].name) == "textbook");
  REQUIRE(std::string(s[1].name) == "textbook-naive");
  REQUIRE((s[1].caps.features & AC_FEAT_NAIVE_EXP) != 0);
  REQUIRE(
      (s[0].caps.features & (AC_FEAT_CAUSAL | AC_FEAT_MASK | AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE)) ==
      (AC_FEAT_CAUSAL | AC_FEAT_MASK | AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE));
}
