// Checked CUDA calls for kernel launchers: every runtime call and every launch is checked, and a
// failure becomes AC_ERR_DEVICE with a one-line message (file:line, the call, CUDA's words),
// never an abort. Usage inside a function returning int and holding `char* err, size_t err_len`:
//   AC_CUDA_TRY(cudaMemsetAsync(...));
//   kernel<<<g, b, smem, stream>>>(...); AC_CUDA_TRY_LAUNCH();
#pragma once
#if defined(__CUDACC__) || defined(ATTNCHECK_HAVE_CUDA)
#include <cuda_runtime.h>

#include <cstdio>

#include "attncheck/plugin_abi.h"

#define AC_CUDA_TRY(call)                                                                                   \
  do {                                                                                                      \
    cudaError_t ac_e_ = (call);                                                                             \
    if (ac_e_ != cudaSuccess) {                                                                             \
      if (err && err_len)                                                                                   \
        std::snprintf(err, err_len, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(ac_e_)); \
      return AC_ERR_DEVICE;                                                                                 \
    }                                                                                                       \
  } while (0)

#define AC_CUDA_TRY_LAUNCH() AC_CUDA_TRY(cudaGetLastError())
#endif

#include <cstdio>
// Refuse an input before launch with a one-line reason.
#define AC_REFUSE(...)                                            \
  do {                                                            \
    if (err && err_len) std::snprintf(err, err_len, __VA_ARGS__); \
    return AC_ERR_UNSUPPORTED;                                    \
  } while (0)

#include <cstring>
// The integer an ABI enum field holds. A caller may store any int there, and reading an
// out-of-range value through the C enum type is undefined in C++: checks read it as an int.
template <typename E>
int raw_enum(const E& field) {
  static_assert(sizeof(E) == sizeof(int), "ABI enums are int-sized");
  int v;
  std::memcpy(&v, &field, sizeof v);
  return v;
}
