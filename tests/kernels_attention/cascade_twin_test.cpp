// Host-twin tests of cascade attention (kernels/cascade/cascade_host.cpp): prefix pass + causal
// chunk pass + merge must equal causal attention over prefix and chunk back to back (fp64 of
// attention_case.h), including sequences with no cached prefix (the merge's one-empty case) and
// an empty chunk. The bound adds one rounding of O: the partials are stored in the input type.
// Run: ctest --test-dir build -R kernels_attention_twin
#include <catch2/catch.hpp>

#include "cascade/cascade.h"
#include "cascade_case.h"

using namespace attncheck;
using namespace attncheck::test;

TEST_CASE("cascade twin: equals causal attention over prefix + chunk", "[cascade][twin]") {
  uint64_t seed = 900;
  for (DType dt : {DType::f16, DType::bf16})
    for (int tiling = 0; tiling < 4; ++tiling) {
      const CascadeCase cc = make_cascade_case(seed++, dt, 4, 2, 64, {100, 0, 37, 5}, {20, 9, 0, 70});
      const AttnCase& w = cc.whole;
      const size_t n_out = size_t(w.total_q() * w.heads * w.head_size), n_lse = size_t(w.total_q() * w.heads);
      std::vector<uint16_t> po(n_out), so(n_out), out(n_out, 0xbeef);
      std::vector<float> pl(n_lse), sl(n_lse), lse(n_lse, 1234.0f);
      ac_attention_args p = host_args(w, po.data(), pl.data(), tiling);
      p.causal = 0;
      p.k = cc.pk.data();
      p.v = cc.pv.data();
      p.cu_seqlens_k = p.cu_seqlens_k_host = cc.cu_pk.data();
      ac_attention_args s = host_args(w, so.data(), sl.data(), 3 - tiling);
      s.k = cc.sk.data();
      s.v = cc.sv.data();
      s.cu_seqlens_k = s.cu_seqlens_k_host = cc.cu_sk.data();
      char err[256] = {0};
      REQUIRE(kern::cascade_attention_host(p, s, out.data(), lse.data(), err, sizeof err) == AC_OK);
      INFO("tiling " << tiling);
      Conventions conv;
      conv.extra_o_roundings = 1;  // the partial O is rounded to the input type before the merge
      CHECK(compare_with_exact(w, out, &lse, conv) == "");
    }
}

TEST_CASE("cascade twin: refuses a causal prefix pass and missing partial buffers", "[cascade][twin]") {
  const CascadeCase cc = make_cascade_case(950, DType::f16, 2, 1, 64, {8}, {4});
  const AttnCase& w = cc.whole;
  std::vector<uint16_t> po(size_t(w.total_q() * 2 * 64)), so(po.size()), out(po.size());
  std::vector<float> pl(size_t(w.total_q() * 2)), sl(pl.size());
  ac_attention_args p = host_args(w, po.data(), pl.data(), 0);
  ac_attention_args s = host_args(w, so.data(), sl.data(), 0);
  char err[256];
  CHECK(kern::cascade_attention_host(p, s, out.data(), nullptr, err, sizeof err) == AC_ERR_UNSUPPORTED);
  p.causal = 0;
  s.lse = nullptr;
  CHECK(kern::cascade_attention_host(p, s, out.data(), nullptr, err, sizeof err) == AC_ERR_UNSUPPORTED);
}
