// Host-twin tests of split-KV attention (kernels/splitkv/splitkv_host.cpp) and its combine math
// (splitkv_math.h), run on CI without a GPU: split counts 1..8 and every fold order against the
// fp64 attention of attention_case.h, more splits than keys (empty parts), all-empty rows (O = 0,
// LSE = -inf), hand-derived merges, and num_splits = 1 equal bit for bit to the fused twin.
// Run: ctest --test-dir build -R kernels_attention_twin
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

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

TEST_CASE("split-KV combine: fold orders agree on exact cases, all-empty folds to (0, -inf)",
          "[splitkv][twin]") {
  using kern::splitkv::fold_partials;
  using kern::splitkv::kMaxSplits;
  for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE}) {
    for (int n = 1; n <= kMaxSplits; ++n) {
      // n parts of equal mass 2^3 with O_i = i: result the mean (n - 1) / 2, LSE 3 + log2 n.
      float o[kMaxSplits] = {}, l[kMaxSplits];
      for (int i = 0; i < kMaxSplits; ++i) {
        o[i] = float(i);
        l[i] = i < n ? 3.0f : -INFINITY;
      }
      float oo, ll;
      fold_partials(o, l, n, f, oo, ll);
      INFO("fold " << int(f) << " n " << n);
      CHECK(oo == Approx((n - 1) / 2.0).epsilon(1e-5));
      CHECK(ll == Approx(3.0 + std::log2(double(n))).epsilon(1e-6));
      float eo[kMaxSplits] = {}, el[kMaxSplits];
      for (int i = 0; i < kMaxSplits; ++i) el[i] = -INFINITY;
      fold_partials(eo, el, n, f, oo, ll);
      CHECK(oo == 0.0f);
      CHECK(ll == -INFINITY);
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
  a.num_splits = 17;
  CHECK(kern::splitkv_attention_host(a, err, sizeof err) == AC_ERR_UNSUPPORTED);
  a.num_splits = 2;
  a.fold_order = ac_fold(7);
  CHECK(kern::splitkv_attention_host(a, err, sizeof err) == AC_ERR_UNSUPPORTED);
  CHECK(std::strstr(err, "fold") != nullptr);
}
