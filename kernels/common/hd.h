// Shared by every kernel's math header: the __host__ __device__ marker, so one header of math
// serves the CUDA kernel and its host twin, and the twin builds without nvcc.
#pragma once
#if defined(__CUDACC__)
#define AC_HD __host__ __device__ __forceinline__
#define AC_DEVICE_CODE 1
#else
#define AC_HD inline
#endif
