// CUDA kernel of splitkv-packed for MLA's absorbed decode: QK head size 576, V head size 512
// (AC_VAR_HEAD_SIZE_V, hopper.h kPackedHeadPairs). The grid, the rows of a CTA, the split ranges,
// the key tiles of 64 walked from the split's start, the variants and the FP8 cache are packed.cu's
// (packed_kernel.cuh shares them); what differs is where the data lives, since a 64-key tile of K
// and V is 139 KB and Q's 576 columns do not fit in registers.
//
// Shared memory: a ring of chunks of 32 keys (a tile is four chunks in order: K's first 32
// keys, K's last 32, V's first 32, V's last 32; a K chunk is 36 KB, a V chunk 32 KB), Q's 16 rows
// (18 KB) and P's 16 x 64 in the input type. Four warps. Per tile:
//   K chunks: S = Q K^T on tensor cores (mma.sync m16n8k16, fp16 or bf16 operands, fp32
//     accumulation), warp w the chunk's keys 8w..8w+7 for all 16 rows, Q's fragments read from
//     shared memory at each of the 36 k-steps; after the second chunk the logits (packed_kernel.cuh
//     logit: fl(dot x scale log2 e), or the capped score) and each warp's row maxima;
//   the first V chunk: the tile's row max over its 64 keys (the four warps' maxima), the online
//     softmax step of fused_math.h, P = 2^(x - m) in fp32, its row sums in fp32, P rounded to the
//     input type into shared memory; O rescaled;
//   V chunks: O += P V, warp w columns 128w..128w+127 of all 16 rows (64 fp32 accumulators per
//     thread), P's fragments from shared memory.
// The rounding points are the split-KV twin's (the same tile walk: P rounded to the input type,
// sums in fp32 in another order), so the twin is this kernel's twin too. The partial O / l (an FP8
// cache: times V's descale) and base-2 LSE go to the split-KV workspace; splitkv.cu's combine folds
// them (its sink included) and rounds O to the input type once.
// Copies: 16-bit K / V by cp.async into the ring, four chunks in flight. An FP8 cache's codes by
// cp.async into a ring of six code chunks (five in flight), each thread converting the codes it
// copied (exactly, codes_to_input) into one of two chunks of the input type at the end of the step
// before the chunk's, so the conversion needs no barrier of its own. Paged K / V: the slots of a
// tile's 64 keys, read as the tile before is issued (packed_kernel.cuh PagedSlots), lane l holding keys l and
// l + 32, each copy taking its row's slot from its lane by a shuffle; a row past the walk's end reads
// no table entry. One CTA per SM (205 KB of shared memory, with or without FP8).
// Check: ctest --test-dir build -L gpu -R kernels_hopper
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "fused/fused_kernel.cuh"
#include "fused/fused_math.h"
#include "hopper/packed_kernel.cuh"
#include "splitkv/splitkv_math.h"

namespace attncheck::kern::packed {

namespace {

namespace dev = fused::dev;

constexpr int kQK = 576, kV = 512, kSub = 32, kWarps = 4, kThreads = kWarps * 32;
static_assert(kBC == 2 * kSub && kSub == 32, "a tile is two chunks of K then two of V; a lane per key");

// 16-bit K / V: kSlots chunks of the input type, kSlots - 1 in flight. FP8: two chunks of the input
// type (the one computed, the next one converted) and kCodeSlots chunks of codes, kCodeSlots - 1 in
// flight.
template <bool FP8>
struct MlaSmem {
  static constexpr int kSlots = FP8 ? 2 : 5, kCodeSlots = FP8 ? 6 : 1;  // 16-bit: no code slot used
  static constexpr int kSlot = kSub * kQK * 2;   // a K chunk (a V chunk is smaller), bytes
  static constexpr int kCodeSlot = kSub * kQK;   // a K chunk's codes
  static constexpr int kCodes = kSlots * kSlot;  // [kCodeSlots][32][576] codes, unswizzled
  static constexpr int kQ = kCodes + (FP8 ? kCodeSlots * kCodeSlot : 0);  // [16][576], input type, swizzled
  static constexpr int kP = kQ + kRows * kQK * 2;                         // [16][64], input type, swizzled
  static constexpr int kMax = kP + kRows * kBC * 2;       // [kWarps][16] fp32: each warp's row max
  static constexpr int kSum = kMax + kWarps * kRows * 4;  // [kWarps][16] fp32: the row sums' shares
  static constexpr int kBytes = kSum + kWarps * kRows * 4;
  static_assert(kBytes <= 227 * 1024, "one CTA per SM");
  static_assert(kSub * kV * 2 <= kSlot, "a V chunk fits a slot");
};

// The copies of one chunk: 32 rows of ROW_BYTES bytes (16-bit K / V, or FP8 codes), row r from row
// `row` (lane r's, by shuffle) of g at stride_bytes, its 16-byte chunk c to byte at(r, c) of s; rows
// at or past `valid` zero-filled (masked keys meet V = 0, never a NaN pattern).
template <int ROW_BYTES, class At>
__device__ __forceinline__ void copy_rows(unsigned char* s, const unsigned char* g, int64_t stride_bytes,
                                          int valid, int64_t my_row, int tid, At at) {
  constexpr int CH = ROW_BYTES / 16, N = kSub * CH / kThreads;
  static_assert(kSub * CH % kThreads == 0, "every lane of a warp copies (the shuffle)");
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int idx = tid + i * kThreads, r = idx / CH, c = idx % CH;
    const int64_t row = __shfl_sync(0xffffffffu, my_row, r);
    const bool ok = r < valid;
    dev::cp_async16(s + at(r, c), ok ? g + row * stride_bytes + c * 16 : g, ok);
  }
}
// A 16-bit chunk into a swizzled [32][D] slot; an FP8 chunk's codes into a [32][D] code slot.
template <int D>
__device__ __forceinline__ void copy_chunk(uint16_t* s, const uint16_t* g, int64_t stride, int valid,
                                           int64_t my_row, int tid) {
  copy_rows<D * 2>(reinterpret_cast<unsigned char*>(s), reinterpret_cast<const unsigned char*>(g), stride * 2,
                   valid, my_row, tid, [](int r, int c) { return dev::swz<D>(r, c) * 2; });
}
template <int D>
__device__ __forceinline__ void copy_codes(uint8_t* s, const uint8_t* g, int64_t stride, int valid,
                                           int64_t my_row, int tid) {
  copy_rows<D>(s, g, stride, valid, my_row, tid, [](int r, int c) { return r * D + c * 16; });
}

// An FP8 chunk in two steps by the same thread: its codes copied (copy_codes), then, once this
// thread's copies landed, the same codes converted into the swizzled slot of the input type (a code
// chunk into two 16-byte chunks). A thread converts only what it copied, so a code slot needs no
// barrier between the two steps or before its reuse.
template <bool BF16, int D>
__device__ __forceinline__ void convert_codes(uint16_t* s, const uint8_t* codes, bool e5m2, int tid) {
  constexpr int CH = D / 16, N = kSub * CH / kThreads;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int idx = tid + i * kThreads, r = idx / CH, c = idx % CH;
    const uint4 in = *reinterpret_cast<const uint4*>(codes + r * D + c * 16);
    uint4 lo, hi;
    if (e5m2)
      codes_to_input<BF16, __NV_E5M2>(in, lo, hi);
    else
      codes_to_input<BF16, __NV_E4M3>(in, lo, hi);
    *reinterpret_cast<uint4*>(s + dev::swz<D>(r, 2 * c)) = lo;
    *reinterpret_cast<uint4*>(s + dev::swz<D>(r, 2 * c + 1)) = hi;
  }
}

template <bool BF16, bool FP8, Walk W>
__global__ void __launch_bounds__(kThreads, 1) mla_kernel(const PackedParams p) {
  constexpr bool VAR = W == Walk::variants;
  using S = MlaSmem<FP8>;
  extern __shared__ __align__(128) unsigned char smem[];
  uint16_t* const sq = reinterpret_cast<uint16_t*>(smem + S::kQ);
  uint16_t* const sp = reinterpret_cast<uint16_t*>(smem + S::kP);
  float* const smax = reinterpret_cast<float*>(smem + S::kMax);
  float* const ssum = reinterpret_cast<float*>(smem + S::kSum);

  const Cta cta = cta_of(p);
  if (!cta.live) return;
  const int tq = cta.tq, tk = cta.tk, tok0 = cta.tok0;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;

  const bool paged = paged_walk<W>(p.page_size);
  const int32_t* table = paged ? p.block_table + int64_t(cta.seq) * p.max_blocks : nullptr;
  int k_lo, k_hi, k_end;
  key_range<VAR>(p, tq, tk, tok0, tok0 + cta.tile_tokens - 1, cta.split, k_lo, k_hi, k_end);
  const int n_tiles = k_end > k_lo ? (k_end - k_lo + kBC - 1) / kBC : 0, n_chunks = 4 * n_tiles;
  // V inside K (AC_VAR_V_IN_K): p.v is p.k and V's rows have K's width; its chunks are still copied
  // on their own (the first 512 columns of the same rows).
  const int v_width = p.v_in_k ? kQK : kV;
  const int64_t k_stride = int64_t(p.num_kv_heads) * kQK, v_stride = int64_t(p.num_kv_heads) * v_width;
  const int64_t row0 = paged ? 0 : cta.k0;  // the pools' rows are slots
  const int64_t k_at = (row0 * p.num_kv_heads + cta.kvh) * kQK,
                v_at = (row0 * p.num_kv_heads + cta.kvh) * v_width;

  // Chunk c's first key, the keys of it the walk reads, and this lane's key's row: its slot (paged:
  // packed_kernel.cuh PagedSlots, the next tile's entries read as a tile's first chunk is issued,
  // four chunks before they are used) or the key itself. Called in the order of c.
  PagedSlots slots, ahead;
  if (paged) ahead.fetch(table, p.page_size, k_lo, k_end - k_lo, lane);
  auto chunk_rows = [&](int c, int& valid) {
    const int n0 = k_lo + (c >> 2) * kBC + (c & 1) * kSub;
    valid = k_end - n0;
    if (!paged) return int64_t(n0) + lane;
    if ((c & 3) == 0) {
      slots = ahead;
      slots.ready(p.page_size);
      const int next = n0 + kBC;
      ahead.fetch(table, p.page_size, next, k_end - next, lane);
    }
    return slots.slot((c & 1) * kSub + lane);
  };
  uint16_t* const ring = reinterpret_cast<uint16_t*>(smem);
  auto slot_of = [&](int c) { return ring + (c % S::kSlots) * (S::kSlot / 2); };
  auto code_slot_of = [&](int c) { return smem + S::kCodes + (c % S::kCodeSlots) * S::kCodeSlot; };
  auto copy = [&](int c) {  // chunk c into its slot (16-bit) or its code slot (FP8)
    int valid;
    const int64_t my_row = chunk_rows(c, valid);
    const bool is_k = (c & 3) < 2;
    if constexpr (FP8) {
      if (is_k)
        copy_codes<kQK>(code_slot_of(c), reinterpret_cast<const uint8_t*>(p.k) + k_at, k_stride, valid,
                        my_row, tid);
      else
        copy_codes<kV>(code_slot_of(c), reinterpret_cast<const uint8_t*>(p.v) + v_at, v_stride, valid, my_row,
                       tid);
    } else {
      if (is_k)
        copy_chunk<kQK>(slot_of(c), p.k + k_at, k_stride, valid, my_row, tid);
      else
        copy_chunk<kV>(slot_of(c), p.v + v_at, v_stride, valid, my_row, tid);
    }
  };
  auto convert = [&](int c) {  // FP8: this thread's codes of chunk c into the chunk's slot
    if ((c & 3) < 2)
      convert_codes<BF16, kQK>(slot_of(c), code_slot_of(c), p.e5m2 != 0, tid);
    else
      convert_codes<BF16, kV>(slot_of(c), code_slot_of(c), p.e5m2 != 0, tid);
  };
  // Chunks issued ahead of the one computed.
  constexpr int kAhead = FP8 ? S::kCodeSlots : S::kSlots - 1;
  float scale, scale_log2, v_descale;
  descaled<FP8>(p, cta.seq, cta.kvh, scale, scale_log2, v_descale);

  // Prologue: chunks 0 .. kAhead - 1 (one commit group each, empty ones too); FP8: chunk 0's codes
  // converted once they landed. Then Q.
#pragma unroll 1
  for (int c = 0; c < kAhead; ++c) {
    if (c < n_chunks) copy(c);
    dev::cp_async_commit();
  }
  if constexpr (FP8) {
    dev::cp_async_wait<kAhead - 1>();
    if (n_chunks > 0) convert(0);
  }
  load_q<kQK, kThreads>(sq, p, cta, tid);

  int row_tok[2];
  bool row_ok[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = cta.first_row + g + 8 * h;
    row_ok[h] = i < cta.n_rows;
    row_tok[h] = tok0 + (row_ok[h] ? i / p.group : 0);
  }
  const uint8_t* mask = p.mask ? p.mask + p.cu_mask[cta.seq] : nullptr;
  float o[16][4];  // rows g, g + 8; columns 128 w + 8 i + 2 t4 (+1)
#pragma unroll
  for (int i = 0; i < 16; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {neg_inf_f(), neg_inf_f()};
  float l_run[2] = {0.0f, 0.0f};  // this thread's share of the row sums (its keys of every tile)
  float s[2][4];                  // the tile's logits, then P: [K chunk][mma fragment]

  // ldmatrix lanes: A fragments (Q, P) rows (lane & 7) + ((lane >> 3) & 1) 8, chunk + (lane >> 4);
  // K (B, keys 8w..8w+7 of a chunk) chunk + (lane >> 3), two k-steps per load; V (B, transposed)
  // keys (lane & 7) + ((lane >> 3) & 1) 8, chunk + (lane >> 4). Every row index is lane & 7 mod 8.
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, sw = lane & 7;
  const uint32_t q_base = dev::smem_addr(sq), p_base = dev::smem_addr(sp);

#pragma unroll 1
  for (int c = 0; c < n_chunks; ++c) {
    // 16-bit: chunk c landed for every thread's copies; FP8: this thread's codes of chunk c + 1
    // landed, and chunk c, converted at the end of the last step, is visible after the barrier.
    // Every warp is done with chunk c - 1, whose slot (FP8: chunk c + 1's) is refilled below.
    dev::cp_async_wait<FP8 ? kAhead - 2 : kAhead - 1>();
    __syncthreads();
    const int pf = c + kAhead, part = c & 3;
    if (pf < n_chunks) copy(pf);
    dev::cp_async_commit();
    const uint32_t slot = dev::smem_addr(slot_of(c));
    if (part < 2) {
      // S for 16 rows and this warp's 8 keys of the chunk, 36 k-steps, two per K load.
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const uint32_t k_row = slot + uint32_t((warp * 8 + sw) * kQK * 2);
#pragma unroll 2
      for (int kp = 0; kp < kQK / 32; ++kp) {
        uint32_t b[4];
        dev::ldsm_x4(b, k_row + uint32_t(((4 * kp + (lane >> 3)) ^ sw) << 4));
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          uint32_t a[4];
          dev::ldsm_x4(a, q_base + uint32_t(dev::swz<kQK>(a_row, 2 * (2 * kp + kk) + (lane >> 4)) * 2));
          dev::mma16816<BF16>(acc, a, b[2 * kk], b[2 * kk + 1]);
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {  // constant indices: s stays in registers
        if (part == 0)
          s[0][e] = acc[e];
        else
          s[1][e] = acc[e];
      }
      if (part == 1) {
        // The tile's logits (chunk h's keys n0 + 32 h + 8 w + 2 t4 (+1)) and this warp's row maxima.
        const int n0 = k_lo + (c >> 2) * kBC;
        const int range_end = n0 + kBC < k_hi ? n0 + kBC : k_hi;
        float mx[2] = {neg_inf_f(), neg_inf_f()};
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = e >> 1, col = n0 + h * kSub + warp * 8 + 2 * t4 + (e & 1);
            s[h][e] = logit<VAR>(p, s[h][e], col, range_end, k_end, row_tok[r], row_ok[r], tq, tk, mask,
                                 scale, scale_log2);
            mx[r] = fmaxf(mx[r], s[h][e]);
          }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          mx[r] = dev::quad_max(mx[r]);
          if (t4 == 0) smax[warp * kRows + g + 8 * r] = mx[r];
        }
      }
    } else {
      if (part == 2) {
        // The tile's row max over its 64 keys (the same in every warp), the online-softmax step,
        // P into shared memory, O rescaled.
        float alpha[2], off[2], tile_sum[2] = {0.0f, 0.0f};
        tile_step<kWarps>(smax, g, m_run, alpha, off);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[h][e] = fused::tile_probability(s[h][e], off[e >> 1]);
            tile_sum[e >> 1] += s[h][e];
          }
          // Keys 32 h + 8 w + 2 t4 (+1): 16-byte chunk 4 h + w of rows g and g + 8.
          *reinterpret_cast<uint32_t*>(sp + dev::swz<kBC>(g, 4 * h + warp) + 2 * t4) =
              dev::pack2<BF16>(s[h][0], s[h][1]);
          *reinterpret_cast<uint32_t*>(sp + dev::swz<kBC>(g + 8, 4 * h + warp) + 2 * t4) =
              dev::pack2<BF16>(s[h][2], s[h][3]);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + tile_sum[r];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          o[i][0] *= alpha[0];
          o[i][1] *= alpha[0];
          o[i][2] *= alpha[1];
          o[i][3] *= alpha[1];
        }
        __syncthreads();  // every warp's P
      }
      // O += P V over the chunk's 32 keys (two k-steps), this warp's 128 columns.
      const int h = part - 2;
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        uint32_t a[4];
        dev::ldsm_x4(a, p_base + uint32_t(dev::swz<kBC>(a_row, 2 * (2 * h + kk) + (lane >> 4)) * 2));
        const uint32_t v_row = slot + uint32_t((16 * kk + a_row) * kV * 2);
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
          uint32_t b[4];
          dev::ldsm_x4_trans(b, v_row + uint32_t(((16 * warp + 2 * nb + (lane >> 4)) ^ sw) << 4));
          dev::mma16816<BF16>(o[2 * nb], a, b[0], b[1]);
          dev::mma16816<BF16>(o[2 * nb + 1], a, b[2], b[3]);
        }
      }
    }
    if constexpr (FP8)
      if (c + 1 < n_chunks) convert(c + 1);  // its slot was chunk c - 1's, free since the barrier above
  }

  // The row sums (the warps' shares), then this warp's columns of the split's partial state.
  dev::cp_async_wait<0>();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = dev::quad_sum(l_run[r]);
    if (t4 == 0) ssum[warp * kRows + g + 8 * r] = l;
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = cta.first_row + g + 8 * r;
    if (i >= cta.n_rows) continue;
    float l = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) l += ssum[w * kRows + g + 8 * r];
    const int64_t pair = partial_index(p, cta, i);
    float* const po = p.part_o + pair * kV + warp * 128 + 2 * t4;
#pragma unroll
    for (int j = 0; j < 16; ++j)
      *reinterpret_cast<float2*>(po + 8 * j) = make_float2(splitkv::partial_o(o[j][2 * r], l, v_descale),
                                                           splitkv::partial_o(o[j][2 * r + 1], l, v_descale));
    if (warp == 0 && t4 == 0) p.part_lse[pair] = fused::partial_lse2(m_run[r], l);
  }
}

template <bool BF16, bool FP8, Walk W>
cudaError_t launch(const PackedParams& p, dim3 grid, cudaStream_t stream) {
  auto kernel = mla_kernel<BF16, FP8, W>;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, MlaSmem<FP8>::kBytes);
  if (e != cudaSuccess) return e;
  kernel<<<grid, kThreads, MlaSmem<FP8>::kBytes, stream>>>(p);
  return cudaGetLastError();
}
template <bool BF16, bool FP8>
cudaError_t launch_walk(const PackedParams& p, Walk w, dim3 grid, cudaStream_t stream) {
  return w == Walk::variants ? launch<BF16, FP8, Walk::variants>(p, grid, stream)
         : w == Walk::paged  ? launch<BF16, FP8, Walk::paged>(p, grid, stream)
                             : launch<BF16, FP8, Walk::plain>(p, grid, stream);
}

}  // namespace

cudaError_t launch_packed_mla(const PackedParams& p, bool bf16, bool fp8, Walk w, dim3 grid,
                              cudaStream_t stream) {
  if (bf16)
    return fp8 ? launch_walk<true, true>(p, w, grid, stream) : launch_walk<true, false>(p, w, grid, stream);
  return fp8 ? launch_walk<false, true>(p, w, grid, stream) : launch_walk<false, false>(p, w, grid, stream);
}

}  // namespace attncheck::kern::packed
