// Host-twin tests of fused-hopper (kernels/hopper/hopper_host.cpp) and splitkv-packed
// (kernels/hopper/packed_host.cpp), run on CI without a GPU: every Hopper tiling, fp16 and bf16,
// head sizes 64 and 128, causal with Tq < Tk, varlen with zero-length key ranges, GQA, masks; the
// split count splitkv-packed picks for num_splits = 0.
// Expected values: the fp64 attention of attention_case.h with its derived error bound.
// Run: ctest --test-dir build -R kernels_hopper_twin
#include <catch2/catch.hpp>

#include "attention_case.h"
#include "attncheck/attention_args.hpp"
#include "fused/fused.h"
#include "hopper/hopper.h"
#include "splitkv/splitkv.h"

using namespace attncheck;
using namespace attncheck::test;

TEST_CASE("hopper twin: every tiling, dtype, head size, causal or not against fp64", "[hopper][twin]") {
  uint64_t seed = 500;
  for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling)
    for (DType dt : {DType::f16, DType::bf16})
      for (int d : {64, 128})
        for (bool causal : {false, true}) {
          const AttnCase c = make_case(seed++, dt, 4, 2, d, {150, 0, 9}, {290, 5, 0}, causal, tiling == 1);
          std::vector<uint16_t> out(size_t(c.total_q() * c.heads * d), 0xbeef);
          std::vector<float> lse(size_t(c.total_q() * c.heads), 12345.0f);
          ac_attention_args a = host_args(c, out.data(), lse.data(), tiling);
          char err[256] = {0};
          INFO("tiling " << tiling << " d " << d << " causal " << causal);
          REQUIRE(kern::hopper_attention_host(a, {}, err, sizeof err) == AC_OK);
          CHECK(compare_with_exact(c, out, &lse, kHopperConv) == "");
        }
}

// fused-hopper's exp2 flushes a weight below 2^-126 (hopper_kernel.cuh), and so does its twin: the
// case's one such weight carries O = 0.070 (attention_case.h), which the flushed twin drops. The
// bound with the flush term passes that; without it, the drop is outside the bound.
TEST_CASE("hopper twin: a weight below 2^-126 is flushed, within the flushed bound only", "[hopper][twin]") {
  const AttnCase c = flushed_weight_case();
  std::vector<uint16_t> out(64, 0xbeef);
  std::vector<float> lse(1, 12345.0f);
  ac_attention_args a = host_args(c, out.data(), lse.data(), 0);
  char err[256] = {0};
  REQUIRE(kern::hopper_attention_host(a, {}, err, sizeof err) == AC_OK);
  CHECK(kern::load_as_float(c.dtype, out[0]) == 0.0f);
  CHECK(compare_with_exact(c, out, &lse, kHopperConv) == "");
  CHECK(compare_with_exact(c, out, &lse, {}) != "");
  // fused's twin keeps the weight: 0.070 within the ordinary bound.
  REQUIRE(kern::fused_attention_host(a, {}, err, sizeof err) == AC_OK);
  CHECK(kern::load_as_float(c.dtype, out[0]) > 0.06f);
  CHECK(compare_with_exact(c, out, &lse, {}) == "");
}

TEST_CASE("hopper twin: refuses a tiling index past the Hopper list", "[hopper][twin]") {
  const AttnCase c = make_case(600, DType::f16, 2, 1, 64, {8}, {8}, false, false);
  std::vector<uint16_t> out(size_t(c.total_q() * c.heads * 64));
  std::vector<float> lse(size_t(c.total_q() * c.heads));
  ac_attention_args a = host_args(c, out.data(), lse.data(), kern::kNumHopperTilings);
  char err[256] = {0};
  CHECK(kern::hopper_attention_host(a, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
}

TEST_CASE("packed: the machine-sized split count", "[packed][twin]") {
  // Decode, 32 query / 8 KV heads, on 132 SMs: batch 1 fills one wave of two CTAs per SM with 33
  // splits (8 x 33 = 264 = 2 x 132), batch 16 with 2 (256 CTAs); batch 20 (160 CTAs a split, more
  // than half a wave) and batch 64 take four CTAs per SM: ceil(528 / 160) = 4, ceil(528 / 512) = 2;
  // short sequences get one split per 128 keys.
  auto splits = [](int batch, int tk, int sms) {
    std::vector<int32_t> cq(size_t(batch) + 1), ck(size_t(batch) + 1);
    for (int i = 0; i <= batch; ++i) {
      cq[size_t(i)] = i;
      ck[size_t(i)] = i * tk;
    }
    // What the split count reads: the heads and the host offsets.
    return kern::packed_machine_splits(
        AttentionArgs(AC_DTYPE_F32, 32, 8, 0).sequences(batch, nullptr, nullptr, cq.data(), ck.data()), sms);
  };
  CHECK(splits(1, 131072, 132) == 33);
  CHECK(splits(1, 8192, 132) == 33);
  CHECK(splits(16, 131072, 132) == 2);
  CHECK(splits(20, 131072, 132) == 4);
  CHECK(splits(1, 2048, 132) == 16);
  CHECK(splits(1, 100, 132) == 1);
  CHECK(splits(64, 131072, 132) == 2);
  CHECK(splits(64, 8192, 132) == 2);
  CHECK(splits(1, 131072, 8) == 2);
  CHECK(splits(1, 131072, 1000) == kern::kPackedMaxSplits);
  CHECK(kern::kPackedMaxSplits == kern::kSplitKVMaxSplits);
}
