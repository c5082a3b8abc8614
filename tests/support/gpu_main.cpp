// Main for GPU tests: exits 77 (ctest: skipped) when this build has no CUDA or no GPU is visible,
// so the `gpu` label skips cleanly on CI machines.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#if defined(ATTNCHECK_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

int main(int argc, char** argv) {
#if defined(ATTNCHECK_HAVE_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device visible: GPU test skipped\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
#else
  (void)argc;
  (void)argv;
  std::printf("built without CUDA: GPU test skipped\n");
  return 77;
#endif
}
