// CUDA launcher of fused-hopper-fp8 (sm_90a): FlashAttention-3's FP8 forward on the Hopper kernel's
// FP8 instantiation (hopper_kernel.cuh, FP8 = true), tiling (128, 128), head size 128.
//
// Contract (plugin_abi.h AC_FP8_Q, AC_FP8_Q_REQUIRED, AC_FP8_P_E4M3, AC_FP8_TRUNCATED_SUMS): Q, K and V
// are e4m3fn codes with descales per tensor, per KV head or per (sequence, KV head); O in the
// call's dtype (fp16 or bf16).
// Rounding points, in order:
//   - S = Q K^T on the codes by wgmma m64n128k32 e4m3: exact products, summed by the tensor cores'
//     accumulator, which keeps 13 bits and truncates (AC_FP8_TRUNCATED_SUMS): one chain of the four
//     k32 steps of d = 128, then fp32;
//   - the descales folded into the softmax scale: fl(fl(fl(scale q_descale) k_descale) log2 e),
//     the twin's head_view order (three fp32 roundings, budgets.cpp fp8_q_score_conditioning);
//   - p = 2^fl(S scale_log2 - m) by ex2.approx.ftz as in fused-hopper; l sums the unrounded p;
//   - P held as the e4m3fn code of 256 p (cvt.rn.satfinite: nearest even; 256 p <= 256 never
//     saturates), P V on the codes by the same wgmma, one chain of four k32 steps per 128-key tile in
//     a fresh accumulator, joined to O in fp32 registers by one fma: O = fl(O alpha_j + P_j V_j);
//   - at the end O / 256 (exact), times 1 / l (one rounding), times v_descale (one rounding), then to
//     the output type (one rounding); the LSE from m and l as fused's.
// The host twin (hopper_host.cpp) is fused's twin with tile (128, 128), ExpForm{fma, flush}, P in
// e4m3fn and V's descale on the output (fused_twin.h VDescale::output): the same roundings with fp32
// sums, so the two differ by the tensor cores' truncation, which the declared budget allows
// (budgets.cpp truncated_sum_error): kernels_hopper_gpu "[fp8]" compares them within it.
//
// V's transposed copy: 8-bit wgmma reads B K-major only, so before the kernel V [keys, kv_heads, 128]
// is copied to vt [kv_heads, 128, cols], each sequence's keys from column vt_col[s] (a scan of the
// key counts on the device: the launcher copies nothing from host memory) in whole tiles
// of 128 (zeros past its last key, so the kernel's last tile needs no masking of V, and a NaN code
// of another sequence is never multiplied by a zero weight), the keys of each 32-key chunk in
// vt_key order: the order in which the kernel's register A words hold the weights, so P V needs no
// shuffle of P. One pass over V (read once, written once) per call.
// FP8 calls only: a call without an FP8 cache runs fused-hopper's kernel (the same contract).
// Check: ctest --test-dir build -L gpu -R kernels_hopper
#include <algorithm>

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

// Keys of a sequence's columns in V's copy: whole tiles.
__host__ __device__ constexpr int64_t vt_cols_of(int64_t tk) { return (tk + kTile - 1) / kTile * kTile; }

// vt_col[s] = the columns of sequences 0 .. s - 1, s = 0 .. seqs (one block of 1024 threads: each
// thread sums a run of sequences, the runs' sums are scanned in shared memory, then each run is
// written). On the device, so that the launcher copies nothing from host memory.
__global__ void __launch_bounds__(1024)
    vt_columns_kernel(const int32_t* __restrict__ cu_k, int seqs, int32_t* __restrict__ vt_col) {
  __shared__ int64_t run_sum[1024];
  const int t = int(threadIdx.x), per = (seqs + 1023) / 1024;
  const int s0 = t * per < seqs ? t * per : seqs, s1 = s0 + per < seqs ? s0 + per : seqs;
  int64_t sum = 0;
  for (int s = s0; s < s1; ++s) sum += vt_cols_of(cu_k[s + 1] - cu_k[s]);
  run_sum[t] = sum;
  __syncthreads();
  for (int step = 1; step < 1024; step *= 2) {  // inclusive scan (Hillis-Steele)
    const int64_t add = t >= step ? run_sum[t - step] : 0;
    __syncthreads();
    run_sum[t] += add;
    __syncthreads();
  }
  int64_t col = run_sum[t] - sum;
  for (int s = s0; s < s1; ++s) {
    vt_col[s] = int32_t(col);
    col += vt_cols_of(cu_k[s + 1] - cu_k[s]);
  }
  if (t == 1023) vt_col[seqs] = int32_t(run_sum[t]);
}

// One block per (tile of 128 keys, KV head, sequence); blocks past a sequence's tiles leave.
__global__ void __launch_bounds__(256)
    transpose_v_kernel(const uint8_t* __restrict__ v, uint8_t* __restrict__ vt,
                       const int32_t* __restrict__ cu_k, const int32_t* __restrict__ vt_col, int kv_heads,
                       int64_t cols) {
  // [key][d / 4], padded, word column XOR 8 (key / 32): a warp's reads below take keys of four
  // 32-key chunks at one d, which the padding alone puts on 8 banks.
  __shared__ uint32_t words[kTile][kTile / 4 + 1];
  const int seq = int(blockIdx.z), kvh = int(blockIdx.y);
  const int64_t k0 = cu_k[seq];
  const int tk = cu_k[seq + 1] - int(k0);
  const int2 tile = make_int2(seq, int(blockIdx.x) * kTile);
  if (tile.y >= tk) return;
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

// hopper_fp8_check_args on the call, with its scalars in device memory (p_scale, output_scale: the
// checks read their values) copied to the host first.
int check_with_scalars(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  ac_attention_args h = a;
  float p_scale = 0.0f, output_scale = 0.0f;
  if (a.p_scale) {
    AC_CUDA_TRY(cudaMemcpy(&p_scale, a.p_scale, sizeof p_scale, cudaMemcpyDefault));
    h.p_scale = &p_scale;
  }
  if (fused::fp8_out(a) && a.output_scale) {
    AC_CUDA_TRY(cudaMemcpy(&output_scale, a.output_scale, sizeof output_scale, cudaMemcpyDefault));
    h.output_scale = &output_scale;
  }
  return hopper_fp8_check_args(h, o, err, err_len);
}

// HM: none, or fp8_row_accumulator (the probe; bf16 output only, one instantiation fewer to build).
template <HopperMutation HM>
int run_fp8(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  if (int rc = check_with_scalars(a, o, err, err_len)) return rc;
  if (HM != HopperMutation::none && a.dtype != AC_DTYPE_BF16)
    AC_REFUSE("fused-hopper-fp8's row accumulator: bf16 output only");
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  // The maxima (AC_FP8_AMAX) start at 0, which is also their value where no row has a key; the
  // kernel raises them. Written only once the call is accepted.
  auto zero_maxima = [&]() -> cudaError_t {
    return a.amax && fused::fp8_kv(a) ? cudaMemsetAsync(a.amax, 0, 2 * sizeof(float), stream) : cudaSuccess;
  };
  if (a.num_seqs == 0) {
    AC_CUDA_TRY(zero_maxima());
    if (o.synchronize) AC_CUDA_TRY(cudaStreamSynchronize(stream));
    return AC_OK;
  }
  if (!fused::fp8_kv(a)) return hopper_attention_cuda(a, o, err, err_len);  // hopper.cu's kernels
  if (int rc = device_checks(a, "fused-hopper-fp8", err, err_len)) return rc;
  AC_CUDA_TRY(zero_maxima());
  const int max_tq = fused::max_seqlen_q_host(a);
  if (max_tq == 0) {
    if (o.synchronize) AC_CUDA_TRY(cudaStreamSynchronize(stream));
    return AC_OK;
  }
  const int64_t total_q = a.cu_seqlens_q_host[a.num_seqs], total_k = a.cu_seqlens_k_host[a.num_seqs];
  // V's copy: sequence s from column vt_col[s] (computed on the device), in whole tiles.
  int64_t cols = 0, max_tk = 0;
  for (int s = 0; s < a.num_seqs; ++s) {
    const int64_t tk = a.cu_seqlens_k_host[s + 1] - a.cu_seqlens_k_host[s];
    cols += vt_cols_of(tk);
    max_tk = std::max(max_tk, tk);
  }
  if (cols >= (int64_t(1) << 31))
    AC_REFUSE("fused-hopper-fp8: more than 2^31 keys in V's tiled copy (tensor-map coordinates)");
  if (a.num_seqs > 65535) AC_REFUSE("fused-hopper-fp8: more than 65535 sequences in a call (grid z)");
  const int64_t map_cols = cols > 0 ? cols : kTile;  // a map needs a column; no tile reads it then
  const size_t vt_bytes = size_t(a.num_kv_heads) * kTile * size_t(map_cols);
  const size_t col_at = (vt_bytes + 255) / 256 * 256;
  const size_t need = col_at + (size_t(a.num_seqs) + 1) * sizeof(int32_t);
  void* ws = nullptr;
  AC_CUDA_TRY(cudaMallocAsync(&ws, need, stream));
  auto* base = static_cast<unsigned char*>(ws);
  auto* vt = base;
  auto* d_col = reinterpret_cast<int32_t*>(base + col_at);
  // Every step below runs; the first failure is reported after the workspace is released.
  vt_columns_kernel<<<1, 1024, 0, stream>>>(a.cu_seqlens_k, a.num_seqs, d_col);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess && max_tk > 0) {
    transpose_v_kernel<<<dim3(unsigned(vt_cols_of(max_tk) / kTile), unsigned(a.num_kv_heads),
                              unsigned(a.num_seqs)),
                         256, 0, stream>>>(static_cast<const uint8_t*>(a.v), vt, a.cu_seqlens_k, d_col,
                                           a.num_kv_heads, map_cols);
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
    p.p_scale = a.p_scale;
    p.out_fp8 = fused::fp8_out(a);
    p.output_scale = p.out_fp8 ? a.output_scale : nullptr;
    p.amax = a.amax;
    if constexpr (HM != HopperMutation::none)
      e = launch<true, kTile, kTile, kTile, HM, false, true>(mq, mk, mv, p, max_tq, a.num_seqs, stream);
    else
      e = a.dtype == AC_DTYPE_BF16
              ? launch<true, kTile, kTile, kTile, HM, false, true>(mq, mk, mv, p, max_tq, a.num_seqs, stream)
              : launch<false, kTile, kTile, kTile, HM, false, true>(mq, mk, mv, p, max_tq, a.num_seqs,
                                                                    stream);
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
  return hopper::run_fp8<HopperMutation::none>(a, o, err, err_len);
}
int hopper_fp8_row_accumulator_cuda(const ac_attention_args& a, const FusedOptions& o, char* err,
                                    size_t err_len) {
  return hopper::run_fp8<HopperMutation::fp8_row_accumulator>(a, o, err, err_len);
}

}  // namespace attncheck::kern
