// The structural shrinker's candidates (properties/src/shrink.cpp) on a hand-built input whose
// every value names its own position, so a candidate's bits say exactly what it kept: two
// sequences (2 and 3 queries, 4 and 1 keys), 2 KV heads of 2 query heads each, d = 2, a mask.
// And the greedy loop: it follows the first candidate that fails the same way, ignores others.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>

#include "shrink.hpp"

using namespace attncheck;
using namespace attncheck::detail;

namespace {

// q value of (token t, head h, dim c) = 1000 + 100 t + 10 h + c; k and v 2000 / 3000 + the same
// with the key index and KV head.
AttentionInput labelled() {
  AttentionInput a;
  a.dtype = AC_DTYPE_F32;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_size = 2;
  a.seqlens_q = {2, 3};
  a.seqlens_k = {4, 1};
  a.causal = true;
  for (int t = 0; t < 5; ++t)
    for (int h = 0; h < 4; ++h)
      for (int c = 0; c < 2; ++c) a.q.push_back(uint32_t(1000 + 100 * t + 10 * h + c));
  for (int j = 0; j < 5; ++j)
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 2; ++c) {
        a.k.push_back(uint32_t(2000 + 100 * j + 10 * h + c));
        a.v.push_back(uint32_t(3000 + 100 * j + 10 * h + c));
      }
  a.mask = {1, 0, 1, 1, 0, 1, 1, 1, /* sequence 1: 3 x 1 */ 1, 0, 1};
  return a;
}

bool same_shape(const AttentionInput& x, std::vector<int32_t> q, std::vector<int32_t> k, int heads, int kv,
                int d) {
  return x.seqlens_q == q && x.seqlens_k == k && x.num_heads == heads && x.num_kv_heads == kv &&
         x.head_size == d;
}

}  // namespace

TEST_CASE("attention_shrinks: every candidate keeps exactly the bits of what it keeps", "[shrink]") {
  const AttentionInput a = labelled();
  const auto c = attention_shrinks(a, {1, 2, 64}, /*zero_keys=*/true);
  REQUIRE(c.size() > 6);
  // First: drop sequence 0, leaving sequence 1 (tokens 2..4, key 4) whole.
  REQUIRE(same_shape(c[0], {3}, {1}, 4, 2, 2));
  CHECK(c[0].q.front() == 1200u);  // token 2, head 0, dim 0
  CHECK(c[0].k.front() == 2400u);  // key 4
  CHECK(c[0].mask == std::vector<uint8_t>{1, 0, 1});
  CHECK(c[0].causal);
  // Then: drop sequence 1.
  REQUIRE(same_shape(c[1], {2}, {4}, 4, 2, 2));
  CHECK(c[1].mask == std::vector<uint8_t>(a.mask.begin(), a.mask.begin() + 8));
  // KV head groups: keep KV head 1 with its query heads 2 and 3, then KV head 0 with 0 and 1.
  bool kv1 = false, group = false, head_size = false, no_mask = false, not_causal = false, rows = false;
  for (const AttentionInput& x : c) {
    if (same_shape(x, {2, 3}, {4, 1}, 2, 1, 2) && x.k.front() == 2010u && x.q.front() == 1020u) kv1 = true;
    // One query head per group (offset 1): heads 1 and 3, with both KV heads.
    if (same_shape(x, {2, 3}, {4, 1}, 2, 2, 2) && x.q[0] == 1010u && x.q[2] == 1030u) group = true;
    if (same_shape(x, {2, 3}, {4, 1}, 4, 2, 1) && x.q[1] == 1010u && x.k[1] == 2010u) head_size = true;
    if (same_shape(x, {2, 3}, {4, 1}, 4, 2, 2) && x.mask.empty() && x.causal) no_mask = true;
    if (same_shape(x, {2, 3}, {4, 1}, 4, 2, 2) && !x.mask.empty() && !x.causal) not_causal = true;
    // Sequence 0 without its first query row: token 1 first, the mask's second row first.
    if (same_shape(x, {1, 3}, {4, 1}, 4, 2, 2) && x.q.front() == 1100u && x.mask[0] == 0 && x.mask[3] == 1)
      rows = true;
    CHECK(x.q.size() == size_t((x.seqlens_q[0] + (x.seqlens_q.size() > 1 ? x.seqlens_q[1] : 0)) *
                               x.num_heads * x.head_size));
  }
  CHECK(kv1);
  CHECK(group);
  CHECK(head_size);
  CHECK(no_mask);
  CHECK(not_causal);
  CHECK(rows);
  // A subject that refuses zero-key ranges never gets a sequence without keys.
  for (const AttentionInput& x : attention_shrinks(a, {2}, /*zero_keys=*/false))
    for (int32_t tk : x.seqlens_k) CHECK(tk >= 1);
}

TEST_CASE("shrink_greedily follows the first candidate that fails the same way", "[shrink]") {
  Case start;
  start.input = labelled();
  Outcome failing;
  failing.ok = false;
  failing.failure_class = "accuracy";
  ShrinkHooks hooks;
  hooks.candidates = [](const AttentionInput& a) { return attention_shrinks(a, {1, 2}, true); };
  // The "bug" needs query head 3's values (1030 + ...) and key 1 of sequence 0; a candidate that
  // loses either passes; one that keeps both fails the same way unless it lost the mask.
  hooks.check = [](const Case& c) -> std::optional<Outcome> {
    const auto& a = std::get<AttentionInput>(c.input);
    bool head3 = false, key1 = false;
    for (uint32_t x : a.q) head3 = head3 || (x % 100) / 10 == 3;
    for (uint32_t x : a.k) key1 = key1 || x / 100 == 21;
    Outcome o;
    if (!head3 || !key1) return o;
    o.ok = false;
    o.failure_class = a.mask.empty() ? "empty_row" : "accuracy";  // losing the mask changes the bug
    return o;
  };
  int stops = 0;
  hooks.stop = [&] { return ++stops > 10000; };
  const ShrinkResult r = shrink_greedily(start, failing, hooks);
  CHECK_FALSE(r.cut);
  const auto& a = std::get<AttentionInput>(r.best.input);
  // Minimal: one sequence, one query row, one key (key 1), KV head 1 with query head 3 alone, d 1,
  // and the mask kept (without it the failure would be another one).
  CHECK(a.seqlens_q == std::vector<int32_t>{1});
  CHECK(a.seqlens_k == std::vector<int32_t>{1});
  CHECK(a.num_heads == 1);
  CHECK(a.num_kv_heads == 1);
  CHECK(a.head_size == 1);
  CHECK(a.k == std::vector<uint32_t>{2110u});
  CHECK(a.q.size() == 1);
  CHECK((a.q[0] % 100) / 10 == 3);
  CHECK(a.mask.size() == 1);
  CHECK(r.outcome.failure_class == "accuracy");
}

TEST_CASE("attention_shrinks: a case with V's own head size shrinks only to declared pairs and plain sizes",
          "[shrink]") {
  // One sequence, one head, QK head size 4 and V's 3 (k = 2000 + c, v = 3000 + c by column c). The
  // subject takes plain sizes 1 .. 8 and the pairs (4, 3), (2, 1), (3, 4) and (1, 2). The head-size
  // candidates must be the plain (1, 1), (2, 2) and (3, 3) (V cut with Q and K, no V size of its
  // own) and the declared pairs within (4, 3): (2, 1) and (1, 2); never QK cut alone beside V's 3,
  // a pair the subject did not declare, nor (3, 4) (V past the case's 3).
  AttentionInput a;
  a.dtype = AC_DTYPE_F32;
  a.head_size = 4;
  a.head_size_v = 3;
  a.seqlens_q = {1};
  a.seqlens_k = {1};
  a.q = {1000, 1001, 1002, 1003};
  a.k = {2000, 2001, 2002, 2003};
  a.v = {3000, 3001, 3002};
  const std::vector<ac_head_pair> pairs = {{4, 3}, {2, 1}, {3, 4}, {1, 2}};
  std::set<std::pair<int32_t, int32_t>> seen;
  for (const AttentionInput& x : attention_shrinks(a, {1, 2, 3, 4, 5, 6, 7, 8}, true, {}, pairs)) {
    if (x.head_size == 4 && x.dv() == 3) continue;  // cuts of rows, keys or heads
    seen.insert({x.head_size, x.dv()});
    const bool plain = x.head_size_v == 0;
    CHECK((plain || std::count_if(pairs.begin(), pairs.end(), [&](const ac_head_pair& p) {
                      return p.qk == x.head_size && p.v == x.head_size_v;
                    }) == 1));
    REQUIRE(x.v.size() == size_t(x.dv()));
    for (int32_t c = 0; c < x.dv(); ++c) CHECK(x.v[size_t(c)] == uint32_t(3000 + c));
    for (int32_t c = 0; c < x.head_size; ++c) CHECK(x.k[size_t(c)] == uint32_t(2000 + c));
  }
  CHECK(seen == std::set<std::pair<int32_t, int32_t>>{{1, 1}, {2, 2}, {3, 3}, {2, 1}, {1, 2}});
  // V inside K survives a cut that keeps V's columns within K's.
  AttentionInput s = a;
  s.v = {2000, 2001, 2002};
  s.v_in_k = true;
  for (const AttentionInput& x : attention_shrinks(s, {1, 2}, true, {}, pairs))
    CHECK(x.v_in_k == (x.dv() <= x.head_size));
}
