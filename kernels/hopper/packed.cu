// CUDA kernel of splitkv-packed: split-KV attention (flash-decoding) with the query heads that share
// one KV head packed into one CTA, so every K/V tile is read from memory once per KV head, not once
// per query head. Plain sm_90 code (no sm_90a instruction).
//
// Grid: (KV heads, sequences x splits, row chunks); the grid is sized to the machine when
// num_splits is 0 (about four CTAs per SM). The rows of a CTA are (token, query head of the group)
// pairs of one token tile of BR tokens (BR = args' split-KV tiling, which is also where the causal
// end of the key range comes from, as in the split-KV twin), 4, 8 or 16 at a time. Key tiles of 64
// from the start of the split's range, three in flight (cp.async, rows past the range zero-filled,
// 16-byte chunks swizzled by row % 8). Each of the 4 warps owns 16 keys of every tile for all the
// rows, so each K/V element is read from shared memory once. Per tile and row: logits
// x_j = fp32 dot * (scale log2 e), the tile max over all 64 keys (across warps), the online-softmax
// step of fused_math.h, P rounded to the input type, each warp's share of O += P V in fp32; the
// shares are summed at the end. The partial O / l and base-2 LSE of each split go to the split-KV
// workspace; splitkv's combine folds them (kernels/splitkv/splitkv.cu). The split-KV twin is this
// kernel's twin: the same tile walk per row, the same rounding points (sums in another order).
// Check: ctest --test-dir build -L gpu -R kernels_hopper
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "common/cuda_check.h"
#include "common/host_tensor.h"
#include "fused/fused_kernel.cuh"
#include "fused/fused_math.h"
#include "hopper/hopper.h"
#include "splitkv/splitkv.h"

namespace attncheck::kern {

namespace {

// Key tile 64 (the twin's), 4 warps, each warp owns 16 keys of every tile for all rows of the CTA,
// so each K/V element is read from shared memory once per CTA. STAGES tiles in flight: 3 when
// several CTAs share an SM, 6 when the grid gives each SM about one (decode at batch 1).
constexpr int kBC = 64, kWarps = 4, kKeysPerWarp = kBC / kWarps;
static_assert(kSplitKVTilings[0].bc == kBC && kSplitKVTilings[1].bc == kBC,
              "the twin's key tile is this kernel's");

struct PackedParams {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  const int32_t* cu_q;
  const int32_t* cu_k;
  const uint8_t* mask;
  const int64_t* cu_mask;
  int num_heads, num_kv_heads, group, br, num_splits, chunks_per_tile;
  int causal;
  int64_t total_q;
  float scale_log2;
  float* part_o;
  float* part_lse;
};

template <int D, int ROWS, int STAGES>
struct PackedSmem {
  static constexpr int kTile = kBC * D * 2;            // one K or V tile, bytes
  static constexpr int kKV = 0;                        // [stage][K | V]
  static constexpr int kQ = kKV + STAGES * 2 * kTile;  // [ROWS][D] fp32
  static constexpr int kP = kQ + ROWS * D * 4;         // [ROWS][64] fp32 (P rounded)
  static constexpr int kRed = kP + ROWS * kBC * 4;     // [2][kWarps][ROWS] fp32 (max, sum)
  static constexpr int kBytes = kRed + 2 * kWarps * ROWS * 4;
  static_assert(kWarps * ROWS * D * 4 <= STAGES * 2 * kTile, "the O reduction reuses the K/V stages");
};

template <bool BF16>
__device__ __forceinline__ float to_float(uint16_t b) {
  if constexpr (BF16)
    return __bfloat162float(__ushort_as_bfloat16(b));
  else
    return __half2float(__ushort_as_half(b));
}
template <bool BF16>
__device__ __forceinline__ float round_input(float x) {
  if constexpr (BF16)
    return __bfloat162float(__float2bfloat16_rn(x));
  else
    return __half2float(__float2half_rn(x));
}
// Byte offset of (row, 16-byte chunk) in a [64][D] tile, chunks swizzled by row % 8 so both the
// row-per-lane reads of Q K^T and the chunk-per-lane reads of P V are free of bank conflicts.
template <int D>
__device__ __forceinline__ int tile_off(int row, int chunk) {
  return row * D * 2 + ((chunk ^ (row & 7)) << 4);
}

template <int D>
__device__ __forceinline__ void load_kv(unsigned char* sk, unsigned char* sv, const uint16_t* gk,
                                        const uint16_t* gv, int64_t stride, int valid) {
  constexpr int CH = D / 8;
  for (int idx = threadIdx.x; idx < kBC * CH; idx += kWarps * 32) {
    const int r = idx / CH, c = idx % CH;
    const bool ok = r < valid;
    const int64_t off = ok ? int64_t(r) * stride + c * 8 : 0;
    fused::dev::cp_async16(sk + tile_off<D>(r, c), gk + off, ok);
    fused::dev::cp_async16(sv + tile_off<D>(r, c), gv + off, ok);
  }
}

template <bool BF16, int D, int ROWS, int STAGES>
__global__ void __launch_bounds__(kWarps * 32) packed_kernel(const PackedParams p) {
  using S = PackedSmem<D, ROWS, STAGES>;
  extern __shared__ __align__(16) unsigned char smem[];
  float* const sq = reinterpret_cast<float*>(smem + S::kQ);
  float* const sp = reinterpret_cast<float*>(smem + S::kP);
  float* const sred = reinterpret_cast<float*>(smem + S::kRed);

  const int kvh = blockIdx.x;
  const int seq = int(blockIdx.y) / p.num_splits, split = int(blockIdx.y) % p.num_splits;
  const int token_tile = int(blockIdx.z) / p.chunks_per_tile, chunk = int(blockIdx.z) % p.chunks_per_tile;
  const int64_t q0 = p.cu_q[seq], k0 = p.cu_k[seq];
  const int tq = p.cu_q[seq + 1] - int(q0), tk = p.cu_k[seq + 1] - int(k0);
  const int tok0 = token_tile * p.br;
  const int tile_tokens = tq - tok0 < p.br ? tq - tok0 : p.br;
  const int first_row = chunk * ROWS;
  if (tile_tokens <= 0 || first_row >= tile_tokens * p.group) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  // Rows: index i = token * group + member within the token tile.
  int row_tok[ROWS];
  bool row_ok[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = first_row + r;
    row_ok[r] = i < tile_tokens * p.group;
    row_tok[r] = tok0 + (row_ok[r] ? i / p.group : 0);
  }

  int k_lo, k_hi;
  {
    const int base = tk / p.num_splits, rem = tk % p.num_splits;
    k_lo = split * base + (split < rem ? split : rem);
    k_hi = k_lo + base + (split < rem ? 1 : 0);
  }
  int k_end = k_hi;
  if (p.causal) {
    const int lim = tok0 + tile_tokens - 1 + tk - tq + 1;
    k_end = lim < k_end ? lim : k_end;
  }
  const int n_tiles = k_end > k_lo ? (k_end - k_lo + kBC - 1) / kBC : 0;
  const int64_t kv_stride = int64_t(p.num_kv_heads) * D;
  const uint16_t* gk = p.k + (k0 * p.num_kv_heads + kvh) * D;
  const uint16_t* gv = p.v + (k0 * p.num_kv_heads + kvh) * D;

  // Prologue: the first STAGES - 1 tiles in flight (one commit group per tile, empty ones too).
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) {
    if (t < n_tiles) {
      unsigned char* st = smem + S::kKV + t * 2 * S::kTile;
      load_kv<D>(st, st + S::kTile, gk + int64_t(k_lo + t * kBC) * kv_stride,
                 gv + int64_t(k_lo + t * kBC) * kv_stride, kv_stride, k_end - k_lo - t * kBC);
    }
    fused::dev::cp_async_commit();
  }
  // Q rows as fp32 (exact: fp16 / bf16 values are floats); rows past the tile are zero.
  for (int idx = threadIdx.x; idx < ROWS * D; idx += kWarps * 32) {
    const int r = idx / D, c = idx % D;
    const int i = first_row + r;
    float val = 0.0f;
    if (i < tile_tokens * p.group)
      val = to_float<BF16>(
          p.q[((q0 + tok0 + i / p.group) * p.num_heads + kvh * p.group + i % p.group) * D + c]);
    sq[idx] = val;
  }

  constexpr int DL = D / 32;  // O elements per lane: d = lane * DL .. + DL - 1
  float o[ROWS][DL];          // this warp's share (its 16 keys of every tile)
  float m_run[ROWS], l_run[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    m_run[r] = neg_inf_f();
    l_run[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < DL; ++e) o[r][e] = 0.0f;
  }
  const uint8_t* mask = p.mask ? p.mask + p.cu_mask[seq] : nullptr;
  const int my_key = warp * kKeysPerWarp + (lane & 15), half = lane >> 4;  // Q K^T: key, half of d

  for (int j = 0; j < n_tiles; ++j) {
    const int n0 = k_lo + j * kBC;
    {
      const int t = j + STAGES - 1;
      if (t < n_tiles) {
        unsigned char* st = smem + S::kKV + (t % STAGES) * 2 * S::kTile;
        load_kv<D>(st, st + S::kTile, gk + int64_t(k_lo + t * kBC) * kv_stride,
                   gv + int64_t(k_lo + t * kBC) * kv_stride, kv_stride, k_end - k_lo - t * kBC);
      }
      fused::dev::cp_async_commit();
      fused::dev::cp_async_wait<STAGES - 1>();
    }
    __syncthreads();  // tile j landed for every thread's copies; Q staged (first pass)
    const unsigned char* sk = smem + S::kKV + (j % STAGES) * 2 * S::kTile;
    const unsigned char* sv = sk + S::kTile;

    // Logits: lane (key my_key, half of d) partial dots, summed with the other half's lane.
    float dot[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) dot[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
      const int chunk = half * (D / 16) + c;
      const uint4 raw = *reinterpret_cast<const uint4*>(sk + tile_off<D>(my_key, chunk));
      const uint16_t* e = reinterpret_cast<const uint16_t*>(&raw);
      float kf[8];
#pragma unroll
      for (int t = 0; t < 8; ++t) kf[t] = to_float<BF16>(e[t]);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const float4 qa = *reinterpret_cast<const float4*>(sq + r * D + chunk * 8);
        const float4 qb = *reinterpret_cast<const float4*>(sq + r * D + chunk * 8 + 4);
        dot[r] = fmaf(qa.x, kf[0], dot[r]);
        dot[r] = fmaf(qa.y, kf[1], dot[r]);
        dot[r] = fmaf(qa.z, kf[2], dot[r]);
        dot[r] = fmaf(qa.w, kf[3], dot[r]);
        dot[r] = fmaf(qb.x, kf[4], dot[r]);
        dot[r] = fmaf(qb.y, kf[5], dot[r]);
        dot[r] = fmaf(qb.z, kf[6], dot[r]);
        dot[r] = fmaf(qb.w, kf[7], dot[r]);
      }
    }
    const int col = n0 + my_key;
    const int range_end = n0 + kBC < k_hi ? n0 + kBC : k_hi;
    float x[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float d = dot[r] + __shfl_xor_sync(0xffffffffu, dot[r], 16);
      float xv = neg_inf_f();
      if (col < range_end) {
        bool vis = col < k_end && (!p.causal || fused::causal_visible(row_tok[r], col, tq, tk));
        if (mask && vis && row_ok[r]) vis = mask[int64_t(row_tok[r]) * tk + col] != 0;
        xv = vis ? __fmul_rn(d, p.scale_log2) : fused::masked_logit();
      }
      x[r] = xv;
      float mx = xv;
#pragma unroll
      for (int s = 8; s > 0; s >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, s));
      if (lane == 0) sred[warp * ROWS + r] = mx;
    }
    __syncthreads();
    // The tile's row max over all 64 keys (every thread the same), then P and the tile sums.
    float alpha[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float mx = sred[r];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, sred[w * ROWS + r]);
      const float m_new = fmaxf(m_run[r], mx);
      alpha[r] = fused::rescale_factor(m_run[r], m_new);
      const float off = fused::exponent_offset(m_new);
      m_run[r] = m_new;
      const float pj = fused::tile_probability(x[r], off);
      float sum = lane < 16 ? pj : 0.0f;  // each key is held by two lanes
#pragma unroll
      for (int s = 16; s > 0; s >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, s);
      if (lane == 0) sred[kWarps * ROWS + warp * ROWS + r] = sum;
      if (lane < 16) sp[r * kBC + my_key] = round_input<BF16>(pj);
#pragma unroll
      for (int e = 0; e < DL; ++e) o[r][e] *= alpha[r];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += sred[kWarps * ROWS + w * ROWS + r];
      l_run[r] = l_run[r] * alpha[r] + sum;
    }

    // O (this warp's share) += P V over its 16 keys; rows past the range are zero in shared memory.
#pragma unroll
    for (int kk = 0; kk < kKeysPerWarp; ++kk) {
      const int key = warp * kKeysPerWarp + kk;
      float vf[DL];
      const int byte = lane * DL * 2;  // d = lane * DL: chunk byte / 16, offset byte % 16
      const unsigned char* src = sv + tile_off<D>(key, byte >> 4) + (byte & 15);
      if constexpr (DL == 4) {
        const uint2 raw = *reinterpret_cast<const uint2*>(src);
        const uint16_t* e = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
        for (int t = 0; t < 4; ++t) vf[t] = to_float<BF16>(e[t]);
      } else {
        const uint32_t raw = *reinterpret_cast<const uint32_t*>(src);
        const uint16_t* e = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
        for (int t = 0; t < DL; ++t) vf[t] = to_float<BF16>(e[t]);
      }
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const float pj = sp[r * kBC + key];
#pragma unroll
        for (int e = 0; e < DL; ++e) o[r][e] = fmaf(pj, vf[e], o[r][e]);
      }
    }
    __syncthreads();  // stage j % STAGES, sp and sred are rewritten next pass
  }

  // Sum the warps' shares of O (shared memory of the stages, free now), normalise, store.
  fused::dev::cp_async_wait<0>();
  __syncthreads();
  float* const so = reinterpret_cast<float*>(smem + S::kKV);  // [kWarps][ROWS][D]
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int e = 0; e < DL; ++e) so[(warp * ROWS + r) * D + lane * DL + e] = o[r][e];
  __syncthreads();
  for (int idx = threadIdx.x; idx < ROWS * D; idx += kWarps * 32) {
    const int r = idx / D, c = idx % D;
    if (first_row + r >= tile_tokens * p.group) continue;
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) acc += so[(w * ROWS + r) * D + c];
    const int64_t tok = q0 + tok0 + (first_row + r) / p.group;
    const int head = kvh * p.group + (first_row + r) % p.group;
    const int64_t pair = (int64_t(split) * p.total_q + tok) * p.num_heads + head;
    float lr = 0.0f, mr = 0.0f;
#pragma unroll
    for (int rr = 0; rr < ROWS; ++rr)
      if (rr == r) {
        lr = l_run[rr];
        mr = m_run[rr];
      }
    p.part_o[pair * D + c] = acc * fused::inverse_row_sum(lr);
    if (c == 0) p.part_lse[pair] = fused::partial_lse2(mr, lr);
  }
}

template <bool BF16, int D, int ROWS, int STAGES>
cudaError_t launch_packed(const PackedParams& p, dim3 grid, cudaStream_t stream) {
  constexpr int smem = PackedSmem<D, ROWS, STAGES>::kBytes;
  auto kernel = packed_kernel<BF16, D, ROWS, STAGES>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  kernel<<<grid, kWarps * 32, smem, stream>>>(p);
  return cudaGetLastError();
}

// Rows per CTA: 4 (decode with groups up to 4), 8 or 16; deep: 6 stages instead of 3.
template <bool BF16, int D>
cudaError_t launch_rows(const PackedParams& p, int rows, bool deep, dim3 grid, cudaStream_t stream) {
  if (deep) {
    if (rows == 4) return launch_packed<BF16, D, 4, 6>(p, grid, stream);
    if (rows == 8) return launch_packed<BF16, D, 8, 6>(p, grid, stream);
    return launch_packed<BF16, D, 16, 6>(p, grid, stream);
  }
  if (rows == 4) return launch_packed<BF16, D, 4, 3>(p, grid, stream);
  if (rows == 8) return launch_packed<BF16, D, 8, 3>(p, grid, stream);
  return launch_packed<BF16, D, 16, 3>(p, grid, stream);
}

}  // namespace

int packed_attention_cuda(const ac_attention_args& args, char* err, size_t err_len, bool synchronize) {
  ac_attention_args a = args;
  const int max_tk = [&] {
    int m = 0;
    for (int s = 0; s < a.num_seqs && a.cu_seqlens_k_host; ++s)
      m = std::max(m, a.cu_seqlens_k_host[s + 1] - a.cu_seqlens_k_host[s]);
    return m;
  }();
  if (a.num_splits == 0 && a.num_kv_heads > 0 && a.num_seqs > 0) {
    // Sized to the machine: about four CTAs per SM (two fit at once), at most one split per 128 keys.
    int dev = 0, sms = 132;
    AC_CUDA_TRY(cudaGetDevice(&dev));
    AC_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int64_t ctas = int64_t(a.num_kv_heads) * a.num_seqs;
    int s = int((4 * int64_t(sms) + ctas - 1) / ctas);
    s = std::min(s, std::max(1, max_tk / 128));
    a.num_splits = std::max(1, std::min(s, kPackedMaxSplits));
  }
  if (int rc = packed_check_args(a, err, err_len)) return rc;
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
  p.q = static_cast<const uint16_t*>(a.q);
  p.k = static_cast<const uint16_t*>(a.k);
  p.v = static_cast<const uint16_t*>(a.v);
  p.cu_q = a.cu_seqlens_q;
  p.cu_k = a.cu_seqlens_k;
  p.mask = a.mask;
  p.cu_mask = a.cu_mask;
  p.num_heads = a.num_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.group = a.num_heads / a.num_kv_heads;
  p.br = kSplitKVTilings[a.tiling].br;
  p.num_splits = a.num_splits;
  p.causal = a.causal != 0;
  p.total_q = total_q;
  p.scale_log2 = a.softmax_scale * fused::kLog2e;
  const int tile_tokens = std::min(p.br, max_tq);
  const int tile_rows = tile_tokens * p.group;
  const int rows = tile_rows <= 4 ? 4 : tile_rows <= 8 ? 8 : 16;
  p.chunks_per_tile = (tile_rows + rows - 1) / rows;
  const int token_tiles = (max_tq + p.br - 1) / p.br;
  if (int64_t(token_tiles) * p.chunks_per_tile > 65535)
    AC_REFUSE("splitkv-packed: %d row chunks exceed the grid (65535)", token_tiles * p.chunks_per_tile);
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  const size_t need = splitkv_workspace_bytes(a);
  void* ws = nullptr;
  AC_CUDA_TRY(cudaMallocAsync(&ws, need, stream));
  p.part_o = static_cast<float*>(ws);
  p.part_lse = p.part_o + size_t(a.num_splits) * size_t(total_q) * size_t(a.num_heads) * size_t(a.head_size);
  const dim3 grid(unsigned(a.num_kv_heads), unsigned(a.num_seqs * a.num_splits),
                  unsigned(token_tiles * p.chunks_per_tile));
  const bool bf16 = a.dtype == AC_DTYPE_BF16;
  int dev = 0, sms = 132;
  AC_CUDA_TRY(cudaGetDevice(&dev));
  AC_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const bool deep = int64_t(grid.x) * grid.y * grid.z < 2 * int64_t(sms);
  cudaError_t e = bf16 ? (a.head_size == 64 ? launch_rows<true, 64>(p, rows, deep, grid, stream)
                                            : launch_rows<true, 128>(p, rows, deep, grid, stream))
                       : (a.head_size == 64 ? launch_rows<false, 64>(p, rows, deep, grid, stream)
                                            : launch_rows<false, 128>(p, rows, deep, grid, stream));
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
