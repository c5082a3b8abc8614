// A GPU test's executable in a build without CUDA (tests/CMakeLists.txt ac_add_test): none of its
// sources are compiled; it exits 77, which ctest reports as skipped.
#include <cstdio>

int main() {
  std::printf("built without CUDA: GPU test skipped\n");
  return 77;
}
