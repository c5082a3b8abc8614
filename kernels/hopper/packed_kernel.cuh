// What the two kernels of splitkv-packed share (packed.cu: head sizes 64 and 128; packed_mla.cu:
// MLA's absorbed decode, QK 576 / V 512): the launch parameters, the key tile and row count, and
// the exact conversion of FP8 codes to the input type. Both write the split-KV workspace that
// splitkv.cu's combine folds.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "fused/fused_kernel.cuh"
#include "fused/fused_math.h"
#include "splitkv/splitkv.h"
#include "splitkv/splitkv_math.h"

namespace attncheck::kern::packed {

// Key tile 64 (the split-KV twin's); 16 rows per CTA, each a (token, query head of the group) pair
// of one token tile.
constexpr int kBC = 64, kRows = 16;
static_assert(kSplitKVTilings[0].bc == kBC && kSplitKVTilings[1].bc == kBC,
              "the twin's key tile is the kernels'");

// Which variants a launch's mainloop reads (a sink is the combine's alone): none; paged K / V only;
// or every one (paged K / V, softcap, window). Paged calls without a cap or window get their own
// instantiation, as the window's and the cap's code costs registers in every key step (the MLA
// kernel ran paged at 0.62x of contiguous with it, the same as with a cap and no pages).
enum class Walk : int { plain = 0, paged = 1, variants = 2 };
inline Walk walk_of(const ac_attention_args& a) {
  if (caps_or_windows(a)) return Walk::variants;
  return a.page_size != 0 ? Walk::paged : Walk::plain;
}
// Whether a launch of walk W reads K / V through the block table: always in W paged (walk_of picks
// it only with pages), so that its copies carry no contiguous branch; in W variants, where pages
// are.
template <Walk W>
__host__ __device__ __forceinline__ bool paged_walk(int page_size) {
  return W == Walk::paged || (W == Walk::variants && page_size > 0);
}

struct PackedParams {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  const int32_t* cu_q;
  const int32_t* cu_k;
  const uint8_t* mask;
  const int64_t* cu_mask;
  int num_heads, num_kv_heads, group, br, num_splits, chunks_per_tile;
  int keys_per_split;  // 0: num_splits equal parts; > 0: the fixed split size of splitkv_math.h
  int causal;
  int64_t total_q;
  float scale_log2;
  float* part_o;
  float* part_lse;
  // The softmax scale itself (the FP8 instantiation multiplies it by K's descale, the VAR one caps
  // the scores after it).
  float scale;
  // An FP8 cache (the FP8 instantiation reads these): the descales (device memory, one per tensor
  // or one per KV head) and the format.
  const float* k_descale;
  const float* v_descale;
  int descale_granularity;  // plugin_abi.h: 0 per tensor, 1 per KV head, 2 per (sequence, KV head)
  int e5m2;
  // The variants (plugin_abi.h AC_VAR_*; the VAR instantiation reads these): the cap (0: none), the
  // window's sides (-1: unbounded), the page pools' block table (page_size 0: contiguous). A sink
  // is the combine's (splitkv.cu), counted once after the fold.
  float softcap;
  int window_left, window_right;
  int page_size, max_blocks;
  const int32_t* block_table;
  // V inside K (AC_VAR_V_IN_K; the MLA kernel reads it): v is k, V's rows at K's stride.
  int v_in_k;
};

// Two FP8 codes (the low 16 bits of `two`, the first in the low byte) to two values of the input
// type packed low = first, exactly (cvt.rn.f16x2.e4m3x2 / e5m2x2 of sm_89 and later; fp16 to bf16
// through fp32 is exact for every FP8 value; NaN codes stay NaN).
template <bool BF16, __nv_fp8_interpretation_t KIND>
__device__ __forceinline__ uint32_t codes2_to_input(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xffffu), KIND);
  if constexpr (BF16) {
    __half2 hh;
    hh.x = __half(__half_raw{h.x});
    hh.y = __half(__half_raw{h.y});
    const __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(hh));
    return *reinterpret_cast<const uint32_t*>(&b);
  } else {
    return uint32_t(h.x) | (uint32_t(h.y) << 16);
  }
}

// 16 FP8 codes to 16 values of the input type (codes2_to_input, pair by pair).
template <bool BF16, __nv_fp8_interpretation_t KIND>
__device__ __forceinline__ void codes_to_input(const uint4 c, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {c.x, c.y, c.z, c.w};
  uint32_t r[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) r[i] = codes2_to_input<BF16, KIND>(w[i / 2] >> (16 * (i % 2)));
  lo = make_uint4(r[0], r[1], r[2], r[3]);
  hi = make_uint4(r[4], r[5], r[6], r[7]);
}

// A CTA's place in the grid (KV heads, sequences x splits, row chunks): its KV head, sequence and
// split, the token tile [tok0, tok0 + tile_tokens) of its rows, and its rows first_row .. of the
// tile's n_rows (token, query head of the group) pairs. live is false for a CTA past its sequence's
// tokens or its tile's rows (the grid is sized by the longest sequence): it returns at once.
struct Cta {
  int kvh, seq, split, tq, tk, tok0, tile_tokens, first_row, n_rows;
  int64_t q0, k0;
  bool live;
};
__device__ __forceinline__ Cta cta_of(const PackedParams& p) {
  Cta c;
  c.kvh = int(blockIdx.x);
  c.seq = int(blockIdx.y) / p.num_splits;
  c.split = int(blockIdx.y) % p.num_splits;
  const int token_tile = int(blockIdx.z) / p.chunks_per_tile, chunk = int(blockIdx.z) % p.chunks_per_tile;
  c.q0 = p.cu_q[c.seq];
  c.k0 = p.cu_k[c.seq];
  c.tq = p.cu_q[c.seq + 1] - int(c.q0);
  c.tk = p.cu_k[c.seq + 1] - int(c.k0);
  c.tok0 = token_tile * p.br;
  c.tile_tokens = c.tq - c.tok0 < p.br ? c.tq - c.tok0 : p.br;
  c.first_row = chunk * kRows;
  c.n_rows = c.tile_tokens * p.group;
  c.live = c.tile_tokens > 0 && c.first_row < c.n_rows;
  return c;
}

// The CTA's 16 rows of Q (row r: the (token, member) pair first_row + r; zero past the tile) into a
// swizzled [16][D] tile of the input type, by all NT threads.
template <int D, int NT>
__device__ __forceinline__ void load_q(uint16_t* sq, const PackedParams& p, const Cta& c, int tid) {
  for (int idx = tid; idx < kRows * (D / 8); idx += NT) {
    const int r = idx / (D / 8), ch = idx % (D / 8), i = c.first_row + r;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (i < c.n_rows)
      val = *reinterpret_cast<const uint4*>(
          p.q + ((c.q0 + c.tok0 + i / p.group) * p.num_heads + c.kvh * p.group + i % p.group) * D + ch * 8);
    *reinterpret_cast<uint4*>(sq + fused::dev::swz<D>(r, ch)) = val;
  }
}

// An FP8 cache's descales for sequence seq's KV head kvh: K's joins the softmax scale, (scale x k_descale)
// and that x log2 e, two fp32 roundings (as the twin's head_view); V's multiplies the partial O. Without FP8
// the scale is the call's and v_descale 1.
template <bool FP8>
__device__ __forceinline__ void descaled(const PackedParams& p, int seq, int kvh, float& scale,
                                         float& scale_log2, float& v_descale) {
  scale = p.scale;
  scale_log2 = p.scale_log2;
  v_descale = 1.0f;
  if constexpr (FP8) {
    const int at = p.descale_granularity == 2   ? seq * p.num_kv_heads + kvh
                   : p.descale_granularity == 1 ? kvh
                                                : 0;
    scale = __fmul_rn(p.scale, p.k_descale[at]);
    scale_log2 = __fmul_rn(scale, fused::kLog2e);
    v_descale = p.v_descale[at];
  }
}

// Row i of the CTA's token tile ((token, member) pair i): its index in the split-KV workspace,
// (split, token, head) flattened (part_o holds DV floats at each, part_lse one).
__device__ __forceinline__ int64_t partial_index(const PackedParams& p, const Cta& c, int i) {
  const int64_t tok = c.q0 + c.tok0 + i / p.group;
  const int head = c.kvh * p.group + i % p.group;
  return (int64_t(c.split) * p.total_q + tok) * p.num_heads + head;
}

// The keys a CTA walks for the token tile [tok0, last_tok] and split `split` of a sequence of tq
// queries and tk keys: [k_lo, k_end), within the split's range [k_lo, k_hi) as splitkv::split_range
// cuts it, ended early by causality (the tile's last token) and, in VAR, by the window's right side,
// started late by its left side (the tile of kBC keys holding the first key the tile's first token
// sees: fused_math.h window_walk_start): the twin's tiles.
template <bool VAR>
__device__ __forceinline__ void key_range(const PackedParams& p, int tq, int tk, int tok0, int last_tok,
                                          int split, int& k_lo, int& k_hi, int& k_end) {
  splitkv::split_range(tk, p.num_splits, p.keys_per_split, split, k_lo, k_hi);
  k_end = k_hi;
  if (p.causal) {
    const int lim = last_tok + tk - tq + 1;
    k_end = lim < k_end ? lim : k_end;
  }
  if constexpr (VAR)
    fused::window_walk(tok0, last_tok, tq, tk, p.window_left, p.window_right, kBC, k_lo, k_end);
}

// The base-2 logit of key `col` for a row of token row_tok from its fp32 dot product: -inf past the
// split's range (range_end), the masked sentinel where causality, the walk's end, the window (VAR)
// or the mask hides the key, else fl(dot x scale log2 e), or the capped score in VAR
// (fused_math.h scaled_logit). row_ok: the row is a real (token, head) pair (a padding row reads
// no mask).
template <bool VAR>
__device__ __forceinline__ float logit(const PackedParams& p, float dot, int col, int range_end, int k_end,
                                       int row_tok, bool row_ok, int tq, int tk, const uint8_t* mask,
                                       float scale, float scale_log2) {
  if (col >= range_end) return neg_inf_f();
  bool vis = col < k_end && (!p.causal || fused::causal_visible(row_tok, col, tq, tk));
  if constexpr (VAR) vis = vis && fused::window_visible(row_tok, col, tq, tk, p.window_left, p.window_right);
  if (mask && vis && row_ok) vis = mask[int64_t(row_tok) * tk + col] != 0;
  if (!vis) return fused::masked_logit();
  if constexpr (VAR) return fused::scaled_logit(dot, scale, scale_log2, p.softcap);
  return __fmul_rn(dot, scale_log2);
}

// Paged K / V (AC_VAR_PAGED_KV): the pool rows (slots) of a key tile's 64 rows, fused_math.h
// kv_slot's (slot key % page_size of page table[key / page_size]) found once per tile: lane l of
// every warp holds rows l and l + 32. fetch reads the block-table entries of a tile; the kernels
// fetch a tile's entries at least one tile before its copies, so the entries arrive while a tile is
// computed and a copy never waits on the table; ready forms the slots once the entries are there. A
// row at or past `valid` reads no entry (slot 0). A page size that is a power of two (the engines'
// 16, 64, 256) takes a shift where others take a division by a register.
struct PagedSlots {
  int32_t page[2] = {0, 0}, off[2] = {0, 0};
  int64_t row[2] = {0, 0};
  __device__ __forceinline__ void fetch(const int32_t* table, int page_size, int n0, int valid, int lane) {
    const uint32_t ps = uint32_t(page_size);
    const bool pow2 = (ps & (ps - 1)) == 0;
    const int shift = 31 - __clz(page_size);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = lane + 32 * h;
      const uint32_t key = uint32_t(n0 + r), block = pow2 ? key >> shift : key / ps;
      const bool ok = r < valid;
      off[h] = ok ? int32_t(key - block * ps) : 0;
      page[h] = ok ? table[block] : 0;
    }
  }
  __device__ __forceinline__ void ready(int page_size) {
#pragma unroll
    for (int h = 0; h < 2; ++h) row[h] = int64_t(page[h]) * page_size + off[h];
  }
  // Row r's slot, from the lane that holds it (after ready). Every lane of the warp calls it, and
  // r < 32 is the same on all of them (the shuffle sends the source lane's choice of its two rows).
  __device__ __forceinline__ int64_t slot(int r) const {
    return __shfl_sync(0xffffffffu, r < 32 ? row[0] : row[1], r & 31);
  }
};

// The tile's max of this thread's rows g and g + 8 over the WARPS warps' maxima in smax
// ([WARPS][16]; the same in every warp), and the online-softmax step of fused_math.h for each: alpha
// rescales the row's state, off is what its exponents subtract.
template <int WARPS>
__device__ __forceinline__ void tile_step(const float* smax, int g, float (&m_run)[2], float (&alpha)[2],
                                          float (&off)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float m = smax[g + 8 * r];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) m = fmaxf(m, smax[w * kRows + g + 8 * r]);
    fused::advance_max(m_run[r], m, alpha[r], off[r]);
  }
}

// MLA's absorbed decode (packed_mla.cu): the kernel for QK 576 / V 512 with the same parameters
// and grid as packed.cu's. Returns the launch's cudaError_t.
cudaError_t launch_packed_mla(const PackedParams& p, bool bf16, bool fp8, Walk w, dim3 grid,
                              cudaStream_t stream);

}  // namespace attncheck::kern::packed
