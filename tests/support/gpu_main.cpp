// Main for GPU tests in a CUDA build: exits 77 (ctest: skipped) when no GPU is visible, so the `gpu`
// label skips cleanly on machines without one. (A build without CUDA uses gpu_skip.cpp instead.)
#define CATCH_CONFIG_RUNNER
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device visible: GPU test skipped\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
