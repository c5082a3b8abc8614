// Mutant 13 on the GPU: K/V tile offsets computed in 32 bits. It needs a tensor past
// 2^31 elements, a regression shape of a real overflow: 128 KV heads x 128 dims x (2^31 / (128 * 128) + 8)
// = 131080 tokens, fp16, 4.29 GB each for K and V (8.6 GB of device memory).
//
// Input, chosen so the exact answer is known by hand: one query token, 128 query heads (group 1),
// q = e_0 (one-hot), softmax scale 1; K = 0 and V = 0 everywhere except the last 8 tokens (all
// past element 2^31 of K and V), where k[0] = 20 and V = 1. So the logits are 0 for 131072 keys
// and 20 for 8 keys:
//   O   = 8 e^20 / (8 e^20 + 131072) = 1 / (1 + 16384 e^-20) = 0.9999663 -> fp16 1.0 exactly
//         (the fp16 neighbours are 1 and 1 - 2^-11 = 0.99951; 1 - 3.4e-5 rounds to 1);
//   LSE = ln(8 e^20 + 131072) = 20 + ln 8 + ln(1 + 16384 e^-20).
// The mutant reads the last tile from 2^31 elements before it (a device fault, or K/V rows that
// are not the ones asked for: O far from 1). Either is a kill. It runs last: a fault ends the
// context.
// Check: ctest --test-dir build -L large -R mutants   (tagged [large]; GPU with >= 10 GB free)
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>

#if defined(ATTNCHECK_HAVE_CUDA)
#include "common/storage.h"
#include "gpu_attention.hpp"

TEST_CASE("mutant 13: 32-bit K/V offsets wrap past 2^31 elements", "[large][mutants]") {
  constexpr int kHeads = 128, kD = 128;
  constexpr int kTokens = int((int64_t(1) << 31) / (kHeads * kD)) + 8;  // 131080
  static_assert(int64_t(kTokens) * kHeads * kD > (int64_t(1) << 31));
  mtg::DeviceAttention a(kHeads, kHeads, kD, 1, kTokens);
  mtg::check(cudaMemset(a.k.p, 0, a.k.n * 2), "memset k");
  mtg::check(cudaMemset(a.v.p, 0, a.v.n * 2), "memset v");
  const uint16_t one = attncheck::kern::float_to_f16(1.0f), twenty = attncheck::kern::float_to_f16(20.0f);
  std::vector<uint16_t> q(size_t(kHeads) * kD, 0);
  for (int hd = 0; hd < kHeads; ++hd) q[size_t(hd) * kD] = one;
  a.q.upload(q);
  std::vector<uint16_t> k_tail(size_t(8) * kHeads * kD, 0), v_tail(size_t(8) * kHeads * kD, one);
  for (int t = 0; t < 8; ++t)
    for (int hd = 0; hd < kHeads; ++hd) k_tail[(size_t(t) * kHeads + hd) * kD] = twenty;
  const size_t tail_offset = size_t(kTokens - 8) * kHeads * kD;
  REQUIRE(tail_offset >= (size_t(1) << 31));  // a 32-bit signed offset wraps here
  mtg::check(cudaMemcpy(a.k.p + tail_offset, k_tail.data(), k_tail.size() * 2, cudaMemcpyHostToDevice),
             "k tail");
  mtg::check(cudaMemcpy(a.v.p + tail_offset, v_tail.data(), v_tail.size() * 2, cudaMemcpyHostToDevice),
             "v tail");

  const double want_lse = 20.0 + std::log(8.0) + std::log1p(16384.0 * std::exp(-20.0));

  std::string err;
  REQUIRE(a.run(mtg::cuda_subject("fused"), &err) == AC_OK);
  {
    const auto out = a.out.download();
    const auto lse = a.lse.download();
    int wrong = 0;
    for (uint16_t o : out) wrong += o != one;
    CHECK(wrong == 0);
    for (float l : lse) REQUIRE(std::fabs(double(l) - want_lse) < 1e-4);
  }

  const int rc = a.run(mtg::cuda_subject("mutant-fused-offsets-32bit"), &err);
  INFO("mutant returned " << rc << " " << err);
  if (rc == AC_OK) {
    const auto out = a.out.download();
    int wrong = 0;
    for (uint16_t o : out) wrong += o != one;
    INFO("elements of O that are not 1.0: " << wrong << " of " << out.size());
    CHECK(wrong > 0);
  } else {
    CHECK(rc == AC_ERR_DEVICE);  // the wrapped offset left the allocation: a device fault
  }
}
#endif
