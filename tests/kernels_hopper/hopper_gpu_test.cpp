// GPU tests of fused-hopper (kernels/hopper/hopper_kernel.cuh), label `gpu`: the sm_90a kernel
// against the fp64 attention of attention_case.h (derived error bound) and against its host twin
// (fused's twin with the Hopper tile), over every tiling, fp16 and bf16, head sizes 64 and 128,
// causal with Tq < Tk, ragged key ranges (the partial V tile the producer writes itself), key
// ranges several times the ring (the pipeline phases wrap), GQA ratios, varlen with zero-length
// ranges, masks; run-to-run bitwise reproducibility; the Llama-3-8B layer shape on sampled rows; and the
// Hopper mutants, which must differ from the exact result or from run to run. splitkv-packed:
// split counts 1..64 and fold orders against fp64, decode against the split-KV twin, the
// machine-sized split count (33 at batch 1 on an H200, the benchmark's path), and the split-KV
// combine alone folding 1..64 parts in every order as the twin's fold does.
// Skips (exit 77) without a GPU. Run: ctest --test-dir build -L gpu -R kernels_hopper
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "attncheck/attention_args.hpp"
#include "attncheck/budgets.hpp"
#include "device_case.h"
#include "fp8_case.h"
#include "hopper/hopper.h"
#include "splitkv/splitkv.h"
#include "splitkv/splitkv_math.h"
#include "tensor_core_model.h"

using namespace attncheck;
using namespace attncheck::test;

namespace {

struct GpuResult {
  int rc;
  std::string err;
  std::vector<uint16_t> out;  // an FP8 output: one byte per element, from the first
  std::vector<float> lse;
  std::vector<float> amax;  // AC_FP8_AMAX's two values where asked
};

GpuResult run_gpu(const AttnCase& c, int tiling, kern::FusedOptions opt = {},
                  kern::HopperMutation m = kern::HopperMutation::none) {
  DeviceCase dc(c);
  ac_attention_args a = dc.args(c, tiling);
  char err[256] = {0};
  GpuResult r;
#if defined(ATTNCHECK_HAVE_SM90A)
  r.rc = kern::hopper_attention_cuda(a, opt, err, sizeof err, m);
#else
  r.rc = AC_ERR_UNSUPPORTED;
  std::snprintf(err, sizeof err, "built without sm_90a");
#endif
  r.err = err;
  r.out = dc.out.to_host();
  r.lse = dc.lse.to_host();
  return r;
}

std::string check_gpu(const AttnCase& c, int tiling, kern::FusedOptions opt = {}) {
  const GpuResult r = run_gpu(c, tiling, opt);
  if (r.rc != AC_OK) return "rc " + std::to_string(r.rc) + ": " + r.err;
  return compare_with_exact(c, r.out, &r.lse, Conventions{opt.lse_base, opt.empty_lse_sign, 0, true});
}

// Elements more than `ulps` ulps of the input type apart (sign-magnitude distance).
int far_apart(const std::vector<uint16_t>& x, const std::vector<uint16_t>& y, int ulps) {
  int far = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const int diff = std::abs(int(x[i] & 0x7fff) - int(y[i] & 0x7fff));
    if ((x[i] ^ y[i]) & 0x8000 ? (x[i] & 0x7fff) + (y[i] & 0x7fff) > ulps : diff > ulps) ++far;
  }
  return far;
}

// Elements of y that differ from x by more than `ulps` ulps of the input type at the exponent of
// x's largest magnitude.
int beyond_scale(DType t, const std::vector<uint16_t>& x, const std::vector<uint16_t>& y, int ulps) {
  double largest = 0;
  for (uint16_t b : x) largest = std::max(largest, std::fabs(test::in_value(t, b)));
  const int mantissa = t == DType::bf16 ? 7 : 10;
  const double tol = ulps * std::ldexp(1.0, std::ilogb(largest > 0 ? largest : 1.0) - mantissa);
  int far = 0;
  for (size_t i = 0; i < x.size(); ++i)
    far += std::fabs(test::in_value(t, x[i]) - test::in_value(t, y[i])) > tol;
  return far;
}

}  // namespace

TEST_CASE("hopper gpu: every tiling, dtype, head size, causal or not, against fp64", "[hopper][gpu]") {
  if (!kern::hopper_built()) return;
  uint64_t seed = 7000;
  for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling)
    for (DType dt : {DType::f16, DType::bf16})
      for (int d : {64, 128})
        for (bool causal : {false, true}) {
          // 700 keys: several passes round the ring, a ragged last tile; 1 query, 64 queries.
          const AttnCase c =
              make_case(seed++, dt, 4, 2, d, {150, 1, 64, 300}, {200, 77, 700, 300}, causal, false);
          INFO("tiling " << tiling << " d " << d << " causal " << causal);
          CHECK(check_gpu(c, tiling) == "");
        }
}

TEST_CASE("hopper gpu: GQA ratios, varlen with zero-length key ranges, masks, conventions", "[hopper][gpu]") {
  if (!kern::hopper_built()) return;
  uint64_t seed = 8000;
  for (int ratio : {1, 2, 4, 8})
    for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling) {
      const AttnCase c = make_case(seed++, ratio % 2 ? DType::f16 : DType::bf16, 8, 8 / ratio, 128,
                                   {5, 33, 0, 17, 3, 40}, {40, 33, 7, 0, 130, 300}, true, ratio >= 4);
      INFO("ratio " << ratio << " tiling " << tiling);
      CHECK(check_gpu(c, tiling) == "");
    }
  const AttnCase m = make_case(seed++, DType::f16, 4, 4, 64, {70, 9}, {90, 0}, false, true, 1.0f, 0.3f);
  CHECK(check_gpu(m, 0) == "");
  kern::FusedOptions fa2;
  fa2.empty_lse_sign = 1;
  CHECK(check_gpu(m, 1, fa2) == "");
  kern::FusedOptions log2;
  log2.lse_base = 2;
  CHECK(check_gpu(m, 2, log2) == "");
  const AttnCase big = make_case(seed++, DType::f16, 2, 1, 64, {100}, {300}, true, true, 8.0f);
  for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling) CHECK(check_gpu(big, tiling) == "");
}

// The kernel's exp2 flushes a weight below 2^-126 (attention_case.h's flushed_weight_case: exact O
// 0.070 from that weight alone), on every tiling: O is 0, within the bound with the flush term only.
TEST_CASE("hopper gpu: a weight below 2^-126 is flushed, within the flushed bound only", "[hopper][gpu]") {
  if (!kern::hopper_built()) return;
  const AttnCase c = flushed_weight_case();
  for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling) {
    const GpuResult r = run_gpu(c, tiling);
    REQUIRE(r.rc == AC_OK);
    INFO("tiling " << tiling);
    CHECK(kern::load_as_float(c.dtype, r.out[0]) == 0.0f);
    CHECK(compare_with_exact(c, r.out, &r.lse, kHopperConv) == "");
    CHECK(compare_with_exact(c, r.out, &r.lse, {}) != "");
  }
}

TEST_CASE("hopper gpu: CUDA and host twin compute the same function", "[hopper][gpu]") {
  if (!kern::hopper_built()) return;
  for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling) {
    const AttnCase c = make_case(9100 + uint64_t(tiling), DType::bf16, 4, 1, 128, {65, 130, 200},
                                 {129, 64, 517}, true, tiling == 2);
    const GpuResult g = run_gpu(c, tiling);
    REQUIRE(g.rc == AC_OK);
    std::vector<uint16_t> out(g.out.size());
    std::vector<float> lse(g.lse.size());
    ac_attention_args a = host_args(c, out.data(), lse.data(), tiling);
    char err[256];
    REQUIRE(kern::hopper_attention_host(a, {}, err, sizeof err) == AC_OK);
    INFO("tiling " << tiling);
    CHECK(compare_with_exact(c, out, &lse, kHopperConv) == "");
    CHECK(compare_with_exact(c, g.out, &g.lse, kHopperConv) == "");
    // Same function, other summation order: the wgmma sums S in another order than the twin, and
    // a logit that moves by an fp32 ulp can move P across a rounding boundary of the input type; over
    // 517 keys with cancelling V that shows as a few elements a few ulps apart (seen: 9 to 31 of
    // 202k beyond 2 ulps). A wrong tile walk or rounding point moves far more, and farther.
    CHECK(far_apart(out, g.out, 2) <= int(out.size() / 2000));
    int worst = 2;
    while (far_apart(out, g.out, worst) > 0 && worst < 4096) worst *= 2;
    WARN("tiling " << tiling << ": " << far_apart(out, g.out, 2) << " of " << out.size()
                   << " elements beyond 2 ulps, all within " << worst);
  }
}

TEST_CASE("hopper gpu: bitwise reproducible run to run", "[hopper][gpu]") {
  if (!kern::hopper_built()) return;
  const AttnCase c = make_case(9200, DType::f16, 8, 2, 128, {300, 17}, {1513, 100}, true, false);
  for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling) {
    const GpuResult a = run_gpu(c, tiling), b = run_gpu(c, tiling);
    REQUIRE(a.rc == AC_OK);
    CHECK(a.out == b.out);
    CHECK(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) == 0);
  }
}

TEST_CASE("hopper gpu: the Llama-3-8B layer shape on sampled rows", "[hopper][gpu][seed]") {
  if (!kern::hopper_built()) return;
  const AttnCase c = make_case(9300, DType::f16, 32, 8, 128, {8192}, {8192}, false, false);
  const std::vector<std::pair<int64_t, int>> rows = seed_shape_rows();
  for (bool causal : {false, true}) {
    AttnCase cc = c;
    cc.causal = causal;
    for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling) {
      const GpuResult r = run_gpu(cc, tiling);
      REQUIRE(r.rc == AC_OK);
      INFO("causal " << causal << " tiling " << tiling);
      CHECK(compare_with_exact(cc, r.out, &r.lse, kHopperConv, &rows) == "");
    }
  }
}

TEST_CASE("hopper gpu: refuses misaligned pointers and fp32 before launch", "[hopper][gpu]") {
  if (!kern::hopper_built()) return;
  const AttnCase c = make_case(9400, DType::f16, 2, 1, 64, {8}, {8}, false, false);
  DeviceCase dc(c);
  ac_attention_args a = dc.args(c, 0);
  char err[256];
  ac_attention_args b = a;
  b.k = static_cast<const char*>(a.k) + 2;
#if defined(ATTNCHECK_HAVE_SM90A)
  CHECK(kern::hopper_attention_cuda(b, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  CHECK(std::strstr(err, "aligned") != nullptr);
  b = a;
  b.dtype = AC_DTYPE_F32;
  CHECK(kern::hopper_attention_cuda(b, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  CHECK(std::strstr(err, "fp32") != nullptr);
#endif
}

// splitkv-packed: the split-KV contract against fp64 and against the split-KV twin (its twin).
namespace {

struct PackedResult {
  int rc;
  std::string err;
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

// fc: K and V from an FP8 cache instead (fp8_case.h).
PackedResult run_packed(const AttnCase& c, int tiling, int splits, ac_fold fold,
                        const Fp8Cache* fc = nullptr) {
  DeviceCase dc(c);
  const Fp8Cache none{};
  DeviceArray<uint8_t> k((fc ? fc : &none)->k), v((fc ? fc : &none)->v);
  DeviceArray<float> kd((fc ? fc : &none)->kd), vd((fc ? fc : &none)->vd);
  ac_attention_args a = dc.args(c, tiling);
  if (fc) point_at_fp8(a, *fc, k.ptr, v.ptr, kd.ptr, vd.ptr);
  a.num_splits = splits;
  a.fold_order = fold;
  char err[256] = {0};
  PackedResult r;
  r.rc = kern::packed_attention_cuda(a, err, sizeof err);
  r.err = err;
  r.out = dc.out.to_host();
  r.lse = dc.lse.to_host();
  return r;
}

}  // namespace

TEST_CASE("packed gpu: split counts, fold orders, GQA ratios, causal, masks against fp64", "[packed][gpu]") {
  uint64_t seed = 9600;
  for (int tiling = 0; tiling < kern::kNumSplitKVTilings; ++tiling)
    for (int splits : {1, 2, 3, 7, 16, 33, 64})
      for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_TREE}) {
        const int d = splits % 2 ? 128 : 64;
        // GQA groups 1, 2, 4, 8 (packing 1..8 heads; 16-row chunks split a token tile's rows).
        const AttnCase c = make_case(seed++, splits % 3 ? DType::f16 : DType::bf16, 8, 8 >> (splits % 4), d,
                                     {1, 70, 3, 2, 1}, {700, 90, 5, 0, 1000}, splits % 2 == 0, splits == 7);
        const PackedResult r = run_packed(c, tiling, splits, f);
        INFO("tiling " << tiling << " splits " << splits << " fold " << int(f) << " " << r.err);
        REQUIRE(r.rc == AC_OK);
        CHECK(compare_with_exact(c, r.out, &r.lse, {}) == "");
      }
}

namespace {

// The packed result against fp64 and against the split-KV twin at the same split count.
void check_packed_decode(const AttnCase& c, int splits, ac_fold fold, int twin_splits) {
  const PackedResult r = run_packed(c, 1, splits, fold);
  INFO("splits " << splits << " (twin " << twin_splits << ") fold " << int(fold) << " " << r.err);
  REQUIRE(r.rc == AC_OK);
  CHECK(compare_with_exact(c, r.out, &r.lse, {}) == "");
  std::vector<uint16_t> out(r.out.size());
  std::vector<float> lse(r.lse.size());
  ac_attention_args a = host_args(c, out.data(), lse.data(), 1);
  a.num_splits = twin_splits;
  a.fold_order = fold;
  char err[256];
  REQUIRE(kern::packed_attention_host(a, err, sizeof err) == AC_OK);
  // The twin sums each tile's products in another fp32 order. On a long row an output averages
  // thousands of values of both signs and lands near zero, where 2 ulps of its own are far below
  // the sums' rounding (on the H200, 16-18 of 4096 elements of the 16411-key fp16 row were beyond
  // 2 ulps of their own while the fp64 comparison passed). So the differences are held to 2 ulps
  // at the scale of the largest output; the count beyond 2 ulps of their own is printed.
  CHECK(beyond_scale(c.dtype, out, r.out, 2) == 0);
  WARN("splits " << twin_splits << " fold " << int(fold) << ": " << far_apart(out, r.out, 2) << " of "
                 << out.size() << " elements beyond 2 ulps of the twin");
}

int device_sms() {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return sms;
}

}  // namespace

TEST_CASE("packed gpu: decode against fp64 and the split-KV twin; machine-sized splits", "[packed][gpu]") {
  const AttnCase c =
      make_case(9700, DType::bf16, 32, 8, 128, {1, 1, 1, 1}, {8192, 3000, 16, 1}, false, false);
  for (int splits : {16, 64}) check_packed_decode(c, splits, AC_FOLD_LEFT, splits);
  ac_attention_args args = host_args(c, nullptr, nullptr, 1);
  check_packed_decode(c, 0, AC_FOLD_LEFT, kern::packed_machine_splits(args, device_sms()));
  const PackedResult a = run_packed(c, 1, 5, AC_FOLD_TREE), b = run_packed(c, 1, 5, AC_FOLD_TREE);
  REQUIRE(a.rc == AC_OK);
  CHECK(a.out == b.out);  // no atomics: bitwise reproducible
}

TEST_CASE("packed gpu: batch 1 decode, machine-sized (33 splits on 132 SMs), every fold order",
          "[packed][gpu]") {
  // The benchmark's shape at batch 1 (32 / 8 heads, d 128, fp16), 16411 keys: on 132 SMs 33 parts
  // of 497 or 498 keys, so every part ends in a ragged tile; num_splits = 0 takes the bench's path.
  const AttnCase c = make_case(9710, DType::f16, 32, 8, 128, {1}, {16411}, false, false);
  ac_attention_args args = host_args(c, nullptr, nullptr, 1);
  const int machine = kern::packed_machine_splits(args, device_sms());
  INFO("machine-sized splits " << machine);
  if (device_sms() == 132) CHECK(machine == 33);
  for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE}) check_packed_decode(c, 0, f, machine);
  // 64 splits run to run, through the combine's largest fold.
  const PackedResult a = run_packed(c, 1, 64, AC_FOLD_TREE), b = run_packed(c, 1, 64, AC_FOLD_TREE);
  REQUIRE(a.rc == AC_OK);
  CHECK(a.out == b.out);
  CHECK(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) == 0);
  // Past the combine's limit: refused before any launch.
  const PackedResult over = run_packed(c, 1, kern::kPackedMaxSplits + 1, AC_FOLD_LEFT);
  CHECK(over.rc == AC_ERR_UNSUPPORTED);
}

TEST_CASE("packed gpu: an FP8 KV cache against fp64 and against the split-KV twin", "[packed][gpu][fp8]") {
  uint64_t seed = 9800;
  for (ac_dtype f : {AC_DTYPE_E4M3, AC_DTYPE_E5M2})
    for (DType dt : {DType::f16, DType::bf16})
      for (int d : {64, 128}) {
        // Against fp64: descales that are powers of two (per tensor at d = 64, per KV head at 128),
        // so that the codes times their descales are values of the input type; the fp64 case holds
        // those values, and the kernel, which folds K's descale into the scale and multiplies O by
        // V's, computes the same function on them.
        const AttnCase c = make_case(seed++, dt, 8, 2, d, {1, 1, 3, 1}, {4000, 70, 300, 0}, false, false);
        const Fp8Cache pow2 = d == 64 ? fp8_cache(c, f, {0x1p-6f}, {0x1p2f})
                                      : fp8_cache(c, f, {0x1p-6f, 0x1p-4f}, {0x1p2f, 0x1p-1f});
        const AttnCase e = dequantised(c, pow2);
        for (int splits : {1, 7, 33}) {
          const PackedResult r = run_packed(c, 1, splits, AC_FOLD_TREE, &pow2);
          INFO(c.describe() << " kv " << int(f) << " splits " << splits << " " << r.err);
          REQUIRE(r.rc == AC_OK);
          CHECK(compare_with_exact(e, r.out, &r.lse, {}) == "");
        }
        // Descales per (sequence, KV head), powers of two that differ by sequence and head.
        const Fp8Cache per_seq =
            fp8_cache(c, f, {0x1p-6f, 0x1p-4f, 0x1p-5f, 0x1p-7f, 0x1p-6f, 0x1p-3f, 0x1p-5f, 0x1p-6f},
                      {0x1p2f, 0x1p-1f, 0x1p0f, 0x1p1f, 0x1p3f, 0x1p-2f, 0x1p1f, 0x1p0f});
        REQUIRE(per_seq.granularity == 2);
        const PackedResult rs = run_packed(c, 1, 7, AC_FOLD_TREE, &per_seq);
        INFO(c.describe() << " kv " << int(f) << " per sequence " << rs.err);
        REQUIRE(rs.rc == AC_OK);
        CHECK(compare_with_exact(dequantised(c, per_seq), rs.out, &rs.lse, {}) == "");
        // Against the twin: descales per KV head, not powers of two; the twin rounds where the
        // kernel rounds (fused_twin.h VDescale::output), its sums in another order.
        const Fp8Cache heads = fp8_cache(c, f, {0.011f, 0.0057f}, {0.03f, 0.047f});
        const PackedResult r = run_packed(c, 1, 5, AC_FOLD_LEFT, &heads);
        INFO(c.describe() << " kv " << int(f) << " per head " << r.err);
        REQUIRE(r.rc == AC_OK);
        std::vector<uint16_t> out(r.out.size());
        std::vector<float> lse(r.lse.size());
        ac_attention_args a = host_args(c, out.data(), lse.data(), 1);
        point_at_fp8(a, heads, heads.k.data(), heads.v.data(), heads.kd.data(), heads.vd.data());
        a.num_splits = 5;
        a.fold_order = AC_FOLD_LEFT;
        char err[256];
        REQUIRE(kern::packed_attention_host(a, err, sizeof err) == AC_OK);
        CHECK(beyond_scale(c.dtype, out, r.out, 2) == 0);
        // A zero-length sequence and the LSE: every row with keys has a finite LSE, the empty one -inf.
        for (int h = 0; h < c.heads; ++h) CHECK(std::isinf(r.lse[size_t(h) * 6 + 5]));
      }
}

TEST_CASE("packed gpu: the combine folds 1..64 parts in every order as the twin's fold", "[packed][gpu]") {
  // Random partials (some parts empty, one (token, head) pair empty in every part) straight into
  // splitkv_combine_cuda; expected: splitkv_math.h's fold on the host, rounded to the input type.
  // exp2 / log2 of CUDA and of the host's libm may differ by an fp32 ulp, so O may differ by one
  // ulp of the input type where the fp32 result sits near a rounding boundary; LSE by a few fp32 ulps.
  constexpr int tokens = 3, heads = 2, pairs = tokens * heads;
  uint64_t x = 777;
  auto next = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return double(x >> 11) * 0x1.0p-53;
  };
  const std::vector<int32_t> cu_q = {0, tokens};
  for (int n = 1; n <= kern::splitkv::kMaxSplits; ++n)
    for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE}) {
      const int d = n % 2 ? 128 : 64;
      const DType dt = n % 3 ? DType::f16 : DType::bf16;
      std::vector<float> po(size_t(n) * pairs * size_t(d)), pl(size_t(n) * pairs);
      for (int s = 0; s < n; ++s)
        for (int p = 0; p < pairs; ++p) {
          const bool empty = p == pairs - 1 || next() < 0.1;
          pl[size_t(s) * pairs + size_t(p)] = empty ? -INFINITY : float(next() * 40 - 20);
          for (int c = 0; c < d; ++c)
            po[(size_t(s) * pairs + size_t(p)) * size_t(d) + size_t(c)] =
                empty ? 0.0f : float(next() * 2 - 1);
        }
      DeviceArray<float> dpo(po), dpl(pl), dlse(static_cast<size_t>(pairs));
      DeviceArray<uint16_t> dout(size_t(pairs) * size_t(d));
      // What the combine reads: shape, the host offsets of the queries, the outputs, the fold.
      const ac_attention_args a = AttentionArgs(ac_dtype(int(dt)), heads, 0, d)
                                      .sequences(1, nullptr, nullptr, cu_q.data(), nullptr)
                                      .tensors(nullptr, nullptr, nullptr, dout.ptr, dlse.ptr)
                                      .splits(n, f);
      REQUIRE(kern::splitkv_combine_cuda(dpo.ptr, dpl.ptr, a, nullptr) == int(cudaSuccess));
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      const std::vector<uint16_t> out = dout.to_host();
      const std::vector<float> lse = dlse.to_host();
      std::vector<uint16_t> want(out.size());
      int lse_bad = 0;
      for (int p = 0; p < pairs; ++p) {
        float lse_final = 0.0f;
        for (int c = 0; c < d; ++c) {
          float o_final;
          kern::splitkv::fold_partials(
              n, f,
              [&](int s, float& o_s, float& l_s) {
                o_s = po[(size_t(s) * pairs + size_t(p)) * size_t(d) + size_t(c)];
                l_s = pl[size_t(s) * pairs + size_t(p)];
              },
              o_final, lse_final);
          want[size_t(p) * size_t(d) + size_t(c)] = round_to_input(dt, o_final);
        }
        // [heads, tokens], natural log.
        const float got = lse[size_t(p % heads) * tokens + size_t(p / heads)];
        const float exp = kern::splitkv::final_lse_natural(lse_final);
        if (!(got == exp || std::fabs(got - exp) <= 1e-5f * std::fabs(exp) + 1e-6f)) ++lse_bad;
      }
      INFO("parts " << n << " fold " << int(f) << " d " << d);
      CHECK(far_apart(want, out, 1) == 0);
      CHECK(lse_bad == 0);
      // The all-empty pair: O = 0 exactly, LSE = -inf.
      for (int c = 0; c < d; ++c) CHECK((out[size_t(pairs - 1) * size_t(d) + size_t(c)] & 0x7fff) == 0);
      CHECK(lse[size_t((pairs - 1) % heads) * tokens + size_t((pairs - 1) / heads)] == -INFINITY);
    }
}

// Small shapes for compute-sanitizer (memcheck, racecheck, synccheck): every tiling, both head
// sizes, causal with a ragged key range (the producer's own V stores), GQA; and splitkv-packed.
TEST_CASE("hopper gpu: small shapes for the sanitizers", "[sanitize]") {
  if (!kern::hopper_built()) return;
  uint64_t seed = 9800;
  for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling)
    for (int d : {64, 128}) {
      const AttnCase c = make_case(seed++, DType::f16, 4, 2, d, {70, 1}, {300, 0}, true, tiling == 1);
      INFO("tiling " << tiling << " d " << d);
      CHECK(check_gpu(c, tiling) == "");
    }
  const AttnCase c = make_case(seed++, DType::bf16, 8, 2, 128, {1, 3}, {700, 90}, true, false);
  const PackedResult r = run_packed(c, 1, 3, AC_FOLD_LEFT);
  REQUIRE(r.rc == AC_OK);
  CHECK(compare_with_exact(c, r.out, &r.lse, {}) == "");
  // 64 splits (the combine's limit, its shared-memory copy of the parts and the tree fold's
  // blocks) and the machine-sized count, on a decode row of 3000 keys.
  const AttnCase d = make_case(seed++, DType::f16, 8, 2, 128, {1}, {3000}, false, false);
  for (int splits : {64, 0}) {
    const PackedResult p = run_packed(d, 1, splits, AC_FOLD_TREE);
    INFO("packed splits " << splits);
    REQUIRE(p.rc == AC_OK);
    CHECK(compare_with_exact(d, p.out, &p.lse, {}) == "");
  }
}

// The Hopper mutants once each on a small shape, results unchecked: for the sanitizers to judge.
// Hidden from a plain run: the stale-phase mutant can trap, and a trap leaves the context unusable.
// AC_HOPPER_MUTANT=N runs only mutation N, so each sanitizer report belongs to one mutant.
TEST_CASE("hopper gpu: mutants under the sanitizers", "[.sanitize-mutants]") {
  if (!kern::hopper_built()) return;
  const AttnCase c = make_case(9900, DType::f16, 4, 2, 64, {128}, {1000}, false, false);
  const char* only = std::getenv("AC_HOPPER_MUTANT");
  for (auto m : {kern::HopperMutation::no_proxy_fence, kern::HopperMutation::no_full_wait,
                 kern::HopperMutation::stale_phase}) {
    if (only && std::atoi(only) != int(m)) continue;
    const GpuResult r = run_gpu(c, 0, {}, m);
    WARN("mutant " << int(m) << ": rc " << r.rc << ", exact check: "
                   << (compare_with_exact(c, r.out, &r.lse, kHopperConv).empty() ? "within bound"
                                                                                 : "outside bound"));
  }
}

// A mutant is caught when some run fails (a trapped deadlock), is outside the exact bound, or two
// runs differ bitwise. Declared last: a trap ends the process's use of the GPU.
// Many heads and long key ranges give the races room; five runs each.
// One Hopper mutant in this process, named by AC_HOPPER_MUTANT: exit 0 when caught (a launch error,
// a result outside the exact bound, or a run-to-run difference in 5 runs), 1 when not. Hidden: the
// test below runs it in a process of its own per mutant, because a trapping mutant (a deadlock's
// guard, a device fault) leaves the CUDA context unusable for whatever runs after it.
TEST_CASE("hopper gpu mutant alone", "[.][hopper-mutant]") {
  if (!kern::hopper_built()) return;
  const char* name = std::getenv("AC_HOPPER_MUTANT");
  REQUIRE(name != nullptr);
  const std::pair<const char*, kern::HopperMutation> known[] = {
      {"no-proxy-fence", kern::HopperMutation::no_proxy_fence},
      {"no-full-wait", kern::HopperMutation::no_full_wait},
      {"stale-phase", kern::HopperMutation::stale_phase}};
  kern::HopperMutation m = kern::HopperMutation::none;
  for (const auto& [n, k] : known)
    if (std::strcmp(n, name) == 0) m = k;
  REQUIRE(m != kern::HopperMutation::none);
  // K/V of 32 KV heads x 16380 keys x d 64 (268 MB, past L2) so the copy engine lags the consumers,
  // which is when a missing or stale wait reads a stage before its data lands; 16380 keys leave a
  // partial V tile (the producer's own stores, the fence mutant's site).
  const AttnCase c = make_case(9500, DType::f16, 32, 32, 64, {128}, {16380}, false, false);
  std::vector<std::pair<int64_t, int>> rows;
  for (int i = 0; i < 64; ++i) rows.push_back({int64_t((i * 37) % 128), (i * 5) % 32});
  bool caught = false;
  std::vector<uint16_t> first;
  for (int run = 0; run < 5 && !caught; ++run) {
    const GpuResult r = run_gpu(c, 0, {}, m);
    if (r.rc != AC_OK) {
      std::printf("mutant %s caught: rc %d (%s)\n", name, r.rc, r.err.c_str());
      caught = true;
    } else if (!compare_with_exact(c, r.out, &r.lse, kHopperConv, &rows).empty()) {
      std::printf("mutant %s caught: outside the exact bound\n", name);
      caught = true;
    } else if (!first.empty() && first != r.out) {
      std::printf("mutant %s caught: run-to-run difference\n", name);
      caught = true;
    }
    if (first.empty()) first = r.out;
  }
  CHECK(caught);
}

TEST_CASE("hopper gpu: the Hopper mutants are caught", "[hopper][gpu][mutants]") {
  if (!kern::hopper_built()) return;
  struct M {
    const char* name;
    bool must_catch;
  };
  // Each in a fresh process of this binary (the hidden case above): its exit status says whether it
  // was caught; a signal or any other status is a broken run, not a verdict.
  // (The shell's /proc/self/exe is the shell: the binary's own path is read here.)
  char self[4096] = {0};
  REQUIRE(::readlink("/proc/self/exe", self, sizeof self - 1) > 0);
  for (const M& m : {M{"no-proxy-fence", false}, M{"no-full-wait", true}, M{"stale-phase", true}}) {
    const std::string cmd =
        std::string("AC_HOPPER_MUTANT=") + m.name + " '" + self + "' '[hopper-mutant]' > /dev/null 2>&1";
    const int status = std::system(cmd.c_str());
    INFO("mutant " << m.name << ": system() status " << status);
    REQUIRE(WIFEXITED(status));
    const int rc = WEXITSTATUS(status);
    REQUIRE((rc == 0 || rc == 1));
    const bool caught = rc == 0;
    if (m.must_catch)
      CHECK(caught);
    else
      WARN("mutant " << m.name << (caught ? " caught" : " not caught in 5 runs"));
  }
}

TEST_CASE("packed gpu: engine modes, a sequence alone and beside longer ones", "[packed][gpu]") {
  // The victim (300 keys; 3 causal queries in the second case) alone and first in a batch with rows
  // of 8192, 2000 and 77 keys. Fixed split size (64 keys): the victim's 5 parts are the same in both
  // launches and the batch's other 123 are empty for it, so its bits agree. Adaptive: on 132 SMs the
  // victim alone gets min(264 / 8, 300 / 64) = 4 splits and the batch min(264 / 32, 8192 / 64) = 8,
  // so its bits move. Both within the fp64 bound.
  uint64_t seed = 9800;
  for (bool causal : {false, true}) {
    const AttnCase batch = make_case(seed++, DType::bf16, 32, 8, 128, {causal ? 3 : 1, 1, 1, 2},
                                     {300, 8192, 2000, 77}, causal, false);
    const AttnCase alone = first_alone(batch);
    auto run = [](const AttnCase& c, int keys) {
      DeviceCase dc(c);
      const ac_attention_args a = dc.args(c, 1);
      char err[256] = {0};
      INFO("keys per split " << keys << ": " << err);
      REQUIRE(kern::packed_engine_attention(a, keys, true, err, sizeof err) == AC_OK);
      const std::vector<uint16_t> out = dc.out.to_host();
      const std::vector<float> lse = dc.lse.to_host();
      CHECK(compare_with_exact(c, out, &lse, {}) == "");
      return first_rows(c, out, lse);
    };
    INFO("causal " << causal);
    CHECK(run(batch, kern::kFixedSplitKeys) == run(alone, kern::kFixedSplitKeys));
    if (device_sms() == 132) CHECK_FALSE(run(batch, 0) == run(alone, 0));
  }
}

// fused-hopper-fp8 (kernels/hopper/hopper_fp8.cu): FlashAttention-3's FP8 forward against its twin,
// which rounds where the kernel rounds (S and P V on the codes, the descales folded into the scale,
// P held as e4m3fn(256 p), V's descale on the output) but sums in fp32, where the kernel's tensor
// cores truncate (AC_FP8_TRUNCATED_SUMS). Each is within its budget of the exact attention, so they
// are apart by at most the two budgets' difference terms (fp8_apart below).
namespace {

struct Fp8Forward {
  Fp8Cache kv;
  std::vector<uint8_t> q;
  std::vector<float> qd;
};

// Q quantised over qd[0] (the codes are the kernel's input whatever descales it is then given), K
// and V over theirs; qd as many values as kd.
Fp8Forward fp8_forward(const AttnCase& c, std::vector<float> qd, std::vector<float> kd,
                       std::vector<float> vd) {
  Fp8Forward f{fp8_cache(c, AC_DTYPE_E4M3, std::move(kd), std::move(vd)), {}, std::move(qd)};
  f.q = fp8_codes(c, c.q, c.head_size, AC_DTYPE_E4M3, {f.qd.front()});
  return f;
}

// cuDNN's scales (fused-hopper-fp8-scaled): P's scale (0: none, the fixed 2^8), O's FP8 format (0:
// the input type) and its output_scale, the maxima; none of them by default (fused-hopper-fp8).
struct Scales {
  float p_scale = 0.0f;
  int out_fp8 = 0;
  float output_scale = 1.0f;
  bool amax = false;
  kern::FusedOptions options() const {
    kern::FusedOptions o;
    o.p_e4m3 = o.fp8_out = p_scale > 0.0f || out_fp8 != 0 || amax;
    return o;
  }
};

// The call's scalars and maxima at `ps`, `os` and `amax` (device or host memory alike).
void point_at_scales(ac_attention_args& a, const Scales& sc, const float* ps, const float* os, float* amax) {
  if (sc.p_scale > 0.0f) a.p_scale = ps;
  if (sc.out_fp8) {
    a.out_dtype = static_cast<ac_dtype>(sc.out_fp8);
    a.output_scale = os;
  }
  if (sc.amax) a.amax = amax;
}

// row_accumulator: the probe of FlashAttention-3's P V (hopper.h HopperMutation::fp8_row_accumulator).
GpuResult run_fp8_gpu(const AttnCase& c, const Fp8Forward& f, const Scales& sc = {},
                      bool row_accumulator = false) {
  DeviceCase dc(c);
  DeviceArray<uint8_t> q(f.q), k(f.kv.k), v(f.kv.v);
  DeviceArray<float> qd(f.qd), kd(f.kv.kd), vd(f.kv.vd),
      scalars(std::vector<float>{sc.p_scale, sc.output_scale}), amax(std::vector<float>{NAN, NAN});
  ac_attention_args a = dc.args(c, 0);
  point_at_fp8(a, f.kv, k.ptr, v.ptr, kd.ptr, vd.ptr);
  a.q = q.ptr;
  a.q_descale = qd.ptr;
  point_at_scales(a, sc, scalars.ptr, scalars.ptr + 1, amax.ptr);
  char err[256] = {0};
  GpuResult r;
#if defined(ATTNCHECK_HAVE_SM90A)
  r.rc = row_accumulator ? kern::hopper_fp8_row_accumulator_cuda(a, sc.options(), err, sizeof err)
                         : kern::hopper_fp8_attention_cuda(a, sc.options(), err, sizeof err);
#else
  r.rc = AC_ERR_UNSUPPORTED;
  std::snprintf(err, sizeof err, "built without sm_90a");
#endif
  r.err = err;
  r.out = dc.out.to_host();
  r.lse = dc.lse.to_host();
  if (sc.amax) r.amax = amax.to_host();
  return r;
}

GpuResult run_fp8_twin(const AttnCase& c, const Fp8Forward& f, const Scales& sc = {}) {
  GpuResult r{0, "", std::vector<uint16_t>(size_t(c.total_q() * c.heads * c.dv())),
              std::vector<float>(size_t(c.total_q() * c.heads)), std::vector<float>{NAN, NAN}};
  ac_attention_args a = host_args(c, r.out.data(), r.lse.data(), 0);
  point_at_fp8(a, f.kv, f.kv.k.data(), f.kv.v.data(), f.kv.kd.data(), f.kv.vd.data());
  a.q = f.q.data();
  a.q_descale = f.qd.data();
  point_at_scales(a, sc, &sc.p_scale, &sc.output_scale, r.amax.data());
  char err[256] = {0};
  r.rc = kern::hopper_fp8_attention_host(a, sc.options(), err, sizeof err);
  r.err = err;
  return r;
}

// The descales of one granularity for a case of 2 KV heads and `seqs` sequences (not powers of two).
std::vector<float> descales(int granularity, int seqs, float base) {
  const size_t n = granularity == 0 ? 1 : granularity == 1 ? 2 : size_t(2 * seqs);
  std::vector<float> d(n);
  for (size_t i = 0; i < n; ++i) d[i] = base * (1.0f + 0.37f * float(i));
  return d;
}

// The descales' index of (sequence s, KV head kvh) for the case's descale arrays.
size_t descale_at(const AttnCase& c, const Fp8Forward& f, size_t s, int kvh) {
  return f.qd.size() == 1                    ? size_t(0)
         : f.qd.size() == size_t(c.kv_heads) ? size_t(kvh)
                                             : s * c.kv_heads + kvh;
}

// delta of row (token t, head h) of sequence s: |scale| q_descale k_descale max_j
// truncated_sum_error(q's codes, k_j's) over the row's keys (budgets.cpp), the most by which the
// kernel's scores may differ from the twin's.
double score_delta(const AttnCase& c, const Fp8Forward& f, size_t s, int h, int64_t t) {
  const int d = c.head_size, kvh = h / (c.heads / c.kv_heads);
  const size_t at = descale_at(c, f, s, kvh);
  std::vector<double> qc(static_cast<size_t>(d)), kc(static_cast<size_t>(d));
  for (int e = 0; e < d; ++e)
    qc[size_t(e)] = kern::fp8_to_float(AC_DTYPE_E4M3, f.q[size_t((t * c.heads + h) * d + e)]);
  double delta = 0;
  for (int64_t key = c.cu_k[s]; key < c.cu_k[s + 1]; ++key) {
    for (int e = 0; e < d; ++e)
      kc[size_t(e)] = kern::fp8_to_float(AC_DTYPE_E4M3, f.kv.k[size_t((key * c.kv_heads + kvh) * d + e)]);
    delta = std::max(delta, std::fabs(double(c.scale)) * f.qd[at] * f.kv.kd[at] *
                                truncated_sum_error(qc.data(), kc.data(), qc.size(), kE4m3MinExp, kE4m3Frac));
  }
  return delta;
}

// "" or the first output where the kernel and its twin are further apart than the budgets allow, for
// rows (token, head) of the case's [tokens, heads] layout:
//   - the LSE: the twin's fp32 rounding differences (2^-16 relative, as for fused-hopper) plus
//     delta = |scale| q_descale k_descale max_j truncated_sum_error(q's codes, k_j's) over the row's
//     keys (budgets.cpp): the
//     kernel's scores are within delta, which moves log sum e^s by at most delta;
//   - O: 2 ulps of the largest output (the other roundings), plus, per the row's vmax (max |v|
//     times its descale, which bounds S = sum p |v| / l): the weights' move expm1(2 delta), P V's
//     truncated_pv_o_allowance (at S_fields), and the e4m3 codes of P: the kernel's p and the
//     twin's differ by delta, so s p (s = p_scale, 256 without one) may round to neighbouring
//     codes, each within 2^-4 p of its own p (2^-3 p), or, subnormal, within half the step 2^-9 / s
//     of e4m3fn's subnormals in p (2^-9 / s a key, over l >= 1).
std::string fp8_apart(const AttnCase& c, const Fp8Forward& f, const GpuResult& twin, const GpuResult& cuda,
                      double p_scale = 256.0) {
  const int dv = c.dv(), group = c.heads / c.kv_heads;
  const size_t nseq = c.seqlens_q.size();
  const double p_codes = 0x1p-3;                         // neighbouring e4m3 codes of 256 p
  const double pv = truncated_pv_o_allowance(1.0, 0.0);  // per unit of S_fields, below
  const int mantissa = c.dtype == DType::bf16 ? 7 : 10;
  double largest = 0;
  for (uint16_t b : twin.out) largest = std::max(largest, std::fabs(in_value(c.dtype, b)));
  const double ulps2 = 2 * std::ldexp(1.0, std::ilogb(std::max(largest, 1e-30)) - mantissa);
  for (size_t s = 0; s < nseq; ++s)
    for (int h = 0; h < c.heads; ++h) {
      const int kvh = h / group;
      const double vd = f.kv.vd[descale_at(c, f, s, kvh)];
      double vmax = 0;
      for (int64_t key = c.cu_k[s]; key < c.cu_k[s + 1]; ++key)
        for (int e = 0; e < dv; ++e)
          vmax = std::max(
              vmax,
              std::fabs(kern::fp8_to_float(AC_DTYPE_E4M3, f.kv.v[size_t((key * c.kv_heads + kvh) * dv + e)]) *
                        vd));
      for (int64_t t = c.cu_q[s]; t < c.cu_q[s + 1]; ++t) {
        const double delta = score_delta(c, f, s, h, t);
        const size_t row = size_t(t * c.heads + h);  // O's [tokens, heads]; the LSE is [heads, tokens]
        const size_t lse_at = size_t(h) * size_t(c.total_q()) + size_t(t);
        const float lt = twin.lse[lse_at], lc = cuda.lse[lse_at];
        const bool lse_ok =
            std::isinf(lt) || std::isnan(lt)
                ? (std::isnan(lt) ? std::isnan(lc) : lt == lc)
                : std::fabs(double(lc) - lt) <= 0x1p-16 * std::max(1.0, std::fabs(double(lt))) + delta;
        if (!lse_ok)
          return "lse[" + std::to_string(lse_at) + "]: twin " + std::to_string(lt) + ", CUDA " +
                 std::to_string(lc) + ", delta " + std::to_string(delta * 1e6) + "e-6";
        // budgets.cpp attention_o_allowance's S_fields at S <= vmax, l >= 1.
        const double vmin = std::ldexp(vd, kE4m3MinExp), keys = double(c.cu_k[s + 1] - c.cu_k[s]);
        const double s_fields = vmax + vmin + keys * 0x1p-6 / p_scale * std::max(vmax, vmin);
        const double o_allowed =
            ulps2 + (std::expm1(2 * delta) + p_codes) * vmax + keys * 0x1p-9 / p_scale * vmax + pv * s_fields;
        for (int e = 0; e < dv; ++e) {
          const size_t i = row * size_t(dv) + size_t(e);
          const double ot = in_value(c.dtype, twin.out[i]), oc = in_value(c.dtype, cuda.out[i]);
          if (!(std::fabs(oc - ot) <= o_allowed))
            return "o[" + std::to_string(i) + "]: twin " + std::to_string(ot) + ", CUDA " +
                   std::to_string(oc) + ", allowed " + std::to_string(o_allowed);
        }
      }
    }
  return "";
}

}  // namespace

TEST_CASE("hopper-fp8 gpu: CUDA against its twin over causal, masks, GQA, varlen and every granularity",
          "[hopper][gpu][fp8]") {
  if (!kern::hopper_built()) return;
  uint64_t seed = 9900;
  for (DType dt : {DType::f16, DType::bf16})
    for (int shape = 0; shape < 3; ++shape)
      for (int granularity : {0, 1, 2}) {
        // Key ranges past one tile and ragged (1000 = 7 tiles + 104), one tile exactly, one short of
        // it, a query range past one row tile, an empty query range, an empty key range.
        const AttnCase c = make_case(seed++, dt, 8, 2, 128, {1, 200, 128, 0, 3}, {1000, 300, 127, 7, 0},
                                     shape == 1, shape == 2);
        const Fp8Forward f = fp8_forward(c, descales(granularity, 5, 0.011f),
                                         descales(granularity, 5, 0.013f), descales(granularity, 5, 0.02f));
        const GpuResult g = run_fp8_gpu(c, f), t = run_fp8_twin(c, f);
        INFO(c.describe() << " granularity " << granularity << " " << g.err << t.err);
        REQUIRE(g.rc == AC_OK);
        REQUIRE(t.rc == AC_OK);
        CHECK(fp8_apart(c, f, t, g) == "");
        WARN(far_apart(t.out, g.out, 2) << " of " << t.out.size() << " outputs beyond 2 ulps of the twin");
      }
}

TEST_CASE("hopper-fp8 gpu: bitwise reproducible, and a call without an FP8 cache is fused-hopper's",
          "[hopper][gpu][fp8]") {
  if (!kern::hopper_built()) return;
  const AttnCase c = make_case(9950, DType::bf16, 8, 1, 128, {300, 1}, {2000, 513}, true, false);
  const Fp8Forward f = fp8_forward(c, {0.01f}, {0.012f}, {0.03f});
  const GpuResult a = run_fp8_gpu(c, f), b = run_fp8_gpu(c, f);
  REQUIRE(a.rc == AC_OK);
  CHECK(a.out == b.out);
  CHECK(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) == 0);
  // The same case in bf16 through the FP8 subject's entry point: fused-hopper's kernel, bit for bit.
  DeviceCase dc(c);
  ac_attention_args args = dc.args(c, 0);
  char err[256] = {0};
#if defined(ATTNCHECK_HAVE_SM90A)
  REQUIRE(kern::hopper_fp8_attention_cuda(args, {}, err, sizeof err) == AC_OK);
#endif
  const GpuResult h = run_gpu(c, 0);
  REQUIRE(h.rc == AC_OK);
  CHECK(dc.out.to_host() == h.out);
}

// fused-hopper-fp8-scaled: the same kernel under cuDNN's scales. Expected values: the twin (which
// rounds P at p_scale, reads its codes in P V and multiplies O once by fl(1 / p_scale), as the
// kernel does) within fp8_apart's budget; the kernel's own outputs of the same call where one is a
// rounding of the other; and the FA3 subject's bits where the scale is its fixed 2^8.
TEST_CASE("hopper-fp8-scaled gpu: p_scale, O in e4m3fn over output_scale and the maxima",
          "[hopper][gpu][fp8]") {
  if (!kern::hopper_built()) return;
  uint64_t seed = 9970;
  for (DType dt : {DType::bf16, DType::f16})
    for (int shape = 0; shape < 2; ++shape) {
      const AttnCase c =
          make_case(seed++, dt, 8, 2, 128, {1, 200, 0, 130}, {1000, 300, 7, 129}, shape == 1, false);
      const Fp8Forward f =
          fp8_forward(c, descales(1, 4, 0.011f), descales(1, 4, 0.013f), descales(1, 4, 0.02f));
      INFO(c.describe());
      // p_scale = 256 explicitly is the fixed offset: fused-hopper-fp8's bits.
      const GpuResult fa3 = run_fp8_gpu(c, f), s256 = run_fp8_gpu(c, f, Scales{256.0f});
      REQUIRE(fa3.rc == AC_OK);
      REQUIRE(s256.rc == AC_OK);
      CHECK(fa3.out == s256.out);
      CHECK(std::memcmp(fa3.lse.data(), s256.lse.data(), fa3.lse.size() * 4) == 0);
      // The largest weight 1 / l (amax[0]) against the twin's, in log: the kernel's scores within
      // delta of the twin's (the LSE's bound in fp8_apart), so each p = e^(s - m) within e^(2 delta)
      // and l with them; the two l add the same N terms in other orders (N - 1 roundings each), the
      // kernel's p by ex2.approx (2^-22 relative), and 1 / l rounds once in each. The scores do not
      // depend on P's scale: one bound for every scale below.
      double delta = 0;
      int64_t keys = 0;
      for (size_t s = 0; s < c.seqlens_q.size(); ++s) {
        keys = std::max<int64_t>(keys, c.cu_k[s + 1] - c.cu_k[s]);
        for (int h = 0; h < c.heads; ++h)
          for (int64_t tok = c.cu_q[s]; tok < c.cu_q[s + 1]; ++tok)
            delta = std::max(delta, score_delta(c, f, s, h, tok));
      }
      const double amax_bound = 2 * delta + double(2 * keys + 2) * 0x1p-24 + 0x1p-22;
      // Scales that are not powers of two, the largest allowed among them: against the twin.
      for (float ps : {100.0f, 448.0f, 3.0f}) {
        Scales sc{ps};
        sc.amax = true;
        const GpuResult g = run_fp8_gpu(c, f, sc), t = run_fp8_twin(c, f, sc);
        INFO("p_scale " << ps << " " << g.err << t.err);
        REQUIRE(g.rc == AC_OK);
        REQUIRE(t.rc == AC_OK);
        CHECK(fp8_apart(c, f, t, g, ps) == "");
        // amax[1], the largest |O| before the cast: the kernel's output is each fp32 element rounded to
        // the input type, a monotonic rounding, so its largest magnitude is amax[1] rounded.
        double largest = 0;
        for (uint16_t b : g.out) largest = std::max(largest, std::fabs(in_value(c.dtype, b)));
        CHECK(largest == in_value(c.dtype, uint16_t(kern::store_from_float(c.dtype, g.amax[1]))));
        // amax[0], the largest weight 1 / l: within amax_bound of the twin's in log (above).
        INFO("amax " << g.amax[0] << " " << g.amax[1] << ", twin " << t.amax[0] << " " << t.amax[1]);
        CHECK(t.amax[0] > 0.0f);
        CHECK(std::fabs(std::log(double(g.amax[0]) / t.amax[0])) <= amax_bound);
      }
      // O in e4m3fn over an output_scale that saturates the largest elements: each code is the
      // rounding of (the kernel's fp32 O) / output_scale, and its bf16 / fp16 output of the same call
      // is that O rounded, so the code decodes to within half an e4m3fn ulp of O / output_scale plus
      // the input type's half ulp over output_scale, or is +-448 where that passes 448.
      Scales wide{100.0f};
      wide.amax = true;
      const GpuResult ref = run_fp8_gpu(c, f, wide);
      REQUIRE(ref.rc == AC_OK);
      Scales sc = wide;
      sc.out_fp8 = AC_DTYPE_E4M3;
      sc.output_scale = float(ref.amax[1] / 500.0);
      const GpuResult g = run_fp8_gpu(c, f, sc);
      REQUIRE(g.rc == AC_OK);
      CHECK(g.amax == ref.amax);
      const auto* codes = reinterpret_cast<const uint8_t*>(g.out.data());
      const int mantissa = c.dtype == DType::bf16 ? 8 : 11;
      int saturated = 0;
      for (size_t i = 0; i < ref.out.size(); ++i) {
        const double o = in_value(c.dtype, ref.out[i]), y = o / sc.output_scale;
        const double x = kern::fp8_to_float(AC_DTYPE_E4M3, codes[i]);
        INFO("element " << i << ": O " << o << ", code " << int(codes[i]) << " = " << x);
        if (std::fabs(y) > 464.0) {  // past 448 by more than half its ulp (32): saturated
          CHECK(x == std::copysign(448.0, o));
          ++saturated;
          continue;
        }
        const double half_code = std::ldexp(1.0, std::max(std::ilogb(std::max(std::fabs(y), 1e-30)), -6) - 4);
        const double half_in =
            std::ldexp(1.0, std::ilogb(std::max(std::fabs(o), 1e-30)) - mantissa) / sc.output_scale;
        CHECK(std::fabs(x - y) <= 2 * half_code + half_in);
      }
      CHECK(saturated > 0);
    }
}

TEST_CASE("hopper-fp8 gpu: small shapes for the sanitizers", "[.sanitize-fp8]") {
  if (!kern::hopper_built()) return;
  const AttnCase c = make_case(9960, DType::f16, 4, 2, 128, {70, 1, 0}, {300, 129, 5}, true, false);
  const Fp8Forward f = fp8_forward(c, {0.02f, 0.03f}, {0.011f, 0.017f}, {0.02f, 0.05f});
  const GpuResult g = run_fp8_gpu(c, f), t = run_fp8_twin(c, f);
  REQUIRE(g.rc == AC_OK);
  CHECK(fp8_apart(c, f, t, g) == "");
  // cuDNN's scales: the maxima's atomics and O's FP8 bytes.
  Scales sc{300.0f, AC_DTYPE_E4M3, 0.01f, true};
  const GpuResult s = run_fp8_gpu(c, f, sc);
  REQUIRE(s.rc == AC_OK);
  CHECK(s.amax[0] > 0.0f);
}

// mma.sync's FP8 sums (kern::fp8_mma_probe: one m16n8k32 e4m3 instruction per trial), against
// the value form of AC_FP8_TRUNCATED_SUMS's bound: each addend moves by less than min(2^-12 M,
// |addend|), M the largest, a product of at least M / 16 not at all, the result by less than 2^-12
// of itself. Trials: C alone with 23 bits after its leading one, random codes and accumulators
// (normal, with subnormal codes, with zeros), and one product beside 31 under 2^-13 of it. On the
// H100 (2026-12-05) this instruction kept every bit, where the kernel's wgmma (next test) truncates:
// the two are not the same datapath, and only wgmma's is declared.
TEST_CASE("FP8 tensor cores: every sum within the declared truncation",
          "[hopper][gpu][fp8][truncated_sums]") {
#if defined(ATTNCHECK_HAVE_SM90A)
  if (!kern::hopper_built()) return;
  std::vector<uint8_t> a, b;
  std::vector<float> c;
  auto trial = [&](const std::vector<uint8_t>& ta, const std::vector<uint8_t>& tb, float tc) {
    a.insert(a.end(), ta.begin(), ta.end());
    b.insert(b.end(), tb.begin(), tb.end());
    c.push_back(tc);
  };
  const std::vector<uint8_t> zeros(32, 0);
  trial(zeros, zeros, 0x1.fffffep0f);
  trial(zeros, zeros, -0x1.fffffep0f);
  trial(zeros, zeros, 0x1.555556p+3f);
  // 0x38 is e4m3fn 1.0, 0x08 is 2^-6, 0x0f is 1.875 2^-6: products 1 and 31 x 1.875 2^-12.
  std::vector<uint8_t> big_a(32, 0x08), big_b(32, 0x0f);
  big_a[0] = big_b[0] = 0x38;
  trial(big_a, big_b, 0.0f);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&]() {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
  };
  auto code = [&]() {
    uint8_t x = uint8_t(next());
    return (x & 0x7f) == 0x7f ? uint8_t(x & 0xf0) : x;  // no NaN codes
  };
  for (int t = 0; t < 20000; ++t) {
    std::vector<uint8_t> ta(32), tb(32);
    const int spread = int(next() % 3);  // 0: all codes, 1: exponents near one another, 2: a few zeros
    for (int k = 0; k < 32; ++k) {
      ta[size_t(k)] = spread == 1 ? uint8_t((code() & 0x87) | 0x30) : code();
      tb[size_t(k)] = spread == 2 && next() % 4 == 0 ? uint8_t(0) : code();
    }
    const double mag = std::ldexp(double(next() % 1000) / 1000.0, int(next() % 24) - 8);
    trial(ta, tb, float(next() % 2 ? mag : -mag) * float(next() % 5 != 0));
  }
  // Subnormal inputs (codes 0x01..0x07: 2^-9 .. 7 2^-9) and zeros beside large products.
  for (int t = 0; t < 4000; ++t) {
    std::vector<uint8_t> ta(32), tb(32);
    for (int k = 0; k < 32; ++k) {
      const uint64_t r = next();
      ta[size_t(k)] = r % 3 == 0 ? uint8_t(1 + next() % 7) | uint8_t(next() % 2 << 7) : code();
      tb[size_t(k)] = r % 5 == 0 ? uint8_t(0) : r % 7 == 0 ? uint8_t(1 + next() % 7) : code();
    }
    trial(ta, tb,
          t % 3 == 0 ? 0.0f : float(std::ldexp(double(next() % 1000) / 1000.0 - 0.5, int(next() % 24) - 8)));
  }
  const int trials = int(c.size());
  std::vector<float> d(static_cast<size_t>(trials));
  char err[256] = {0};
  REQUIRE(kern::fp8_mma_probe(a.data(), b.data(), c.data(), d.data(), trials, err, sizeof err) == AC_OK);
  // Per class (0: every input normal or zero-free, 1: a subnormal input, 2: a zero input and no
  // subnormal): trials, trials past the bound, the largest error / bound and its trial.
  struct Class {
    int n = 0, past = 0, worst_trial = -1;
    double worst = 0, worst_field = 0;
  } cls[3];
  auto e_of = [](double v) { return std::max(std::ilogb(v), kE4m3MinExp); };  // e4m3fn's exponent field
  for (int t = 0; t < trials; ++t) {
    std::vector<double> prods(32);
    double exact = c[size_t(t)], M = std::fabs(double(c[size_t(t)]));
    int field = c[size_t(t)] != 0 ? std::ilogb(double(c[size_t(t)])) : INT_MIN;
    bool sub = false, zero = false;
    for (int k = 0; k < 32; ++k) {
      const double x = kern::fp8_to_float(AC_DTYPE_E4M3, a[size_t(32 * t + k)]),
                   y = kern::fp8_to_float(AC_DTYPE_E4M3, b[size_t(32 * t + k)]);
      prods[size_t(k)] = x * y;
      exact += x * y;
      M = std::max(M, std::fabs(x * y));
      zero = zero || x == 0 || y == 0;
      sub = sub || (x != 0 && std::fabs(x) < 0x1p-6) || (y != 0 && std::fabs(y) < 0x1p-6);
      if (x != 0 && y != 0) field = std::max(field, e_of(std::fabs(x)) + e_of(std::fabs(y)) + 1);
    }
    constexpr double u = kTruncatedSumUnit;
    double moved = std::min(u * M, std::fabs(double(c[size_t(t)])));
    for (const double p : prods)
      if (std::fabs(p) < M / 16) moved += std::min(u * M, std::fabs(p));
    const double bound = moved + u * (std::fabs(exact) + moved);
    const double e = std::fabs(double(d[size_t(t)]) - exact);
    REQUIRE(std::isfinite(d[size_t(t)]));
    Class& k = cls[sub ? 1 : zero ? 2 : 0];
    ++k.n;
    if (e > bound) ++k.past;
    const double ratio = bound > 0 ? e / bound : (e > 0 ? INFINITY : 0);
    if (ratio > k.worst) k.worst = ratio, k.worst_trial = t;
    // The same error against 33 units of 2^-13 at the largest exponent field (subnormals at 2^-6),
    // the measured model's worst case.
    if (field != INT_MIN)
      k.worst_field =
          std::max(k.worst_field, e / (33 * std::ldexp(1.0, field - 13) + 0x1p-13 * std::fabs(exact)));
  }
  auto kept = [](double x, double y) { return x == y ? 23 : -std::ilogb(std::fabs(x - y) / std::fabs(x)); };
  WARN("C alone: " << kept(0x1.fffffep0, d[0]) << " bits kept (" << d[0] << ", " << d[1] << ", " << d[2]
                   << "); one product 1 beside 31 of 1.875 2^-12: device " << d[3] << " exact "
                   << 1 + 31 * 1.875 * 0x1p-12);
  for (int k = 0; k < 3; ++k) {
    const int w = cls[k].worst_trial;
    std::ostringstream trial_text;
    if (w >= 0) {
      trial_text << "c " << c[size_t(w)] << " device " << d[size_t(w)] << " codes";
      for (int j = 0; j < 32; ++j)
        trial_text << " " << int(a[size_t(32 * w + j)]) << "x" << int(b[size_t(32 * w + j)]);
    }
    INFO((k == 0   ? "normal inputs"
          : k == 1 ? "a subnormal input"
                   : "a zero input")
         << ": " << cls[k].n << " trials, " << cls[k].past << " past the bound, worst " << cls[k].worst
         << " (trial " << w << ": " << trial_text.str() << "); against the fields' model "
         << cls[k].worst_field);
    CHECK(cls[k].past == 0);
    WARN("class " << k << ": " << cls[k].n << " trials, " << cls[k].past << " past, worst " << cls[k].worst
                  << ", fields' model " << cls[k].worst_field);
  }
#endif
}

// The same question asked of the kernel's own wgmma (m64n128k32 e4m3, which mma.sync above need not
// share): one query, one key, scale 1, descales 1, so the LSE is the score S = q.k itself (up to
// fp32's log2 e and ln 2 roundings, 2^-22 relative). Each row puts a few products beside zeros and
// reads which bits survive; each S must lie within the declared bound (budgets.cpp
// truncated_sum_error on the row's products), and what the device did is printed.
TEST_CASE("FP8 tensor cores: the kernel's wgmma sums within the declared truncation",
          "[hopper][gpu][fp8][truncated_sums]") {
  if (!kern::hopper_built()) return;
  struct Row {
    const char* what;
    std::vector<std::pair<int, std::pair<uint8_t, uint8_t>>> codes;  // (column, (q code, k code))
    uint8_t k_rest;  // K's code at every other column (Q's: 0)
  };
  // e4m3fn: 0x38 = 1, 0x08 = 2^-6, 0x09 = 1.125 2^-6, 0x0f = 1.875 2^-6, 0x01 = 2^-9 (subnormal),
  // 0x7e = 448, 0x8f = -1.875 2^-6.
  const std::vector<Row> rows = {
      {"1 + 1.875 2^-12 (kept bits)", {{0, {0x38, 0x38}}, {1, {0x0f, 0x08}}}, 0},
      {"1 - 1.875 2^-12 (rounding direction)", {{0, {0x38, 0x38}}, {1, {0x8f, 0x08}}}, 0},
      {"1, then 1.875 2^-12 in the next k step", {{0, {0x38, 0x38}}, {32, {0x0f, 0x08}}}, 0},
      {"2^-9 x 448 + 1.875 2^-12 (a subnormal's product largest)", {{0, {0x01, 0x7e}}, {1, {0x0f, 0x08}}}, 0},
      {"1.265625 2^-12 beside zeros times 448", {{0, {0x09, 0x09}}}, 0x7e},
      {"1 + 31 x 1.875 2^-12", {{0, {0x38, 0x38}}}, 0},
  };
  for (const Row& row : rows) {
    AttnCase c = make_case(9970, DType::bf16, 1, 1, 128, {1}, {1}, false, false);
    c.scale = 1.0f;
    Fp8Forward f = fp8_forward(c, {1.0f}, {1.0f}, {1.0f});
    std::fill(f.q.begin(), f.q.end(), uint8_t(0));
    std::fill(f.kv.k.begin(), f.kv.k.end(), row.k_rest);
    std::fill(f.kv.v.begin(), f.kv.v.end(), uint8_t(0x38));
    if (std::string(row.what).rfind("1 + 31", 0) == 0)
      for (int col = 1; col < 32; ++col) f.q[size_t(col)] = 0x0f, f.kv.k[size_t(col)] = 0x08;
    for (const auto& [col, qk] : row.codes) f.q[size_t(col)] = qk.first, f.kv.k[size_t(col)] = qk.second;
    std::vector<double> qv(128), kv(128);
    double exact = 0;
    for (int col = 0; col < 128; ++col) {
      qv[size_t(col)] = kern::fp8_to_float(AC_DTYPE_E4M3, f.q[size_t(col)]);
      kv[size_t(col)] = kern::fp8_to_float(AC_DTYPE_E4M3, f.kv.k[size_t(col)]);
      exact += qv[size_t(col)] * kv[size_t(col)];
    }
    const GpuResult g = run_fp8_gpu(c, f);
    REQUIRE(g.rc == AC_OK);
    const double s = double(g.lse[0]);
    const double bound =
        truncated_sum_error(qv.data(), kv.data(), 128, kE4m3MinExp, kE4m3Frac) + 0x1p-21 * std::fabs(exact);
    char text[256];
    std::snprintf(text, sizeof text,
                  "%s: exact %a, kernel %a, off by %.4g units of 2^-13 |exact|, bound %.4g", row.what, exact,
                  s, std::fabs(s - exact) / (0x1p-13 * std::fabs(exact)),
                  bound / (0x1p-13 * std::fabs(exact)));
    WARN(text);
    CHECK(std::fabs(s - exact) <= bound);
  }
}

// FlashAttention-3's P V (each tile's P V wgmma added into O itself) against the committed kernel
// (a fresh accumulator per 128 keys, AC_FP8_TRUNCATED_SUMS) on one row of 8192 keys with V = 1
// everywhere, so O must be 1 exactly: scale 1, descales 1, Q = e_0 (code 0x38 in column 0), K's
// column 0 key 0's code 0 (the max, first, so no tile rescales O) and the others' codes drawn in
// [-2, 0], K's other columns 0: each score is one code's value, exact. The host predicts both
// kernels' O from the measured accumulator (tensor_core_model.h) on P's codes, e4m3fn(256 e^s),
// and l = sum e^s: the model says about 14% low for one accumulator (fp8_forward_twin "one accumulator
// over an 8192-key row"). The committed kernel must meet its allowance; what the probe does is the
// measurement, checked against the model within 2^-6 (P's codes from ex2.approx may differ from
// the host's in a tie, and O is rounded to bf16).
TEST_CASE("FP8 tensor cores: FlashAttention-3's P V over an 8192-key row against the model",
          "[hopper][gpu][fp8][truncated_sums]") {
  if (!kern::hopper_built()) return;
  constexpr int N = 8192, Q = 64;
  AttnCase c = make_case(9990, DType::bf16, 1, 1, 128, {Q}, {N}, false, false);
  c.scale = 1.0f;
  Fp8Forward f = fp8_forward(c, {1.0f}, {1.0f}, {1.0f});
  std::fill(f.q.begin(), f.q.end(), uint8_t(0));
  for (int r = 0; r < Q; ++r) f.q[size_t(r) * 128] = 0x38;
  std::fill(f.kv.k.begin(), f.kv.k.end(), uint8_t(0));
  std::fill(f.kv.v.begin(), f.kv.v.end(), uint8_t(0x38));
  uint64_t state = 0x9e3779b97f4a7c15ull;
  std::vector<double> held(N), ones(N, 1.0);
  double l = 0;
  for (int j = 0; j < N; ++j) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    const uint8_t code = j == 0 ? uint8_t(0) : uint8_t(0x80 | (1 + state % 0x40));  // -(2^-9 .. 2)
    f.kv.k[size_t(j) * 128] = code;
    const double s = kern::fp8_to_float(AC_DTYPE_E4M3, code);
    l += std::exp(s);
    held[size_t(j)] = double(kern::round_to_e4m3(float(256 * std::exp(s))));
  }
  const double chained = tc_sum(held, ones) / 256 / l, row = tc_sum(held, ones, N) / 256 / l;
  const GpuResult g = run_fp8_gpu(c, f), probe = run_fp8_gpu(c, f, {}, true);
  REQUIRE(g.rc == AC_OK);
  REQUIRE(probe.rc == AC_OK);
  double g_lo = 2, g_hi = 0, p_lo = 2, p_hi = 0;
  for (size_t i = 0; i < g.out.size(); ++i) {
    const double x = kern::bf16_to_float(g.out[i]), y = kern::bf16_to_float(probe.out[i]);
    g_lo = std::min(g_lo, x), g_hi = std::max(g_hi, x), p_lo = std::min(p_lo, y), p_hi = std::max(p_hi, y);
  }
  const double allowance = v_one_fp8_row_allowance(N, l);
  char text[320];
  std::snprintf(text, sizeof text,
                "V = 1, 8192 keys: committed kernel O in [%.6f, %.6f] (model %.6f); FlashAttention-3's P V "
                "O in [%.6f, %.6f] (model %.6f); O's allowance %.4f",
                g_lo, g_hi, chained, p_lo, p_hi, row, allowance);
  WARN(text);
  CHECK(std::fabs(g_lo - 1) <= allowance);
  CHECK(std::fabs(g_hi - 1) <= allowance);
  CHECK(std::fabs(p_lo - row) <= 0x1p-6);
  CHECK(std::fabs(p_hi - row) <= 0x1p-6);
}
