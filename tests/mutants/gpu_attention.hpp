// Device staging for the GPU mutant tests: one fp16 attention sequence in device memory, run
// through a registered ac_subject (CUDA backend) by name. Tensors are filled on the host or by
// cudaMemset; outputs come back as fp16 bits and fp32 LSEs ([heads, tokens]).
#pragma once
#if defined(ATTNCHECK_HAVE_CUDA)
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/attention_args.hpp"
#include "attncheck/plugin_abi.h"
#include "common/registry.h"

namespace mtg {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

inline const ac_subject& cuda_subject(const std::string& name) {
  static std::vector<ac_subject> all;
  if (all.empty()) {
    all = attncheck::kern::builtin_subjects(true);
    attncheck::kern::append_mutant_subjects(all, true);
  }
  for (const ac_subject& s : all)
    if (name == s.name) return s;
  throw std::runtime_error("no CUDA subject " + name);
}

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) {
    check(cudaMalloc(&p, count * sizeof(T) + 16), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& v) {
    check(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> v(n);
    check(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return v;
  }
};

// One sequence: Q [tq, h, d], K / V [tk, hkv, d] fp16, softmax scale `scale`, tiling 0.
struct DeviceAttention {
  int h, hkv, d, tq, tk;
  float scale = 1.0f;
  DeviceBuffer<uint16_t> q, k, v, out;
  DeviceBuffer<float> lse;
  DeviceBuffer<int32_t> cu;
  DeviceAttention(int heads, int kv_heads, int head_size, int queries, int keys)
      : h(heads),
        hkv(kv_heads),
        d(head_size),
        tq(queries),
        tk(keys),
        q(size_t(queries) * heads * head_size),
        k(size_t(keys) * kv_heads * head_size),
        v(size_t(keys) * kv_heads * head_size),
        out(size_t(queries) * heads * head_size),
        lse(size_t(heads) * queries),
        cu(4) {
    cu.upload({0, tq, 0, tk});
  }
  // Returns the subject's status; err receives its one-line reason.
  int run(const ac_subject& s, std::string* err_out = nullptr) {
    int32_t cu_q[2] = {0, tq}, cu_k[2] = {0, tk};
    const ac_attention_args a = attncheck::AttentionArgs(AC_DTYPE_F16, h, hkv, d)
                                    .sequences(1, cu.p, cu.p + 2, cu_q, cu_k)
                                    .tensors(q.p, k.p, v.p, out.p, lse.p)
                                    .scale(scale)
                                    .tiling(0)
                                    .splits(1, AC_FOLD_LEFT);
    char err[512] = {};
    const int rc = s.attention(s.self, &a, err, sizeof err);
    if (err_out) *err_out = err;
    return rc;
  }
};

}  // namespace mtg
#endif
