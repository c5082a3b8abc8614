// hopper_bench: throughput of fused (mma.sync) beside fused-hopper (wgmma + TMA) at the seed's
// shapes, of splitkv-packed decode, and of a large device copy as the bandwidth ceiling. Not a
// test; run on the H200.
//   Attention: T in {2048, 8192}, 32 query heads, 8 KV heads, d = 128, fp16 and bf16, causal and
//   not, every tiling of each kernel; TFLOP/s with 4 T^2 h d flops (half for causal).
//   Decode: 1 query, T_k in {8k, 32k, 128k} keys, batch 1 and 64, same heads, fp16; GB/s of
//   compulsory traffic (K and V once, Q and O once; the fp32 partials written and read once).
//   Every number is the median of the repeats, timed with CUDA events around one launch, with
//   L2 flushed (a 512 MiB memset) before each repeat and random non-zero inputs.
// Output: one line per measurement, "name shape ... ms value unit".
// Run: build-cuda/tests/kernels_hopper/hopper_bench [repeats] [decode | hopper8192]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "common/bench_util.cuh"
#include "fused/fused.h"
#include "hopper/hopper.h"

using namespace attncheck;

namespace {

int g_repeats = 20;
void* g_flush = nullptr;
constexpr size_t kFlushBytes = size_t(512) << 20;

// Median over g_repeats of one call of f, each timed alone after an L2 flush.
template <typename F>
float median_ms(F f) {
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  for (int w = 0; w < 2; ++w) f();
  std::vector<float> t;
  for (int r = 0; r < g_repeats; ++r) {
    BENCH_CHECK(cudaMemsetAsync(g_flush, r & 0xff, kFlushBytes));
    BENCH_CHECK(cudaEventRecord(a));
    f();
    BENCH_CHECK(cudaEventRecord(b));
    BENCH_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  BENCH_CHECK(cudaEventDestroy(a));
  BENCH_CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Problem {
  uint16_t *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  float* lse = nullptr;
  int32_t *cu_q = nullptr, *cu_k = nullptr;
  std::vector<int32_t> cu_q_host, cu_k_host;
  ac_attention_args a{};
};

Problem make_problem(int batch, int tq, int tk, int heads, int kv_heads, int d, bool bf16, bool causal) {
  Problem p;
  const int64_t nq = int64_t(batch) * tq * heads * d, nk = int64_t(batch) * tk * kv_heads * d;
  BENCH_CHECK(cudaMalloc(&p.q, size_t(nq) * 2));
  BENCH_CHECK(cudaMalloc(&p.k, size_t(nk) * 2));
  BENCH_CHECK(cudaMalloc(&p.v, size_t(nk) * 2));
  BENCH_CHECK(cudaMalloc(&p.o, size_t(nq) * 2));
  BENCH_CHECK(cudaMalloc(&p.lse, size_t(batch) * tq * heads * 4));
  bench::fill_random<<<1024, 256>>>(p.q, nq, 11, bf16);
  bench::fill_random<<<1024, 256>>>(p.k, nk, 12, bf16);
  bench::fill_random<<<1024, 256>>>(p.v, nk, 13, bf16);
  BENCH_CHECK(cudaGetLastError());
  for (int s = 0; s <= batch; ++s) {
    p.cu_q_host.push_back(s * tq);
    p.cu_k_host.push_back(s * tk);
  }
  BENCH_CHECK(cudaMalloc(&p.cu_q, p.cu_q_host.size() * 4));
  BENCH_CHECK(cudaMalloc(&p.cu_k, p.cu_k_host.size() * 4));
  BENCH_CHECK(cudaMemcpy(p.cu_q, p.cu_q_host.data(), p.cu_q_host.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(p.cu_k, p.cu_k_host.data(), p.cu_k_host.size() * 4, cudaMemcpyHostToDevice));
  ac_attention_args& a = p.a;
  a.dtype = bf16 ? AC_DTYPE_BF16 : AC_DTYPE_F16;
  a.num_seqs = batch;
  a.cu_seqlens_q = p.cu_q;
  a.cu_seqlens_k = p.cu_k;
  a.cu_seqlens_q_host = p.cu_q_host.data();
  a.cu_seqlens_k_host = p.cu_k_host.data();
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_size = d;
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.out = p.o;
  a.lse = p.lse;
  a.softmax_scale = 1.0f / 11.313708f;
  a.causal = causal ? 1 : 0;
  a.num_splits = 1;
  BENCH_CHECK(cudaDeviceSynchronize());
  return p;
}

void free_problem(Problem& p) {
  for (void* x :
       {static_cast<void*>(p.q), static_cast<void*>(p.k), static_cast<void*>(p.v), static_cast<void*>(p.o),
        static_cast<void*>(p.lse), static_cast<void*>(p.cu_q), static_cast<void*>(p.cu_k)})
    cudaFree(x);
}

void attention(int t, bool bf16, bool causal, bool with_fused) {
  Problem p = make_problem(1, t, t, 32, 8, 128, bf16, causal);
  const double flops = 4.0 * double(t) * double(t) * 32 * 128 * (causal ? 0.5 : 1.0);
  const char* dt = bf16 ? "bf16" : "fp16";
  char err[256];
  kern::FusedOptions o;
  o.synchronize = false;
  for (int tiling = 0; with_fused && tiling < kern::kNumFusedTilings; ++tiling) {
    p.a.tiling = tiling;
    const float ms = median_ms([&] {
      if (kern::fused_attention_cuda(p.a, o, err, sizeof err) != AC_OK) {
        std::fprintf(stderr, "fused: %s\n", err);
        std::exit(3);
      }
    });
    std::printf("attn fused        T=%-5d %s causal=%d tiling=(%d,%d) %8.3f ms %6.1f TFLOP/s\n", t, dt,
                causal, kern::kFusedTilings[tiling].br, kern::kFusedTilings[tiling].bc, ms,
                flops / ms * 1e-9);
  }
#if defined(ATTNCHECK_HAVE_SM90A)
  for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling) {
    p.a.tiling = tiling;
    const float ms = median_ms([&] {
      if (kern::hopper_attention_cuda(p.a, o, err, sizeof err) != AC_OK) {
        std::fprintf(stderr, "fused-hopper: %s\n", err);
        std::exit(3);
      }
    });
    std::printf("attn fused-hopper T=%-5d %s causal=%d tiling=(%d,%d) %8.3f ms %6.1f TFLOP/s\n", t, dt,
                causal, kern::kHopperTilings[tiling].br, kern::kHopperTilings[tiling].bc, ms,
                flops / ms * 1e-9);
  }
#endif
  std::fflush(stdout);
  free_problem(p);
}

void decode(int batch, int tk) {
  Problem p = make_problem(batch, 1, tk, 32, 8, 128, false, false);
  const double bytes = 2.0 * batch * tk * 8 * 128 * 2 + 2.0 * batch * 32 * 128 * 2;
  char err[256];
  for (int splits : {0}) {
    p.a.num_splits = splits;
    p.a.tiling = 1;
    const float ms = median_ms([&] {
      if (kern::packed_attention_cuda(p.a, err, sizeof err, false) != AC_OK) {
        std::fprintf(stderr, "splitkv-packed: %s\n", err);
        std::exit(3);
      }
    });
    std::printf("decode splitkv-packed batch=%-3d Tk=%-6d splits=auto %8.4f ms %7.1f GB/s (K/V/Q/O once)\n",
                batch, tk, ms, bytes / ms * 1e-6);
  }
  std::fflush(stdout);
  free_problem(p);
}

void copy_ceiling() {
  const size_t n = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CHECK(cudaMalloc(&a, n));
  BENCH_CHECK(cudaMalloc(&b, n));
  BENCH_CHECK(cudaMemset(a, 1, n));
  const float ms = median_ms([&] { BENCH_CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice)); });
  std::printf("copy 1 GiB device-to-device %8.3f ms %7.1f GB/s (read + write)\n", ms,
              2.0 * double(n) / ms * 1e-6);
  cudaFree(a);
  cudaFree(b);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_repeats = std::max(1, std::atoi(argv[1]));
  // Optional second argument: "decode" (decode only) or "hopper8192" (fused-hopper at T = 8192 only).
  const bool only_decode = argc > 2 && std::string_view(argv[2]) == "decode";
  const bool only_hopper = argc > 2 && std::string_view(argv[2]) == "hopper8192";
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "hopper_bench: no GPU\n");
    return 77;
  }
  BENCH_CHECK(cudaMalloc(&g_flush, kFlushBytes));
  copy_ceiling();
  if (only_hopper) {
    for (bool bf16 : {false, true})
      for (bool causal : {false, true}) attention(8192, bf16, causal, false);
    return 0;
  }
  if (!only_decode)
    for (int t : {2048, 8192})
      for (bool bf16 : {false, true})
        for (bool causal : {false, true}) attention(t, bf16, causal, true);
  for (int batch : {1, 64})
    for (int tk : {8192, 32768, 131072}) decode(batch, tk);
  return 0;
}
