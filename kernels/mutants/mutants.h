// Deliberately broken variants of the built-in kernels: one per real bug class, each a
// few lines different from its correct kernel and compiled from the same per-element math header
// through a compile-time mutation switch (MergeMutation in merge/merge_math.h, the fused
// Mutation in fused/fused_math.h, SoftmaxVariant::online_l_fp16 in softmax/softmax_math.h), so
// the GPU kernel and its host twin carry the same bug. They are registered as subjects named
// `mutant-<short-name>` (append_mutant_subjects, common/registry.h), never part of the default
// subject list, and `attncheck mutants` proves the default gate kills every one of them.
//
// The table below is the one place a mutant's number, name, bug, correct twin and expected
// killer live; the subjects' descriptions and the self-test's report are generated from it.
// Conventions of every mutant are those of its correct twin (LSE base and layout, empty-row
// sentinel, dtypes, head sizes: its capabilities are copied from the correct twin's subject), so a
// kill is the bug's doing, never a declaration mismatch
// (mutant 4 and mutant 8 are the exceptions by design: their bug IS the mismatch between what is
// declared and what is computed).
// Check: ctest --test-dir build -R mutants
#pragma once
#include <cstddef>
#include <span>
#include <string_view>

#include "attncheck/plugin_abi.h"

namespace attncheck::kern {

struct MutantInfo {
  int number;                   // 1..27, the numbering of the README's mutation self-test
  const char* name;             // subject name, "mutant-..."
  const char* bug;              // one line: what is wrong
  const char* correct_subject;  // the correct built-in subject it differs from (and copies caps of)
  const char* expected_killer;  // the gate property expected to kill it (or the GPU test)
  bool gpu_only;                // no host twin: a race (12), a > 2^31-element tensor (13), Hopper (14-16)
};

// Every mutant, in number order.
std::span<const MutantInfo> mutant_table();
// nullptr when `name` is not a mutant.
const MutantInfo* find_mutant(std::string_view name);

#if defined(ATTNCHECK_HAVE_CUDA)
// CUDA launcher of the fused attention forward instantiated with mutation `mutation` (an int
// holding a fused::Mutation value): the same kernel template (fused/fused_kernel.cuh), the same
// checks and parameters as fused_attention_cuda. Natural-log LSE, empty row -inf.
int fused_mutant_cuda(int mutation, const ac_attention_args& a, char* err, size_t err_len);
#endif
// The host twins of the attention mutants are the correct twins' own walks, instantiated with the
// mutation: fused_attention_host with FusedOptions::mutation, splitkv_attention_host with
// SplitKVOptions::mutation.

}  // namespace attncheck::kern
