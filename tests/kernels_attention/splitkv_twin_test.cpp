// Host-twin tests of split-KV attention (kernels/splitkv/splitkv_host.cpp) and its combine math
// (splitkv_math.h), run on CI without a GPU: split counts 1..8, 16, 33 and 64 and every fold order
// against the fp64 attention of attention_case.h, more splits than keys (empty parts), all-empty
// rows (O = 0, LSE = -inf), hand-derived merges, the streaming folds equal bit for bit to the folds
// as defined for 1..64 parts, and num_splits = 1 equal bit for bit to the fused twin.
// Run: ctest --test-dir build -R kernels_attention_twin
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "attention_case.h"
#include "fused/fused.h"
#include "splitkv/splitkv.h"
#include "splitkv/splitkv_math.h"

using namespace attncheck;
using namespace attncheck::test;

namespace {

std::string run_split_twin(const AttnCase& c, int tiling, int splits, ac_fold fold,
                           std::vector<uint16_t>* out_copy = nullptr,
                           std::vector<float>* lse_copy = nullptr) {
  std::vector<uint16_t> out(size_t(c.total_q() * c.heads * c.head_size), 0xbeef);
  std::vector<float> lse(size_t(c.total_q() * c.heads), 12345.0f);
  ac_attention_args a = host_args(c, out.data(), lse.data(), tiling);
  a.num_splits = splits;
  a.fold_order = fold;
  char err[256] = {0};
  if (kern::splitkv_attention_host(a, err, sizeof err) != AC_OK) return std::string("refused: ") + err;
  if (out_copy) *out_copy = out;
  if (lse_copy) *lse_copy = lse;
  return compare_with_exact(c, out, &lse, {});
}

}  // namespace

TEST_CASE("split-KV combine: hand-derived merges and guards", "[splitkv][twin]") {
  using kern::splitkv::merge_partial;
  const float ninf = -INFINITY;
  // Equal masses 2^0 and 2^0: the average, LSE log2(2) = 1.
  float o = 1.0f, l = 0.0f;
  merge_partial(o, l, 3.0f, 0.0f);
  CHECK(o == 2.0f);
  CHECK(l == 1.0f);
  // Masses 2^2 and 2^0: weights 4/5 and 1/5.
  o = 10.0f, l = 2.0f;
  merge_partial(o, l, 5.0f, 0.0f);
  CHECK(o == Approx(9.0f).epsilon(1e-6));
  CHECK(l == Approx(std::log2(5.0f)).epsilon(1e-6));
  // One empty side: the other side unchanged.
  o = 0.0f, l = ninf;
  merge_partial(o, l, 7.0f, 3.0f);
  CHECK(o == 7.0f);
  CHECK(l == 3.0f);
  // Both empty: O = 0 exactly, LSE = -inf, never NaN.
  o = 0.0f, l = ninf;
  merge_partial(o, l, 0.0f, ninf);
  CHECK(o == 0.0f);
  CHECK(l == ninf);
}

namespace {

// Fold of n partials from arrays, through the streaming walk of splitkv_math.h.
void fold_arrays(const std::vector<float>& o, const std::vector<float>& l, int n, ac_fold f, float& oo,
                 float& ll) {
  kern::splitkv::fold_partials(
      n, f,
      [&](int i, float& o_i, float& l_i) {
        o_i = o[size_t(i)];
        l_i = l[size_t(i)];
      },
      oo, ll);
}

// The folds as defined, on arrays indexed freely: left to right, right to left, and the pairwise
// tree level by level (at stride s, part i merges part i + s when i + s < n).
void fold_by_definition(std::vector<float> o, std::vector<float> l, int n, ac_fold f, float& oo, float& ll) {
  using kern::splitkv::merge_partial;
  if (f == AC_FOLD_LEFT) {
    for (int i = 1; i < n; ++i) merge_partial(o[0], l[0], o[size_t(i)], l[size_t(i)]);
  } else if (f == AC_FOLD_RIGHT) {
    for (int i = n - 2; i >= 0; --i)
      merge_partial(o[size_t(i)], l[size_t(i)], o[size_t(i) + 1], l[size_t(i) + 1]);
  } else {
    for (int stride = 1; stride < n; stride *= 2)
      for (int i = 0; i + stride < n; i += 2 * stride)
        merge_partial(o[size_t(i)], l[size_t(i)], o[size_t(i + stride)], l[size_t(i + stride)]);
  }
  oo = o[0];
  ll = l[0];
}

}  // namespace

TEST_CASE("split-KV combine: fold orders agree on exact cases, all-empty folds to (0, -inf)",
          "[splitkv][twin]") {
  using kern::splitkv::kMaxSplits;
  for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE}) {
    for (int n = 1; n <= kMaxSplits; ++n) {
      // n parts of equal mass 2^3 with O_i = i: result the mean (n - 1) / 2, LSE 3 + log2 n.
      std::vector<float> o(static_cast<size_t>(n)), l(static_cast<size_t>(n), 3.0f);
      for (int i = 0; i < n; ++i) o[size_t(i)] = float(i);
      float oo, ll;
      fold_arrays(o, l, n, f, oo, ll);
      INFO("fold " << int(f) << " n " << n);
      CHECK(oo == Approx((n - 1) / 2.0).epsilon(1e-5));
      CHECK(ll == Approx(3.0 + std::log2(double(n))).epsilon(1e-6));
      const std::vector<float> eo(size_t(n), 0.0f), el(size_t(n), -INFINITY);
      fold_arrays(eo, el, n, f, oo, ll);
      CHECK(oo == 0.0f);
      CHECK(ll == -INFINITY);
      // One part's state NaN (its only key's logit NaN, from a NaN code in K), every other part
      // empty: the NaN is kept, in O and in the LSE, wherever the part sits. A both-empty guard
      // tested on max(LSE_a, LSE_b) took NaN beside -inf for two empty parts and dropped it.
      for (int at = 0; at < n; ++at) {
        std::vector<float> no(size_t(n), 0.0f), nl(size_t(n), -INFINITY);
        no[size_t(at)] = NAN;
        nl[size_t(at)] = NAN;
        fold_arrays(no, nl, n, f, oo, ll);
        INFO("NaN part " << at);
        CHECK(std::isnan(oo));
        CHECK(std::isnan(ll));
      }
    }
  }
}

TEST_CASE("split-KV combine: the streaming folds are the defined folds bit for bit, 1..64 parts",
          "[splitkv][twin]") {
  using kern::splitkv::kMaxSplits;
  // Distinct masses and values, some parts empty, so that every merge's operands and their order
  // show in the last bits.
  uint64_t x = 12345;
  auto next = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return double(x >> 11) * 0x1.0p-53;
  };
  for (int trial = 0; trial < 20; ++trial)
    for (int n = 1; n <= kMaxSplits; ++n) {
      std::vector<float> o(static_cast<size_t>(n)), l(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        o[size_t(i)] = float(next() * 2 - 1);
        l[size_t(i)] = next() < 0.1 ? -INFINITY : float(next() * 40 - 20);
      }
      for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE}) {
        float oo, ll, eo, el;
        fold_arrays(o, l, n, f, oo, ll);
        fold_by_definition(o, l, n, f, eo, el);
        INFO("trial " << trial << " n " << n << " fold " << int(f));
        CHECK(std::memcmp(&oo, &eo, 4) == 0);
        CHECK(std::memcmp(&ll, &el, 4) == 0);
      }
    }
}

TEST_CASE("split-KV twin: split counts 1..8, every fold order, against fp64", "[splitkv][twin]") {
  uint64_t seed = 500;
  for (int tiling = 0; tiling < kern::kNumSplitKVTilings; ++tiling)
    for (int splits = 1; splits <= 8; ++splits)
      for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE}) {
        // Sequence 2 has fewer keys than splits (empty parts), sequence 3 none at all (empty rows).
        const AttnCase c = make_case(seed++, splits % 2 ? DType::f16 : DType::bf16, 4, 2, 64, {3, 20, 2},
                                     {150, 5, 0}, splits % 3 == 0, splits == 5);
        INFO("tiling " << tiling << " splits " << splits << " fold " << int(f));
        CHECK(run_split_twin(c, tiling, splits, f) == "");
      }
}

TEST_CASE("split-KV twin: 16 to 64 splits (up to the combine's limit) against fp64", "[splitkv][twin]") {
  uint64_t seed = 550;
  for (int splits : {16, 33, 64})
    for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE}) {
      // 4100 keys: 64 parts of 64 or 65 keys (a part of two tiles, the second of one key); 40 keys:
      // most parts empty.
      const AttnCase c = make_case(seed++, splits == 33 ? DType::bf16 : DType::f16, 4, 1, 64, {1, 3, 1},
                                   {4100, 40, 0}, f == AC_FOLD_TREE, false);
      INFO("splits " << splits << " fold " << int(f));
      CHECK(run_split_twin(c, 1, splits, f) == "");
    }
}

TEST_CASE("split-KV twin: one split equals the fused twin bit for bit", "[splitkv][twin]") {
  const AttnCase c = make_case(600, DType::f16, 4, 1, 128, {70, 5}, {90, 300}, true, false);
  std::vector<uint16_t> so;
  std::vector<float> sl;
  REQUIRE(run_split_twin(c, 0, 1, AC_FOLD_TREE, &so, &sl) == "");
  std::vector<uint16_t> fo(so.size());
  std::vector<float> fl(sl.size());
  ac_attention_args a = host_args(c, fo.data(), fl.data(), 0);  // fused tiling 0 is (64, 64) too
  char err[256];
  REQUIRE(kern::fused_attention_host(a, {}, err, sizeof err) == AC_OK);
  CHECK(so == fo);
  CHECK(std::memcmp(sl.data(), fl.data(), sl.size() * 4) == 0);
}

TEST_CASE("split-KV twin: refuses bad split counts and fold orders", "[splitkv][twin]") {
  const AttnCase c = make_case(700, DType::f16, 2, 1, 64, {4}, {4}, false, false);
  std::vector<uint16_t> out(size_t(c.total_q() * c.heads * 64));
  ac_attention_args a = host_args(c, out.data(), nullptr, 0);
  char err[256];
  a.num_splits = 0;
  CHECK(kern::splitkv_attention_host(a, err, sizeof err) == AC_ERR_UNSUPPORTED);
  CHECK(std::strstr(err, "num_splits") != nullptr);
  a.num_splits = kern::kSplitKVMaxSplits + 1;
  CHECK(kern::splitkv_attention_host(a, err, sizeof err) == AC_ERR_UNSUPPORTED);
  a.num_splits = kern::kSplitKVMaxSplits;
  CHECK(kern::splitkv_attention_host(a, err, sizeof err) == AC_OK);
  a.num_splits = 2;
  a.fold_order = ac_fold(7);
  CHECK(kern::splitkv_attention_host(a, err, sizeof err) == AC_ERR_UNSUPPORTED);
  CHECK(std::strstr(err, "fold") != nullptr);
}
