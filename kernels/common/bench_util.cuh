// What the GPU benchmarks (fused_bench, hopper_bench, merge_bench) share: a CUDA call check that
// ends the benchmark with the error named, and random non-zero inputs on the device.
// Benchmarks print numbers; they are not tests.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define BENCH_CHECK(x)                                                                         \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

namespace attncheck::bench {

// A benchmark without a GPU says so in one line and exits with ctest's skip code.
constexpr int kExitNoDevice = 77;
inline bool have_device(const char* tool) {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) return true;
  std::fprintf(stderr, "%s: no CUDA device\n", tool);
  return false;
}

// Uniform in [-1, 1] from a hash of (seed, index), never zero.
__device__ inline float uniform_at(int64_t i, uint32_t seed) {
  uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return (float(h >> 8) + 0.5f) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}
// uniform_at rounded to fp16 or bf16 (stored as their 16 bits).
__global__ inline void fill_random(uint16_t* x, int64_t n, uint32_t seed, bool bf16) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float u = uniform_at(i, seed);
    x[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(u)) : __half_as_ushort(__float2half_rn(u));
  }
}

// The same uniform values as e4m3fn codes (nearest, ties to even; none is a NaN code): an FP8 cache
// whose logits vary, so a kernel's running max moves as it would on real keys.
__global__ inline void fill_random_e4m3(uint8_t* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float u = uniform_at(i, seed);
    x[i] = __nv_cvt_float_to_fp8(u, __NV_SATFINITE, __NV_E4M3);
  }
}

}  // namespace attncheck::bench
