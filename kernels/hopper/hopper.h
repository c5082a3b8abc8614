// Launchers of the Hopper attention forward `fused-hopper` (sm_90a) and of the GQA-packed split-KV
// decode `splitkv-packed`.
//
// fused-hopper: the same function, conventions and capabilities as `fused` (kernels/fused/fused.h):
// Q [total_q, h, d], K/V [total_k, h_kv, d], cu_seqlens, optional per-sequence mask, bottom-right
// causal, GQA; O in the input type, LSE fp32 [heads, tokens], natural or base 2, empty row O = 0
// and LSE -inf (or +inf). Per CTA BR = 64 x (consumer warpgroups) query rows of one (sequence,
// head): one producer warpgroup streams Q, K and V with the tensor memory accelerator into a
// shared-memory ring guarded by mbarriers; each consumer warpgroup computes S = Q K^T and
// O += P V with wgmma (fp32 accumulators, P rounded to the input type in registers) and the online
// softmax of fused_math.h between them. The host twin is fused's twin walked with these tilings.
//
// splitkv-packed: decode-shaped split-KV (AC_OP_SPLITKV) where the query heads that share one KV
// head are one tile, so each K/V element is read once per KV head (not once per query head).
// Check: ctest --test-dir build -R kernels_hopper
#pragma once
#include <cstddef>
#include <vector>

#include "attncheck/plugin_abi.h"
#include "fused/fused.h"

namespace attncheck::kern {

// (BR, BC): BR / 64 consumer warpgroups, BC keys per ring stage.
inline constexpr ac_tiling kHopperTilings[] = {{128, 128}, {128, 64}, {192, 64}};
inline constexpr int kNumHopperTilings = int(sizeof(kHopperTilings) / sizeof(kHopperTilings[0]));

// The page sizes of fused-hopper's paged K / V (AC_VAR_PAGED_KV): vLLM's 16, FlashMLA's 64 and a
// large 256. The kernel copies a key tile with the tensor memory accelerator in chunks of one box
// (hopper_kernel.cuh): a page lands whole in a tile, or a tile in a page, only where the page size
// divides every BC or is a multiple of it, and a chunk keeps the 128-byte swizzle of one copy only
// from 8 rows on. Powers of two, so that a slot is a shift and a mask, and at least
// kHopperMinPageSize, which bounds a tile's chunks (the producer holds their slots in registers).
// The host twin computes any page size and declares these.
inline constexpr int32_t kHopperPageSizes[] = {16, 64, 256};
inline constexpr int kNumHopperPageSizes = int(sizeof(kHopperPageSizes) / sizeof(kHopperPageSizes[0]));
inline constexpr int kHopperMinPageSize = 16;
consteval bool hopper_page_sizes_fit() {
  for (int32_t ps : kHopperPageSizes) {
    if (ps < kHopperMinPageSize || (ps & (ps - 1)) != 0) return false;
    for (const ac_tiling& t : kHopperTilings)
      if (t.bc % ps != 0 && ps % t.bc != 0) return false;
  }
  return kHopperMinPageSize % 8 == 0;
}
static_assert(hopper_page_sizes_fit(), "a page size the chunked tile copy cannot lay out");

// The deliberately broken variants of the Hopper kernel (subjects mutant-hopper-*), each one
// compile-time instantiation; the correct kernel uses none.
enum class HopperMutation : int {
  none = 0,
  no_full_wait = 1,    // consumers read the K and V stages without waiting on their full mbarriers
  stale_phase = 2,     // consumers wait on parity 0 forever: on odd passes round the ring the wait
                       // succeeds on the previous pass's completion, before the new data lands, so
                       // they read the stage's old tile unless the copy was quick, or run ahead until
                       // the pipeline deadlocks (caught by the wait's trap). With 4 stages the copy
                       // mostly lands in time at small shapes: K/V past L2 (streamed_kv) shows it
  no_proxy_fence = 3,  // the partial V tile written by ordinary stores lacks fence.proxy.async
                       // before the barrier that hands it to wgmma
  // fused-hopper-fp8 with FlashAttention-3's P V, each tile's P V wgmma added into O's own e4m3
  // accumulator, so a row's every product meets the tensor cores' truncation, not a chain of 128
  // (AC_FP8_TRUNCATED_SUMS). A probe of that arithmetic's error and speed
  // (hopper_fp8_row_accumulator_cuda: kernels_hopper_gpu "[truncated_sums]", hopper_bench), and
  // mutant 37 on the GPU (kernels/mutants/: the same kernel under the committed one's declaration).
  fp8_row_accumulator = 4,
};

// True when this build holds the sm_90a kernels (nvcc able to target compute_90a).
bool hopper_built();

int hopper_check_args(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len);
// Host twin: fused's twin (fused_twin.h) with the tile (BR, BC) of kHopperTilings[a.tiling].
int hopper_attention_host(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len);

// fused-hopper-fp8 (hopper_fp8.cu): FlashAttention-3's FP8 forward (Q, K and V in e4m3fn, P in
// e4m3fn with the offset 2^8, V's descale on the output) on the Hopper kernel, tiling (128, 128) and
// head size 128 alone; a call without an FP8 cache is fused-hopper's. The checks (fused's, an FP8
// call in e4m3fn with Q in FP8) and the twin: fused's twin with that tile, fused-hopper's exponent,
// P in e4m3fn and V's descale on the output.
inline constexpr int kNumHopperFp8Tilings = 1;  // kHopperTilings[0], (128, 128)
inline constexpr int32_t kHopperFp8HeadSizes[] = {128};
int hopper_fp8_check_args(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len);
int hopper_fp8_attention_host(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len);

#if defined(ATTNCHECK_HAVE_CUDA)
int hopper_fp8_attention_cuda(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len);
int hopper_attention_cuda(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len,
                          HopperMutation m = HopperMutation::none);
// The FP8 tensor cores' sum, one instruction per trial (hopper_probe.cu): d[t] = c[t] + sum_k
// a[32 t + k] b[32 t + k] as mma.sync m16n8k32 e4m3 computes it (a NaN when the instruction's
// elements disagree). Host arrays; synchronous.
int fp8_mma_probe(const uint8_t* a, const uint8_t* b, const float* c, float* d, int trials, char* err,
                  size_t err_len);
// fused-hopper-fp8's kernel with HopperMutation::fp8_row_accumulator (bf16 output only; the same
// checks, launch and epilogue as hopper_fp8_attention_cuda). Not a subject; tests and bench only.
int hopper_fp8_row_accumulator_cuda(const ac_attention_args& a, const FusedOptions& o, char* err,
                                    size_t err_len);
// The mutants' instantiations (hopper_mutants.cu); m != none.
int hopper_mutant_cuda(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len,
                       HopperMutation m);
#endif

// splitkv-packed: split-KV's tilings (BR = the token tile that sets the causal end; key tiles of
// 64 in both), num_splits 1..kPackedMaxSplits (the split-KV combine's limit).
inline constexpr int kPackedMaxSplits = 64;
// The (QK, V) head sizes splitkv-packed's CUDA kernel computes (AC_VAR_HEAD_SIZE_V): MLA's absorbed
// decode, one kernel of its own (packed_mla.cu); its host twin takes every kFusedTwinHeadPairs pair.
inline constexpr ac_head_pair kPackedHeadPairs[] = {{576, 512}};
inline constexpr int kNumPackedHeadPairs = int(sizeof(kPackedHeadPairs) / sizeof(kPackedHeadPairs[0]));
int packed_check_args(const ac_attention_args& a, char* err, size_t err_len);
int packed_attention_host(const ac_attention_args& a, char* err, size_t err_len);
// CTAs of the 3-stage d = 128 kernel resident on one SM (its shared memory, about 100 KB each);
// packed.cu checks it against the kernel's layout.
inline constexpr int kPackedResidentPerSM = 2;
// The split count num_splits = 0 asks for on a device of `sms` SMs: where the KV heads of the batch
// fill less than half a wave, splits that fill one wave of kPackedResidentPerSM CTAs per SM;
// otherwise about four CTAs per SM; at most one split per 64-key tile of the longest sequence,
// 1..kPackedMaxSplits. Decode at batch 1 with 8 KV heads and 8192 keys or more gets 33 splits on
// 132 SMs (264 CTAs).
int packed_machine_splits(const ac_attention_args& a, int sms);
#if defined(ATTNCHECK_HAVE_CUDA)
// num_splits 0 in args picks packed_machine_splits for the current device (or, at a fixed split
// size, fixed_split_count); the caps say 1..64. keys_per_split > 0 (a multiple of 64): a fixed
// split size (splitkv::split_range), the key ranges then independent of the batch.
int packed_attention_cuda(const ac_attention_args& a, char* err, size_t err_len, bool synchronize = true,
                          int keys_per_split = 0);
#endif

// The engine-style modes of splitkv-packed (packed_subject.cpp), as attention: the launch picks its
// own split count, fold left. keys_per_split 0: packed_machine_splits (on the host, for an H200's
// kH200SMs SMs), the split count a function of the whole batch; > 0 (a multiple of 64): that fixed
// split size. On the host, the split-KV twin.
inline constexpr int kH200SMs = 132;
// The fixed split size of splitkv-packed-fixed: one key tile, so that the gate's short rows
// already fold several parts (the bench prices larger sizes).
inline constexpr int kFixedSplitKeys = 64;
int packed_engine_attention(const ac_attention_args& a, int keys_per_split, bool cuda, char* err,
                            size_t err_len);
// Their capabilities: splitkv-packed's as an attention subject, AC_CAP_BATCH_INVARIANT as given.
ac_caps packed_engine_caps(bool cuda, bool invariant);

void append_hopper_subjects(std::vector<ac_subject>& out, bool cuda);
// splitkv-packed (packed_subject.cpp), appended by append_hopper_subjects.
void append_packed_subjects(std::vector<ac_subject>& out, bool cuda);
void append_hopper_mutant_subjects(std::vector<ac_subject>& out, bool cuda);

}  // namespace attncheck::kern
