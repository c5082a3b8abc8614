// Merge bandwidth benchmark: merge_cuda on 4096 tokens x 32 heads x 128 (the Llama-3-8B merge shape)
// in fp16, bf16 and fp32, both LSE layouts. Prints the median of 50 timed repeats (cudaEvents,
// after 5 warm-ups), the achieved bandwidth counting bytes read (two states, two LSEs) plus
// bytes written (one state, one LSE), and beside it the device's own copy bandwidth measured the
// same way (cudaMemcpy device to device of the same number of bytes, read + written).
// H200 copy ~4.0-4.3 TB/s; the merge written as tensor ops took 313 us, floor ~24 us.
// Run: build/tests/kernels_basic/merge_bench [tokens heads head_size]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/bench_util.cuh"
#include "merge/merge.h"

using namespace attncheck::kern;

namespace {

template <typename F>
double median_us(F&& body, int repeats = 50, int warmup = 5) {
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) body();
  std::vector<float> ms;
  for (int i = 0; i < repeats; ++i) {
    BENCH_CHECK(cudaEventRecord(a));
    body();
    BENCH_CHECK(cudaEventRecord(b));
    BENCH_CHECK(cudaEventSynchronize(b));
    float t = 0;
    BENCH_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  BENCH_CHECK(cudaEventDestroy(a));
  BENCH_CHECK(cudaEventDestroy(b));
  return 1000.0 * ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int tokens = argc > 3 ? std::atoi(argv[1]) : 4096;
  const int heads = argc > 3 ? std::atoi(argv[2]) : 32;
  const int d = argc > 3 ? std::atoi(argv[3]) : 128;
  if (!attncheck::bench::have_device("merge_bench")) return attncheck::bench::kExitNoDevice;
  int dev = 0;
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDevice(&dev));
  BENCH_CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s; merge of %d tokens x %d heads x %d; median of 50 (cudaEvents)\n", prop.name,
              tokens, heads, d);
  std::printf("%-6s %-13s %-7s %10s %10s %12s %12s %8s\n", "dtype", "lse layout", "path", "bytes(MB)",
              "merge(us)", "merge(GB/s)", "copy(GB/s)", "of copy");
  const size_t n = size_t(tokens) * heads * d, rows = size_t(tokens) * heads;
  const ac_dtype types[3] = {AC_DTYPE_F16, AC_DTYPE_BF16, AC_DTYPE_F32};
  const char* names[3] = {"fp16", "bf16", "fp32"};
  for (int ti = 0; ti < 3; ++ti) {
    const size_t elem = types[ti] == AC_DTYPE_F32 ? 4 : 2;
    void *p, *s, *o;
    float *pl, *sl, *ol;
    BENCH_CHECK(cudaMalloc(&p, n * elem));
    BENCH_CHECK(cudaMalloc(&s, n * elem));
    BENCH_CHECK(cudaMalloc(&o, n * elem));
    BENCH_CHECK(cudaMalloc(&pl, rows * 4));
    BENCH_CHECK(cudaMalloc(&sl, rows * 4));
    BENCH_CHECK(cudaMalloc(&ol, rows * 4));
    BENCH_CHECK(cudaMemset(p, 0, n * elem));  // zeros are valid states (finite LSE 0)
    BENCH_CHECK(cudaMemset(s, 0, n * elem));
    BENCH_CHECK(cudaMemset(pl, 0, rows * 4));
    BENCH_CHECK(cudaMemset(sl, 0, rows * 4));
    const double bytes = double(3 * n * elem + 3 * rows * 4);
    // copy reference: the same number of bytes moved (read + written), device to device
    const size_t copy_bytes = size_t(bytes / 2);
    void *c0, *c1;
    BENCH_CHECK(cudaMalloc(&c0, copy_bytes));
    BENCH_CHECK(cudaMalloc(&c1, copy_bytes));
    const double copy_us =
        median_us([&] { BENCH_CHECK(cudaMemcpyAsync(c1, c0, copy_bytes, cudaMemcpyDeviceToDevice)); });
    const double copy_gbs = 2.0 * double(copy_bytes) / copy_us * 1e-3;
    for (ac_lse_layout layout : {AC_LSE_HEADS_TOKENS, AC_LSE_TOKENS_HEADS}) {
      ac_merge_args a{};
      a.dtype = types[ti];
      a.num_tokens = tokens;
      a.num_heads = heads;
      a.head_size = d;
      a.out = o;
      a.prefix_out = p;
      a.suffix_out = s;
      a.out_stride_token = a.prefix_stride_token = a.suffix_stride_token = int64_t(heads) * d;
      a.out_stride_head = a.prefix_stride_head = a.suffix_stride_head = d;
      a.out_lse = ol;
      a.prefix_lse = pl;
      a.suffix_lse = sl;
      a.lse_stride_token = layout == AC_LSE_HEADS_TOKENS ? 1 : heads;
      a.lse_stride_head = layout == AC_LSE_HEADS_TOKENS ? tokens : 1;
      char err[256] = {0};
      MergeOptions opt{};
      opt.synchronize = false;  // time the kernel, not the host's wait
      int rc = AC_OK;
      const double us = median_us([&] {
        const int r = merge_cuda(a, opt, err, sizeof err);
        if (r != AC_OK) rc = r;
      });
      BENCH_CHECK(cudaDeviceSynchronize());
      if (rc != AC_OK) {
        std::fprintf(stderr, "merge_cuda failed: %s\n", err);
        return 1;
      }
      const double gbs = bytes / us * 1e-3;
      std::printf("%-6s %-13s %-7s %10.1f %10.1f %12.0f %12.0f %7.0f%%\n", names[ti],
                  layout == AC_LSE_HEADS_TOKENS ? "heads,tokens" : "tokens,heads",
                  merge_cuda_uses_vector_path(a, opt) ? "vector" : "scalar", bytes / 1e6, us, gbs, copy_gbs,
                  100.0 * gbs / copy_gbs);
    }
    for (void* x : {p, s, o, static_cast<void*>(pl), static_cast<void*>(sl), static_cast<void*>(ol), c0, c1})
      BENCH_CHECK(cudaFree(x));
  }
  return 0;
}
