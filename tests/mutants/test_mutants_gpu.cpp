// Mutant 12 on the GPU: the fused kernel without the barrier that keeps a K/V buffer
// alive until every warp has finished reading it. A race has no host twin, so it is caught on the
// device in two ways:
//   - compute-sanitizer racecheck reports the shared-memory hazard (deterministic):
//       compute-sanitizer --tool racecheck --error-exitcode 99 mutants_gpu "[race]"   -> rc 99
//     while the correct kernel gives rc 0 on the same input ("[mutants]" cases below);
//   - run to run, the racy kernel's output differs from the correct kernel's (bitwise) on a shape
//     with many key tiles; a race that does not fire in 30 launches fails that check (the test
//     then says so; racecheck remains the reliable killer).
// The "[race]" case is hidden ([.]) so the default run and sanitizer sweeps (tests/gpu) only see
// the correct kernel; ctest runs it as mutants_gpu_race.
// Check: ctest --test-dir build -L gpu -R mutants
#include <catch2/catch.hpp>
#include <cstdint>

#if defined(ATTNCHECK_HAVE_CUDA)
#include <memory>

#include "common/storage.h"
#include "gpu_attention.hpp"

namespace {

// 8 heads, d = 128, 256 queries x 2048 keys: 32 key tiles per CTA, 4 warps per CTA, so a fast
// warp's prefetch has 31 chances per CTA to overwrite a buffer a slow warp is still reading.
std::unique_ptr<mtg::DeviceAttention> race_shape() {
  auto a = std::make_unique<mtg::DeviceAttention>(8, 8, 128, 256, 2048);
  a->scale = 0.08838834764831845f;  // 1 / sqrt(128)
  uint32_t state = 12345u;
  auto next = [&state] {  // LCG, values in [-2, 2) as fp16 (exact: multiples of 2^-8)
    state = state * 1664525u + 1013904223u;
    const float x = float(int((state >> 8) & 1023u) - 512) / 256.0f;
    return attncheck::kern::float_to_f16(x);
  };
  for (auto* buf : {&a->q, &a->k, &a->v}) {
    std::vector<uint16_t> host(buf->n);
    for (auto& x : host) x = next();
    buf->upload(host);
  }
  return a;
}

}  // namespace

TEST_CASE("correct fused kernel on the race shape is bitwise reproducible", "[mutants]") {
  auto a = race_shape();
  REQUIRE(a->run(mtg::cuda_subject("fused")) == AC_OK);
  const auto first = a->out.download();
  for (int i = 0; i < 5; ++i) {
    REQUIRE(a->run(mtg::cuda_subject("fused")) == AC_OK);
    REQUIRE(a->out.download() == first);
  }
}

TEST_CASE("mutant 12: the missing barrier changes the output run to run", "[.race][mutants]") {
  auto a = race_shape();
  REQUIRE(a->run(mtg::cuda_subject("fused")) == AC_OK);
  const auto reference = a->out.download();
  int differing = 0;
  for (int i = 0; i < 30; ++i) {
    std::string err;
    const int rc = a->run(mtg::cuda_subject("mutant-fused-missing-barrier"), &err);
    INFO(err);
    REQUIRE(rc == AC_OK);
    differing += a->out.download() != reference;
  }
  INFO("launches whose output differs bitwise from the correct kernel's: " << differing << " of 30");
  CHECK(differing > 0);
}
#endif
