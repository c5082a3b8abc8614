// Host-twin tests of the engines' variants (plugin_abi.h AC_VAR_*) in the fused and split-KV twins
// (kernels/fused/fused_twin.h), run on CI without a GPU: the cases of variant_case.h (paged K / V at
// every declared page size with poisoned spare slots, softcap 1 and 30, windows, sinks, their
// combinations) against the fp64 attention with the variants, no NaN from a poisoned slot; the
// variant mutants 19 to 23 leave the bound on their cases while the correct twins stay inside. The
// twins' own V head sizes (64 / 32, MLA's 192 / 128 and 576 / 512) against the same fp64 attention,
// and mutant 25, which reads V rows at the QK head size, outside its bound.
// The GPU test (variants_gpu_test.cpp) runs the same cases on the CUDA kernels.
// Run: ctest --test-dir build -R kernels_attention_twin
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "fused/fused.h"
#include "hopper/hopper.h"
#include "splitkv/splitkv.h"
#include "variant_case.h"

using namespace attncheck;
using namespace attncheck::test;

namespace {

struct TwinRun {
  int rc;
  std::string err;
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

// The fused twin (split = false) or the split-KV twin on a case with its variants, in host memory.
// v_in_k: V inside K (AC_VAR_V_IN_K), v pointing at k (or K's pool).
TwinRun run_twin(const VariantCase& vc, bool split,
                 kern::fused::Mutation mutation = kern::fused::Mutation::none, bool v_in_k = false) {
  const AttnCase& c = vc.c;
  TwinRun r;
  r.out.assign(size_t(c.total_q() * c.heads * c.dv()), 0x7f7f);
  r.lse.assign(size_t(c.total_q() * c.heads), 12345.0f);
  PagedKV pk;
  if (vc.var.page_size > 0) pk = page_case(c, vc.var.page_size, 77);
  ac_attention_args a = variant_args(
      host_args(c, r.out.data(), r.lse.data(), split ? vc.split_tiling : vc.tiling), vc.var,
      vc.var.page_size > 0 ? &pk : nullptr, pk.k.data(), pk.v.data(), pk.table.data(), vc.var.sinks.data());
  if (v_in_k) {
    a.v = a.k;
    a.v_in_k = 1;
  }
  char err[256] = {0};
  if (split) {
    a.num_splits = vc.splits;
    a.fold_order = vc.fold;
    kern::SplitKVOptions o;
    o.mutation = mutation;
    r.rc = kern::splitkv_attention_host(a, o, err, sizeof err);
  } else {
    kern::FusedOptions o;
    o.mutation = mutation;
    r.rc = kern::fused_attention_host(a, o, err, sizeof err);
  }
  r.err = err;
  return r;
}

// Both twins on each case: no NaN, and O and LSE within the fp64 reference's bound.
void check_twins_against_fp64(const std::vector<VariantCase>& cases) {
  for (const VariantCase& vc : cases) {
    INFO(vc.describe());
    for (bool split : {false, true}) {
      INFO((split ? "split-KV twin" : "fused twin"));
      const TwinRun r = run_twin(vc, split);
      REQUIRE(r.rc == AC_OK);
      CHECK(nan_count(vc.c, r.out) == 0);
      CHECK(compare_variants(vc.c, vc.var, r.out, r.lse) == "");
    }
  }
}

}  // namespace

TEST_CASE("fused and split-KV twins: the variants against fp64", "[fused][splitkv][twin][variants]") {
  check_twins_against_fp64(variant_cases());
}

TEST_CASE("fused and split-KV twins: the variant mutants 19-23 leave the bound",
          "[mutants][twin][variants]") {
  using kern::fused::Mutation;
  for (const MutantCase& mc : variant_mutant_cases()) {
    const bool split = mc.mutation == Mutation::sink_every_split;
    INFO("mutant " << int(mc.mutation) << " " << mc.vc.describe());
    const TwinRun good = run_twin(mc.vc, split);
    REQUIRE(good.rc == AC_OK);
    CHECK(compare_variants(mc.vc.c, mc.vc.var, good.out, good.lse) == "");
    const TwinRun bad = run_twin(mc.vc, split, mc.mutation);
    REQUIRE(bad.rc == AC_OK);
    CHECK(compare_variants(mc.vc.c, mc.vc.var, bad.out, bad.lse) != "");
  }
}

TEST_CASE("fused and split-KV twins: V's own head size against fp64", "[fused][splitkv][twin][variants]") {
  check_twins_against_fp64(head_pair_cases());
  check_twins_against_fp64(mla_cases());  // the GPU test's MLA decode cases
}

TEST_CASE("fused and split-KV twins: a pair outside kFusedTwinHeadPairs is refused",
          "[fused][splitkv][twin]") {
  VariantCase vc = v_head_mutant_case();
  vc.c = with_head_size_v(vc.c, 48, 1);  // 64 / 48 is not declared
  for (bool split : {false, true}) {
    const TwinRun r = run_twin(vc, split);
    CHECK(r.rc == AC_ERR_UNSUPPORTED);
    CHECK(r.err.find("V head size 48 differs from the QK head size 64") != std::string::npos);
  }
}

TEST_CASE("fused twin: mutant 25 (V rows at the QK head size) leaves the bound",
          "[mutants][twin][variants]") {
  const VariantCase vc = v_head_mutant_case();
  const TwinRun good = run_twin(vc, false);
  REQUIRE(good.rc == AC_OK);
  CHECK(compare_variants(vc.c, vc.var, good.out, good.lse) == "");
  const TwinRun bad = run_twin(vc, false, kern::fused::Mutation::v_head_from_qk);
  REQUIRE(bad.rc == AC_OK);
  CHECK(compare_variants(vc.c, vc.var, bad.out, bad.lse) != "");
}

TEST_CASE(
    "fused-hopper twin: paged K / V, softcap, window and sinks against fp64, undeclared page sizes refused",
    "[hopper][twin][variants]") {
  // The variant cases at fused-hopper's page sizes (hopper_page_size), each on the Hopper tiling of
  // its fused tiling's index: the twin (fused's walk with the Hopper tiles and exponent form) within
  // the fp64 bound, no NaN from a poisoned slot, and a paged case the same bits as contiguous.
  for (VariantCase vc : variant_cases()) {
    vc.var.page_size = hopper_page_size(vc.var.page_size);
    vc.tiling %= kern::kNumHopperTilings;
    INFO(vc.describe());
    const AttnCase& c = vc.c;
    auto run = [&](int page_size, std::vector<uint16_t>& out, std::vector<float>& lse) {
      out.assign(size_t(c.total_q() * c.heads * c.dv()), 0x7f7f);
      lse.assign(size_t(c.total_q() * c.heads), 12345.0f);
      PagedKV pk;
      if (page_size > 0) pk = page_case(c, page_size, 77);
      Variants var = vc.var;
      var.page_size = page_size;
      ac_attention_args a =
          variant_args(host_args(c, out.data(), lse.data(), vc.tiling), var, page_size > 0 ? &pk : nullptr,
                       pk.k.data(), pk.v.data(), pk.table.data(), vc.var.sinks.data());
      char err[256] = {0};
      const int rc = kern::hopper_attention_host(a, {}, err, sizeof err);
      INFO(err);
      REQUIRE(rc == AC_OK);
    };
    std::vector<uint16_t> out, flat_out;
    std::vector<float> lse, flat_lse;
    run(vc.var.page_size, out, lse);
    CHECK(nan_count(c, out) == 0);
    CHECK(compare_variants(c, vc.var, out, lse) == "");
    if (vc.var.page_size == 0) continue;
    run(0, flat_out, flat_lse);
    CHECK(out == flat_out);
    CHECK(std::memcmp(lse.data(), flat_lse.data(), lse.size() * 4) == 0);
  }
  // A page size outside kHopperPageSizes (fused's twin computes 5; the kernel's copies do not) is
  // refused by name before any work.
  VariantCase vc = variant_cases().front();
  std::vector<uint16_t> out(size_t(vc.c.total_q() * vc.c.heads * vc.c.dv()));
  std::vector<float> lse(size_t(vc.c.total_q() * vc.c.heads));
  vc.var.page_size = 5;
  PagedKV pk = page_case(vc.c, 5, 77);
  ac_attention_args a = variant_args(host_args(vc.c, out.data(), lse.data(), 0), vc.var, &pk, pk.k.data(),
                                     pk.v.data(), pk.table.data(), nullptr);
  char err[256] = {0};
  CHECK(kern::hopper_attention_host(a, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  CHECK(std::string(err).find("page size 5 is not one of the declared sizes (16, 64, 256)") !=
        std::string::npos);
}

// V inside K (AC_VAR_V_IN_K): a case whose V is K's first head_size_v columns, called with v == k,
// computes what the same case with V as its own tensor computes, bit for bit, in both twins, paged
// or not; mutant 33 (V read at V's own row stride from K's storage) computes something else; a call
// with v != k, or with V wider than K, is refused by name.
TEST_CASE("twins: V inside K equals V as its own tensor; mutant 33 does not", "[twin][variants]") {
  for (VariantCase vc : head_pair_cases()) {
    AttnCase& c = vc.c;
    const size_t d = size_t(c.head_size), dv = size_t(c.dv()), rows = c.k.size() / d;
    REQUIRE(dv < d);
    for (size_t r = 0; r < rows; ++r)
      for (size_t col = 0; col < dv; ++col) c.v[r * dv + col] = c.k[r * d + col];
    INFO(vc.describe());
    TwinRun fused_own;
    for (bool split : {false, true}) {
      const TwinRun own = run_twin(vc, split),
                    inside = run_twin(vc, split, kern::fused::Mutation::none, true);
      INFO("split " << split << " " << own.err << inside.err);
      REQUIRE(own.rc == AC_OK);
      REQUIRE(inside.rc == AC_OK);
      CHECK(inside.out == own.out);
      CHECK(std::memcmp(inside.lse.data(), own.lse.data(), own.lse.size() * 4) == 0);
      if (!split) fused_own = own;
    }
    const TwinRun bad = run_twin(vc, false, kern::fused::Mutation::v_in_k_own_stride, true);
    REQUIRE(bad.rc == AC_OK);
    CHECK(bad.out != fused_own.out);
  }
  // Refused: v elsewhere than k, and a V head size past K's.
  VariantCase vc = head_pair_cases().front();
  std::vector<uint16_t> out(size_t(vc.c.total_q() * vc.c.heads * vc.c.dv()));
  ac_attention_args a = host_args(vc.c, out.data(), nullptr, vc.tiling);
  a.v_in_k = 1;
  char err[256] = {0};
  CHECK(kern::fused_check_variants(a, err, sizeof err, kern::kTwinScope) == AC_ERR_UNSUPPORTED);
  CHECK(std::string(err).find("V inside K needs v == k") != std::string::npos);
  a.v = a.k;
  CHECK(kern::fused_check_variants(a, err, sizeof err, kern::kTwinScope) == AC_OK);
  a.head_size_v = a.head_size + 1;
  CHECK(kern::fused_check_variants(a, err, sizeof err, kern::kTwinScope) == AC_ERR_UNSUPPORTED);
}
