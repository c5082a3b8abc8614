// Where each sequence of a varlen AttentionProblem begins in the packed tensors: prefix sums of
// seqlens_q (query tokens), seqlens_k (key tokens) and seqlens_q * seqlens_k (mask entries), one
// entry per sequence plus the total at the back. Integer only (int64, no rounding anywhere).
// Shared by the exact path (exact.cpp) and the fast path (fast.cpp). Internal linkage on purpose:
// fast.cpp is compiled with -mavx2 -mfma, and an inline function with external linkage could let
// the linker hand that AVX2 copy to exact.cpp as well.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attncheck/reference/exact.hpp"

namespace attncheck::ref {
namespace {

struct Offsets {
  std::vector<int64_t> q, k, mask;
};

Offsets offsets_of(const AttentionProblem& pb) {
  Offsets o;
  const size_t b = pb.seqlens_q.size();
  o.q.assign(b + 1, 0);
  o.k.assign(b + 1, 0);
  o.mask.assign(b + 1, 0);
  for (size_t s = 0; s < b; ++s) {
    o.q[s + 1] = o.q[s] + pb.seqlens_q[s];
    o.k[s + 1] = o.k[s] + pb.seqlens_k[s];
    o.mask[s + 1] = o.mask[s] + int64_t{pb.seqlens_q[s]} * pb.seqlens_k[s];
  }
  return o;
}

}  // namespace
}  // namespace attncheck::ref
