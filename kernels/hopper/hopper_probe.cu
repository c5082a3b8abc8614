// A probe of the FP8 tensor cores' accumulator (plugin_abi.h AC_FP8_TRUNCATED_SUMS): one
// mma.sync m16n8k32 e4m3 x e4m3 + f32 instruction per trial, D = A B + C, with every row of A
// the trial's 32 codes a, every column of B its codes b and every element of C its c, so every
// element of D is c + sum_k a_k b_k whatever the fragments' row and column layout (a thread's byte
// i of A's word w and of B's word w carry the same k). The host compares D with the exact sum.
// Check: ctest --test-dir build -L gpu -R kernels_hopper ("[truncated_sums]")
#include <cuda_runtime.h>

#include <cstdio>

#include "hopper/hopper.h"

namespace attncheck::kern {

namespace {

// One warp per trial: a and b hold 32 codes each, c one value; d gets element (g, 2 t4) of D.
__global__ void fp8_mma_probe_kernel(const uint8_t* __restrict__ a, const uint8_t* __restrict__ b,
                                     const float* __restrict__ c, float* __restrict__ d, int trials) {
  const int trial = int(blockIdx.x) * (int(blockDim.x) / 32) + int(threadIdx.x) / 32;
  if (trial >= trials) return;
  const int lane = int(threadIdx.x) & 31, t4 = lane & 3;
  const uint8_t* at = a + size_t(trial) * 32;
  const uint8_t* bt = b + size_t(trial) * 32;
  // k of byte i in word w: 16 (w's half) + 4 t4 + i, for A's words (0, 1: first half; 2, 3: second)
  // and B's (0: first; 1: second).
  auto word = [&](const uint8_t* x, int half) {
    const int k = 16 * half + 4 * t4;
    return uint32_t(x[k]) | uint32_t(x[k + 1]) << 8 | uint32_t(x[k + 2]) << 16 | uint32_t(x[k + 3]) << 24;
  };
  const uint32_t a0 = word(at, 0), a2 = word(at, 1), b0 = word(bt, 0), b1 = word(bt, 1);
  float d0 = c[trial], d1 = d0, d2 = d0, d3 = d0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(a0), "r"(a0), "r"(a2), "r"(a2), "r"(b0), "r"(b1));
#endif
  // Every element is the same sum: lane 0's first stands for the trial, and the others must agree.
  const bool same = d0 == d1 && d0 == d2 && d0 == d3;
  if (lane == 0) d[trial] = same ? d0 : __int_as_float(0x7fc00001);
}

}  // namespace

int fp8_mma_probe(const uint8_t* a, const uint8_t* b, const float* c, float* d, int trials, char* err,
                  size_t err_len) {
  uint8_t *da = nullptr, *db = nullptr;
  float *dc = nullptr, *dd = nullptr;
  const size_t codes = size_t(trials) * 32;
  cudaError_t e = cudaMalloc(&da, codes);
  if (e == cudaSuccess) e = cudaMalloc(&db, codes);
  if (e == cudaSuccess) e = cudaMalloc(&dc, size_t(trials) * 4);
  if (e == cudaSuccess) e = cudaMalloc(&dd, size_t(trials) * 4);
  if (e == cudaSuccess) e = cudaMemcpy(da, a, codes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(db, b, codes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(dc, c, size_t(trials) * 4, cudaMemcpyHostToDevice);
  if (e == cudaSuccess && trials > 0) {
    fp8_mma_probe_kernel<<<unsigned((trials + 3) / 4), 128>>>(da, db, dc, dd, trials);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpy(d, dd, size_t(trials) * 4, cudaMemcpyDeviceToHost);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  cudaFree(dd);
  if (e != cudaSuccess) {
    if (err && err_len) std::snprintf(err, err_len, "fp8_mma_probe: %s", cudaGetErrorString(e));
    return AC_ERR_DEVICE;
  }
  return AC_OK;
}

}  // namespace attncheck::kern
