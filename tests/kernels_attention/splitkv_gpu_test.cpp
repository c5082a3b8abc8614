// GPU tests of split-KV attention (kernels/splitkv/splitkv.cu), label `gpu`: split counts 1..8 and
// every fold order against the fp64 attention of attention_case.h, both tilings, fp16 / bf16,
// head sizes 64 / 128, GQA, causal, masks, empty parts and empty rows; num_splits = 1 bitwise
// reproducible run to run; decode shape (T_q = 1) with many keys, 16 and 64 (the combine's
// limit) splits. Skips (exit 77) without a GPU.
// Run: ctest --test-dir build -L gpu -R kernels_attention
#include <catch2/catch.hpp>
#include <cstring>

#include "device_case.h"
#include "hopper/hopper.h"
#include "splitkv/splitkv.h"

using namespace attncheck;
using namespace attncheck::test;

namespace {

struct SplitResult {
  int rc;
  std::string err;
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

SplitResult run_split_gpu(const AttnCase& c, int tiling, int splits, ac_fold fold) {
  DeviceCase dc(c);
  ac_attention_args a = dc.args(c, tiling);
  a.num_splits = splits;
  a.fold_order = fold;
  char err[256] = {0};
  SplitResult r;
  r.rc = kern::splitkv_attention_cuda(a, err, sizeof err);
  r.err = err;
  r.out = dc.out.to_host();
  r.lse = dc.lse.to_host();
  return r;
}

}  // namespace

TEST_CASE("split-KV gpu: split counts 1..8, every fold order, against fp64", "[splitkv][gpu]") {
  uint64_t seed = 5000;
  for (int tiling = 0; tiling < kern::kNumSplitKVTilings; ++tiling)
    for (int splits = 1; splits <= 8; ++splits)
      for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE}) {
        const int d = splits % 2 ? 128 : 64;
        const AttnCase c = make_case(seed++, splits % 3 ? DType::f16 : DType::bf16, 8, 8 >> (splits % 4), d,
                                     {1, 70, 3, 2}, {700, 90, 5, 0}, splits % 2 == 0, splits == 7);
        const SplitResult r = run_split_gpu(c, tiling, splits, f);
        INFO("tiling " << tiling << " splits " << splits << " fold " << int(f) << " " << r.err);
        REQUIRE(r.rc == AC_OK);
        CHECK(compare_with_exact(c, r.out, &r.lse, {}) == "");
      }
}

TEST_CASE("split-KV gpu: num_splits = 1 is bitwise reproducible run to run", "[splitkv][gpu]") {
  const AttnCase c = make_case(5100, DType::f16, 8, 2, 128, {1, 1, 200}, {4000, 17, 300}, true, false);
  for (int tiling = 0; tiling < kern::kNumSplitKVTilings; ++tiling) {
    const SplitResult a = run_split_gpu(c, tiling, 1, AC_FOLD_LEFT),
                      b = run_split_gpu(c, tiling, 1, AC_FOLD_LEFT);
    REQUIRE(a.rc == AC_OK);
    CHECK(a.out == b.out);
    CHECK(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) == 0);
  }
}

TEST_CASE("split-KV gpu: decode (T_q = 1), 16 and 64 splits, long key ranges", "[splitkv][gpu]") {
  const AttnCase c =
      make_case(5200, DType::bf16, 32, 8, 128, {1, 1, 1, 1}, {8192, 3000, 16, 1}, false, false);
  for (int splits : {16, 64})
    for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE}) {
      const SplitResult r = run_split_gpu(c, 1, splits, f);
      INFO("splits " << splits << " fold " << int(f) << " " << r.err);
      REQUIRE(r.rc == AC_OK);
      CHECK(compare_with_exact(c, r.out, &r.lse, {}) == "");
    }
}

TEST_CASE("split-KV gpu: a fixed split size, a sequence alone and beside longer ones", "[splitkv][gpu]") {
  // The victim (300 keys; 3 causal queries in the second case) alone and first in a batch with rows
  // of 8192, 2000 and 77 keys. At 64 keys per split the victim's parts are [0,64) ... [256,300) in
  // both launches (5 parts alone; 5 of the batch's 64, the rest empty for it: 8192 keys need parts
  // of 128), so its bits agree. At equal parts (5 alone, 64 in the batch) its ranges differ, and so
  // do its bits. Every launch within the fp64 bound.
  uint64_t seed = 9900;
  for (bool causal : {false, true}) {
    const AttnCase batch = make_case(seed++, DType::bf16, 32, 8, 128, {causal ? 3 : 1, 1, 1, 2},
                                     {300, 8192, 2000, 77}, causal, false);
    const AttnCase alone = first_alone(batch);
    auto run = [](const AttnCase& c, int keys) {
      DeviceCase dc(c);
      ac_attention_args a = dc.args(c, 0);
      a.fold_order = AC_FOLD_LEFT;
      a.num_splits = keys > 0 ? kern::fixed_split_count(a, keys) : c.seqlens_k.size() > 1 ? 64 : 5;
      kern::SplitKVOptions o;
      o.keys_per_split = keys;
      char err[256] = {0};
      const int rc = kern::splitkv_attention_cuda(a, o, err, sizeof err);
      INFO("keys per split " << keys << ": " << err);
      REQUIRE(rc == AC_OK);
      const std::vector<uint16_t> out = dc.out.to_host();
      const std::vector<float> lse = dc.lse.to_host();
      CHECK(compare_with_exact(c, out, &lse, {}) == "");
      return first_rows(c, out, lse);
    };
    INFO("causal " << causal);
    CHECK(kern::fixed_split_count(host_args(batch, nullptr, nullptr, 0), kern::kFixedSplitKeys) == 64);
    CHECK(run(batch, kern::kFixedSplitKeys) == run(alone, kern::kFixedSplitKeys));
    CHECK_FALSE(run(batch, 0) == run(alone, 0));
  }
}
