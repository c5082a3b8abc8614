// GPU test support: an AttnCase (attention_case.h) copied to device memory, with the ABI
// arguments pointing there, and helpers to read the outputs back. CUDA builds only.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "attention_case.h"

namespace attncheck::test {

template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t n = 0;
  DeviceArray() = default;
  explicit DeviceArray(size_t count) : n(count) {
    if (cudaMalloc(reinterpret_cast<void**>(&ptr), (count ? count : 1) * sizeof(T)) != cudaSuccess)
      throw std::runtime_error("cudaMalloc failed");
  }
  explicit DeviceArray(const std::vector<T>& h) : DeviceArray(h.size()) {
    if (!h.empty()) cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr); }
  std::vector<T> to_host() const {
    std::vector<T> h(n);
    if (n) cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
  void fill_bytes(int byte) { cudaMemset(ptr, byte, (n ? n : 1) * sizeof(T)); }
};

struct DeviceCase {
  DeviceArray<uint16_t> q, k, v, out;
  DeviceArray<float> lse;
  DeviceArray<int32_t> cu_q, cu_k;
  DeviceArray<uint8_t> mask;
  DeviceArray<int64_t> cu_mask;
  explicit DeviceCase(const AttnCase& c)
      : q(c.q),
        k(c.k),
        v(c.v),
        out(size_t(c.total_q() * c.heads * c.dv())),
        lse(size_t(c.total_q() * c.heads)),
        cu_q(c.cu_q),
        cu_k(c.cu_k),
        mask(c.mask),
        cu_mask(c.cu_mask) {
    out.fill_bytes(0x7f);  // poison: an unwritten element reads as a huge value or NaN
    lse.fill_bytes(0x7f);
  }
  ac_attention_args args(const AttnCase& c, int tiling) {
    return case_args(c, {q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr, cu_q.ptr, cu_k.ptr, mask.ptr, cu_mask.ptr},
                     tiling);
  }
};

}  // namespace attncheck::test
