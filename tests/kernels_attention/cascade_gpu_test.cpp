// GPU test of cascade attention (kernels/cascade/cascade.cu), label `gpu`: prefix pass + causal
// chunk pass + merge against fp64 causal attention over prefix and chunk back to back, fp16 and
// bf16, d 64 and 128, GQA, sequences without a prefix and with an empty chunk.
// Run: ctest --test-dir build -L gpu -R kernels_attention
#include <catch2/catch.hpp>

#include "cascade/cascade.h"
#include "cascade_case.h"
#include "device_case.h"

using namespace attncheck;
using namespace attncheck::test;

TEST_CASE("cascade gpu: equals causal attention over prefix + chunk", "[cascade][gpu]") {
  uint64_t seed = 9000;
  for (DType dt : {DType::f16, DType::bf16})
    for (int d : {64, 128}) {
      const CascadeCase cc = make_cascade_case(seed++, dt, 8, 2, d, {1000, 0, 37, 5}, {200, 9, 0, 70});
      const AttnCase& w = cc.whole;
      const size_t n_out = size_t(w.total_q() * w.heads * w.head_size), n_lse = size_t(w.total_q() * w.heads);
      DeviceArray<uint16_t> q(w.q), pk(cc.pk), pv(cc.pv), sk(cc.sk), sv(cc.sv), po(n_out), so(n_out),
          out(n_out);
      DeviceArray<float> pl(n_lse), sl(n_lse), lse(n_lse);
      DeviceArray<int32_t> cu_q(w.cu_q), cu_pk(cc.cu_pk), cu_sk(cc.cu_sk);
      ac_attention_args p = host_args(w, po.ptr, pl.ptr, 0);
      p.q = q.ptr;
      p.cu_seqlens_q = cu_q.ptr;
      p.causal = 0;
      p.k = pk.ptr;
      p.v = pv.ptr;
      p.cu_seqlens_k = cu_pk.ptr;
      p.cu_seqlens_k_host = cc.cu_pk.data();
      ac_attention_args s = host_args(w, so.ptr, sl.ptr, 2);
      s.q = q.ptr;
      s.cu_seqlens_q = cu_q.ptr;
      s.k = sk.ptr;
      s.v = sv.ptr;
      s.cu_seqlens_k = cu_sk.ptr;
      s.cu_seqlens_k_host = cc.cu_sk.data();
      char err[256] = {0};
      REQUIRE(kern::cascade_attention_cuda(p, s, out.ptr, lse.ptr, err, sizeof err) == AC_OK);
      const std::vector<float> lse_host = lse.to_host();
      Conventions conv;
      conv.extra_o_roundings = 1;  // the partial O is rounded to the input type before the merge
      CHECK(compare_with_exact(w, out.to_host(), &lse_host, conv) == "");
    }
}
