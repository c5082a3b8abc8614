// The built-in subjects: every kernel of kernels/, as ac_subject entries of the plugin ABI
// (abi/include/attncheck/plugin_abi.h), once per backend. Host twins are always present;
// CUDA subjects only in a CUDA build. The harness registers these exactly as it registers a
// user's plugin, so built-ins and plugins are tested by one code path.
#pragma once
#include <vector>

#include "attncheck/plugin_abi.h"

namespace attncheck::kern {

// Each kernel family appends its subjects. cuda selects the GPU variants (only call with true
// in a CUDA build); otherwise the host twins.
void append_merge_subjects(std::vector<ac_subject>& out, bool cuda);
void append_softmax_subjects(std::vector<ac_subject>& out, bool cuda);
void append_textbook_subjects(std::vector<ac_subject>& out, bool cuda);
void append_fused_subjects(std::vector<ac_subject>& out, bool cuda);
void append_splitkv_subjects(std::vector<ac_subject>& out, bool cuda);
void append_hopper_subjects(std::vector<ac_subject>& out, bool cuda);    // fused-hopper, splitkv-packed
void append_quantize_subjects(std::vector<ac_subject>& out, bool cuda);  // the KV-cache quantiser
// Deliberately broken variants (kernels/mutants/), never part of the default subject list.
void append_mutant_subjects(std::vector<ac_subject>& out, bool cuda);

// All correct built-in subjects for one backend.
std::vector<ac_subject> builtin_subjects(bool cuda);
// True when this build has CUDA kernels compiled in (independent of whether a GPU is present).
bool built_with_cuda();

}  // namespace attncheck::kern
