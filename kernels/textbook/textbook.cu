// CUDA textbook attention: three kernels per sequence and two materialised T_q x T_k tensors,
// the slow baseline the fused kernel is measured against (seed: "Naive attention").
//   1. scores_kernel   S[h, i, j] = scale * Q[i, h, :] . K[j, kv(h), :], -inf where masked;
//                      16 x 16 tiles of S, Q and K staged through shared memory 32 columns at a
//                      time; fp32 fma chain over c in index order; S stored as fp32 (or the
//                      input type for the naive variant).
//   2. softmax_kernel  one 256-thread block per row of S (softmax_block.cuh, shared with the
//                      standalone softmax): safe (max, sum, normalise) or naive (exp(S) rounded
//                      to P's type, stored, summed); P stored in the input type; LSE written.
//   3. pv_kernel       O[i, h, c] = sum_j P[h, i, j] V[j, kv(h), c], 16 x 16 tiles of O, fp32 fma
//                      chain over j in index order, O rounded once to the input type.
// Accumulators fp32 throughout; rounding points: S (to its type), P (to the input type, as
// production kernels round P before P V), O. LSE fp32 natural log, layout by option; an empty row
// (no visible key, or T_k = 0) gives P = 0, O = 0, LSE = -inf. GQA, bottom-right causal, boolean
// mask, varlen (one launch triple per sequence) as in textbook_math.h. S and P are one
// cudaMallocAsync each for all sequences; their size is reported via bytes_allocated.
// Check: ctest -R kernels_basic_textbook_gpu
#include <cstdint>
#include <vector>

#include "common/cuda_check.h"
#include "softmax/softmax_block.cuh"
#include "textbook/textbook.h"
#include "textbook/textbook_math.h"

namespace attncheck::kern {

namespace {

constexpr int kTile = 16;   // S and O tiles are kTile x kTile
constexpr int kChunk = 32;  // head-dimension columns of Q and K staged per step

struct SeqView {
  int64_t q0, k0, tq, tk;
  int32_t num_heads, num_kv_heads, head_size;
  int64_t total_q;
};

template <int DTIN, int DTS>
__global__ void __launch_bounds__(kTile* kTile)
    scores_kernel(const void* q, const void* k, void* s_out, const uint8_t* mask, int causal, float scale,
                  SeqView v) {
  using In = dev::Elem<DTIN>;
  using Sc = dev::Elem<DTS>;
  __shared__ float q_tile[kTile][kChunk];
  __shared__ float k_tile[kTile][kChunk + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i0 = int64_t(blockIdx.y) * kTile, j0 = int64_t(blockIdx.x) * kTile;
  const int64_t h = blockIdx.z, kvh = kv_head_of(int32_t(h), v.num_heads, v.num_kv_heads);
  const int64_t d = v.head_size;
  float acc = 0.0f;
  for (int64_t c0 = 0; c0 < d; c0 += kChunk) {
    for (int cc = tx; cc < kChunk; cc += kTile) {
      const int64_t c = c0 + cc, i = i0 + ty, j = j0 + ty;
      q_tile[ty][cc] = (i < v.tq && c < d) ? In::load(q, ((v.q0 + i) * v.num_heads + h) * d + c) : 0.0f;
      k_tile[ty][cc] = (j < v.tk && c < d) ? In::load(k, ((v.k0 + j) * v.num_kv_heads + kvh) * d + c) : 0.0f;
    }
    __syncthreads();
    const int n = int(d - c0 < kChunk ? d - c0 : kChunk);  // exact chain length: no padded fmas
    for (int cc = 0; cc < n; ++cc) acc = dot_step(acc, q_tile[ty][cc], k_tile[tx][cc]);
    __syncthreads();
  }
  const int64_t i = i0 + ty, j = j0 + tx;
  if (i < v.tq && j < v.tk) {
    const bool visible = (!causal || causal_visible(i, j, v.tq, v.tk)) && (!mask || mask[i * v.tk + j] != 0);
    Sc::store(s_out, (h * v.tq + i) * v.tk + j, masked_score(visible, acc, scale));
  }
}

template <SoftmaxVariant V, int DTS, int DTIN>
__global__ void __launch_bounds__(kSoftmaxThreads)
    softmax_kernel(const void* s, void* p, float* lse, ac_lse_layout layout, SeqView v) {
  constexpr int64_t kSElem = DTS == AC_DTYPE_F32 ? 4 : 2, kPElem = DTIN == AC_DTYPE_F32 ? 4 : 2;
  const int64_t row = blockIdx.x, h = row / v.tq, i = row % v.tq;
  const float row_lse = dev::softmax_row_block<V, DTS, DTIN>(
      static_cast<const char*>(s) + row * v.tk * kSElem, static_cast<char*>(p) + row * v.tk * kPElem, v.tk);
  if (lse != nullptr && threadIdx.x == 0)
    lse[lse_index(layout, h, v.q0 + i, v.num_heads, v.total_q)] = row_lse;
}

template <int DTIN>
__global__ void __launch_bounds__(kTile* kTile)
    pv_kernel(const void* p, const void* vmat, void* out, SeqView v) {
  using In = dev::Elem<DTIN>;
  __shared__ float p_tile[kTile][kTile];
  __shared__ float v_tile[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const int64_t h = blockIdx.z, kvh = kv_head_of(int32_t(h), v.num_heads, v.num_kv_heads);
  const int64_t d = v.head_size, i = i0 + ty, c = c0 + tx;
  float acc = 0.0f;
  for (int64_t j0 = 0; j0 < v.tk; j0 += kTile) {
    p_tile[ty][tx] = (i < v.tq && j0 + tx < v.tk) ? In::load(p, (h * v.tq + i) * v.tk + j0 + tx) : 0.0f;
    v_tile[ty][tx] =
        (j0 + ty < v.tk && c < d) ? In::load(vmat, ((v.k0 + j0 + ty) * v.num_kv_heads + kvh) * d + c) : 0.0f;
    __syncthreads();
    const int n = int(v.tk - j0 < kTile ? v.tk - j0 : kTile);
    for (int jj = 0; jj < n; ++jj) acc = dot_step(acc, p_tile[ty][jj], v_tile[jj][tx]);
    __syncthreads();
  }
  if (i < v.tq && c < d) In::store(out, ((v.q0 + i) * v.num_heads + h) * d + c, acc);
}

template <int DTIN, int DTS>
int run_sequences(const ac_attention_args& a, const TextbookOptions& o, unsigned char* s_buf,
                  unsigned char* p_buf, cudaStream_t stream, char* err, size_t err_len) {
  const int64_t total_q = a.cu_seqlens_q_host[a.num_seqs];
  size_t s_off = 0, p_off = 0;
  for (int32_t s = 0; s < a.num_seqs; ++s) {
    SeqView v{a.cu_seqlens_q_host[s],
              a.cu_seqlens_k_host[s],
              int64_t(a.cu_seqlens_q_host[s + 1]) - a.cu_seqlens_q_host[s],
              int64_t(a.cu_seqlens_k_host[s + 1]) - a.cu_seqlens_k_host[s],
              a.num_heads,
              a.num_kv_heads,
              a.head_size,
              total_q};
    if (v.tq == 0) continue;
    const uint8_t* mask = a.mask ? a.mask + a.cu_mask_host[s] : nullptr;
    const dim3 tile_block(kTile, kTile);
    const unsigned tiles_q = unsigned((v.tq + kTile - 1) / kTile);
    if (tiles_q > 65535u) AC_REFUSE("textbook: sequence %d: T_q %lld too long", int(s), (long long)v.tq);
    if (v.tk > 0) {
      const dim3 grid(unsigned((v.tk + kTile - 1) / kTile), tiles_q, unsigned(a.num_heads));
      scores_kernel<DTIN, DTS>
          <<<grid, tile_block, 0, stream>>>(a.q, a.k, s_buf + s_off, mask, a.causal, a.softmax_scale, v);
      AC_CUDA_TRY_LAUNCH();
    }
    const unsigned rows = unsigned(v.tq * a.num_heads);
    if (o.naive_softmax)
      softmax_kernel<SoftmaxVariant::naive, DTS, DTIN>
          <<<rows, kSoftmaxThreads, 0, stream>>>(s_buf + s_off, p_buf + p_off, a.lse, o.lse_layout, v);
    else
      softmax_kernel<SoftmaxVariant::safe, DTS, DTIN>
          <<<rows, kSoftmaxThreads, 0, stream>>>(s_buf + s_off, p_buf + p_off, a.lse, o.lse_layout, v);
    AC_CUDA_TRY_LAUNCH();
    const dim3 grid_o(unsigned((a.head_size + kTile - 1) / kTile), tiles_q, unsigned(a.num_heads));
    pv_kernel<DTIN><<<grid_o, tile_block, 0, stream>>>(p_buf + p_off, a.v, a.out, v);
    AC_CUDA_TRY_LAUNCH();
    const size_t scores = size_t(a.num_heads) * size_t(v.tq) * size_t(v.tk);
    s_off += scores * (DTS == AC_DTYPE_F32 ? 4 : 2);
    p_off += scores * (DTIN == AC_DTYPE_F32 ? 4 : 2);
  }
  return AC_OK;
}

template <int DTIN>
int run_dtype(const ac_attention_args& a, const TextbookOptions& o, bool score_f32, unsigned char* s_buf,
              unsigned char* p_buf, cudaStream_t stream, char* err, size_t err_len) {
  if (score_f32 || DTIN == AC_DTYPE_F32)
    return run_sequences<DTIN, AC_DTYPE_F32>(a, o, s_buf, p_buf, stream, err, err_len);
  return run_sequences<DTIN, DTIN>(a, o, s_buf, p_buf, stream, err, err_len);
}

}  // namespace

int textbook_attention_cuda(const ac_attention_args& a, const TextbookOptions& o, char* err, size_t err_len) {
  if (const int rc = textbook_check_args(a, o, err, err_len); rc != AC_OK) return rc;
  const size_t bytes = textbook_intermediate_bytes(a, o);
  if (o.bytes_allocated) *o.bytes_allocated = bytes;
  if (a.num_seqs == 0 || a.cu_seqlens_q_host[a.num_seqs] == 0) return AC_OK;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  const bool score_f32 = !o.score_as_input && o.score_dtype == DType::f32;
  const size_t p_bytes =
      bytes == 0
          ? 0
          : bytes / size_t(dtype_size(score_f32 ? DType::f32 : DType(a.dtype)) + dtype_size(DType(a.dtype))) *
                size_t(dtype_size(DType(a.dtype)));
  const size_t s_bytes = bytes - p_bytes;
  void* s_buf = nullptr;
  void* p_buf = nullptr;
  if (bytes > 0) {
    AC_CUDA_TRY(cudaMallocAsync(&s_buf, s_bytes, stream));
    const cudaError_t e = cudaMallocAsync(&p_buf, p_bytes, stream);
    if (e != cudaSuccess) {
      cudaFreeAsync(s_buf, stream);
      AC_CUDA_TRY(e);
    }
  }
  int rc = AC_OK;
  auto* s8 = static_cast<unsigned char*>(s_buf);
  auto* p8 = static_cast<unsigned char*>(p_buf);
  switch (a.dtype) {
    case AC_DTYPE_F32:
      rc = run_dtype<AC_DTYPE_F32>(a, o, score_f32, s8, p8, stream, err, err_len);
      break;
    case AC_DTYPE_F16:
      rc = run_dtype<AC_DTYPE_F16>(a, o, score_f32, s8, p8, stream, err, err_len);
      break;
    case AC_DTYPE_BF16:
      rc = run_dtype<AC_DTYPE_BF16>(a, o, score_f32, s8, p8, stream, err, err_len);
      break;
    case AC_DTYPE_E4M3:  // FP8 is refused by the argument checks before this point
    case AC_DTYPE_E5M2:
    case AC_DTYPE_E4M3FNUZ:
      break;
  }
  // Free even after a failed launch (the buffers are stream-ordered); the first error wins.
  const cudaError_t free_s = s_buf ? cudaFreeAsync(s_buf, stream) : cudaSuccess;
  const cudaError_t free_p = p_buf ? cudaFreeAsync(p_buf, stream) : cudaSuccess;
  const cudaError_t sync = cudaStreamSynchronize(stream);
  if (rc != AC_OK) return rc;
  AC_CUDA_TRY(free_s);
  AC_CUDA_TRY(free_p);
  AC_CUDA_TRY(sync);
  return AC_OK;
}

}  // namespace attncheck::kern
