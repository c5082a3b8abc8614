// Sequence offsets (see offsets.hpp). Its own translation unit with external linkage, built
// without fast.cpp's AVX2 flags, so the exact path and the harness never run an AVX2 copy.
#include "attncheck/reference/offsets.hpp"

#include <cstddef>

namespace attncheck::ref {

SequenceOffsets sequence_offsets(const std::vector<int32_t>& seqlens_q,
                                 const std::vector<int32_t>& seqlens_k) {
  SequenceOffsets o;
  const size_t b = seqlens_q.size();
  o.q.assign(b + 1, 0);
  o.k.assign(b + 1, 0);
  o.mask.assign(b + 1, 0);
  for (size_t s = 0; s < b; ++s) {
    o.q[s + 1] = o.q[s] + seqlens_q[s];
    o.k[s + 1] = o.k[s] + seqlens_k[s];
    o.mask[s + 1] = o.mask[s] + int64_t{seqlens_q[s]} * seqlens_k[s];
  }
  return o;
}

}  // namespace attncheck::ref
