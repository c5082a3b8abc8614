// fused_bench: throughput of the fused attention forward at the Llama-3-8B layer shape and of split-KV
// decode, on the GPU (not a test; the lead runs it on the H200).
//   Fused: T = 8192, 32 query heads, 8 KV heads, d = 128, fp16, non-causal and causal, every
//   tiling: median of 20 timed runs (cudaEvents, after 3 warm-up runs, fresh random non-zero
//   inputs before each run), TFLOP/s with 4 T^2 h d flops (half for causal), printed beside
//   FlashAttention-2 and cuDNN on the same H200.
//   Split-KV decode: T_q = 1, T_k = 8192, batch 64, same heads, fp16, split counts 1..16:
//   GB/s of compulsory traffic (K and V once, Q, O, the fp32 partials written and read once).
// Run: build-ka/kernels_attention/fused_bench  (or build/tests/kernels_attention/fused_bench)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "attncheck/attention_args.hpp"
#include "common/bench_util.cuh"
#include "fused/fused.h"
#include "splitkv/splitkv.h"

namespace {

struct Buffers {
  __half *q, *k, *v, *o;
  float* lse;
  int64_t nq, nk;
};

void refill(const Buffers& b, uint32_t seed) {
  attncheck::bench::fill_random<<<1024, 256>>>(reinterpret_cast<uint16_t*>(b.q), b.nq, seed * 3 + 1, false);
  attncheck::bench::fill_random<<<1024, 256>>>(reinterpret_cast<uint16_t*>(b.k), b.nk, seed * 3 + 2, false);
  attncheck::bench::fill_random<<<1024, 256>>>(reinterpret_cast<uint16_t*>(b.v), b.nk, seed * 3 + 3, false);
  BENCH_CHECK(cudaGetLastError());
}

template <typename Launch>
float median_ms(const Buffers& b, Launch launch) {
  cudaEvent_t e0, e1;
  BENCH_CHECK(cudaEventCreate(&e0));
  BENCH_CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) launch();
  BENCH_CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    refill(b, uint32_t(100 + i));
    BENCH_CHECK(cudaEventRecord(e0));
    launch();
    BENCH_CHECK(cudaEventRecord(e1));
    BENCH_CHECK(cudaEventSynchronize(e1));
    float t;
    BENCH_CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 0.5f * (ms[9] + ms[10]);
}

}  // namespace

int main() {
  using namespace attncheck;
  if (!bench::have_device("fused_bench")) return bench::kExitNoDevice;
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);

  const int T = 8192, H = 32, HKV = 8, D = 128;
  Buffers b{};
  b.nq = int64_t(T) * H * D;
  b.nk = int64_t(T) * HKV * D;
  BENCH_CHECK(cudaMalloc(&b.q, b.nq * 2));
  BENCH_CHECK(cudaMalloc(&b.k, b.nk * 2));
  BENCH_CHECK(cudaMalloc(&b.v, b.nk * 2));
  BENCH_CHECK(cudaMalloc(&b.o, b.nq * 2));
  BENCH_CHECK(cudaMalloc(&b.lse, int64_t(T) * H * 4));
  int32_t* cu;
  BENCH_CHECK(cudaMalloc(&cu, 2 * sizeof(int32_t)));
  const int32_t cu_host[2] = {0, T};
  BENCH_CHECK(cudaMemcpy(cu, cu_host, sizeof cu_host, cudaMemcpyHostToDevice));
  refill(b, 1);

  std::printf("\nfused attention forward: T=%d, h=%d, h_kv=%d, d=%d, fp16 (median of 20)\n", T, H, HKV, D);
  std::printf(
      "  references on the same H200: FlashAttention-2 359 TFLOP/s (causal 316), cuDNN 656 (causal 595)\n");
  std::printf("  %-8s %-10s %10s %12s\n", "causal", "tiling", "ms", "TFLOP/s");
  for (int causal : {0, 1}) {
    for (int t = 0; t < kern::kNumFusedTilings; ++t) {
      const ac_attention_args a = attncheck::AttentionArgs(AC_DTYPE_F16, H, HKV, D)
                                      .sequences(1, cu, cu, cu_host, cu_host)
                                      .tensors(b.q, b.k, b.v, b.o, b.lse)
                                      .scale(0.08838834764831845f)
                                      .causal(causal)
                                      .tiling(t);
      kern::FusedOptions opt;
      opt.synchronize = false;
      char err[256];
      int rc = AC_OK;
      const float ms = median_ms(b, [&] { rc = kern::fused_attention_cuda(a, opt, err, sizeof err); });
      if (rc != AC_OK) {
        std::printf("  error: %s\n", err);
        return 1;
      }
      const double flops = 4.0 * T * double(T) * H * D * (causal ? 0.5 : 1.0);
      char til[32];
      std::snprintf(til, sizeof til, "(%d,%d)", kern::kFusedTilings[t].br, kern::kFusedTilings[t].bc);
      std::printf("  %-8d %-10s %10.3f %12.1f\n", causal, til, ms, flops / (ms * 1e-3) / 1e12);
    }
  }
  BENCH_CHECK(cudaFree(b.q));
  BENCH_CHECK(cudaFree(b.k));
  BENCH_CHECK(cudaFree(b.v));
  BENCH_CHECK(cudaFree(b.o));
  BENCH_CHECK(cudaFree(b.lse));

  // Split-KV decode: 64 sequences of one query against 8192 keys each.
  const int B = 64, TK = 8192;
  Buffers d{};
  d.nq = int64_t(B) * H * D;
  d.nk = int64_t(B) * TK * HKV * D;
  BENCH_CHECK(cudaMalloc(&d.q, d.nq * 2));
  BENCH_CHECK(cudaMalloc(&d.k, d.nk * 2));
  BENCH_CHECK(cudaMalloc(&d.v, d.nk * 2));
  BENCH_CHECK(cudaMalloc(&d.o, d.nq * 2));
  BENCH_CHECK(cudaMalloc(&d.lse, int64_t(B) * H * 4));
  std::vector<int32_t> cq(B + 1), ck(B + 1);
  for (int i = 0; i <= B; ++i) {
    cq[size_t(i)] = i;
    ck[size_t(i)] = i * TK;
  }
  int32_t *dcq, *dck;
  BENCH_CHECK(cudaMalloc(&dcq, (B + 1) * 4));
  BENCH_CHECK(cudaMalloc(&dck, (B + 1) * 4));
  BENCH_CHECK(cudaMemcpy(dcq, cq.data(), (B + 1) * 4, cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(dck, ck.data(), (B + 1) * 4, cudaMemcpyHostToDevice));
  void* ws;
  const size_t ws_bytes = size_t(kern::kSplitKVMaxSplits) * B * H * (D + 1) * 4;
  BENCH_CHECK(cudaMalloc(&ws, ws_bytes));
  std::printf(
      "\nsplit-KV decode: batch %d, T_q=1, T_k=%d, h=%d, h_kv=%d, d=%d, fp16 (median of 20); "
      "copy bandwidth on the H200 is about 4000 GB/s\n",
      B, TK, H, HKV, D);
  std::printf("  %-8s %-10s %10s %12s\n", "splits", "tiling", "ms", "GB/s");
  for (int t = 0; t < kern::kNumSplitKVTilings; ++t) {
    for (int splits : {1, 2, 4, 8, 16}) {
      const ac_attention_args a = attncheck::AttentionArgs(AC_DTYPE_F16, H, HKV, D)
                                      .sequences(B, dcq, dck, cq.data(), ck.data())
                                      .tensors(d.q, d.k, d.v, d.o, d.lse)
                                      .scale(0.08838834764831845f)
                                      .tiling(t)
                                      .splits(splits, AC_FOLD_TREE);
      kern::SplitKVOptions opt;
      opt.synchronize = false;
      opt.workspace = ws;
      opt.workspace_bytes = ws_bytes;
      char err[256];
      int rc = AC_OK;
      const float ms = median_ms(d, [&] { rc = kern::splitkv_attention_cuda(a, opt, err, sizeof err); });
      if (rc != AC_OK) {
        std::printf("  error: %s\n", err);
        return 1;
      }
      const double bytes = double(d.nk) * 2 * 2 + double(d.nq) * 2 * 2 + double(B) * H * 4 +
                           2.0 * splits * B * H * (D + 1) * 4;
      char til[32];
      std::snprintf(til, sizeof til, "(%d,%d)", kern::kSplitKVTilings[t].br, kern::kSplitKVTilings[t].bc);
      std::printf("  %-8d %-10s %10.3f %12.1f\n", splits, til, ms, bytes / (ms * 1e-3) / 1e9);
    }
  }
  return 0;
}
