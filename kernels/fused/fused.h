// Launchers of the fused attention forward (FlashAttention-2 style): one kernel, per CTA a tile of
// Br query rows of one (sequence, head), a loop over key tiles of Bc keys, online softmax (m, l, O)
// in fp32 registers, Q K^T and P V on tensor cores (mma.sync m16n8k16, fp16/bf16 operands, fp32
// accumulation), P rounded to the input type before P V. The per-element math is fused_math.h.
//
// Arguments: the plugin ABI's ac_attention_args (Q [total_q, h, d], K/V [total_k, h_kv, d]
// contiguous or page pools; cu_seqlens; optional per-sequence boolean mask; bottom-right causal;
// GQA; softcap, sliding window and sinks, each where fused_math.h says).
// Variants, where the kernel (fused_kernel.cuh, its VAR instantiation) and the twin apply them:
// paged K / V in the tile loads (each key's row gathered through the block table; nothing rounds);
// the window in the key range (a row tile's walk starts at the key tile holding its first visible
// key and stops after its last) and in the per-element visibility test; the softcap on each fp32
// score, rounded after the scale, the division by the cap, tanh, the product by the cap and the one
// by log2 e; a sink in the epilogue, joined in fp32 to the finished row's (m, l) before O / l is
// rounded to the input type (split-KV: once, in the combine after the fold). V's own head size is refused
// here; the host twin computes it (kFusedTwinHeadPairs: V and O rows of head_size_v elements, nothing else
// rounds). Outputs: O in the input type; LSE fp32 in layout [heads, tokens] (AC_LSE_HEADS_TOKENS), natural
// log by default or base 2 (FusedOptions::lse_base = 2); an empty row (no visible key, including a
// zero-length key range) gets O = 0 exactly and LSE = -inf, or +inf with empty_lse_sign = +1
// (FlashAttention-2's unsplit convention).
// Supported: fp16 and bf16, head sizes 64 and 128, the tilings of kFusedTilings (args.tiling is
// an index into it). Anything else is refused before launch with a message naming it.
// Check: ctest --test-dir build -R kernels_attention
#pragma once
#include <cstddef>
#include <cstring>
#include <vector>

#include "attncheck/plugin_abi.h"
#include "fused/fused_math.h"  // Mutation, ExpForm, TwinArithmetic

namespace attncheck::kern {

struct FusedOptions {
  int lse_base = 0;            // 0: natural log; 2: base 2
  int empty_lse_sign = -1;     // -1: an empty row's LSE is -inf; +1: +inf (FlashAttention-2)
  bool synchronize = true;     // CUDA: synchronise the stream before returning (false: benchmarks)
  fused::Mutation mutation{};  // host twin: none (0); another value runs an attention mutant
                               // (kernels/mutants/) through the twin's own walk
  fused::ExpForm exp_form{};   // host twin: how p is formed (fused_math.h); fused-hopper's twin sets it
  fused::TwinArithmetic arithmetic{};  // host twin: IEEE, or FTZ / DAZ (fused_math.h)
  bool p_e4m3 = false;  // host twin: in FP8 calls P held in e4m3fn with the offset 2^8 (AC_FP8_P_E4M3)
  // host twin: O may be written in FP8 (AC_FP8_OUT with AC_FP8_SATURATE): the fp32 element divided
  // by output_scale, then one saturating cast (quantize_math.h quantize_element)
  bool fp8_out = false;
  // host twin: an FP8 cache's V descale multiplies the output, not each V value (fused_twin.h
  // VDescale::output; fused-hopper-fp8's twin)
  bool v_descale_output = false;
  // host twin: P V reads P's e4m3fn codes themselves, and O is multiplied once by the fp32 reciprocal
  // of P's scale before the normalisation (a kernel whose tensor cores take P's codes: fused-hopper-
  // fp8's), not each weight read back over the scale (fused_math.h p_e4m3)
  bool p_scale_on_output = false;
};

// The compiled (Br, Bc) tilings, one list that both the kernel instantiations and the subjects'
// caps come from. Each CTA has Br / 16 warps; each warp owns 16 query rows (one m16 block).
inline constexpr ac_tiling kFusedTilings[] = {{64, 64}, {128, 64}, {128, 32}, {64, 32}};
inline constexpr int kNumFusedTilings = int(sizeof(kFusedTilings) / sizeof(kFusedTilings[0]));
inline constexpr int32_t kFusedHeadSizes[] = {64, 128};
// The page sizes of paged K / V (AC_VAR_PAGED_KV): vLLM's 16, FlashMLA's 64, a large 256, a page
// of one key, and 5, a size that puts page boundaries everywhere in a key tile.
inline constexpr int32_t kFusedPageSizes[] = {1, 5, 16, 64, 256};
inline constexpr int kNumFusedPageSizes = int(sizeof(kFusedPageSizes) / sizeof(kFusedPageSizes[0]));
// The variants the fused walk computes (fused_math.h states where each is applied).
inline constexpr uint32_t kFusedVariants = AC_VAR_PAGED_KV | AC_VAR_SOFTCAP | AC_VAR_WINDOW | AC_VAR_SINKS;
// The (QK, V) head sizes the host twins compute (AC_VAR_HEAD_SIZE_V): MLA's prefill 192 / 128 and
// absorbed decode 576 / 512, and 64 / 32, a small pair that keeps the gate's cases cheap. The CUDA
// kernels load V tiles of the QK head size: they refuse every pair and their subjects declare none.
inline constexpr ac_head_pair kFusedTwinHeadPairs[] = {{64, 32}, {192, 128}, {576, 512}};
inline constexpr int kNumFusedTwinHeadPairs =
    int(sizeof(kFusedTwinHeadPairs) / sizeof(kFusedTwinHeadPairs[0]));

namespace fused {
// Whether a call's K and V are an FP8 cache (kv_dtype AC_DTYPE_E4M3 or AC_DTYPE_E5M2).
inline bool fp8_kv(const ac_attention_args& a) {
  return a.kv_dtype == AC_DTYPE_E4M3 || a.kv_dtype == AC_DTYPE_E5M2;
}
// A call's FP8 output format (AC_FP8_OUT: out_dtype 3, 4 or 5), read as an int (a caller may store
// any value in the enum field); 0 for out in dtype.
inline int fp8_out(const ac_attention_args& a) {
  int od;
  std::memcpy(&od, &a.out_dtype, sizeof od);
  return od == AC_DTYPE_E4M3 || od == AC_DTYPE_E5M2 || od == AC_DTYPE_E4M3FNUZ ? od : 0;
}
}  // namespace fused

// V's head size of a call: head_size_v where the caller set it (version 3), else head_size.
inline int head_size_v_of(const ac_attention_args& a) {
  return a.head_size_v > 0 ? a.head_size_v : a.head_size;
}

// Whether a call caps or windows its scores (AC_VAR_SOFTCAP, AC_VAR_WINDOW): what the kernels'
// variant instantiations read in every key step.
inline bool caps_or_windows(const ac_attention_args& a) {
  return a.softcap != 0.0f || a.window_left != -1 || a.window_right != -1;
}

// Whether a call uses any version-3 variant (kernels that compute none refuse such a call).
inline bool uses_variants(const ac_attention_args& a) {
  return (a.head_size_v != 0 && a.head_size_v != a.head_size) || caps_or_windows(a) || a.sinks ||
         a.page_size != 0;
}

const ac_tiling* fused_tilings(int* count);

// What a caller computes beyond the CUDA kernels' common contract: the (QK, V) head-size pairs it
// takes (the host twins kFusedTwinHeadPairs, splitkv-packed's CUDA kernel kPackedHeadPairs) and an
// FP8 KV cache (the twins; of the CUDA kernels, splitkv-packed), and Q in FP8 (the twins).
struct ArgScope {
  const ac_head_pair* head_pairs = nullptr;
  int num_head_pairs = 0;
  bool fp8_kv = false;
  bool fp8_q = false;
  // Descales per (sequence, KV head) (descale_granularity 2): read where V's descale multiplies
  // the output (fused_twin.h VDescale::output), one factor per (sequence, head) view.
  bool fp8_per_sequence = false;
  // The page sizes the caller declares (AC_VAR_PAGED_KV): the fused walk's, or a kernel's own subset
  // (fused-hopper's kHopperPageSizes).
  const int32_t* page_sizes = kFusedPageSizes;
  int num_page_sizes = kNumFusedPageSizes;
};
inline constexpr ArgScope kTwinScope{kFusedTwinHeadPairs, kNumFusedTwinHeadPairs, true, true};

// The checks both launchers run before touching memory: dtype, head size, heads, tiling, shapes,
// null pointers, options, an FP8 cache's descales. AC_OK or AC_ERR_UNSUPPORTED with the reason
// written to err.
int fused_check_args(const ac_attention_args& a, const FusedOptions& o, int num_tilings, char* err,
                     size_t err_len, ArgScope scope = {});
// The variants' checks (part of fused_check_args): V's head size equal to QK's (or one of the
// scope's pairs), the softcap and window in range, a declared page size
// with a block table whose entries lie in the pool.
int fused_check_variants(const ac_attention_args& a, char* err, size_t err_len, ArgScope scope = {});

// Host twin: tensors in host memory; walks the same tiles in the same order with the same
// rounding points.
int fused_attention_host(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len);
// The twin's walk with row tiles of br and key tiles of bc, on arguments already checked (shared
// with kernels of other tilings whose tile walk is this one, e.g. fused-hopper). Refuses only a
// mutation that has no host twin.
int fused_twin_tiles(const ac_attention_args& a, const FusedOptions& o, int br, int bc, char* err,
                     size_t err_len);

#if defined(ATTNCHECK_HAVE_CUDA)
// CUDA kernel: tensors in device memory, launched on a.stream, synchronised before returning (a
// device fault becomes AC_ERR_DEVICE). Pointers q, k, v must be 16-byte aligned, out 4-byte.
int fused_attention_cuda(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len);
#endif

// The capabilities of the fused subjects (fp16 / bf16, head sizes 64 and 128, causal, mask, varlen,
// GQA, LSE [heads, tokens], the tilings of kFusedTilings) with the given LSE base and empty-row
// sign; split-KV attention declares the same with its own tilings, splits and fold orders.
ac_caps fused_caps(bool cuda, int lse_base, int empty_lse_sign);
// c with the variants the fused walk computes (kFusedVariants, kFusedPageSizes; on the host backend
// also V's own head size, kFusedTwinHeadPairs): the fused and split-KV subjects declare them;
// kernels built on other mainloops do not (yet).
ac_caps with_fused_variants(ac_caps c);
// c with an FP8 KV cache: e4m3fn and e5m2, descales per tensor or per KV head (fused_twin.h reads
// it; of the CUDA kernels, splitkv-packed).
ac_caps with_fp8_kv_cache(ac_caps c);
// c with FlashAttention-3's FP8 forward contract: Q, K and V in e4m3fn with descales per tensor or
// per KV head, P in e4m3fn with the offset 2^8 (AC_FP8_Q, AC_FP8_P_E4M3; fused_twin.h).
ac_caps with_fp8_forward(ac_caps c);
void append_fused_subjects(std::vector<ac_subject>& out, bool cuda);

}  // namespace attncheck::kern
