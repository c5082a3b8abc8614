// Where each sequence of packed varlen tensors begins: prefix sums of seqlens_q (query rows),
// seqlens_k (key rows) and seqlens_q * seqlens_k (mask entries), one entry per sequence plus the
// total at the back. Integer only (int64, no rounding anywhere). The exact and fast references
// index their problems with it, and the harness's subject adapters derive cu_seqlens from it.
#pragma once
#include <cstdint>
#include <vector>

namespace attncheck::ref {

struct SequenceOffsets {
  std::vector<int64_t> q, k, mask;
};
// seqlens_k has at least as many entries as seqlens_q (callers check that they agree).
SequenceOffsets sequence_offsets(const std::vector<int32_t>& seqlens_q,
                                 const std::vector<int32_t>& seqlens_k);

}  // namespace attncheck::ref
