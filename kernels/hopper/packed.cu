// CUDA kernel of splitkv-packed: split-KV attention (flash-decoding) with the query heads that share
// one KV head packed into one CTA, so every K/V tile is read from memory once per KV head, not once
// per query head. Plain sm_90 code (no sm_90a instruction).
//
// Grid: (KV heads, sequences x splits, row chunks), 1..64 splits; num_splits = 0 sizes the grid to
// the machine (packed_machine_splits: a small batch gets one full wave of two resident CTAs per SM,
// so decode at batch 1 with 8 KV heads gets 33 splits, 264 CTAs on 132 SMs, since one CTA of 4
// warps per SM cannot keep the memory busy, however deep its pipeline, and a second, part-empty
// wave costs more than it brings; a large batch about four CTAs per SM). The 16 rows of a CTA are
// (token, query head of the group) pairs of one token tile of BR tokens (BR = args' split-KV
// tiling, which is also where the causal end of the key range comes from, as in the split-KV twin);
// rows past the tile are zero and never stored. Key tiles of 64 from the start of the split's
// range, STAGES in flight (cp.async, rows past the range zero-filled, 16-byte chunks swizzled by
// row % 8). Warp w owns keys 16w..16w+15 of every tile for all 16 rows: S = Q K^T and O += P V on
// tensor cores (mma.sync m16n8k16, fp16 or bf16 operands, fp32 accumulation; a decode tile has 4 or
// 8 real rows of the 16, the tensor cores have time to spare). Per tile and row: logits x_j = fp32
// dot * (scale log2 e), the tile max over all 64 keys (the warps' maxima through shared memory),
// the online-softmax step of fused_math.h, P rounded to the input type, each warp's share of O += P
// V and of the row sum in fp32; the shares are summed at the end. The partial O / l and base-2 LSE
// of each split go to the split-KV workspace (fp32); splitkv's combine folds the up to 64 partials
// in fp32 in the requested order (kernels/splitkv/splitkv.cu, the fold of splitkv_math.h) and
// rounds O to the input type once, at the store; LSE natural, [heads, tokens], -inf for an empty
// row (O = 0). The split-KV twin is this kernel's twin: the same split ranges
// (splitkv::split_range), the same tile walk per row, the same rounding points and the same fold
// (sums in another order).
// An FP8 KV cache (kv_dtype e4m3fn or e5m2, descales per tensor or per KV head; FlashAttention-3's
// contract): the codes are staged by cp.async as bytes (half the bytes of an fp16 cache), and each
// warp reads its own 16 keys of a tile into registers by ldmatrix as codes and converts them there
// to the tensor cores' fragments, exactly (every e4m3fn and e5m2 value is an fp16 and a bf16 value;
// NaN codes stay NaN): K's codes as B fragments with d permuted within each 16 (Q's fragments take
// the same order), V's transposed with d split into even and odd columns (the epilogue puts them
// back); no value of the input type is stored to shared memory. K's descale joins the logit
// scale, (scale x k_descale) x log2 e with two fp32 roundings; V's multiplies each split's
// normalised partial O (splitkv_math.h partial_o), one fp32 rounding; the twin (the split-KV twin
// with fused_twin.h VDescale::output) rounds at the same points.
// Check: ctest --test-dir build -L gpu -R kernels_hopper
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "common/cuda_check.h"
#include "common/host_tensor.h"
#include "fused/fused_kernel.cuh"
#include "fused/fused_math.h"
#include "hopper/hopper.h"
#include "hopper/packed_kernel.cuh"
#include "splitkv/splitkv.h"
#include "splitkv/splitkv_math.h"

namespace attncheck::kern {

namespace {

using packed::kBC;
using packed::kRows;
using packed::PackedParams;

// 4 warps, warp w owns keys 16w..16w+15 of every tile for all 16 rows of the CTA, so each K/V
// element is read from shared memory once per CTA. STAGES tiles in flight: 3 when several CTAs
// share an SM, 6 when the grid gives each SM about one (decode at batch 1).
constexpr int kWarps = 4, kThreads = kWarps * 32;

// FP8: the STAGES in flight are code stages of half the bytes (the fragments are converted in
// registers, so no tile of the input type is kept).
template <int D, int STAGES, bool FP8 = false>
struct PackedSmem {
  static constexpr int kTile = kBC * D * 2;  // one K or V tile, bytes (swizzled rows)
  static constexpr int kKV = 0;              // [stage][K | V]
  static constexpr int kCodeTile = kBC * D;  // FP8: one K or V tile of codes, bytes
  static constexpr int kCodes = kKV + (FP8 ? 0 : STAGES * 2) * kTile;     // FP8: [stage][K | V] codes
  static constexpr int kQ = kCodes + (FP8 ? STAGES * 2 * kCodeTile : 0);  // [16 rows][D], input type
  static constexpr int kMax = kQ + kRows * D * 2;                 // [kWarps][16] fp32: each warp's row max,
  static constexpr int kBytes = kMax + (kWarps + 1) * kRows * 4;  // then [16] the final row max
  // The epilogue sums the warps' O shares ([kWarps][16][D] fp32) and row sums ([kWarps][16]) in the
  // K/V (and code) stages, free by then.
  static_assert(kWarps * kRows * (D + 1) * 4 <= kQ - kKV, "the O reduction reuses the K/V stages");
};

// FP8: byte offset of 16-byte chunk c of row r in a [kBC][D] code tile: the chunks of a row are
// permuted so that the 8 rows that one ldmatrix phase reads lie in distinct banks (D = 128: 8
// chunks a row, c ^ (r % 8); D = 64: 4 chunks, two rows to 128 bytes, c ^ (r / 2 % 4)).
template <int D>
__device__ __forceinline__ int code_at(int r, int c) {
  static_assert(D == 64 || D == 128, "the code tiles' swizzle");
  return r * D + 16 * (D == 128 ? (c ^ (r & 7)) : (c ^ ((r >> 1) & 3)));
}

// FP8: warp w stages and reads only keys 16w..16w+15 of each tile (its share of S and of P V).
// Its 16 rows of D codes of K and of V (row stride in bytes) into rows 16w.. of the [kBC][D] code
// tiles sk and sv (chunks at code_at); rows
// at or past `valid` (counted from the tile's first row) are zero-filled (code 0 is +0: masked keys
// meet V = 0) and read nothing (the first row of gk / gv, always in range, stands in as their
// address). Paged (slots not null): gk and gv are the pools' first rows of this KV head, row r at
// slots->slot(r); otherwise at row r. runs: the warp's 16 keys lie in one page (pages and the
// tile's first key at multiples of 16), so their slots follow the first one's, which one shuffle
// brings instead of one per row.
template <int D>
__device__ __forceinline__ void load_code_rows(uint8_t* sk, uint8_t* sv, const uint8_t* gk, const uint8_t* gv,
                                               int64_t row_stride, int valid, int warp, int lane,
                                               const packed::PagedSlots* slots, bool runs) {
  constexpr int CH = D / 16, PER_LANE = kRows * CH / 32;
  static_assert(kRows * CH % 32 == 0, "whole chunks per lane");
  const int64_t first = slots && runs ? slots->slot(warp * kRows) : 0;  // every lane: the shuffle
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int idx = lane + 32 * i, r = warp * kRows + idx / CH, c = idx % CH;
    const bool ok = r < valid;
    const int64_t row = !slots ? r : runs ? first + idx / CH : slots->slot(r);  // every lane: the shuffle
    const int64_t off = row * row_stride + c * 16;
    fused::dev::cp_async16(sk + code_at<D>(r, c), ok ? gk + off : gk, ok);
    fused::dev::cp_async16(sv + code_at<D>(r, c), ok ? gv + off : gv, ok);
  }
}

// The paged 16-bit K and V tiles (the layout of fused::dev::load_tile), row r at slots.slot(r);
// rows at or past `valid` zero-filled.
template <int D>
__device__ __forceinline__ void load_kv_paged(uint16_t* sk, uint16_t* sv, const uint16_t* gk,
                                              const uint16_t* gv, int64_t row_stride,
                                              const packed::PagedSlots& slots, int valid, int tid) {
  constexpr int CH = D / 8, ROWS_PER_PASS = kThreads / CH, PASSES = kBC / ROWS_PER_PASS;
  static_assert(kThreads % CH == 0 && kBC % ROWS_PER_PASS == 0 && 32 % ROWS_PER_PASS == 0,
                "whole rows per pass; a warp's rows on one side of row 32");
  const int r0 = tid / CH, c = tid % CH;
#pragma unroll
  for (int it = 0; it < PASSES; ++it) {
    const int r = r0 + it * ROWS_PER_PASS;
    const bool ok = r < valid;
    const int64_t off = slots.slot(r) * row_stride + c * 8;
    fused::dev::cp_async16(sk + fused::dev::swz<D>(r, c), ok ? gk + off : gk, ok);
    fused::dev::cp_async16(sv + fused::dev::swz<D>(r, c), ok ? gv + off : gv, ok);
  }
}

// FP8: the ldmatrix address of lane `lane` of warp `warp` in the code tile at `tile` (shared) for
// chunks c and c + 1 of its 16 keys: lanes 0-7 keys 0-7 and lanes 8-15 keys 8-15 of chunk c, lanes
// 16-31 the same of chunk c + 1.
template <int D>
__device__ __forceinline__ uint32_t code_rows_at(uint32_t tile, int warp, int lane, int c) {
  const int row = warp * kRows + (lane & 7) + ((lane >> 3) & 1) * 8;
  return tile + uint32_t(code_at<D>(row, c + (lane >> 4)));
}

// FP8: this warp's S = Q K^T for its 16 keys of a tile (s[0] keys 0-7, s[1] keys 8-15) from the
// code tile kc (shared address; the warp's rows at code_at). An ldmatrix of 8 keys x 16 codes (b16,
// not transposed) gives lane (g, t4) codes 4 t4 .. 4 t4 + 3 of key g: the first two are its B
// register of k = 2 t4, 2 t4 + 1 and the last two of k = 2 t4 + 8, 2 t4 + 9, so step c of the mma
// takes d = 16 c + 4 t4 + {0, 1, 2, 3} where the 16-bit kernel takes 16 c + 2 t4 + {0, 1, 8, 9}
// (the kernel loads Q's fragments in that order): the same products, each exact in fp32.
template <bool BF16, int D, __nv_fp8_interpretation_t KIND>
__device__ __forceinline__ void fp8_scores(float (&s)[2][4], const uint32_t (&qf)[D / 16][4], uint32_t kc,
                                           int warp, int lane) {
  namespace dev = fused::dev;
  using packed::codes2_to_input;
#pragma unroll
  for (int c = 0; c < D / 16; c += 2) {
    uint32_t r[4];  // keys 0-7 and 8-15 of step c, then of step c + 1
    dev::ldsm_x4(r, code_rows_at<D>(kc, warp, lane, c));
#pragma unroll
    for (int m = 0; m < 4; ++m)
      dev::mma16816<BF16>(s[m & 1], qf[c + (m >> 1)], codes2_to_input<BF16, KIND>(r[m]),
                          codes2_to_input<BF16, KIND>(r[m] >> 16));
  }
}

// FP8: O += P V for this warp's 16 keys from the code tile vc. An ldmatrix.trans of 8 keys x 16
// codes gives lane (g, t4) the codes 2 g, 2 g + 1 of keys 2 t4 and 2 t4 + 1, bytes (k0 d0, k0 d1,
// k1 d0, k1 d1); one byte permutation makes them the B registers of column 2 g (low half) and of
// column 2 g + 1 (high half). So accumulator 2 c + e of chunk c holds the columns 16 c + 2 n + e
// (n the mma's column): o_column maps them back.
template <bool BF16, int D, __nv_fp8_interpretation_t KIND>
__device__ __forceinline__ void fp8_pv(float (&o)[D / 8][4], const uint32_t (&a)[4], uint32_t vc, int warp,
                                       int lane) {
  namespace dev = fused::dev;
  using packed::codes2_to_input;
#pragma unroll
  for (int c = 0; c < D / 16; c += 2) {
    uint32_t r[4];  // keys 0-7 and 8-15 of chunk c, then of chunk c + 1
    dev::ldsm_x4_trans(r, code_rows_at<D>(vc, warp, lane, c));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t k0 = __byte_perm(r[2 * h], 0, 0x3120), k8 = __byte_perm(r[2 * h + 1], 0, 0x3120);
      dev::mma16816<BF16>(o[2 * (c + h)], a, codes2_to_input<BF16, KIND>(k0),
                          codes2_to_input<BF16, KIND>(k8));
      dev::mma16816<BF16>(o[2 * (c + h) + 1], a, codes2_to_input<BF16, KIND>(k0 >> 16),
                          codes2_to_input<BF16, KIND>(k8 >> 16));
    }
  }
}
// The column of O that element e (0, 1) of accumulator i of lane quad position t4 holds: fp8_pv's
// order under FP8, the 16-bit kernel's 8 i + 2 t4 + e otherwise.
template <bool FP8>
__device__ __forceinline__ int o_column(int i, int t4, int e) {
  return FP8 ? 16 * (i >> 1) + 4 * t4 + 2 * e + (i & 1) : 8 * i + 2 * t4 + e;
}

// FP8: three CTAs per SM (registers and shared memory sized for it): a tile's work is a chain of
// dependent steps, and with two CTAs (two warps per scheduler) the FP8 kernel issued an instruction
// every 4.7 cycles per warp, at 44% of the DRAM bandwidth (Nsight Compute on the H200, batch 64).
// W: the variants the instantiation reads (packed_kernel.cuh Walk), applied where the fused kernel
// applies them (fused_kernel.cuh): paged K / V in the tile loads; the window clips the key range of
// the token tile and tests each (row, key); the cap replaces the logit's one product (fused_math.h
// scaled_logit).
template <bool BF16, int D, int STAGES, bool FP8, packed::Walk W>
__global__ void __launch_bounds__(kThreads, FP8 ? 3 : 1) packed_kernel(const PackedParams p) {
  namespace dev = fused::dev;
  using S = PackedSmem<D, STAGES, FP8>;
  extern __shared__ __align__(128) unsigned char smem[];
  uint16_t* const sq = reinterpret_cast<uint16_t*>(smem + S::kQ);
  float* const smax = reinterpret_cast<float*>(smem + S::kMax);

  const packed::Cta cta = packed::cta_of(p);
  if (!cta.live) return;
  const int kvh = cta.kvh, seq = cta.seq, tq = cta.tq, tk = cta.tk, tok0 = cta.tok0;
  const int first_row = cta.first_row, n_rows = cta.n_rows;
  const int64_t k0 = cta.k0;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;

  // Paged K / V (W paged or variants, page_size > 0): this sequence's block-table row and its last page; the
  // pools' rows are slots, so the sequence's keys start nowhere in particular (row 0 below).
  constexpr bool VAR = W == packed::Walk::variants;
  const bool paged = packed::paged_walk<W>(p.page_size);
  const int32_t* table = paged ? p.block_table + int64_t(seq) * p.max_blocks : nullptr;

  int k_lo, k_hi, k_end;
  packed::key_range<VAR>(p, tq, tk, tok0, tok0 + cta.tile_tokens - 1, cta.split, k_lo, k_hi, k_end);
  const int n_tiles = k_end > k_lo ? (k_end - k_lo + kBC - 1) / kBC : 0;
  const int64_t kv_stride = int64_t(p.num_kv_heads) * D;
  const int64_t kv_row0 = paged ? 0 : k0;
  const uint16_t* gk = p.k + (kv_row0 * p.num_kv_heads + kvh) * D;
  const uint16_t* gv = p.v + (kv_row0 * p.num_kv_heads + kvh) * D;
  const uint8_t* ck = reinterpret_cast<const uint8_t*>(p.k) + (kv_row0 * p.num_kv_heads + kvh) * D;
  const uint8_t* cv = reinterpret_cast<const uint8_t*>(p.v) + (kv_row0 * p.num_kv_heads + kvh) * D;
  // Paged: the next tile's slots, read one tile ahead (packed::PagedSlots).
  packed::PagedSlots slots;
  if (paged) slots.fetch(table, p.page_size, k_lo, k_end - k_lo, lane);
  // FP8 copies by warp (load_code_rows): each warp's 16 keys in one page where pages and tiles
  // start at multiples of 16 (tiles start at k_lo + 64 t).
  const bool runs = paged && p.page_size % kRows == 0 && k_lo % kRows == 0;
  auto load_tile = [&](int t) {  // tile t of the range into its stage; rows past k_end zero-filled
    const int n0 = k_lo + t * kBC;
    const int64_t off = paged ? 0 : int64_t(n0) * kv_stride;
    const int valid = k_end - n0;
    if (paged) slots.ready(p.page_size);
    if constexpr (FP8) {  // codes: the row stride in bytes is the stride in elements
      uint8_t* sc = smem + S::kCodes + (t % STAGES) * 2 * S::kCodeTile;
      load_code_rows<D>(sc, sc + S::kCodeTile, ck + off, cv + off, kv_stride, valid, warp, lane,
                        paged ? &slots : nullptr, runs);
    } else {
      uint16_t* sk = reinterpret_cast<uint16_t*>(smem + S::kKV + (t % STAGES) * 2 * S::kTile);
      if (paged) {
        load_kv_paged<D>(sk, sk + kBC * D, gk, gv, kv_stride, slots, valid, tid);
      } else {
        dev::load_tile<kBC, D, kThreads>(sk, gk + off, kv_stride, valid, tid);
        dev::load_tile<kBC, D, kThreads>(sk + kBC * D, gv + off, kv_stride, valid, tid);
      }
    }
    if (paged) slots.fetch(table, p.page_size, n0 + kBC, valid - kBC, lane);
  };
  float scale, scale_log2, v_descale;
  packed::descaled<FP8>(p, seq, kvh, scale, scale_log2, v_descale);

  // Prologue: the first STAGES - 1 tiles in flight (one commit group per tile, empty ones too),
  // then this CTA's 16 rows of Q (row r = (token, member) pair first_row + r; zero past the tile).
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) {
    if (t < n_tiles) load_tile(t);
    dev::cp_async_commit();
  }
  packed::load_q<D, kThreads>(sq, p, cta, tid);
  __syncthreads();
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    if constexpr (FP8) {  // fp8_scores' order of d: 16 ks + 4 t4 + {0, 1} and + {2, 3}
      auto at = [&](int r, int d) {
        return *reinterpret_cast<const uint32_t*>(sq + dev::swz<D>(r, d >> 3) + (d & 7));
      };
      const int d = 16 * ks + 4 * t4;
      qf[ks][0] = at(g, d);
      qf[ks][1] = at(g + 8, d);
      qf[ks][2] = at(g, d + 2);
      qf[ks][3] = at(g + 8, d + 2);
    } else {
      dev::ldsm_x4(
          qf[ks], dev::smem_addr(sq + dev::swz<D>((lane & 7) + ((lane >> 3) & 1) * 8, 2 * ks + (lane >> 4))));
    }
  }

  // This thread's two rows (g and g + 8 of the CTA's 16) and their tokens.
  int row_tok[2];
  bool row_ok[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = first_row + g + 8 * h;
    row_ok[h] = i < n_rows;
    row_tok[h] = tok0 + (row_ok[h] ? i / p.group : 0);
  }
  float o[D / 8][4];  // this warp's share of O (its 16 keys of every tile), 16 rows x D
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {neg_inf_f(), neg_inf_f()};
  float l_run[2] = {0.0f, 0.0f};  // this thread's share of the row sums (its keys of every tile)
  const uint8_t* mask = p.mask ? p.mask + p.cu_mask[seq] : nullptr;

  // ldmatrix addresses (as in the fused kernel): K rows (lane & 7) + (lane >> 4) * 8 of this warp's
  // 16 keys, V rows (lane & 7) + ((lane >> 3) & 1) * 8 transposed; chunks XOR-ed per step.
  const uint32_t key_off = uint32_t(warp * 16 * D * 2);
  const uint32_t k_off = key_off + uint32_t(((lane & 7) + (lane >> 4) * 8) * D * 2);
  const uint32_t k_chunk = uint32_t((((lane >> 3) & 1) ^ (lane & 7)) << 4);
  const uint32_t v_off = key_off + uint32_t(((lane & 7) + ((lane >> 3) & 1) * 8) * D * 2);
  const uint32_t v_chunk = uint32_t(((lane >> 4) ^ (lane & 7)) << 4);
  const uint32_t kv_base = dev::smem_addr(smem + S::kKV);

  for (int j = 0; j < n_tiles; ++j) {
    // Tile j landed for every thread's copies; every warp is done with tile j - 1 (its stage,
    // which the prefetch below refills, and the row maxima in shared memory).
    dev::cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (j + STAGES - 1 < n_tiles) load_tile(j + STAGES - 1);
    dev::cp_async_commit();
    const int n0 = k_lo + j * kBC;
    const uint32_t sk = kv_base + uint32_t((j % STAGES) * 2 * S::kTile);
    const uint32_t sv = sk + uint32_t(S::kTile);
    // FP8: tile j's code tiles (K, then V).
    const uint32_t kc = dev::smem_addr(smem + S::kCodes + (j % STAGES) * 2 * S::kCodeTile);
    const uint32_t vc = kc + uint32_t(S::kCodeTile);

    // S = Q K^T for 16 rows and this warp's 16 keys: s[0] keys 0-7, s[1] keys 8-15.
    float s[2][4] = {};
    if constexpr (FP8) {
      if (p.e5m2)
        fp8_scores<BF16, D, __NV_E5M2>(s, qf, kc, warp, lane);
      else
        fp8_scores<BF16, D, __NV_E4M3>(s, qf, kc, warp, lane);
    } else {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t b[4];
        dev::ldsm_x4(b, sk + k_off + (k_chunk ^ uint32_t(ks << 5)));
        dev::mma16816<BF16>(s[0], qf[ks], b[0], b[1]);
        dev::mma16816<BF16>(s[1], qf[ks], b[2], b[3]);
      }
    }
    // Logits x = dot * (scale log2 e) in fp32, -inf past the split's range, the masked sentinel
    // where causality or the mask hides a key of the range; this warp's row maxima. A tile wholly
    // inside the range and the walk, without causality, mask or variants, takes the product alone
    // (what logit returns there, without its tests).
    const int range_end = n0 + kBC < k_hi ? n0 + kBC : k_hi;
    const bool open_tile = !VAR && !p.causal && !mask && n0 + kBC <= k_hi && n0 + kBC <= k_end;
    float mx[2] = {neg_inf_f(), neg_inf_f()};
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1, col = n0 + warp * 16 + i * 8 + 2 * t4 + (e & 1);
        const float xv = open_tile ? __fmul_rn(s[i][e], scale_log2)
                                   : packed::logit<VAR>(p, s[i][e], col, range_end, k_end, row_tok[h],
                                                        row_ok[h], tq, tk, mask, scale, scale_log2);
        s[i][e] = xv;
        mx[h] = fmaxf(mx[h], xv);
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = dev::quad_max(mx[h]);
      if (t4 == 0) smax[warp * kRows + g + 8 * h] = mx[h];
    }
    __syncthreads();
    // The tile's row max over all 64 keys (the same in every warp), the online-softmax step, P.
    float alpha[2], off[2], tile_sum[2] = {0.0f, 0.0f};
    packed::tile_step<kWarps>(smax, g, m_run, alpha, off);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[i][e] = fused::tile_probability(s[i][e], off[e >> 1]);
        tile_sum[e >> 1] += s[i][e];
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * alpha[h] + tile_sum[h];
    // alpha is 1 on a row whose max held (most tiles past the first): O x 1 keeps every bit, so
    // the rescale is skipped where it is 1 on every row of the warp.
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        o[i][0] *= alpha[0];
        o[i][1] *= alpha[0];
        o[i][2] *= alpha[1];
        o[i][3] *= alpha[1];
      }
    }
    // O += P V over this warp's 16 keys, P rounded to the input type (the A fragment is the S
    // accumulator layout, packed); keys past the range have P = 0 and zero-filled V.
    const uint32_t a[4] = {dev::pack2<BF16>(s[0][0], s[0][1]), dev::pack2<BF16>(s[0][2], s[0][3]),
                           dev::pack2<BF16>(s[1][0], s[1][1]), dev::pack2<BF16>(s[1][2], s[1][3])};
    if constexpr (FP8) {
      if (p.e5m2)
        fp8_pv<BF16, D, __NV_E5M2>(o, a, vc, warp, lane);
      else
        fp8_pv<BF16, D, __NV_E4M3>(o, a, vc, warp, lane);
    } else {
#pragma unroll
      for (int nb = 0; nb < D / 16; ++nb) {
        uint32_t b[4];
        dev::ldsm_x4_trans(b, sv + v_off + (v_chunk ^ uint32_t(nb << 5)));
        dev::mma16816<BF16>(o[2 * nb], a, b[0], b[1]);
        dev::mma16816<BF16>(o[2 * nb + 1], a, b[2], b[3]);
      }
    }
  }

  // Sum the warps' shares of O and of the row sums (in the K/V stages, free once every copy has
  // landed and every warp is past its last tile), normalise, store the split's partial state.
  dev::cp_async_wait<0>();
  __syncthreads();
  float* const so = reinterpret_cast<float*>(smem + S::kKV);  // [kWarps][16][D]
  float* const sl = so + kWarps * kRows * D;                  // [kWarps][16]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = dev::quad_sum(l_run[h]);
    if (t4 == 0) sl[warp * kRows + g + 8 * h] = l;
    if (t4 == 0 && warp == 0) smax[kWarps * kRows + g + 8 * h] = m_run[h];  // the same in every warp
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      float* const at = so + (warp * kRows + g + 8 * h) * D;
      if constexpr (FP8) {
        at[o_column<FP8>(i, t4, 0)] = o[i][2 * h];
        at[o_column<FP8>(i, t4, 1)] = o[i][2 * h + 1];
      } else {
        *reinterpret_cast<float2*>(at + o_column<FP8>(i, t4, 0)) = make_float2(o[i][2 * h], o[i][2 * h + 1]);
      }
    }
  }
  __syncthreads();
  for (int idx = tid; idx < kRows * D; idx += kThreads) {
    const int r = idx / D, c = idx % D, i = first_row + r;
    if (i >= n_rows) continue;
    float acc = 0.0f, l = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      acc += so[(w * kRows + r) * D + c];
      l += sl[w * kRows + r];
    }
    const int64_t pair = packed::partial_index(p, cta, i);
    p.part_o[pair * D + c] = splitkv::partial_o(acc, l, v_descale);
    if (c == 0) p.part_lse[pair] = fused::partial_lse2(smax[kWarps * kRows + r], l);
  }
}
template <bool BF16, int D, int STAGES, bool FP8, packed::Walk W>
cudaError_t launch_packed(const PackedParams& p, dim3 grid, cudaStream_t stream) {
  constexpr int smem = PackedSmem<D, STAGES, FP8>::kBytes;
  auto kernel = packed_kernel<BF16, D, STAGES, FP8, W>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  kernel<<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// deep: 6 stages instead of 3, for a grid with at most one CTA per SM (3 stages let two share one).
// FP8: code stages of half the bytes; three CTAs of 3 stages per SM (the deep grid: one CTA with
// 11, the bytes in flight of the 16-bit kernel's 6).
constexpr int kStages = 3, kDeepStages = 6, kFp8Stages = 3, kFp8DeepStages = 11;
static_assert(kPackedResidentPerSM * (PackedSmem<128, kStages>::kBytes + 1024) <= 228 * 1024 &&
                  3 * (PackedSmem<128, kFp8Stages, true>::kBytes + 1024) <= 228 * 1024,
              "packed_machine_splits counts two resident CTAs per SM; FP8 fits three");
static_assert(PackedSmem<128, kFp8DeepStages, true>::kBytes <= 227 * 1024, "one CTA per SM at the deepest");
// A call with variants takes the shallow stages whatever its grid (fewer instantiations).
template <bool BF16, int D, bool FP8, packed::Walk W>
cudaError_t launch_stages(const PackedParams& p, bool deep, dim3 grid, cudaStream_t stream) {
  constexpr int shallow = FP8 ? kFp8Stages : kStages, deepest = FP8 ? kFp8DeepStages : kDeepStages;
  if constexpr (W == packed::Walk::plain)
    if (deep) return launch_packed<BF16, D, deepest, FP8, W>(p, grid, stream);
  return launch_packed<BF16, D, shallow, FP8, W>(p, grid, stream);
}
template <bool BF16, bool FP8, packed::Walk W>
cudaError_t launch_walk(const PackedParams& p, int d, bool deep, dim3 grid, cudaStream_t stream) {
  return d == 64 ? launch_stages<BF16, 64, FP8, W>(p, deep, grid, stream)
                 : launch_stages<BF16, 128, FP8, W>(p, deep, grid, stream);
}
template <bool BF16, bool FP8>
cudaError_t launch_head_size(const PackedParams& p, int d, packed::Walk w, bool deep, dim3 grid,
                             cudaStream_t stream) {
  using packed::Walk;
  return w == Walk::variants ? launch_walk<BF16, FP8, Walk::variants>(p, d, deep, grid, stream)
         : w == Walk::paged  ? launch_walk<BF16, FP8, Walk::paged>(p, d, deep, grid, stream)
                             : launch_walk<BF16, FP8, Walk::plain>(p, d, deep, grid, stream);
}

}  // namespace

int packed_attention_cuda(const ac_attention_args& args, char* err, size_t err_len, bool synchronize,
                          int keys_per_split) {
  ac_attention_args a = args;
  const int sms = cuda_sm_count();
  if (sms < 1) {
    if (err && err_len) std::snprintf(err, err_len, "splitkv-packed: the device's SM count cannot be read");
    return AC_ERR_DEVICE;
  }
  if (a.num_splits == 0)
    a.num_splits = keys_per_split > 0 ? fixed_split_count(a, keys_per_split) : packed_machine_splits(a, sms);
  if (int rc = packed_check_args(a, err, err_len)) return rc;
  if (int rc = splitkv_check_fixed(a, keys_per_split, err, err_len)) return rc;
  if (a.num_seqs == 0) return AC_OK;
  if (!aligned_to(a.q, 16) || !aligned_to(a.k, 16) || !aligned_to(a.v, 16))
    AC_REFUSE("splitkv-packed: q, k and v must be 16-byte aligned (cp.async of 16-byte chunks)");
  if (!a.cu_seqlens_q || !a.cu_seqlens_k) AC_REFUSE("splitkv-packed: device cu_seqlens missing");
  if (int64_t(a.num_seqs) * a.num_splits > 65535)
    AC_REFUSE("splitkv-packed: %d sequences x %d splits exceed the grid (65535)", a.num_seqs, a.num_splits);
  const int64_t total_q = a.cu_seqlens_q_host[a.num_seqs];
  if (total_q == 0) return AC_OK;
  const int max_tq = fused::max_seqlen_q_host(a);
  PackedParams p{};
  fused::read_common_args(p, a);
  p.br = kSplitKVTilings[a.tiling].br;
  p.num_splits = a.num_splits;
  p.keys_per_split = keys_per_split;
  const int tile_tokens = std::min(p.br, max_tq);
  const int tile_rows = tile_tokens * p.group;
  p.chunks_per_tile = (tile_rows + kRows - 1) / kRows;
  const int token_tiles = (max_tq + p.br - 1) / p.br;
  if (int64_t(token_tiles) * p.chunks_per_tile > 65535)
    AC_REFUSE("splitkv-packed: %d row chunks exceed the grid (65535)", token_tiles * p.chunks_per_tile);
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  const size_t need = splitkv_workspace_bytes(a);
  void* ws = nullptr;
  AC_CUDA_TRY(cudaMallocAsync(&ws, need, stream));
  p.part_o = static_cast<float*>(ws);
  const int dv = head_size_v_of(a);
  p.part_lse = p.part_o + size_t(a.num_splits) * size_t(total_q) * size_t(a.num_heads) * size_t(dv);
  const dim3 grid(unsigned(a.num_kv_heads), unsigned(a.num_seqs * a.num_splits),
                  unsigned(token_tiles * p.chunks_per_tile));
  const bool bf16 = a.dtype == AC_DTYPE_BF16, fp8 = fused::fp8_kv(a);
  const packed::Walk walk = packed::walk_of(a);
  fused::read_variant_args(p, a);
  p.v_in_k = a.v_in_k;
  if (fp8) {
    p.k_descale = a.k_descale;
    p.v_descale = a.v_descale;
    p.descale_granularity = a.descale_granularity;
    p.e5m2 = a.kv_dtype == AC_DTYPE_E5M2;
  }
  const bool deep = int64_t(grid.x) * grid.y * grid.z <= int64_t(sms);
  const int d = a.head_size;
  cudaError_t e = dv != d ? packed::launch_packed_mla(p, bf16, fp8, walk, grid, stream)  // kPackedHeadPairs
                  : bf16  ? (fp8 ? launch_head_size<true, true>(p, d, walk, deep, grid, stream)
                                 : launch_head_size<true, false>(p, d, walk, deep, grid, stream))
                          : (fp8 ? launch_head_size<false, true>(p, d, walk, deep, grid, stream)
                                 : launch_head_size<false, false>(p, d, walk, deep, grid, stream));
  if (e == cudaSuccess) e = cudaError_t(splitkv_combine_cuda(p.part_o, p.part_lse, a, stream));
  const cudaError_t f = cudaFreeAsync(ws, stream);
  if (e == cudaSuccess) e = f;
  if (e != cudaSuccess) {
    if (err && err_len) std::snprintf(err, err_len, "splitkv-packed: %s", cudaGetErrorString(e));
    return AC_ERR_DEVICE;
  }
  if (synchronize) AC_CUDA_TRY(cudaStreamSynchronize(stream));
  return AC_OK;
}

}  // namespace attncheck::kern
