// CUDA launcher of fused-hopper-fp8 (sm_90a): FlashAttention-3's FP8 forward on the Hopper kernel's
// FP8 instantiation (hopper_kernel.cuh, FP8 = true), tiling (128, 128), head size 128.
//
// Contract (plugin_abi.h AC_FP8_Q, AC_FP8_Q_REQUIRED, AC_FP8_P_E4M3): Q, K and V are e4m3fn codes with
// descales per tensor, per KV head or per (sequence, KV head); O in the call's dtype (fp16 or bf16).
// Rounding points, in order:
//   - S = Q K^T on the codes by wgmma m64n128k32 e4m3 (exact products; the sum is meant to be fp32,
//     and on the H200 it is not: one key's LSE came out 712 ulps from the exact one, see below);
//   - the descales folded into the softmax scale: fl(fl(fl(scale q_descale) k_descale) log2 e),
//     the twin's head_view order (three fp32 roundings, budgets.cpp fp8_q_score_conditioning);
//   - p = 2^fl(S scale_log2 - m) by ex2.approx.ftz as in fused-hopper; l sums the unrounded p;
//   - P held as the e4m3fn code of 256 p (cvt.rn.satfinite: nearest even; 256 p <= 256 never
//     saturates), P V on the codes by the same wgmma (its sums likewise not fp32);
//   - at the end O / 256 (exact), times 1 / l (one rounding), times v_descale (one rounding), then to
//     the output type (one rounding); the LSE from m and l as fused's.
// The host twin (hopper_host.cpp) is fused's twin with tile (128, 128), ExpForm{fma, flush}, P in
// e4m3fn and V's descale on the output (fused_twin.h VDescale::output): the same roundings with fp32
// sums. The kernel fails that contract until its partial sums are added in fp32 registers, so it is
// not a subject (hopper_subject.cpp); kernels_hopper_gpu "[.fp8-accumulation]" shows it.
//
// V's transposed copy: 8-bit wgmma reads B K-major only, so before the kernel V [keys, kv_heads, 128]
// is copied to vt [kv_heads, 128, cols], each sequence's keys from column vt_col[s] in whole tiles
// of 128 (zeros past its last key, so the kernel's last tile needs no masking of V, and a NaN code
// of another sequence is never multiplied by a zero weight), the keys of each 32-key chunk in
// vt_key order: the order in which the kernel's register A words hold the weights, so P V needs no
// shuffle of P. One pass over V (read once, written once) per call.
// FP8 calls only: a call without an FP8 cache runs fused-hopper's kernel (the same contract).
// Check: ctest --test-dir build -L gpu -R kernels_hopper
#include <vector>

#include "hopper/hopper_launch.cuh"

namespace attncheck::kern {

namespace hopper {
namespace {

constexpr int kTile = 128;  // keys per tile, the head size, and bytes per row of V's copy

// Position c (0..31) of a 32-key chunk of V's copy holds key vt_key(c) of the chunk: register A word
// w of a k32 step holds columns 16 (w >> 1) + 4 t4 .. + 3 and the thread's accumulator holds keys
// 8 j + 2 t4 + {0, 1}, j = 0..3; rescale_and_pack puts keys (2 t4, 2 t4 + 1, 8 + 2 t4, 9 + 2 t4) in
// the first half's word and the same plus 16 in the second's.
__host__ __device__ constexpr int vt_key(int c) {
  const int t = (c & 15) >> 2, i = c & 3;
  return (c & 16) + 2 * t + (i & 1) + 8 * (i >> 1);
}
static_assert(vt_key(0) == 0 && vt_key(1) == 1 && vt_key(2) == 8 && vt_key(3) == 9 && vt_key(4) == 2 &&
                  vt_key(15) == 15 && vt_key(18) == 24 && vt_key(31) == 31,
              "vt_key");

// One block per (tile of 128 keys of one sequence, KV head): tiles[b] = (sequence, first key).
__global__ void __launch_bounds__(256)
    transpose_v_kernel(const uint8_t* __restrict__ v, uint8_t* __restrict__ vt,
                       const int2* __restrict__ tiles, const int32_t* __restrict__ cu_k,
                       const int32_t* __restrict__ vt_col, int kv_heads, int64_t cols) {
  // [key][d / 4], padded, word column XOR 8 (key / 32): a warp's reads below take keys of four
  // 32-key chunks at one d, which the padding alone puts on 8 banks.
  __shared__ uint32_t words[kTile][kTile / 4 + 1];
  const int2 tile = tiles[blockIdx.x];
  const int kvh = int(blockIdx.y);
  const int64_t k0 = cu_k[tile.x];
  const int tk = cu_k[tile.x + 1] - int(k0);
  for (int idx = int(threadIdx.x); idx < kTile * 8; idx += int(blockDim.x)) {
    const int r = idx >> 3, ch = idx & 7, key = tile.y + r;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (key < tk) val = *reinterpret_cast<const uint4*>(v + ((k0 + key) * kv_heads + kvh) * kTile + ch * 16);
    const int sw = 8 * (r >> 5);
    words[r][(ch * 4 + 0) ^ sw] = val.x;
    words[r][(ch * 4 + 1) ^ sw] = val.y;
    words[r][(ch * 4 + 2) ^ sw] = val.z;
    words[r][(ch * 4 + 3) ^ sw] = val.w;
  }
  __syncthreads();
  uint8_t* const dst = vt + int64_t(kvh) * kTile * cols + vt_col[tile.x] + tile.y;
  for (int idx = int(threadIdx.x); idx < kTile * 32; idx += int(blockDim.x)) {
    const int d = idx >> 5, w = idx & 31;
    uint32_t word = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int c = 4 * w + b, key = (c & ~31) + vt_key(c & 31);
      word |= ((words[key][(d >> 2) ^ (8 * (key >> 5))] >> (8 * (d & 3))) & 0xffu) << (8 * b);
    }
    *reinterpret_cast<uint32_t*>(dst + int64_t(d) * cols + 4 * w) = word;
  }
}

int run_fp8(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  if (int rc = hopper_fp8_check_args(a, o, err, err_len)) return rc;
  if (a.num_seqs == 0) return AC_OK;
  if (!fused::fp8_kv(a)) return hopper_attention_cuda(a, o, err, err_len);  // hopper.cu's kernels
  if (int rc = device_checks(a, "fused-hopper-fp8", err, err_len)) return rc;
  const int max_tq = fused::max_seqlen_q_host(a);
  if (max_tq == 0) return AC_OK;
  const int64_t total_q = a.cu_seqlens_q_host[a.num_seqs], total_k = a.cu_seqlens_k_host[a.num_seqs];
  // V's copy: sequence s from column col[s], in whole tiles.
  std::vector<int32_t> col(size_t(a.num_seqs) + 1);
  std::vector<int2> tiles;
  int64_t cols = 0;
  for (int s = 0; s < a.num_seqs; ++s) {
    col[size_t(s)] = int32_t(cols);
    const int tk = a.cu_seqlens_k_host[s + 1] - a.cu_seqlens_k_host[s];
    for (int k = 0; k < tk; k += kTile) tiles.push_back(make_int2(s, k));
    cols += (int64_t(tk) + kTile - 1) / kTile * kTile;
    if (cols >= (int64_t(1) << 31))
      AC_REFUSE("fused-hopper-fp8: more than 2^31 keys in V's tiled copy (tensor-map coordinates)");
  }
  col.back() = int32_t(cols);
  const int64_t map_cols = cols > 0 ? cols : kTile;  // a map needs a column; no tile reads it then
  const size_t vt_bytes = size_t(a.num_kv_heads) * kTile * size_t(map_cols);
  const size_t col_at = (vt_bytes + 255) / 256 * 256, tiles_at = col_at + (col.size() * 4 + 255) / 256 * 256;
  const size_t need = tiles_at + tiles.size() * sizeof(int2);
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  void* ws = nullptr;
  AC_CUDA_TRY(cudaMallocAsync(&ws, need, stream));
  auto* base = static_cast<unsigned char*>(ws);
  auto* vt = base;
  auto* d_col = reinterpret_cast<int32_t*>(base + col_at);
  auto* d_tiles = reinterpret_cast<int2*>(base + tiles_at);
  // Every step below runs; the first failure is reported after the workspace is released.
  cudaError_t e = cudaMemcpyAsync(d_col, col.data(), col.size() * 4, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess && !tiles.empty())
    e = cudaMemcpyAsync(d_tiles, tiles.data(), tiles.size() * sizeof(int2), cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess && !tiles.empty()) {
    transpose_v_kernel<<<dim3(unsigned(tiles.size()), unsigned(a.num_kv_heads)), 256, 0, stream>>>(
        static_cast<const uint8_t*>(a.v), vt, d_tiles, a.cu_seqlens_k, d_col, a.num_kv_heads, map_cols);
    e = cudaGetLastError();
  }
  CUtensorMap mq{}, mk{}, mv{};
  const cuuint64_t vt_dims[3] = {cuuint64_t(map_cols), cuuint64_t(kTile), cuuint64_t(a.num_kv_heads)};
  const cuuint64_t vt_strides[2] = {cuuint64_t(map_cols), cuuint64_t(kTile) * cuuint64_t(map_cols)};
  const cuuint32_t vt_box[3] = {kTile, kTile, 1};
  const bool maps =
      make_map(&mq, a.q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, kTile, a.num_heads, total_q, kTile) &&
      make_map(&mk, a.k, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, kTile, a.num_kv_heads, total_k, kTile) &&
      encode_map3(&mv, vt, CU_TENSOR_MAP_DATA_TYPE_UINT8, vt_dims, vt_strides, vt_box);
  if (e == cudaSuccess && maps) {
    fused::KernelParams p = fused::unsplit_params(a, o);
    p.q_descale = a.q_descale;
    p.k_descale = a.k_descale;
    p.v_descale = a.v_descale;
    p.descale_granularity = a.descale_granularity;
    p.vt_col = d_col;
    e = a.dtype == AC_DTYPE_BF16 ? launch<true, kTile, kTile, kTile, HopperMutation::none, false, true>(
                                       mq, mk, mv, p, max_tq, a.num_seqs, stream)
                                 : launch<false, kTile, kTile, kTile, HopperMutation::none, false, true>(
                                       mq, mk, mv, p, max_tq, a.num_seqs, stream);
  }
  const cudaError_t freed = cudaFreeAsync(ws, stream);
  if (!maps) {
    if (err && err_len) std::snprintf(err, err_len, "fused-hopper-fp8: cuTensorMapEncodeTiled failed");
    return AC_ERR_DEVICE;
  }
  AC_CUDA_TRY(e);
  AC_CUDA_TRY(freed);
  if (o.synchronize) AC_CUDA_TRY(cudaStreamSynchronize(stream));
  return AC_OK;
}

}  // namespace
}  // namespace hopper

int hopper_fp8_attention_cuda(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  return hopper::run_fp8(a, o, err, err_len);
}

}  // namespace attncheck::kern
