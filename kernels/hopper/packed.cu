// CUDA kernel of splitkv-packed: split-KV attention (flash-decoding) with the query heads that share
// one KV head packed into one CTA, so every K/V tile is read from memory once per KV head, not once
// per query head. Plain sm_90 code (no sm_90a instruction).
//
// Grid: (KV heads, sequences x splits, row chunks). The rows of a CTA are (token, query head of the
// group) pairs of one token tile of BR tokens (BR = args' split-KV tiling, which is also where the
// causal end of the key range comes from, as in the split-KV twin), at most 16 at a time: 4 warps x
// 4 rows. Key tiles of 64 from the start of the split's range: K and V staged in shared memory with
// cp.async one tile ahead (rows past the range zero-filled, rows padded by 16 bytes so the warp's
// row-wise reads are conflict-free). Per row and tile: logits x_j = fp32 dot * (scale log2 e), the
// tile max, the online-softmax step of fused_math.h, P rounded to the input type, O += P V in fp32.
// The partial O / l and base-2 LSE of each split go to the split-KV workspace; splitkv's combine
// folds them (kernels/splitkv/splitkv.cu). The split-KV twin is this kernel's twin: the same tile
// walk per row, the same rounding points (the sums run in another order).
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

constexpr int kBC = 64, kRowsPerWarp = 4, kWarps = 4, kRows = kRowsPerWarp * kWarps;
static_assert(kSplitKVTilings[0].bc == kBC && kSplitKVTilings[1].bc == kBC, "the twin's key tile is this kernel's");

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

template <int D>
constexpr int packed_smem_bytes() {
  // Two buffers of K and V (64 rows of D + 8 halves), then Q of the 16 rows as fp32, then P.
  return 2 * 2 * kBC * (D + 8) * 2 + kRows * D * 4 + kRows * kBC * 4;
}

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

template <int D>
__device__ __forceinline__ void load_kv(uint16_t* sk, uint16_t* sv, const uint16_t* gk, const uint16_t* gv,
                                        int64_t stride, int valid) {
  constexpr int CH = D / 8;
  for (int idx = threadIdx.x; idx < kBC * CH; idx += kWarps * 32) {
    const int r = idx / CH, c = idx % CH;
    const bool ok = r < valid;
    const int64_t off = ok ? int64_t(r) * stride + c * 8 : 0;
    fused::dev::cp_async16(sk + r * (D + 8) + c * 8, gk + off, ok);
    fused::dev::cp_async16(sv + r * (D + 8) + c * 8, gv + off, ok);
  }
  fused::dev::cp_async_commit();
}

template <bool BF16, int D>
__global__ void __launch_bounds__(kWarps * 32) packed_kernel(const PackedParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* const skv = reinterpret_cast<uint16_t*>(smem_raw);  // [buf][K | V][64][D + 8]
  float* const sq = reinterpret_cast<float*>(smem_raw + 2 * 2 * kBC * (D + 8) * 2);  // [16][D]
  float* const sp = sq + kRows * D;                                                   // [16][64]

  const int kvh = blockIdx.x;
  const int seq = int(blockIdx.y) / p.num_splits, split = int(blockIdx.y) % p.num_splits;
  const int token_tile = int(blockIdx.z) / p.chunks_per_tile, chunk = int(blockIdx.z) % p.chunks_per_tile;
  const int64_t q0 = p.cu_q[seq], k0 = p.cu_k[seq];
  const int tq = p.cu_q[seq + 1] - int(q0), tk = p.cu_k[seq + 1] - int(k0);
  const int tok0 = token_tile * p.br;
  const int tile_tokens = tq - tok0 < p.br ? tq - tok0 : p.br;
  const int first_row = chunk * kRows;
  if (tile_tokens <= 0 || first_row >= tile_tokens * p.group) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  // This CTA's rows: row index i = token * group + member within the token tile.
  int row_tok[kRowsPerWarp], row_head[kRowsPerWarp];
  bool row_ok[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = first_row + warp * kRowsPerWarp + r;
    row_ok[r] = i < tile_tokens * p.group;
    row_tok[r] = tok0 + (row_ok[r] ? i / p.group : 0);
    row_head[r] = kvh * p.group + (row_ok[r] ? i % p.group : 0);
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

  if (n_tiles > 0)
    load_kv<D>(skv, skv + kBC * (D + 8), gk + int64_t(k_lo) * kv_stride, gv + int64_t(k_lo) * kv_stride, kv_stride,
               k_end - k_lo);
  // Q rows as fp32 (exact: fp16 / bf16 values are floats); rows past the tile are zero.
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const uint16_t* gq = p.q + ((q0 + row_tok[r]) * p.num_heads + row_head[r]) * D;
    for (int c = lane; c < D; c += 32)
      sq[(warp * kRowsPerWarp + r) * D + c] = row_ok[r] ? to_float<BF16>(gq[c]) : 0.0f;
  }

  constexpr int DL = D / 32;  // O elements per lane: d = lane * DL .. + DL - 1
  float o[kRowsPerWarp][DL];
  float m_run[kRowsPerWarp], l_run[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m_run[r] = fused::neg_inf_f();
    l_run[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < DL; ++e) o[r][e] = 0.0f;
  }
  const uint8_t* mask = p.mask ? p.mask + p.cu_mask[seq] : nullptr;

  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j & 1;
    const int n0 = k_lo + j * kBC;
    if (j + 1 < n_tiles) {
      uint16_t* nk = skv + (buf ^ 1) * 2 * kBC * (D + 8);
      load_kv<D>(nk, nk + kBC * (D + 8), gk + int64_t(n0 + kBC) * kv_stride, gv + int64_t(n0 + kBC) * kv_stride,
                 kv_stride, k_end - n0 - kBC);
      fused::dev::cp_async_wait<1>();
    } else {
      fused::dev::cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* sk = skv + buf * 2 * kBC * (D + 8);
    const uint16_t* sv = sk + kBC * (D + 8);

    // Logits of keys n0 + lane and n0 + lane + 32 for the warp's rows.
    float dot[kRowsPerWarp][2];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) dot[r][0] = dot[r][1] = 0.0f;
#pragma unroll 4
    for (int c = 0; c < D / 8; ++c) {
      float kf[2][8];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 raw = *reinterpret_cast<const uint4*>(sk + (lane + 32 * h) * (D + 8) + c * 8);
        const uint16_t* e = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
        for (int t = 0; t < 8; ++t) kf[h][t] = to_float<BF16>(e[t]);
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float4 qa = *reinterpret_cast<const float4*>(sq + (warp * kRowsPerWarp + r) * D + c * 8);
        const float4 qb = *reinterpret_cast<const float4*>(sq + (warp * kRowsPerWarp + r) * D + c * 8 + 4);
        const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int t = 0; t < 8; ++t) dot[r][h] = fmaf(qv[t], kf[h][t], dot[r][h]);
      }
    }

#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = row_tok[r];
      float x[2];
      float mx = fused::neg_inf_f();
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int col = n0 + lane + 32 * h;
        float xv = fused::neg_inf_f();
        if (col < (n0 + kBC < k_hi ? n0 + kBC : k_hi)) {
          bool vis = col < k_end && (!p.causal || fused::causal_visible(row, col, tq, tk));
          if (mask && vis) vis = mask[int64_t(row) * tk + col] != 0;
          xv = vis ? __fmul_rn(dot[r][h], p.scale_log2) : fused::masked_logit();
        }
        x[h] = xv;
        mx = fmaxf(mx, xv);
      }
#pragma unroll
      for (int s = 16; s > 0; s >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, s));
      const float m_new = fmaxf(m_run[r], mx);
      const float alpha = fused::rescale_factor(m_run[r], m_new);
      const float off = fused::exponent_offset(m_new);
      m_run[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float pj = fused::tile_probability(x[h], off);
        sum += pj;
        sp[(warp * kRowsPerWarp + r) * kBC + lane + 32 * h] = round_input<BF16>(pj);
      }
#pragma unroll
      for (int s = 16; s > 0; s >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, s);
      l_run[r] = l_run[r] * alpha + sum;
#pragma unroll
      for (int e = 0; e < DL; ++e) o[r][e] *= alpha;
    }
    __syncwarp();

    // O += P V over the tile's keys (rows past the range are zero in shared memory, p there is 0).
#pragma unroll 4
    for (int jj = 0; jj < kBC; ++jj) {
      float vf[DL];
      if constexpr (DL == 4) {
        const uint2 raw = *reinterpret_cast<const uint2*>(sv + jj * (D + 8) + lane * 4);
        const uint16_t* e = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
        for (int t = 0; t < 4; ++t) vf[t] = to_float<BF16>(e[t]);
      } else {
        const uint32_t raw = *reinterpret_cast<const uint32_t*>(sv + jj * (D + 8) + lane * 2);
        const uint16_t* e = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
        for (int t = 0; t < DL; ++t) vf[t] = to_float<BF16>(e[t]);
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float pj = sp[(warp * kRowsPerWarp + r) * kBC + jj];
#pragma unroll
        for (int e = 0; e < DL; ++e) o[r][e] = fmaf(pj, vf[e], o[r][e]);
      }
    }
    __syncthreads();  // the next prefetch overwrites the buffer read above
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (!row_ok[r]) continue;
    const int64_t tok = q0 + row_tok[r];
    const int64_t pair = (int64_t(split) * p.total_q + tok) * p.num_heads + row_head[r];
    const float inv = fused::inverse_row_sum(l_run[r]);
#pragma unroll
    for (int e = 0; e < DL; ++e) p.part_o[pair * D + lane * DL + e] = o[r][e] * inv;
    if (lane == 0) p.part_lse[pair] = fused::partial_lse2(m_run[r], l_run[r]);
  }
}

template <bool BF16, int D>
cudaError_t launch_packed(const PackedParams& p, dim3 grid, cudaStream_t stream) {
  constexpr int smem = packed_smem_bytes<D>();
  cudaError_t e = cudaFuncSetAttribute(packed_kernel<BF16, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  packed_kernel<BF16, D><<<grid, kWarps * 32, smem, stream>>>(p);
  return cudaGetLastError();
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
    // Sized to the machine: about six CTAs per SM (three fit at once), at most one split per 128 keys.
    int dev = 0, sms = 132;
    AC_CUDA_TRY(cudaGetDevice(&dev));
    AC_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int64_t ctas = int64_t(a.num_kv_heads) * a.num_seqs;
    int s = int((6 * int64_t(sms) + ctas - 1) / ctas);
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
  p.chunks_per_tile = (tile_tokens * p.group + kRows - 1) / kRows;
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
  cudaError_t e = bf16 ? (a.head_size == 64 ? launch_packed<true, 64>(p, grid, stream)
                                            : launch_packed<true, 128>(p, grid, stream))
                       : (a.head_size == 64 ? launch_packed<false, 64>(p, grid, stream)
                                            : launch_packed<false, 128>(p, grid, stream));
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
