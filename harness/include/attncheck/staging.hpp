// What every subject adapter does alike to a case before the call, wherever the subject's memory
// is (AbiSubject: the process or its GPU; WorkerSubject: a worker's shared arena): the patterns
// outputs are poisoned with, the check of each case tensor's size, and the packed-sequence offsets
// (cu_seqlens) of an attention case.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attncheck/plugin_abi.h"
#include "attncheck/subject.hpp"

namespace attncheck {

// Bit patterns the adapters write into outputs before each call (quiet NaNs with a payload), so an
// element the subject never wrote reads back as NaN instead of stale zeros.
constexpr uint32_t kPoisonF32 = 0x7fc0deadu;
constexpr uint32_t kPoisonF16 = 0x7e5au;
constexpr uint32_t kPoisonBf16 = 0x7fdau;
uint32_t poison_bits(ac_dtype d);

// An empty Bits with room for n elements, for a case's output copied out of the subject's memory.
// Its pages are advised as transparent huge pages before their first write (madvise; ordinary
// pages where the kernel declines): a fresh 16 M-element output otherwise takes one page fault per
// 4 KiB, and in a virtual machine whose pages come back from its host each fault is an exit (about
// 25 us: 0.4 s for a 4096 x 32 x 128 merge's output, ten times its copy).
Bits reserve_bits(size_t n);

// SubjectError (internal) naming the tensor when a case tensor has `got` elements, not `want`.
void require_tensor_size(const char* what, size_t got, size_t want);
// The same for each tensor of a merge case against its shape.
void require_merge_sizes(const MergeInput& in);

// The sequences of an attention case packed back to back, as ac_attention_args describes them.
struct PackedSequences {
  std::vector<int32_t> cu_q, cu_k;  // num_seqs + 1 offsets: each sequence's first query / key row
  std::vector<int64_t> cu_mask;     // num_seqs + 1 offsets: each sequence's [Tq_i, Tk_i] mask block
  int32_t max_q = 0, max_k = 0;     // the longest sequence's queries / keys

  int32_t num_seqs() const { return int32_t(cu_q.size()) - 1; }
  int64_t total_q() const { return cu_q.back(); }
  int64_t total_k() const { return cu_k.back(); }
};
// The offsets of `in`'s sequences, with q, k, v and a mask (when there is one) checked against
// them; SubjectError (internal) when the per-sequence lengths or a tensor's size disagree.
PackedSequences pack_sequences(const AttentionInput& in);

}  // namespace attncheck
