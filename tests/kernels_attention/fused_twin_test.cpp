// Host-twin tests of the fused attention forward (kernels/fused/fused_host.cpp), run on CI without
// a GPU: every tiling, fp16 and bf16, head sizes 64 and 128, GQA ratios 1/2/4/8, causal with
// Tq < Tk, varlen with zero-length key ranges, masks with fully masked rows, the three subjects'
// conventions (natural / base-2 LSE, empty row -inf / +inf), and refusals of bad input.
// Expected values: the fp64 attention of attention_case.h with its derived error bound.
// Run: ctest --test-dir build -R kernels_attention_twin
#include <catch2/catch.hpp>
#include <cstring>

#include "attention_case.h"
#include "fused/fused.h"

using namespace attncheck;
using namespace attncheck::test;

namespace {

std::string run_twin(const AttnCase& c, int tiling, kern::FusedOptions opt) {
  std::vector<uint16_t> out(size_t(c.total_q() * c.heads * c.head_size), 0xbeef);
  std::vector<float> lse(size_t(c.total_q() * c.heads), 12345.0f);
  ac_attention_args a = host_args(c, out.data(), lse.data(), tiling);
  char err[256] = {0};
  const int rc = kern::fused_attention_host(a, opt, err, sizeof err);
  if (rc != AC_OK) return std::string("refused: ") + err;
  return compare_with_exact(c, out, &lse, Conventions{opt.lse_base, opt.empty_lse_sign});
}

}  // namespace

TEST_CASE("fused twin: every tiling, dtype and head size against fp64", "[fused][twin]") {
  uint64_t seed = 1;
  for (int tiling = 0; tiling < kern::kNumFusedTilings; ++tiling)
    for (DType dt : {DType::f16, DType::bf16})
      for (int d : {64, 128}) {
        // Tq and Tk not multiples of any tile, so partial row and key tiles are exercised.
        const AttnCase c = make_case(seed++, dt, 2, 1, d, {70}, {75}, false, false);
        INFO("tiling " << tiling);
        CHECK(run_twin(c, tiling, {}) == "");
      }
}

TEST_CASE("fused twin: GQA ratios, causal with Tq < Tk, varlen with empty key ranges", "[fused][twin]") {
  uint64_t seed = 100;
  for (int ratio : {1, 2, 4, 8}) {
    const AttnCase c =
        make_case(seed++, DType::f16, 8, 8 / ratio, 64, {5, 33, 0, 17, 3}, {40, 33, 7, 0, 130}, true, false);
    INFO("ratio " << ratio);
    CHECK(run_twin(c, ratio % kern::kNumFusedTilings, {}) == "");
  }
}

TEST_CASE("fused twin: masks with fully masked rows, empty-row conventions", "[fused][twin]") {
  const AttnCase c = make_case(7, DType::bf16, 4, 2, 64, {9, 20, 6}, {30, 0, 70}, true, true);
  CHECK(run_twin(c, 0, {}) == "");
  kern::FusedOptions fa2;
  fa2.empty_lse_sign = 1;
  CHECK(run_twin(c, 1, fa2) == "");
  kern::FusedOptions log2;
  log2.lse_base = 2;
  CHECK(run_twin(c, 2, log2) == "");
}

TEST_CASE("fused twin: a late outlier forces a rescale (seed section 3)", "[fused][twin]") {
  // Row logits ~ N(0, 3^2) with one key far above the rest near the end: the running max jumps
  // in the last key tile and everything banked before must be rescaled by alpha ~ 0.
  AttnCase c = make_case(11, DType::f16, 1, 1, 64, {4}, {200}, false, false, 1.0f);
  const int d = 64;
  for (int i = 0; i < d; ++i) {
    c.k[size_t(190 * d + i)] =
        round_to_input(DType::f16, 4.0f * kern::load_as_float(DType::f16, c.q[size_t(i)]));
  }
  for (int tiling = 0; tiling < kern::kNumFusedTilings; ++tiling) CHECK(run_twin(c, tiling, {}) == "");
}

TEST_CASE("fused twin: a test that can fail (wrong GQA mapping is caught)", "[fused][twin]") {
  // Swap KV heads in the input after building the reference case: the comparison must fail.
  AttnCase c = make_case(12, DType::f16, 4, 2, 64, {8}, {40}, false, false);
  std::vector<uint16_t> out(size_t(c.total_q() * c.heads * c.head_size));
  std::vector<float> lse(size_t(c.total_q() * c.heads));
  AttnCase swapped = c;
  for (int64_t t = 0; t < c.total_k(); ++t)
    for (int i = 0; i < 64; ++i)
      std::swap(swapped.k[size_t((t * 2) * 64 + i)], swapped.k[size_t((t * 2 + 1) * 64 + i)]);
  ac_attention_args a = host_args(swapped, out.data(), lse.data(), 0);
  char err[256];
  REQUIRE(kern::fused_attention_host(a, {}, err, sizeof err) == AC_OK);
  CHECK(compare_with_exact(c, out, &lse, {}) != "");
}

TEST_CASE("fused twin: refuses bad input with a message naming it", "[fused][twin]") {
  AttnCase c = make_case(13, DType::f16, 2, 1, 64, {4}, {4}, false, false);
  std::vector<uint16_t> out(size_t(c.total_q() * c.heads * 64));
  char err[256];
  auto refused = [&](ac_attention_args a, const char* word, kern::FusedOptions o = {}) {
    err[0] = 0;
    const int rc = kern::fused_attention_host(a, o, err, sizeof err);
    INFO(err);
    return rc == AC_ERR_UNSUPPORTED && std::strstr(err, word) != nullptr;
  };
  ac_attention_args a = host_args(c, out.data(), nullptr, 0);
  ac_attention_args b = a;
  b.dtype = AC_DTYPE_F32;
  CHECK(refused(b, "fp32"));
  b = a;
  b.head_size = 96;
  CHECK(refused(b, "head size 96"));
  b = a;
  b.tiling = kern::kNumFusedTilings;
  CHECK(refused(b, "tiling"));
  b = a;
  b.num_kv_heads = 3;
  CHECK(refused(b, "num_kv_heads"));
  kern::FusedOptions o;
  o.lse_base = 10;
  CHECK(refused(a, "lse_base", o));
}
