// The benchmarks' input: one sequence of tq queries and tk keys, fp16 Q, K, V drawn from N(0, 1)
// and rounded once to fp16 (round_to_format, nearest-even), scale 1/sqrt(d) in fp32, no mask.
// Shared by reference_bench and fast_bench so both time the same kind of problem. Not a test.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "attncheck/reference/reference.hpp"

namespace attncheck::ref::bench {

inline AttentionProblem random_problem(int32_t tq, int32_t tk, int32_t h, int32_t hkv, int32_t d, bool causal,
                                       std::mt19937_64& rng) {
  std::normal_distribution<double> n01(0.0, 1.0);
  AttentionProblem pb{
      Format::fp16, h,  hkv, d, {tq}, {tk}, causal, {}, 1.0f / std::sqrt(static_cast<float>(d)),
      {},           {}, {},  0, 0.0f, -1,   -1,     {}, {},
      {},           {}};
  auto fill = [&](std::vector<uint32_t>& t, size_t n) {
    t.resize(n);
    for (auto& b : t) b = round_to_format(Format::fp16, n01(rng));
  };
  fill(pb.q, static_cast<size_t>(tq) * h * d);
  fill(pb.k, static_cast<size_t>(tk) * hkv * d);
  fill(pb.v, static_cast<size_t>(tk) * hkv * d);
  return pb;
}

}  // namespace attncheck::ref::bench
