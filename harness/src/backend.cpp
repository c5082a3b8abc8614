// Backend choice and device queries (see backend.hpp). The device is asked only in a CUDA build
// (ATTNCHECK_HAVE_CUDA); a host-only build sees none.
#include "attncheck/backend.hpp"

#include <stdexcept>

#if defined(ATTNCHECK_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace attncheck {

Backend parse_backend(const std::string& name) {
  if (name == "auto") return Backend::automatic;
  if (name == "cuda") return Backend::cuda;
  if (name == "host") return Backend::host;
  throw std::invalid_argument("unknown backend '" + name + "' (expected auto, cuda or host)");
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::automatic:
      return "auto";
    case Backend::cuda:
      return "cuda";
    case Backend::host:
      return "host";
  }
  return "?";
}

bool cuda_device_available() {
#if defined(ATTNCHECK_HAVE_CUDA)
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

int cuda_device_count() {
#if defined(ATTNCHECK_HAVE_CUDA)
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
#else
  return 0;
#endif
}

std::string cuda_device_name() {
#if defined(ATTNCHECK_HAVE_CUDA)
  if (!cuda_device_available()) return "";
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) return "";
  return p.name;
#else
  return "";
#endif
}

BackendResolution resolve_backend(Backend requested) {
#if defined(ATTNCHECK_HAVE_CUDA)
  const bool built = true;
#else
  const bool built = false;
#endif
  BackendResolution r;
  switch (requested) {
    case Backend::host:
      r.backend = Backend::host;
      r.note = "backend: host twins";
      break;
    case Backend::cuda:
      if (!built) throw std::runtime_error("--backend cuda: this attncheck was built without CUDA");
      if (!cuda_device_available()) throw std::runtime_error("--backend cuda: no CUDA device visible");
      r.backend = Backend::cuda;
      r.note = "backend: cuda on " + cuda_device_name() + " (as asked)";
      break;
    case Backend::automatic:
      if (built && cuda_device_available()) {
        r.backend = Backend::cuda;
        r.note = "backend: cuda on " + cuda_device_name() + " (auto: a GPU is visible)";
      } else {
        r.backend = Backend::host;
        r.note = built ? "backend: host twins (auto: built with CUDA but no GPU visible)"
                       : "backend: host twins (auto: this build has no CUDA)";
      }
      break;
  }
  return r;
}

}  // namespace attncheck
