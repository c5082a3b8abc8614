// CUDA textbook attention (kernels/textbook/textbook.cu) on the GPU: the host twin's suite
// (GQA, bottom-right causal, mask with a fully masked row, varlen with zero-length ranges, every
// dtype, head sizes 1 / 16 / 33 / 64, safe and naive) against fp64, plus agreement with the twin
// (same fma orders for S and P V; they differ only where exp does) and the naive fp16 band.
// Small shapes, suitable for compute-sanitizer memcheck / racecheck.
#include <catch2/catch.hpp>

#if defined(ATTNCHECK_HAVE_CUDA)
#include "kb_device.hpp"
#include "textbook_cases.hpp"

using namespace attncheck::kern;
using kb::DType;

namespace {

kb::TextbookResult run_one(const kb::AttnCase& c, bool naive, bool gpu) {
  kb::TextbookResult r;
  r.out = kb::Tensor(c.type, size_t(c.total_q) * c.heads * c.d);
  r.lse.assign(size_t(c.total_q) * c.heads, 777.0f);
  TextbookOptions o;
  o.naive_softmax = naive;
  o.score_as_input = naive;
  o.bytes_allocated = &r.bytes;
  char err[256] = {0};
  if (!gpu) {
    const ac_attention_args a =
        kb::textbook_args(c, c.q.data(), c.k.data(), c.v.data(), r.out.data(), r.lse.data(), c.mask.data(),
                          c.cu_q.data(), c.cu_k.data(), c.cu_mask.data());
    REQUIRE(textbook_attention_host(a, o, err, sizeof err) == AC_OK);
    return r;
  }
  kb::DeviceBuffer dq(c.q.bytes), dk(c.k.bytes), dv(c.v.bytes), dout(r.out.bytes.size()), dlse(r.lse);
  kb::DeviceBuffer dmask(c.mask), dcuq(c.cu_q), dcuk(c.cu_k), dcum(c.cu_mask);
  KB_CUDA(cudaMemset(dout.ptr, 0x7f, r.out.bytes.size()));
  const ac_attention_args a =
      kb::textbook_args(c, dq.ptr, dk.ptr, dv.ptr, dout.ptr, dlse.as<float>(), dmask.as<uint8_t>(),
                        dcuq.as<int32_t>(), dcuk.as<int32_t>(), dcum.as<int64_t>());
  const int rc = textbook_attention_cuda(a, o, err, sizeof err);
  INFO(err);
  REQUIRE(rc == AC_OK);
  if (r.out.bytes.size()) dout.to_host(r.out.bytes);
  dlse.to_host(r.lse);
  return r;
}

kb::TextbookResult run_gpu_and_twin(const kb::AttnCase& c, bool naive) {
  const kb::TextbookResult g = run_one(c, naive, true), h = run_one(c, naive, false);
  REQUIRE(g.bytes == h.bytes);
  // exp differs by an ulp or two between CUDA and libm, which can move a rounded P by one ulp of
  // the input type: that moves O by at most u * max|v| per key it hits
  double max_v = 0;
  for (size_t i = 0; i < c.v.size(); ++i) max_v = std::max(max_v, std::fabs(c.v.get(i)));
  const double p_flip = 4 * kb::unit_roundoff(c.type) * max_v + 64 * std::ldexp(1.0, -24) * max_v;
  for (size_t i = 0; i < g.out.size(); ++i) {
    INFO("gpu vs twin element " << i << " gpu " << g.out.get(i) << " twin " << h.out.get(i));
    if (std::isnan(h.out.get(i))) {
      REQUIRE(std::isnan(g.out.get(i)));
    } else {
      REQUIRE(std::fabs(g.out.get(i) - h.out.get(i)) <= 2 * kb::ulp_at(c.type, h.out.get(i)) + p_flip);
    }
  }
  for (size_t i = 0; i < g.lse.size(); ++i)
    REQUIRE((g.lse[i] == h.lse[i] || std::fabs(g.lse[i] - h.lse[i]) <= 1e-5 * (1 + std::fabs(h.lse[i]))));
  return g;
}

}  // namespace

TEST_CASE("textbook gpu: GQA, causal, mask, varlen against fp64 and the twin; bytes of S and P") {
  kb::check_textbook_suite(run_gpu_and_twin, 12);
}

TEST_CASE("textbook gpu: naive variant overflows in the fp16 band") {
  kb::check_naive_fp16_overflow([](const kb::AttnCase& c, bool naive) { return run_one(c, naive, true); });
}

TEST_CASE("textbook gpu: a longer sequence (several tiles, 300 keys), fp16 d = 128") {
  kb::AttnCase c;
  c.type = DType::f16;
  c.heads = 4;
  c.kv_heads = 1;
  c.d = 128;
  c.seq_q = {70};
  c.seq_k = {300};
  c.causal = true;
  std::mt19937_64 rng(4);
  c.build(rng);
  kb::check_textbook(c, run_gpu_and_twin(c, false), false, "long");
}
#endif
