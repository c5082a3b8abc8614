// Device buffers for the GPU tests (CUDA builds only): RAII over cudaMalloc, copies to and from
// host tensors. A failing CUDA call fails the test with CUDA's message.
#pragma once
#if defined(ATTNCHECK_HAVE_CUDA)
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <vector>

#define KB_CUDA(call)                                 \
  do {                                                \
    const cudaError_t kb_e_ = (call);                 \
    INFO(#call << ": " << cudaGetErrorString(kb_e_)); \
    REQUIRE(kb_e_ == cudaSuccess);                    \
  } while (0)

namespace kb {

struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n) KB_CUDA(cudaMalloc(&ptr, n));
  }
  template <typename T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    if (bytes) KB_CUDA(cudaMemcpy(ptr, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
  template <typename T>
  void to_host(std::vector<T>& host) const {
    REQUIRE(host.size() * sizeof(T) <= bytes);
    if (!host.empty()) KB_CUDA(cudaMemcpy(host.data(), ptr, host.size() * sizeof(T), cudaMemcpyDeviceToHost));
  }
};

}  // namespace kb
#endif
