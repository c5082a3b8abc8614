// Textbook attention cases shared by the host-twin test and the GPU test: GQA, bottom-right
// causal with T_q < T_k, a random mask with a fully masked row, varlen with a zero-length key
// range, every dtype, odd head sizes; checked against the fp64 attention of kb_support.hpp.
#pragma once
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <random>
#include <string>

#include "attncheck/attention_args.hpp"
#include "kb_support.hpp"
#include "textbook/textbook.h"

namespace kb {

struct TextbookResult {
  Tensor out;
  std::vector<float> lse;  // [heads, total_q]
  size_t bytes = 0;
};
using TextbookRun = std::function<TextbookResult(const AttnCase&, bool naive)>;

inline std::vector<AttnCase> textbook_cases() {
  std::vector<AttnCase> cases;
  for (DType t : {DType::f16, DType::bf16, DType::f32}) {
    AttnCase a;  // GQA 4:2, causal with T_q < T_k (bottom-right)
    a.type = t;
    a.heads = 4;
    a.kv_heads = 2;
    a.d = 16;
    a.seq_q = {5};
    a.seq_k = {9};
    a.causal = true;
    cases.push_back(a);
    AttnCase b;  // varlen with a zero-length key range and an empty query range, mask
    b.type = t;
    b.heads = 3;
    b.kv_heads = 1;
    b.d = 33;
    b.seq_q = {3, 2, 0, 4};
    b.seq_k = {7, 0, 3, 20};
    b.use_mask = true;
    cases.push_back(b);
    AttnCase c;  // head size 1, causal with T_q > T_k (first rows see no key), many keys
    c.type = t;
    c.heads = 2;
    c.kv_heads = 2;
    c.d = 1;
    c.seq_q = {6};
    c.seq_k = {3};
    c.causal = true;
    cases.push_back(c);
    AttnCase e;  // head size 64 and 40 keys: several tiles in every direction
    e.type = t;
    e.heads = 2;
    e.kv_heads = 1;
    e.d = 64;
    e.seq_q = {17};
    e.seq_k = {40};
    e.causal = true;
    e.use_mask = true;
    cases.push_back(e);
  }
  return cases;
}

// Bounds: kernel_textbook_o_bound, kernel_textbook_lse_bound (derived in properties/src/budgets.cpp).
inline void check_textbook(const AttnCase& c, const TextbookResult& r, bool naive, const std::string& what) {
  const auto rows = c.exact();
  const double u = unit_roundoff(c.type);
  REQUIRE(r.bytes == c.expected_intermediate_bytes(naive ? attncheck::kern::dtype_size(c.type) : 4,
                                                   attncheck::kern::dtype_size(c.type)));
  for (int tok = 0; tok < c.total_q; ++tok)
    for (int h = 0; h < c.heads; ++h) {
      const auto& row = rows[size_t(tok) * size_t(c.heads) + size_t(h)];
      const float lse = r.lse[size_t(h) * size_t(c.total_q) + size_t(tok)];
      INFO(what << " token " << tok << " head " << h << " exact lse " << row.lse << " got " << lse);
      if (row.lse == -kInf) {
        REQUIRE(lse == -INFINITY);
        for (int e = 0; e < c.d; ++e) REQUIRE(r.out.bits((size_t(tok) * c.heads + h) * c.d + e) == 0u);
        continue;
      }
      REQUIRE(std::fabs(lse - row.lse) <=
              attncheck::kernel_textbook_lse_bound(u, naive, row.max_abs_s, row.lse));
      for (int e = 0; e < c.d; ++e) {
        const double got = r.out.get((size_t(tok) * c.heads + h) * c.d + e), want = row.o[size_t(e)];
        INFO("e " << e << " got " << got << " want " << want);
        REQUIRE(std::fabs(got - want) <=
                attncheck::kernel_textbook_o_bound(u, naive, row.max_abs_s, double(row.keys), double(c.d),
                                                   row.sum_p_abs_v_max, ulp_at(c.type, want)));
      }
    }
}

inline void check_textbook_suite(const TextbookRun& run, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (AttnCase c : textbook_cases())
    for (bool naive : {false, true}) {
      c.build(rng);
      const TextbookResult r = run(c, naive);
      check_textbook(c, r, naive,
                     std::string(naive ? "naive" : "safe") + " dtype " + std::to_string(int(c.type)) + " d " +
                         std::to_string(c.d));
    }
}

// The naive variant overflows where S reaches the fp16 band: one key with q . k scaled to
// 11.09375, whose exp rounds to fp16 inf, so P = inf / inf = NaN; the safe variant gives 1, and so
// does the naive one a step below (11.0859375). Derived by hand; run is the host twin or the GPU.
inline void check_naive_fp16_overflow(const TextbookRun& run) {
  AttnCase c;
  c.type = DType::f16;
  c.d = 1;
  c.seq_q = {1};
  c.seq_k = {2};
  c.scale = 1.0f;
  std::mt19937_64 rng(3);
  c.build(rng);
  c.q.set(0, 1.0f);
  c.k.set(0, 11.09375f);
  c.k.set(1, 0.0f);
  c.v.set(0, 1.0f);
  c.v.set(1, 1.0f);
  REQUIRE(std::isnan(run(c, true).out.get(0)));
  REQUIRE(run(c, false).out.get(0) == 1.0);
  c.k.set(0, 11.0859375f);
  REQUIRE(run(c, true).out.get(0) == 1.0);
}

inline ac_attention_args textbook_args(const AttnCase& c, const void* q, const void* k, const void* v,
                                       void* out, float* lse, const uint8_t* mask, const int32_t* cu_q,
                                       const int32_t* cu_k, const int64_t* cu_mask) {
  return attncheck::AttentionArgs(ac_dtype(c.type), c.heads, c.kv_heads, c.d)
      .sequences(int32_t(c.seq_q.size()), cu_q, cu_k, c.cu_q.data(), c.cu_k.data())
      .tensors(q, k, v, out, lse)
      .scale(c.scale)
      .causal(c.causal)
      .mask(c.use_mask ? mask : nullptr, cu_mask, c.cu_mask.data());
}

}  // namespace kb
