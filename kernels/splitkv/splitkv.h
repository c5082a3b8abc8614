// Launchers of split-KV attention (flash-decoding): the key range of every (sequence, head) is cut
// into args.num_splits contiguous parts (sizes as equal as possible); the fused kernel's mainloop
// (kernels/fused/fused_kernel.cuh, SPLIT mode) writes an fp32 partial (O / l, base-2 LSE) per part
// to a workspace of num_splits x total_q x heads x (d + 1) floats (never Tq x Tk); a combine kernel
// folds the partials in args.fold_order (AC_FOLD_LEFT, RIGHT or TREE; splitkv_math.h).
// Outputs: O in the input type, LSE fp32 natural log, [heads, tokens]; an empty row (all parts
// empty) gets O = 0 exactly and LSE = -inf. num_splits = 1 is bitwise reproducible (no atomics).
// Supported: fp16, bf16; head sizes 64, 128; num_splits 1..64 (the combine's limit,
// splitkv::kMaxSplits); the tilings of kSplitKVTilings; the fused kernel's variants (fused.h: paged
// K / V, softcap, window inside each part; a sink counted once, by the combine after the fold); the
// host twin also V's own head size (fused.h kFusedTwinHeadPairs, MLA's decode 576 / 512 among them).
// Check: ctest --test-dir build -R kernels_attention
#pragma once
#include <cstddef>
#include <vector>

#include "attncheck/plugin_abi.h"
#include "fused/fused.h"
#include "fused/fused_math.h"

namespace attncheck::kern {

// (64, 64) for prefill-like shapes; (16, 64), one warp per CTA, for decode (T_q = 1).
inline constexpr ac_tiling kSplitKVTilings[] = {{64, 64}, {16, 64}};
inline constexpr int kNumSplitKVTilings = int(sizeof(kSplitKVTilings) / sizeof(kSplitKVTilings[0]));
inline constexpr int kSplitKVMaxSplits = 64;

struct SplitKVOptions {
  bool synchronize = true;    // CUDA: synchronise the stream before returning
  void* workspace = nullptr;  // CUDA: device workspace of splitkv_workspace_bytes(), 16-byte aligned;
                              // null: allocated per call
  size_t workspace_bytes = 0;
  // none; combine_plus_inf runs mutant 11's combine (kernels/mutants/), on both backends; the
  // partials are the correct ones.
  fused::Mutation mutation = fused::Mutation::none;
  // 0: the key range cut into num_splits parts as equal as possible; > 0 (a multiple of 64): a fixed
  // split size, splitkv::split_range (both backends; num_splits at least fixed_split_count).
  int keys_per_split = 0;
};

// The part count of a launch at a fixed split size: the most any sequence of `a` needs (1..64).
int fixed_split_count(const ac_attention_args& a, int keys_per_split);

// Bytes of the fp32 partials: num_splits x total_q x heads x (head_size + 1) x 4.
size_t splitkv_workspace_bytes(const ac_attention_args& a);
// scope: what the caller computes beyond the CUDA contract (fused_check_args).
int splitkv_check_args(const ac_attention_args& a, char* err, size_t err_len, ArgScope scope = {});
// keys_per_split is 0 or a multiple of 64, and a.num_splits covers every sequence's parts under it.
int splitkv_check_fixed(const ac_attention_args& a, int keys_per_split, char* err, size_t err_len);

int splitkv_attention_host(const ac_attention_args& a, char* err, size_t err_len);
int splitkv_attention_host(const ac_attention_args& a, const SplitKVOptions& o, char* err, size_t err_len);
#if defined(ATTNCHECK_HAVE_CUDA)
int splitkv_attention_cuda(const ac_attention_args& a, char* err, size_t err_len);
int splitkv_attention_cuda(const ac_attention_args& a, const SplitKVOptions& o, char* err, size_t err_len);
// The combine alone, for other producers of the same partials (layout of SplitKVOptions' workspace:
// part_o [num_splits, total_q, heads, d], 16-byte aligned, part_lse [num_splits, total_q, heads],
// base 2), folding a.num_splits (1..64) parts in a.fold_order into a.out / a.lse on `stream`.
// Returns a cudaError_t.
int splitkv_combine_cuda(const float* part_o, const float* part_lse, const ac_attention_args& a,
                         void* stream);
// The current device's SM count (what engines size their split counts by), or -1 on a CUDA error.
int cuda_sm_count();
#endif

// A split-KV subject's capabilities as those of its engine-style mode: an attention subject (the
// launch picks num_splits, fold left), AC_CAP_BATCH_INVARIANT as given.
ac_caps engine_caps(ac_caps split, bool invariant);

void append_splitkv_subjects(std::vector<ac_subject>& out, bool cuda);

}  // namespace attncheck::kern
