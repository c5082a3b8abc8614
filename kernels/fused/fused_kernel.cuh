// The fused attention forward kernel (FlashAttention-2 style) for sm_90, shared by fused.cu (one
// output per row) and kernels/splitkv/splitkv.cu (SPLIT: the key range cut into num_splits parts,
// fp32 partial (O, LSE) per part).
//
// Per CTA: a tile of BR query rows of one (sequence, head); BR / 16 warps, each owning 16 rows (one
// m16 block) and holding its Q fragments, its S tile and its O accumulator in registers.
// Loop over key tiles of BC keys: K and V tiles are double-buffered in shared memory and fetched
// with cp.async one tile ahead (zero-filled past the end of the key range); fragments are read with
// ldmatrix (V transposed) from rows swizzled by 16-byte chunk (chunk ^ row % 8) so ldmatrix and
// cp.async are free of bank conflicts. S = Q K^T and O += P V run on tensor cores,
// mma.sync.m16n8k16.row.col with fp16 or bf16 operands and fp32 accumulation.
// Numerics (fused_math.h): scores scaled by softmax_scale * log2 e in fp32 (__fmul_rn, never
// contracted), masked logits are -inf (never a finite sentinel), online softmax m / l / O in fp32
// with the base-case guard, P rounded to the input type before P V, O rounded to the input type at
// the store; LSE fp32, base 2 or natural, [heads, tokens]; empty row O = 0, LSE = sentinel.
// Variants (plugin_abi.h AC_VAR_*; instantiated with VAR = true, chosen per call by uses_variants, so
// the plain instantiation's code is unchanged). Paged K / V: the tile loader gathers each key's row
// from its page (load_kv_tiles_paged, kv_slot). Window: the key range starts at the key tile (of the
// grid from key 0) holding the row tile's first visible key and ends after its last (window_walk,
// the right side like causal), and the per-element test adds window_visible. Softcap: scaled_logit
// replaces the one product, rounding after the scale, the division, tanhf, the cap and log2 e
// (__fmul_rn / __fdiv_rn, never contracted). Sinks: the epilogue joins the sink to the finished
// (m, l) and rescales O~ (join_sink, fp32) before the normalisation; a split partial leaves the
// sink to the combine (splitkv.cu).
// Check: ctest --test-dir build -L gpu -R kernels_attention
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <iterator>
#include <utility>

#include "attncheck/plugin_abi.h"
#include "fused/fused.h"
#include "fused/fused_math.h"
#include "quantize/quantize_math.h"
#include "splitkv/splitkv_math.h"

namespace attncheck::kern::fused {

struct KernelParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;   // [total_q, num_heads, D], input type (unsplit)
  float* lse;  // [num_heads, total_q] or null (unsplit)
  const int32_t* cu_q;
  const int32_t* cu_k;
  const uint8_t* mask;
  const int64_t* cu_mask;
  int num_heads, num_kv_heads, group;
  int64_t total_q;
  float scale_log2;
  int causal;
  int lse_base2;
  float empty_lse;
  int reverse_tiles;   // causal: launch the row tiles with the most keys first
  int num_splits;      // split mode: partial (O, LSE) per part of the key range
  int keys_per_split;  // split mode: 0 equal parts; > 0 the fixed split size (splitkv_math.h)
  float* part_o;       // [num_splits, total_q, num_heads, D], O / l (0 for an empty part)
  float* part_lse;     // [num_splits, total_q, num_heads], base 2, -inf for an empty part
  // The variants (plugin_abi.h AC_VAR_*), read by the VAR instantiations only; neutral values
  // (softcap 0, window sides -1, no sinks, page_size 0) leave that instantiation computing what the
  // plain one does.
  float scale;                 // softmax_scale itself: a capped score is scaled before the cap
  float softcap;               // > 0: scores capped (fused_math.h scaled_logit); 0: none
  int window_left;             // -1: unbounded (fused_math.h window_visible)
  int window_right;            // -1: unbounded
  const float* sinks;          // [num_heads] natural-unit logits, device memory, or null
  const int32_t* block_table;  // [num_seqs, max_blocks] when page_size > 0
  int page_size;               // > 0: k and v are page pools read through block_table
  int max_blocks;
  // FlashAttention-3's FP8 forward (fused-hopper-fp8 alone reads these): the descales, device memory,
  // per descale_granularity (plugin_abi.h), and the first key column of each sequence in V's
  // transposed copy (kernels/hopper/hopper_fp8.cu).
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  int descale_granularity;
  const int32_t* vt_col;
  // cuDNN's FP8 scales (fused-hopper-fp8-scaled; plugin_abi.h), device memory: P's scale (null: the
  // fixed 2^8), O's FP8 format (0: O in the input type) with its output_scale, and the two maxima
  // the kernel raises by atomicMax (null: not asked).
  const float* p_scale;
  const float* output_scale;
  int out_fp8;
  float* amax;
};

template <int BR, int BC, int D>
constexpr int fused_smem_bytes() {
  // [K0][V0][K1][V1]; Q is staged in the second buffer (and beyond when BR > 2 BC) before the
  // first prefetch overwrites it, after every warp has its Q fragments in registers.
  constexpr int kv = 4 * BC * D, q = 2 * BC * D + BR * D;
  return 2 * (kv > q ? kv : q);
}

namespace dev {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte asynchronous copy global -> shared; src_size 0 zero-fills (rows past the range).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// D (16x8, fp32) += A (16x16, row) * B (16x8, col).
template <bool BF16>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
// Two floats rounded (nearest even) to the input type, packed low = first.
template <bool BF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (BF16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}
// Element offset of (row, 16-byte chunk) in a swizzled [rows][D] tile.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}
// Stage `rows` rows of D elements (row stride in elements) into a swizzled tile; rows at or past
// `valid` are zero-filled, so masked keys meet V = 0 and never an uninitialised NaN pattern.
template <int ROWS, int D, int NT>
__device__ __forceinline__ void load_tile(uint16_t* s, const uint16_t* g, int64_t row_stride, int valid,
                                          int tid) {
  constexpr int CH = D / 8, ROWS_PER_PASS = NT / CH, PASSES = (ROWS + ROWS_PER_PASS - 1) / ROWS_PER_PASS;
  static_assert(NT % CH == 0, "a pass covers whole rows");
  // A running source pointer (one add per pass) rather than per-pass addresses the compiler would
  // hoist out of the key loop and keep live in registers.
  const int r0 = tid / CH, c = tid % CH;
  const uint16_t* src = g + int64_t(r0) * row_stride + c * 8;
  const int64_t step = int64_t(ROWS_PER_PASS) * row_stride;
#pragma unroll
  for (int it = 0; it < PASSES; ++it) {
    const int r = r0 + it * ROWS_PER_PASS;
    if (ROWS % ROWS_PER_PASS != 0 && r >= ROWS) break;
    const bool ok = r < valid;
    cp_async16(s + swz<D>(r, c), ok ? src : g, ok);
    src += step;
  }
}

// The paged form of load_tile (AC_VAR_PAGED_KV) for a K tile and its V tile at once: row r is key
// n0 + r, stored at slot kv_slot<M> of the pools (its page from this sequence's block-table row
// `table`), so every row has its own address and the slot is found once for both tensors. Chunks,
// swizzle and the zero-fill of rows at or past `valid` are load_tile's; a row past `valid` reads no
// table entry, so table entries past the sequence's last page are never read.
template <int ROWS, int D, int NT, Mutation M>
__device__ __forceinline__ void load_kv_tiles_paged(uint16_t* sk, uint16_t* sv, const uint16_t* gk,
                                                    const uint16_t* gv, int64_t row_stride,
                                                    const int32_t* table, int page_size, int64_t last_page,
                                                    int n0, int valid, int tid) {
  constexpr int CH = D / 8, ROWS_PER_PASS = NT / CH, PASSES = (ROWS + ROWS_PER_PASS - 1) / ROWS_PER_PASS;
  static_assert(NT % CH == 0, "a pass covers whole rows");
  const int r0 = tid / CH, c = tid % CH;
#pragma unroll
  for (int it = 0; it < PASSES; ++it) {
    const int r = r0 + it * ROWS_PER_PASS;
    if (ROWS % ROWS_PER_PASS != 0 && r >= ROWS) break;
    const bool ok = r < valid;
    int64_t off = 0;
    if (ok) off = row_offset<M>(kv_slot<M>(table, page_size, int64_t(n0) + r, last_page), row_stride) + c * 8;
    cp_async16(sk + swz<D>(r, c), gk + off, ok);
    cp_async16(sv + swz<D>(r, c), gv + off, ok);
  }
}

// The sum / the max of x over the quad of lanes that hold one row of an mma fragment (lanes
// 4 g .. 4 g + 3), each lane's value first.
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return x;
}

}  // namespace dev

// One key tile's step of a row's running max m (fused_math.h): m moves to the larger of m and the
// tile's max (fmaxf), alpha rescales the state to it and off is what the exponent subtracts.
__device__ __forceinline__ void advance_max(float& m_run, float tile_max, float& alpha, float& off) {
  const float m_new = fmaxf(m_run, tile_max);
  alpha = rescale_factor(m_run, m_new);
  off = exponent_offset(m_new);
  m_run = m_new;
}

// The unsplit epilogue's store of one of this thread's rows (token tok of head `head`), shared by
// fused and fused-hopper: O times inv (1 / l) rounded to the input type, this thread's columns
// 8 i + 2 t4 and 8 i + 2 t4 + 1 of each group i of 8, which o_pair(i, 0) and o_pair(i, 1) name in
// the kernel's accumulator; the row's LSE from the quad's first thread. inv and the accumulator
// are taken by reference, so the kernel's registers are read where its own loop read them.
// FP8 (fused-hopper-fp8's instantiation): where the call asks O in FP8 (p.out_fp8), each fp32
// element O inv is divided by output_scale and cast, saturating (quantize_math.h quantize_element,
// the twin's own function), one byte per element; and the largest |O inv| of the thread's elements
// is returned (AC_FP8_AMAX's amax[1], NaN left out as the twin's std::max leaves it); 0 otherwise.
template <bool BF16, int D, bool FP8 = false, class OPair>
__device__ __forceinline__ float store_row(const KernelParams& p, int64_t tok, int head, int t4,
                                           const float& inv, float m, float l, OPair o_pair) {
  float largest = 0.0f;
  if (FP8 && p.out_fp8) {
    uint8_t* po = static_cast<uint8_t*>(p.out) + (tok * p.num_heads + head) * D;
    const float scale = *p.output_scale;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const float x0 = o_pair(i, 0) * inv, x1 = o_pair(i, 1) * inv;
      largest = fmaxf(largest, fmaxf(fabsf(x0), fabsf(x1)));
      *reinterpret_cast<uint16_t*>(po + i * 8 + 2 * t4) =
          uint16_t(quantize_element(p.out_fp8, x0, scale, true) |
                   (uint32_t(quantize_element(p.out_fp8, x1, scale, true)) << 8));
    }
  } else {
    uint16_t* po = static_cast<uint16_t*>(p.out) + (tok * p.num_heads + head) * D;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const float x0 = o_pair(i, 0) * inv, x1 = o_pair(i, 1) * inv;
      if constexpr (FP8) largest = fmaxf(largest, fmaxf(fabsf(x0), fabsf(x1)));
      *reinterpret_cast<uint32_t*>(po + i * 8 + 2 * t4) = dev::pack2<BF16>(x0, x1);
    }
  }
  if (p.lse && t4 == 0)
    p.lse[int64_t(head) * p.total_q + tok] = final_lse(m, l, p.lse_base2 != 0, p.empty_lse);
  return largest;
}

// CTAs per SM the register allocator is asked to allow: 3 for the 4-warp tiles with at most 64
// keys (up to 170 registers), otherwise whatever fits (255).
template <int BR, int BC, int D>
constexpr int fused_min_ctas() {
  return 1;
}

// VAR: the instantiation that reads the variants (KernelParams' last fields); without it they are
// never read and the kernel is the plain one. M: a mutant (kernels/mutants/), none for the correct
// kernels; the variants' mutants (19 to 23) act only in VAR instantiations.
template <bool BF16, int D, int BR, int BC, bool SPLIT, bool VAR = false, Mutation M = Mutation::none>
__global__ void __launch_bounds__(BR / 16 * 32, fused_min_ctas<BR, BC, D>())
    fused_attention_kernel(const KernelParams p) {
  static_assert(BR % 16 == 0 && BC % 16 == 0 && D % 16 == 0, "tile sizes are multiples of 16");
  constexpr int NW = BR / 16, NT = NW * 32;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint16_t* const smem = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* const sQ = smem + 2 * BC * D;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int head = blockIdx.y;
  const int seq = SPLIT ? int(blockIdx.z) / p.num_splits : int(blockIdx.z);
  const int split = SPLIT ? int(blockIdx.z) % p.num_splits : 0;
  const int64_t q0 = p.cu_q[seq], k0 = p.cu_k[seq];
  const int tq = p.cu_q[seq + 1] - int(q0), tk = p.cu_k[seq + 1] - int(k0);
  const int tile = p.reverse_tiles ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int row0 = tile * BR;
  if (row0 >= tq) return;
  const int kvh = kv_head_of<M>(head, p.group, p.num_kv_heads);
  // Paged K / V (VAR, page_size > 0): this sequence's block-table row and its last page's index;
  // the pools' rows are slots, so the sequence's keys start nowhere in particular (row 0 below).
  const bool paged = VAR && p.page_size > 0;
  const int32_t* table = paged ? p.block_table + int64_t(seq) * p.max_blocks : nullptr;
  const int64_t last_page = paged && tk > 0 ? (tk - 1) / p.page_size : 0;

  // This CTA's key range [k_lo, k_hi): the whole sequence, or one part of num_splits
  // (splitkv::split_range: sizes as equal as possible, or the fixed split size keys_per_split,
  // parts past the row's end empty).
  int k_lo = 0, k_hi = tk;
  if constexpr (SPLIT) {
    splitkv::split_range(tk, p.num_splits, p.keys_per_split, split, k_lo, k_hi);
  } else if constexpr (VAR) {
    k_hi = int(walked_keys<M>(tk, paged));  // tk; one more under mutant 20
  }
  // Causal: nothing past what the tile's last row can see is loaded.
  int k_end = k_hi;
  if (p.causal) {
    const int last_row = (row0 + BR < tq ? row0 + BR : tq) - 1;
    const int lim = last_row + tk - tq + 1 + (M == Mutation::causal_off_by_one ? 1 : 0);
    k_end = lim < k_end ? lim : k_end;
  }
  if constexpr (VAR)  // fused_twin.h walks the same tiles
    window_walk<M>(row0, (row0 + BR < tq ? row0 + BR : tq) - 1, tq, tk, p.window_left, p.window_right, BC,
                   k_lo, k_end);
  const int n_tiles = k_end > k_lo ? (k_end - k_lo + BC - 1) / BC : 0;

  const uint16_t* gq = static_cast<const uint16_t*>(p.q) + ((q0 + row0) * p.num_heads + head) * D;
  const int64_t kv_stride = int64_t(p.num_kv_heads) * D;
  const int64_t kv_row0 = paged ? 0 : k0;
  const uint16_t* gk = static_cast<const uint16_t*>(p.k) + (kv_row0 * p.num_kv_heads + kvh) * D;
  const uint16_t* gv = static_cast<const uint16_t*>(p.v) + (kv_row0 * p.num_kv_heads + kvh) * D;

  dev::load_tile<BR, D, NT>(sQ, gq, int64_t(p.num_heads) * D, tq - row0, tid);
  if (n_tiles > 0) {
    if (paged) {
      dev::load_kv_tiles_paged<BC, D, NT, M>(smem, smem + BC * D, gk, gv, kv_stride, table, p.page_size,
                                             last_page, k_lo, k_end - k_lo, tid);
    } else {
      dev::load_tile<BC, D, NT>(smem, gk + row_offset<M>(k_lo, kv_stride), kv_stride, k_end - k_lo, tid);
      dev::load_tile<BC, D, NT>(smem + BC * D, gv + row_offset<M>(k_lo, kv_stride), kv_stride, k_end - k_lo,
                                tid);
    }
  }
  dev::cp_async_commit();
  dev::cp_async_wait<0>();
  __syncthreads();

  // Q fragments of this warp's 16 rows, all of D, kept in registers for the whole loop.
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
    dev::ldsm_x4(qf[ks], dev::smem_addr(sQ + dev::swz<D>(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                         2 * ks + (lane >> 4))));
  __syncthreads();  // sQ is the second K/V buffer: every warp has read it before the prefetch

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {neg_inf_f(), neg_inf_f()};
  float l_run[2] = {0.0f, 0.0f};  // this thread's partial row sums, reduced over the quad at the end

  const int row_a = row0 + warp * 16 + g, row_b = row_a + 8;  // this thread's two rows
  const uint8_t* mask = p.mask ? p.mask + p.cu_mask[seq] : nullptr;
  const int diag = tk - tq;  // bottom-right alignment: row t sees keys <= t + diag

  // ldmatrix addresses: a per-lane byte offset (row part and the lane's swizzled chunk) XOR-ed
  // with a compile-time chunk step, so no per-step address registers are kept live.
  // K (B of Q K^T, not transposed): rows = keys (lane & 7) + (lane >> 4) * 8, chunk bit 0 = (lane >> 3) & 1.
  const uint32_t k_row_off = uint32_t(((lane & 7) + (lane >> 4) * 8) * D * 2);
  const uint32_t k_chunk = uint32_t((((lane >> 3) & 1) ^ (lane & 7)) << 4);
  // V (B of P V, transposed): rows = keys (lane & 7) + ((lane >> 3) & 1) * 8, chunk bit 0 = lane >> 4.
  const uint32_t v_row_off = uint32_t(((lane & 7) + ((lane >> 3) & 1) * 8) * D * 2);
  const uint32_t v_chunk = uint32_t(((lane >> 4) ^ (lane & 7)) << 4);
  const uint32_t smem_base = dev::smem_addr(smem);

  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j & 1;
    const int n0 = k_lo + j * BC;
    if (j + 1 < n_tiles) {
      uint16_t* sk = smem + (buf ^ 1) * 2 * BC * D;
      if (paged) {
        dev::load_kv_tiles_paged<BC, D, NT, M>(sk, sk + BC * D, gk, gv, kv_stride, table, p.page_size,
                                               last_page, n0 + BC, k_end - n0 - BC, tid);
      } else {
        dev::load_tile<BC, D, NT>(sk, gk + row_offset<M>(n0 + BC, kv_stride), kv_stride, k_end - n0 - BC,
                                  tid);
        dev::load_tile<BC, D, NT>(sk + BC * D, gv + row_offset<M>(n0 + BC, kv_stride), kv_stride,
                                  k_end - n0 - BC, tid);
      }
      dev::cp_async_commit();
      dev::cp_async_wait<1>();
    } else {
      dev::cp_async_wait<0>();
    }
    __syncthreads();
    const uint32_t sK = smem_base + uint32_t(buf * 2 * BC * D * 2);
    const uint32_t sV = sK + uint32_t(BC * D * 2);

    // S = Q K^T for this warp's 16 rows and BC keys.
    float s[BC / 8][4];
#pragma unroll
    for (int i = 0; i < BC / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int nb = 0; nb < BC / 16; ++nb) {
        uint32_t b[4];
        dev::ldsm_x4(b, sK + k_row_off + uint32_t(nb * 16 * D * 2) + (k_chunk ^ uint32_t(ks << 5)));
        dev::mma16816<BF16>(s[2 * nb], qf[ks], b[0], b[1]);
        dev::mma16816<BF16>(s[2 * nb + 1], qf[ks], b[2], b[3]);
      }
    }

    // Scale, mask (-inf), tile row max. A tile wholly inside the key range and below the causal
    // diagonal for all 16 rows of the warp, without an explicit mask, skips the per-element test.
    const int warp_row0 = row0 + warp * 16;
    bool full = n0 + BC <= k_hi && !mask && (!p.causal || n0 + BC - 1 <= warp_row0 + diag);
    if constexpr (VAR) {
      // The window is a band: the tile is inside every warp row's window when its first key is
      // inside the last row's and its last key inside the first row's.
      full = full && window_visible<M>(warp_row0 + 15, n0, tq, tk, p.window_left, p.window_right) &&
             window_visible<M>(warp_row0, n0 + BC - 1, tq, tk, p.window_left, p.window_right);
      // The softcap (fused_math.h scaled_logit) on every score first, one branch per tile: the
      // uncapped walk keeps the plain kernel's one product.
      if (p.softcap != 0.0f) {
#pragma unroll
        for (int i = 0; i < BC / 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[i][e] = scaled_logit<M>(s[i][e], p.scale, p.scale_log2, p.softcap);
      } else {
#pragma unroll
        for (int i = 0; i < BC / 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[i][e] = __fmul_rn(s[i][e], p.scale_log2);
      }
    }
    float mx[2] = {neg_inf_f(), neg_inf_f()};
#pragma unroll
    for (int i = 0; i < BC / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = VAR ? s[i][e] : __fmul_rn(s[i][e], p.scale_log2);
        if (!full) {
          const int row = e < 2 ? row_a : row_b;
          const int col = n0 + i * 8 + 2 * t4 + (e & 1);
          bool vis = row < tq && col < k_hi;
          if (p.causal) vis = vis && causal_visible<M>(row, col, tq, tk);
          if constexpr (VAR) vis = vis && window_visible<M>(row, col, tq, tk, p.window_left, p.window_right);
          // A key past the sequence (only mutant 20 walks there) has no mask entry.
          if (mask && vis)
            vis = (M == Mutation::read_past_end && col >= tk) || mask[int64_t(row) * tk + col] != 0;
          if (!vis) x = row < tq && col < k_hi ? masked_logit<M>() : neg_inf_f();
        }
        s[i][e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) mx[r] = dev::quad_max(mx[r]);
    float alpha[2], off[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) advance_max(m_run[r], mx[r], alpha[r], off[r]);
    float tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < BC / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[i][e] = tile_probability(s[i][e], off[e >> 1]);
        tile_sum[e >> 1] += s[i][e];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + tile_sum[r];
    if constexpr (M != Mutation::forget_rescale_o) {
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        o[i][0] *= alpha[0];
        o[i][1] *= alpha[0];
        o[i][2] *= alpha[1];
        o[i][3] *= alpha[1];
      }
    }

    // O += P V, P rounded to the input type (the A fragment is the S accumulator layout, packed).
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t a[4];
      a[0] = dev::pack2<BF16>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = dev::pack2<BF16>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = dev::pack2<BF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = dev::pack2<BF16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int nb = 0; nb < D / 16; ++nb) {
        uint32_t b[4];
        dev::ldsm_x4_trans(b, sV + v_row_off + uint32_t(kk * 16 * D * 2) + (v_chunk ^ uint32_t(nb << 5)));
        dev::mma16816<BF16>(o[2 * nb], a, b[0], b[1]);
        dev::mma16816<BF16>(o[2 * nb + 1], a, b[2], b[3]);
      }
    }
    // The next iteration's prefetch overwrites this buffer: every warp must be done reading it.
    if constexpr (M != Mutation::missing_barrier) __syncthreads();
  }

  // Epilogue: reduce l over the quad, join the sink (fused_math.h join_sink: its weight joins l,
  // O~ is rescaled to the new max; a split partial never counts it, the combine does, except under
  // mutant 23), normalise, store.
  float l_row[2] = {dev::quad_sum(l_run[0]), dev::quad_sum(l_run[1])};
  if constexpr (VAR && (!SPLIT || M == Mutation::sink_every_split)) {
    if (p.sinks) {
      const float sink2 = __fmul_rn(p.sinks[head], kLog2e);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float alpha = join_sink(m_run[r], l_row[r], sink2);
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
          o[i][2 * r] *= alpha;
          o[i][2 * r + 1] *= alpha;
        }
      }
    }
  }
  const float inv[2] = {inverse_row_sum(l_row[0]), inverse_row_sum(l_row[1])};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r == 0 ? row_a : row_b;
    if (row >= tq) continue;
    const int64_t tok = q0 + row;
    if constexpr (SPLIT) {
      float* po = p.part_o + ((int64_t(split) * p.total_q + tok) * p.num_heads + head) * D;
#pragma unroll
      for (int i = 0; i < D / 8; ++i)
        *reinterpret_cast<float2*>(po + i * 8 + 2 * t4) =
            make_float2(o[i][2 * r] * inv[r], o[i][2 * r + 1] * inv[r]);
      if (t4 == 0)
        p.part_lse[(int64_t(split) * p.total_q + tok) * p.num_heads + head] =
            partial_lse2(m_run[r], l_row[r]);
    } else {
      store_row<BF16, D>(p, tok, head, t4, inv[r], m_run[r], l_row[r],
                         [&](int i, int c) -> const float& { return o[i][2 * r + c]; });
    }
  }
}

// Launch one instantiation: grid (row tiles, heads, sequences x splits).
// M selects a deliberately broken variant (kernels/mutants/); the correct kernels use none.
template <bool BF16, int D, int BR, int BC, bool SPLIT, bool VAR = false, Mutation M = Mutation::none>
cudaError_t launch_fused_kernel(const KernelParams& p, int max_tq, int num_seqs, cudaStream_t stream) {
  auto kernel = fused_attention_kernel<BF16, D, BR, BC, SPLIT, VAR, M>;
  constexpr int smem = fused_smem_bytes<BR, BC, D>();
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const int splits = SPLIT ? p.num_splits : 1;
  const dim3 grid(unsigned((max_tq + BR - 1) / BR), unsigned(p.num_heads), unsigned(num_seqs * splits));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
  kernel<<<grid, BR / 16 * 32, smem, stream>>>(p);
  return cudaGetLastError();
}

using LaunchFn = cudaError_t (*)(const KernelParams&, int, int, cudaStream_t);

// The launchers of every tiling of TILINGS (kFusedTilings or kSplitKVTilings: one list gives both
// the instantiations and the subjects' caps) for one dtype and head size, in the list's order.
template <const auto& TILINGS, bool SPLIT, bool VAR, Mutation M, bool BF16, int D, size_t... Is>
constexpr std::array<LaunchFn, sizeof...(Is)> launch_table(std::index_sequence<Is...>) {
  return {&launch_fused_kernel<BF16, D, TILINGS[Is].br, TILINGS[Is].bc, SPLIT, VAR, M>...};
}
// The launcher for fp16 or bf16, head size 64 or 128 and tiling index `tiling` of TILINGS (the
// caller has checked all three); VAR and M as for the kernel.
template <const auto& TILINGS, bool SPLIT, bool VAR = false, Mutation M = Mutation::none>
LaunchFn pick_launch(bool bf16, int head_size, int tiling) {
  constexpr auto kIndices = std::make_index_sequence<std::size(TILINGS)>{};
  static constexpr auto kF16D64 = launch_table<TILINGS, SPLIT, VAR, M, false, 64>(kIndices);
  static constexpr auto kF16D128 = launch_table<TILINGS, SPLIT, VAR, M, false, 128>(kIndices);
  static constexpr auto kBf16D64 = launch_table<TILINGS, SPLIT, VAR, M, true, 64>(kIndices);
  static constexpr auto kBf16D128 = launch_table<TILINGS, SPLIT, VAR, M, true, 128>(kIndices);
  const auto& table =
      bf16 ? (head_size == 64 ? kBf16D64 : kBf16D128) : (head_size == 64 ? kF16D64 : kF16D128);
  return table[size_t(tiling)];
}

// Host side. The fields every mainloop's parameters read off the ABI arguments alike (this
// mainloop's KernelParams, splitkv-packed's PackedParams): tensors, offsets, mask, heads, the
// total query rows, the scale with log2 e folded in, causality.
template <class Params>
void read_common_args(Params& p, const ac_attention_args& a) {
  p.q = static_cast<decltype(p.q)>(a.q);
  p.k = static_cast<decltype(p.k)>(a.k);
  p.v = static_cast<decltype(p.v)>(a.v);
  p.cu_q = a.cu_seqlens_q;
  p.cu_k = a.cu_seqlens_k;
  p.mask = a.mask;
  p.cu_mask = a.cu_mask;
  p.num_heads = a.num_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.group = a.num_heads / a.num_kv_heads;
  p.total_q = a.cu_seqlens_q_host[a.num_seqs];
  p.scale_log2 = a.softmax_scale * kLog2e;
  p.causal = a.causal != 0;
}

// The variants' parameters, at their neutral values unless the call uses them (only VAR kernels read
// them): shared with splitkv-packed's launcher (a sink is read by the combine there).
template <typename Params>
void read_variant_args(Params& p, const ac_attention_args& a) {
  p.scale = a.softmax_scale;
  p.softcap = a.softcap;
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  p.page_size = a.page_size;
  p.max_blocks = a.max_blocks;
  p.block_table = a.page_size > 0 ? a.block_table : nullptr;
}

// Shared by every launcher of this mainloop (fused, split-KV, the mutants, fused-hopper): the
// parameters read off the ABI arguments, and the longest query range (the grid's row tiles).
// Each launcher then sets what is its own: outputs, LSE convention, split workspace.
inline KernelParams params_from_args(const ac_attention_args& a) {
  KernelParams p{};
  read_common_args(p, a);
  p.out = a.out;
  p.lse = a.lse;
  p.lse_base2 = 0;
  p.empty_lse = neg_inf_f();
  p.reverse_tiles = a.causal != 0;
  p.num_splits = 1;
  p.keys_per_split = 0;
  read_variant_args(p, a);
  p.sinks = a.sinks;
  return p;
}
// The unsplit launchers' parameters (fused, its mutants, fused-hopper): o's LSE base and empty-row
// sentinel.
inline KernelParams unsplit_params(const ac_attention_args& a, const FusedOptions& o) {
  KernelParams p = params_from_args(a);
  p.lse_base2 = o.lse_base == 2;
  p.empty_lse = o.empty_lse_sign > 0 ? pos_inf_f() : neg_inf_f();
  return p;
}

inline int max_seqlen_q_host(const ac_attention_args& a) {
  int max_tq = 0;
  for (int s = 0; s < a.num_seqs; ++s) {
    const int tq = a.cu_seqlens_q_host[s + 1] - a.cu_seqlens_q_host[s];
    max_tq = tq > max_tq ? tq : max_tq;
  }
  return max_tq;
}

// Runs launcher `fn` of the unsplit mainloop on arguments that passed fused_check_args: the
// device-side refusals (16-byte q / k / v for cp.async, 4-byte out, device cu_seqlens, the grid's
// 65535 sequences), the parameters with o's LSE base and empty-row sentinel, the launch and, with
// o.synchronize, the stream sync. Defined in fused.cu; the fused launcher and the fused mutants'
// launcher (kernels/mutants/mutants.cu) differ only in the instantiation they pass.
int run_unsplit(const ac_attention_args& a, const FusedOptions& o, LaunchFn fn, char* err, size_t err_len);

}  // namespace attncheck::kern::fused
