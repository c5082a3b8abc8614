// The backend a run's built-in subjects use (the CUDA kernels or their host twins) and the device
// queries that choose it: whether this build has CUDA, whether a GPU is visible, its name.
#pragma once
#include <string>

namespace attncheck {

enum class Backend { automatic, cuda, host };
Backend parse_backend(const std::string& name);  // "auto" | "cuda" | "host"; throws std::invalid_argument
const char* backend_name(Backend b);

// What --backend auto resolves to: cuda when this build has CUDA and a device is visible.
struct BackendResolution {
  Backend backend = Backend::host;
  std::string note;  // one line: which backend and why
};
BackendResolution resolve_backend(Backend requested);
bool cuda_device_available();
int cuda_device_count();         // 0 without CUDA or device
std::string cuda_device_name();  // "" without CUDA or device

}  // namespace attncheck
