// GPU tests of the fused attention forward (kernels/fused/fused.cu), label `gpu`: the CUDA kernel
// against the fp64 attention of attention_case.h (derived error bound) and against its host twin,
// over every tiling, fp16 and bf16, head sizes 64 and 128, GQA ratios 1/2/4/8, causal with
// Tq < Tk, varlen with zero-length key ranges (O = 0 exactly, LSE -inf or +inf), masks with fully
// masked rows; run-to-run bitwise reproducibility; the Llama-3-8B layer shape (T = 8192, 32 query heads,
// 8 KV heads, d = 128, fp16) on 16 sampled rows; refusals (misaligned pointers).
// Skips (exit 77) without a GPU. Run: ctest --test-dir build -L gpu -R kernels_attention
#include <catch2/catch.hpp>
#include <cstring>

#include "device_case.h"
#include "fused/fused.h"

using namespace attncheck;
using namespace attncheck::test;

namespace {

struct GpuResult {
  int rc;
  std::string err;
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

GpuResult run_gpu(const AttnCase& c, int tiling, kern::FusedOptions opt = {}) {
  DeviceCase dc(c);
  ac_attention_args a = dc.args(c, tiling);
  char err[256] = {0};
  GpuResult r;
  r.rc = kern::fused_attention_cuda(a, opt, err, sizeof err);
  r.err = err;
  r.out = dc.out.to_host();
  r.lse = dc.lse.to_host();
  return r;
}

std::string check_gpu(const AttnCase& c, int tiling, kern::FusedOptions opt = {}) {
  const GpuResult r = run_gpu(c, tiling, opt);
  if (r.rc != AC_OK) return "rc " + std::to_string(r.rc) + ": " + r.err;
  return compare_with_exact(c, r.out, &r.lse, Conventions{opt.lse_base, opt.empty_lse_sign});
}

}  // namespace

TEST_CASE("fused gpu: every tiling, dtype, head size, causal or not, against fp64", "[fused][gpu]") {
  uint64_t seed = 1000;
  for (int tiling = 0; tiling < kern::kNumFusedTilings; ++tiling)
    for (DType dt : {DType::f16, DType::bf16})
      for (int d : {64, 128})
        for (bool causal : {false, true}) {
          const AttnCase c = make_case(seed++, dt, 4, 2, d, {150, 1, 64}, {200, 77, 64}, causal, false);
          INFO("tiling " << tiling);
          CHECK(check_gpu(c, tiling) == "");
        }
}

TEST_CASE("fused gpu: GQA ratios, varlen with zero-length key ranges, masks", "[fused][gpu]") {
  uint64_t seed = 2000;
  for (int ratio : {1, 2, 4, 8})
    for (int tiling = 0; tiling < kern::kNumFusedTilings; ++tiling) {
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
}

TEST_CASE("fused gpu: large logits (spread 8) keep the guards finite", "[fused][gpu]") {
  const AttnCase c = make_case(3000, DType::f16, 2, 1, 64, {100}, {300}, true, true, 8.0f);
  for (int tiling = 0; tiling < kern::kNumFusedTilings; ++tiling) CHECK(check_gpu(c, tiling) == "");
}

TEST_CASE("fused gpu: CUDA and host twin agree to the same bound", "[fused][gpu]") {
  const AttnCase c = make_case(3100, DType::bf16, 4, 1, 128, {65, 130}, {129, 64}, true, true);
  const GpuResult g = run_gpu(c, 1);
  REQUIRE(g.rc == AC_OK);
  std::vector<uint16_t> out(g.out.size());
  std::vector<float> lse(g.lse.size());
  ac_attention_args a = host_args(c, out.data(), lse.data(), 1);
  char err[256];
  REQUIRE(kern::fused_attention_host(a, {}, err, sizeof err) == AC_OK);
  CHECK(compare_with_exact(c, out, &lse, {}) == "");
  CHECK(compare_with_exact(c, g.out, &g.lse, {}) == "");
  // Same function: every element within 2 ulps of the input type of each other.
  int far = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const int diff = std::abs(int(out[i] & 0x7fff) - int(g.out[i] & 0x7fff));
    if ((out[i] ^ g.out[i]) & 0x8000 ? (out[i] & 0x7fff) + (g.out[i] & 0x7fff) > 2 : diff > 2) ++far;
  }
  CHECK(far == 0);
}

TEST_CASE("fused gpu: bitwise reproducible run to run", "[fused][gpu]") {
  const AttnCase c = make_case(3200, DType::f16, 8, 2, 128, {300, 17}, {513, 100}, true, false);
  for (int tiling = 0; tiling < kern::kNumFusedTilings; ++tiling) {
    const GpuResult a = run_gpu(c, tiling), b = run_gpu(c, tiling);
    REQUIRE(a.rc == AC_OK);
    CHECK(a.out == b.out);
    CHECK(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) == 0);
  }
}

TEST_CASE("fused gpu: the Llama-3-8B layer shape on 16 sampled rows", "[fused][gpu][seed]") {
  // T = 8192, 32 query heads, 8 KV heads, d = 128, fp16, non-causal and causal.
  const AttnCase c = make_case(3300, DType::f16, 32, 8, 128, {8192}, {8192}, false, false);
  const std::vector<std::pair<int64_t, int>> rows = seed_shape_rows();
  for (bool causal : {false, true}) {
    AttnCase cc = c;
    cc.causal = causal;
    for (int tiling = 0; tiling < kern::kNumFusedTilings; ++tiling) {
      const GpuResult r = run_gpu(cc, tiling);
      REQUIRE(r.rc == AC_OK);
      INFO("causal " << causal << " tiling " << tiling);
      CHECK(compare_with_exact(cc, r.out, &r.lse, {}, &rows) == "");
    }
  }
}

TEST_CASE("fused gpu: refuses misaligned pointers and fp32 before launch", "[fused][gpu]") {
  const AttnCase c = make_case(3400, DType::f16, 2, 1, 64, {8}, {8}, false, false);
  DeviceCase dc(c);
  ac_attention_args a = dc.args(c, 0);
  char err[256];
  ac_attention_args b = a;
  b.k = static_cast<const char*>(a.k) + 2;
  CHECK(kern::fused_attention_cuda(b, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  CHECK(std::strstr(err, "aligned") != nullptr);
  b = a;
  b.dtype = AC_DTYPE_F32;
  CHECK(kern::fused_attention_cuda(b, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  CHECK(std::strstr(err, "fp32") != nullptr);
}
