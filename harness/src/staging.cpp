// What every subject adapter stages alike (see staging.hpp).
#include "attncheck/staging.hpp"

#include <algorithm>
#include <string>

namespace attncheck {

uint32_t poison_bits(ac_dtype d) {
  return d == AC_DTYPE_F32 ? kPoisonF32 : d == AC_DTYPE_F16 ? kPoisonF16 : kPoisonBf16;
}

void require_tensor_size(const char* what, size_t got, size_t want) {
  if (got != want)
    throw SubjectError(SubjectError::Kind::internal, std::string("case tensor ") + what + " has " +
                                                         std::to_string(got) + " elements, expected " +
                                                         std::to_string(want));
}

PackedSequences pack_sequences(const AttentionInput& in) {
  if (in.seqlens_q.size() != in.seqlens_k.size())
    throw SubjectError(SubjectError::Kind::internal, "seqlens_q and seqlens_k differ in length");
  const size_t n = in.seqlens_q.size();
  PackedSequences p;
  p.cu_q.assign(n + 1, 0);
  p.cu_k.assign(n + 1, 0);
  p.cu_mask.assign(n + 1, 0);
  for (size_t s = 0; s < n; ++s) {
    p.cu_q[s + 1] = p.cu_q[s] + in.seqlens_q[s];
    p.cu_k[s + 1] = p.cu_k[s] + in.seqlens_k[s];
    p.cu_mask[s + 1] = p.cu_mask[s] + int64_t(in.seqlens_q[s]) * in.seqlens_k[s];
    p.max_q = std::max(p.max_q, in.seqlens_q[s]);
    p.max_k = std::max(p.max_k, in.seqlens_k[s]);
  }
  const size_t n_q = size_t(p.total_q() * in.num_heads * in.head_size);
  const size_t n_kv = size_t(p.total_k() * in.num_kv_heads * in.head_size);
  require_tensor_size("q", in.q.size(), n_q);
  require_tensor_size("k", in.k.size(), n_kv);
  require_tensor_size("v", in.v.size(), n_kv);
  if (!in.mask.empty()) require_tensor_size("mask", in.mask.size(), size_t(p.cu_mask.back()));
  return p;
}

}  // namespace attncheck
