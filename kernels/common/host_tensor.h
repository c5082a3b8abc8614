// Host-side element access shared by the host twins (*_host.cpp): read one element of a tensor
// stored as fp32 / fp16 / bf16 as a float, write a float back into that storage, and check a
// pointer's alignment before a twin walks it. The only rounding here is the store to fp16 / bf16,
// through store_from_float (storage.h: nearest-even, the rounding the kernels perform); fp32
// loads and stores are plain copies. Host only: the kernels read their tensors in device code.
#pragma once
#include <cstdint>

#include "storage.h"

namespace attncheck::kern {

// Element i of a tensor of type t at base, widened to float (exact for every storage type).
inline float load_host(const void* base, DType t, int64_t i) {
  if (t == DType::f32) return static_cast<const float*>(base)[i];
  return load_as_float(t, static_cast<const uint16_t*>(base)[i]);
}

// Writes v into element i of a tensor of type t at base, rounded once to t.
inline void store_host(void* base, DType t, int64_t i, float v) {
  if (t == DType::f32)
    static_cast<float*>(base)[i] = v;
  else
    static_cast<uint16_t*>(base)[i] = uint16_t(store_from_float(t, v));
}

// True when p is a multiple of n bytes (a twin refuses misaligned tensors, as its kernel does).
inline bool aligned_to(const void* p, uintptr_t n) { return (reinterpret_cast<uintptr_t>(p) % n) == 0; }

}  // namespace attncheck::kern
