// Host-twin tests of fused-hopper (kernels/hopper/hopper_host.cpp) and splitkv-packed
// (kernels/hopper/packed_host.cpp), run on CI without a GPU: every Hopper tiling, fp16 and bf16,
// head sizes 64 and 128, causal with Tq < Tk, varlen with zero-length key ranges, GQA, masks; the
// split count splitkv-packed picks for num_splits = 0; splitkv-packed reading an FP8 KV cache.
// Expected values: the fp64 attention of attention_case.h with its derived error bound.
// Run: ctest --test-dir build -R kernels_hopper_twin
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>

#include "attention_case.h"
#include "attncheck/attention_args.hpp"
#include "fp8_case.h"
#include "fused/fused.h"
#include "hopper/hopper.h"
#include "splitkv/splitkv.h"
#include "splitkv/splitkv_math.h"

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
  // short sequences get one split per 64-key tile: 2048 keys 32 splits, 200 keys 3, 100 keys 1.
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
  CHECK(splits(1, 2048, 132) == 32);
  CHECK(splits(1, 200, 132) == 3);
  CHECK(splits(1, 100, 132) == 1);
  CHECK(splits(64, 131072, 132) == 2);
  CHECK(splits(64, 8192, 132) == 2);
  CHECK(splits(1, 131072, 8) == 2);
  CHECK(splits(1, 131072, 1000) == kern::kPackedMaxSplits);
  CHECK(kern::kPackedMaxSplits == kern::kSplitKVMaxSplits);
}

TEST_CASE("split-KV fold: an empty part is an exact identity on either side, -0 kept", "[packed][twin]") {
  namespace sk = kern::splitkv;
  const float inf = std::numeric_limits<float>::infinity();
  for (float o : {-0.0f, 0.0f, 0.3f, -7.5f}) {
    float o_a = o, lse_a = 1.25f;
    sk::merge_partial(o_a, lse_a, 0.0f, -inf);
    CHECK(std::memcmp(&o_a, &o, 4) == 0);
    CHECK(lse_a == 1.25f);
    float o_b = 0.0f, lse_b = -inf;
    sk::merge_partial(o_b, lse_b, o, 1.25f);
    CHECK(std::memcmp(&o_b, &o, 4) == 0);
    CHECK(lse_b == 1.25f);
  }
  float o = 5.0f, lse = -inf;  // both empty: O = 0, LSE = -inf
  sk::merge_partial(o, lse, 3.0f, -inf);
  CHECK(o == 0.0f);
  CHECK(lse == -inf);
}

TEST_CASE("split-KV: fixed split size ranges, part counts and their checks", "[packed][twin]") {
  namespace sk = kern::splitkv;
  // 200 keys at 64 per split: [0, 64) [64, 128) [128, 192) [192, 200), then empty parts.
  const int want[][2] = {{0, 64}, {64, 128}, {128, 192}, {192, 200}, {200, 200}, {200, 200}};
  for (int i = 0; i < 6; ++i) {
    int lo = -1, hi = -1;
    sk::split_range(200, 6, 64, i, lo, hi);
    CHECK(lo == want[i][0]);
    CHECK(hi == want[i][1]);
  }
  CHECK(sk::fixed_parts(200, 64) == 4);
  CHECK(sk::fixed_parts(0, 64) == 1);
  // 10000 keys would need 157 parts of 64: the size rises to ceil(10000 / 64) = 157 keys, rounded
  // up to the tile, 192, and 10000 / 192 needs 53 parts.
  CHECK(sk::split_keys(10000, 64) == 192);
  CHECK(sk::fixed_parts(10000, 64) == 53);
  CHECK(sk::split_keys(10000, 4096) == 4096);
  CHECK(sk::fixed_parts(131072, 256) == 64);
  // Equal parts where no size is given: 200 keys in 3 parts of 67, 67, 66.
  int lo = -1, hi = -1;
  sk::split_range(200, 3, 0, 2, lo, hi);
  CHECK(lo == 134);
  CHECK(hi == 200);

  const AttnCase c = make_case(640, DType::f16, 2, 1, 64, {1, 1}, {200, 1000}, false, false);
  ac_attention_args a = host_args(c, nullptr, nullptr, 1);
  CHECK(kern::fixed_split_count(a, 64) == 16);  // the 1000-key row: 16 parts of 64
  char err[256] = {0};
  a.num_splits = 15;
  CHECK(kern::splitkv_check_fixed(a, 64, err, sizeof err) == AC_ERR_UNSUPPORTED);
  CHECK(std::string(err).find("need 16 parts") != std::string::npos);
  a.num_splits = 16;
  CHECK(kern::splitkv_check_fixed(a, 64, err, sizeof err) == AC_OK);
  CHECK(kern::splitkv_check_fixed(a, 100, err, sizeof err) == AC_ERR_UNSUPPORTED);
}

namespace {

// The twin at `splits` parts (0: the engine mode's own choice) and keys_per_split; sequence 0's rows.
FirstRows twin_first_rows(const AttnCase& c, int splits, int keys_per_split, ac_fold fold) {
  std::vector<uint16_t> out(size_t(c.total_q() * c.heads * c.head_size));
  std::vector<float> lse(size_t(c.total_q() * c.heads));
  ac_attention_args a = host_args(c, out.data(), lse.data(), 1);
  a.fold_order = fold;
  char err[256] = {0};
  if (splits == 0) {
    REQUIRE(kern::packed_engine_attention(a, keys_per_split, false, err, sizeof err) == AC_OK);
  } else {
    a.num_splits = splits;
    kern::SplitKVOptions o;
    o.keys_per_split = keys_per_split;
    REQUIRE(kern::splitkv_attention_host(a, o, err, sizeof err) == AC_OK);
  }
  return first_rows(c, out, lse);
}

}  // namespace

TEST_CASE("splitkv-packed engine modes: a sequence alone and beside a longer one", "[packed][twin]") {
  // A victim of 3 queries and 300 keys (5 parts of 64), alone and first in a batch whose second
  // sequence has 2000 keys (32 parts of 64 at the fixed size; under the adaptive rule the batch's
  // longest row allows 31 splits and the victim alone 4).
  const AttnCase batch = make_case(650, DType::bf16, 4, 2, 128, {3, 1}, {300, 2000}, true, false);
  const AttnCase alone = first_alone(batch);
  for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE}) {
    INFO("fold " << int(f));
    // Fixed split size: the victim's 5 parts are the same, the batch's 27 more are empty.
    CHECK(twin_first_rows(batch, 32, 64, f) == twin_first_rows(alone, 5, 64, f));
    // Equal parts at the batch's count and at the victim's own: the parts move, and with them bits.
    CHECK_FALSE(twin_first_rows(batch, 32, 0, f) == twin_first_rows(alone, 5, 0, f));
  }
  // The subjects' own choices (fold left): fixed agrees bit for bit, adaptive does not.
  CHECK(twin_first_rows(batch, 0, kern::kFixedSplitKeys, AC_FOLD_LEFT) ==
        twin_first_rows(alone, 0, kern::kFixedSplitKeys, AC_FOLD_LEFT));
  CHECK_FALSE(twin_first_rows(batch, 0, 0, AC_FOLD_LEFT) == twin_first_rows(alone, 0, 0, AC_FOLD_LEFT));
  // Both within the fp64 bound.
  std::vector<uint16_t> out(size_t(batch.total_q() * batch.heads * 128));
  std::vector<float> lse(size_t(batch.total_q() * batch.heads));
  ac_attention_args a = host_args(batch, out.data(), lse.data(), 1);
  char err[256] = {0};
  for (int keys : {0, kern::kFixedSplitKeys}) {
    REQUIRE(kern::packed_engine_attention(a, keys, false, err, sizeof err) == AC_OK);
    CHECK(compare_with_exact(batch, out, &lse, {}) == "");
  }
}

TEST_CASE("splitkv-packed twin: an FP8 KV cache against fp64, per tensor, per KV head, per sequence",
          "[packed][twin]") {
  // Descales that are powers of two (fp8_case.h dequantised): the codes times their descales are
  // values of the input type, and the fp64 attention of those values is what the twin must compute.
  // Per KV head (per (sequence, KV head)), the descales differ by head (and sequence), so a descale
  // read at another index fails.
  uint64_t seed = 620;
  for (ac_dtype f : {AC_DTYPE_E4M3, AC_DTYPE_E5M2})
    for (DType dt : {DType::f16, DType::bf16})
      for (int granularity : {0, 1, 2}) {
        const AttnCase c = make_case(seed++, dt, 8, 2, 64, {1, 2, 1}, {500, 70, 0}, true, false);
        const Fp8Cache fc = granularity == 2
                                ? fp8_cache(c, f, {0x1p-6f, 0x1p-3f, 0x1p-4f, 0x1p-7f, 0x1p-5f, 0x1p-5f},
                                            {0x1p2f, 0x1p-1f, 0x1p0f, 0x1p3f, 0x1p1f, 0x1p1f})
                            : granularity == 1 ? fp8_cache(c, f, {0x1p-6f, 0x1p-3f}, {0x1p2f, 0x1p-1f})
                                               : fp8_cache(c, f, {0x1p-5f}, {0x1p1f});
        REQUIRE(fc.granularity == granularity);
        std::vector<uint16_t> out(size_t(c.total_q() * c.heads * c.head_size), 0xbeef);
        std::vector<float> lse(size_t(c.total_q() * c.heads), 12345.0f);
        ac_attention_args a = host_args(c, out.data(), lse.data(), 1);
        point_at_fp8(a, fc, fc.k.data(), fc.v.data(), fc.kd.data(), fc.vd.data());
        a.num_splits = 3;
        char err[256] = {0};
        INFO(c.describe() << " kv " << int(f) << " granularity " << granularity << " " << err);
        REQUIRE(kern::packed_attention_host(a, err, sizeof err) == AC_OK);
        CHECK(compare_with_exact(dequantised(c, fc), out, &lse, {}) == "");
      }
}

TEST_CASE("splitkv-packed: an FP8 cache without its descales, or of a granularity it lacks, is refused",
          "[packed][twin]") {
  const AttnCase c = make_case(640, DType::f16, 4, 2, 64, {1}, {40}, false, false);
  const Fp8Cache fc = fp8_cache(c, AC_DTYPE_E4M3, {0.5f}, {0.25f});
  std::vector<uint16_t> out(size_t(c.total_q() * c.heads * c.head_size));
  std::vector<float> lse(size_t(c.total_q() * c.heads));
  ac_attention_args a = host_args(c, out.data(), lse.data(), 1);
  point_at_fp8(a, fc, fc.k.data(), fc.v.data(), fc.kd.data(), nullptr);
  a.num_splits = 2;
  char err[256] = {0};
  CHECK(kern::packed_check_args(a, err, sizeof err) == AC_ERR_UNSUPPORTED);
  CHECK(std::string(err) == "fused attention: an FP8 KV cache without k_descale / v_descale");
  a.v_descale = fc.vd.data();
  a.descale_granularity = 3;
  CHECK(kern::packed_check_args(a, err, sizeof err) == AC_ERR_UNSUPPORTED);
  CHECK(std::string(err) ==
        "fused attention: descale_granularity 3 (0 per tensor, 1 per KV head, 2 per (sequence, KV head))");
  a.descale_granularity = 0;
  CHECK(kern::packed_check_args(a, err, sizeof err) == AC_OK);
}

TEST_CASE("fused-hopper-fp8 twin: one hand-derived row, V's descale on the output", "[hopper][twin][fp8]") {
  // One query, two keys, d = 128, all codes e4m3fn, softmax scale 1. Q one-hot on coordinate 0 with
  // code 0x38 (1.0), q_descale 2; K: key 0 all 0x00, key 1's coordinate 0 0xB8 (-1.0), k_descale
  // 2.5; V: key 0 all 0x00, key 1 all 0x38 (1.0), v_descale 2. Scores 0 and 1 * 2 * -1 * 2.5 = -5:
  // weights 1 and p = e^-5 = 6.7379e-3, l = 1 + p (unrounded), LSE = ln(1 + e^-5). 256 p = 1.72492
  // is held as the nearest e4m3fn value, 1.75 (values in [1, 2) are 0.125 apart), so P V reads
  // 1.75 / 256 = 6.8359e-3; O = 6.8359e-3 / 1.0067379 = 6.7902e-3, then times v_descale 2 =
  // 1.35804e-2 (fp16 spacing there 2^-17, relative 5.6e-4).
  const int d = 128;
  std::vector<uint8_t> q(d, 0), k(2 * d, 0), v(2 * d, 0);
  q[0] = 0x38;
  k[d] = 0xB8;
  for (int c = 0; c < d; ++c) v[d + c] = 0x38;
  const float q_descale = 2.0f, k_descale = 2.5f, v_descale = 2.0f;
  int32_t cu_q[2] = {0, 1}, cu_k[2] = {0, 2};
  std::vector<uint16_t> out(d, 0x7e00);
  std::vector<float> lse(1, 12345.0f);
  ac_attention_args a = AttentionArgs(AC_DTYPE_F16, 1, 1, d)
                            .sequences(1, cu_q, cu_k)
                            .tensors(q.data(), k.data(), v.data(), out.data(), lse.data())
                            .scale(1.0f)
                            .fp8_kv(AC_DTYPE_E4M3, &k_descale, &v_descale, 0)
                            .fp8_q(&q_descale);
  char err[256] = {};
  REQUIRE(kern::hopper_fp8_attention_host(a, {}, err, sizeof err) == AC_OK);
  for (int c = 0; c < d; ++c) CHECK(kern::f16_to_float(out[size_t(c)]) == Approx(1.35804e-2).epsilon(6e-4));
  CHECK(lse[0] == Approx(std::log1p(std::exp(-5.0))).epsilon(1e-5));
  // V's descale is applied once: the same row with v_descale 1 is half of it, bit for bit (a
  // product by 2 is exact).
  const float one = 1.0f;
  std::vector<uint16_t> half(d);
  ac_attention_args b = a;
  b.v_descale = &one;
  b.out = half.data();
  REQUIRE(kern::hopper_fp8_attention_host(b, {}, err, sizeof err) == AC_OK);
  CHECK(kern::f16_to_float(half[0]) * 2 == kern::f16_to_float(out[0]));
}

TEST_CASE("fused-hopper-fp8: the calls its kernel does not compute are refused by name",
          "[hopper][twin][fp8]") {
  const int d = 128;
  std::vector<uint8_t> q(d, 0x38), k(2 * d, 0x38), v(2 * d, 0x38);
  std::vector<uint16_t> q16(d, 0x3c00), out(d);
  const float ds[2] = {1.0f, 1.0f};
  int32_t cu_q[2] = {0, 1}, cu_k[2] = {0, 2};
  auto check = [&](ac_attention_args a, const char* want) {
    char err[256] = {};
    const int rc = kern::hopper_fp8_check_args(a, {}, err, sizeof err);
    INFO(err);
    if (!want) {
      CHECK(rc == AC_OK);
      return;
    }
    CHECK(rc == AC_ERR_UNSUPPORTED);
    CHECK(std::string(err).find(want) != std::string::npos);
  };
  const ac_attention_args a = AttentionArgs(AC_DTYPE_BF16, 1, 1, d)
                                  .sequences(1, cu_q, cu_k)
                                  .tensors(q.data(), k.data(), v.data(), out.data(), nullptr)
                                  .fp8_kv(AC_DTYPE_E4M3, ds, ds, 0)
                                  .fp8_q(ds);
  check(a, nullptr);
  ac_attention_args b = a;
  b.q = q16.data();
  b.q_descale = nullptr;  // Q in bf16 beside the FP8 cache: its tensor cores take e4m3 only
  check(b, "AC_FP8_Q_REQUIRED");
  b = a;
  b.kv_dtype = AC_DTYPE_E5M2;
  check(b, "e4m3fn only");
  b = a;
  b.head_size = 64;
  check(b, "head size 64");
  b = a;
  b.descale_granularity = 2;  // one sequence, one KV head: [1, 1] per (sequence, KV head)
  check(b, nullptr);
  b = a;
  b.tiling = 1;
  check(b, "tiling");
  // Without an FP8 cache the call is fused-hopper's (bf16 Q, K and V).
  b = AttentionArgs(AC_DTYPE_BF16, 1, 1, d)
          .sequences(1, cu_q, cu_k)
          .tensors(q16.data(), q16.data(), q16.data(), out.data(), nullptr);
  check(b, nullptr);
}
