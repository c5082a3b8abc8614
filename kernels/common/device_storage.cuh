// Device-side element access by storage type (an ac_dtype value), shared by every CUDA kernel
// that reads or writes fp32 / fp16 / bf16 one element at a time: loads widen to fp32 (exact),
// stores round once, to nearest even (__float2half_rn / __float2bfloat16_rn, the rounding
// storage.h's float_to_f16 / float_to_bf16 replay bit for bit in the host twins).
// Elem<DT>::load(v) / store(f) convert one value of the storage type T; load(p, i) / store(p, i, f)
// read or write element i of a tensor of that type.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "attncheck/plugin_abi.h"

namespace attncheck::kern::dev {

template <int DT>
struct ElemConvert;
template <>
struct ElemConvert<AC_DTYPE_F32> {
  using T = float;
  static __device__ __forceinline__ float load(T v) { return v; }
  static __device__ __forceinline__ T store(float f) { return f; }
};
template <>
struct ElemConvert<AC_DTYPE_F16> {
  using T = __half;
  static __device__ __forceinline__ float load(T v) { return __half2float(v); }
  static __device__ __forceinline__ T store(float f) { return __float2half_rn(f); }
};
template <>
struct ElemConvert<AC_DTYPE_BF16> {
  using T = __nv_bfloat16;
  static __device__ __forceinline__ float load(T v) { return __bfloat162float(v); }
  static __device__ __forceinline__ T store(float f) { return __float2bfloat16_rn(f); }
};

template <int DT>
struct Elem : ElemConvert<DT> {
  using T = typename ElemConvert<DT>::T;
  using ElemConvert<DT>::load;
  using ElemConvert<DT>::store;
  static __device__ __forceinline__ float load(const void* p, int64_t i) {
    return load(static_cast<const T*>(p)[i]);
  }
  static __device__ __forceinline__ void store(void* p, int64_t i, float f) {
    static_cast<T*>(p)[i] = store(f);
  }
};

}  // namespace attncheck::kern::dev
