// What every subject adapter stages alike (see staging.hpp).
#include "attncheck/staging.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <string>
#include <utility>

#include "attncheck/reference/offsets.hpp"

namespace attncheck {

uint32_t poison_bits(ac_dtype d) {
  // An FP8 output (a quantiser's) is poisoned with its format's NaN: the one code a quantiser
  // writes only for a NaN or, unsaturated, an overflow, so an element it never wrote is seen.
  if (is_fp8(d)) return d == AC_DTYPE_E4M3FNUZ ? 0x80u : 0x7fu;
  return d == AC_DTYPE_F32 ? kPoisonF32 : d == AC_DTYPE_F16 ? kPoisonF16 : kPoisonBf16;
}

Bits reserve_bits(size_t n) {
  Bits out;
  out.reserve(n);
  // Only whole huge pages inside the allocation: the advice covers address ranges, not objects.
  constexpr uintptr_t kHuge = uintptr_t(1) << 21;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(out.data()) + kHuge - 1) & ~(kHuge - 1),
                  end = reinterpret_cast<uintptr_t>(out.data() + n) & ~(kHuge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  return out;
}

void require_tensor_size(const char* what, size_t got, size_t want) {
  if (got != want)
    throw SubjectError(SubjectError::Kind::internal, std::string("case tensor ") + what + " has " +
                                                         std::to_string(got) + " elements, expected " +
                                                         std::to_string(want));
}

void require_merge_sizes(const MergeInput& in) {
  const int64_t tokens = in.num_tokens, heads = in.num_heads;
  const size_t n_out = size_t(tokens * heads * in.head_size), n_lse = size_t(tokens * heads);
  require_tensor_size("prefix_out", in.prefix_out.size(), n_out);
  require_tensor_size("suffix_out", in.suffix_out.size(), n_out);
  require_tensor_size("prefix_lse", in.prefix_lse.size(), n_lse);
  require_tensor_size("suffix_lse", in.suffix_lse.size(), n_lse);
}

PackedSequences pack_sequences(const AttentionInput& in) {
  if (in.seqlens_q.size() != in.seqlens_k.size())
    throw SubjectError(SubjectError::Kind::internal, "seqlens_q and seqlens_k differ in length");
  ref::SequenceOffsets offsets = ref::sequence_offsets(in.seqlens_q, in.seqlens_k);
  PackedSequences p;
  // ac_attention_args's offsets are 32-bit; a case's totals are far below 2^31 (case.cpp's kMaxDim).
  p.cu_q.assign(offsets.q.begin(), offsets.q.end());
  p.cu_k.assign(offsets.k.begin(), offsets.k.end());
  p.cu_mask = std::move(offsets.mask);
  for (const int32_t n : in.seqlens_q) p.max_q = std::max(p.max_q, n);
  for (const int32_t n : in.seqlens_k) p.max_k = std::max(p.max_k, n);
  const size_t n_q = size_t(p.total_q() * in.num_heads * in.head_size);
  // K and V hold total_k rows, or a paged input's whole pool (num_pages x page_size rows).
  const size_t rows = size_t(in.kv_rows()), n_k = rows * size_t(in.num_kv_heads) * size_t(in.head_size),
               n_v = rows * size_t(in.num_kv_heads) * size_t(in.dv());
  require_tensor_size("q", in.q.size(), n_q);
  require_tensor_size("k", in.k.size(), n_k);
  require_tensor_size("v", in.v.size(), n_v);
  if (in.paged())
    require_tensor_size("block_table", in.block_table.size(), in.seqlens_k.size() * size_t(in.max_blocks));
  if (!in.sinks.empty()) require_tensor_size("sinks", in.sinks.size(), size_t(in.num_heads));
  if (!in.mask.empty()) require_tensor_size("mask", in.mask.size(), size_t(p.cu_mask.back()));
  return p;
}

}  // namespace attncheck
