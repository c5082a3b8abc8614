// AbiSubject's side of staging: a case's bit tensors as the bytes of the subject's element type
// and LSE layout, in buffers of the subject's memory space (host, or the CUDA device). Elements
// are copied bit for bit; nothing is rounded. CUDA buffers exist only in a CUDA build
// (ATTNCHECK_HAVE_CUDA); there a CUDA subject's upload refuses the call as unsupported.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "attncheck/plugin_abi.h"
#include "attncheck/subject.hpp"

namespace attncheck {

// Bits (one uint32 per element) <-> packed bytes of the element type.
std::vector<unsigned char> pack(ac_dtype d, const Bits& bits);
Bits unpack(ac_dtype d, const std::vector<unsigned char>& bytes);
// `elements` outputs of type d, each the poison pattern (staging.hpp).
std::vector<unsigned char> poisoned(ac_dtype d, size_t elements);
std::vector<float> poisoned_lse(size_t n);
template <class T>
std::vector<unsigned char> as_bytes(const std::vector<T>& v) {
  std::vector<unsigned char> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// LSE strides (token, head) of a [tokens, heads] tensor in the subject's declared layout.
struct LseStrides {
  int64_t token, head;
};
LseStrides lse_strides(ac_lse_layout layout, int64_t tokens, int64_t heads);
// Logical [tokens, heads] <-> declared layout.
std::vector<float> to_layout(const std::vector<float>& logical, ac_lse_layout layout, int64_t tokens,
                             int64_t heads);
std::vector<float> from_layout(const std::vector<float>& stored, ac_lse_layout layout, int64_t tokens,
                               int64_t heads);

// The buffers of one call in the subject's memory space, each at least one byte so no subject
// sees a null pointer for an empty tensor. Host subjects: one vector each. CUDA subjects: slices
// (256-byte aligned) of one device block kept for the process, filled by one copy from one pinned
// host block and read back by one copy. cudaMalloc and cudaFree per buffer (cudaFree waits for the
// device) and a copy per buffer made the subject's calls most of a CUDA gate's time. The blocks
// only grow, and one call uses them at a time (the lock is held from the upload to the end).
// With ATTNCHECK_SEPARATE_BUFFERS=1 each buffer is its own allocation of its exact size, so that
// compute-sanitizer's memcheck sees each buffer's own bounds.
// Seconds this process's calls have held the device (from a call's upload to its end): calls on
// the device run one at a time per process, so in a device server this is its serialised time.
double staging_device_seconds();

class Staging {
 public:
  explicit Staging(ac_memory mem) : mem_(mem) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging();

  // Adds a buffer holding `bytes`; returns its slot. Outputs are added after every input. `name`
  // (an output's: "O", "LSE") names it where a subject writes past its end.
  size_t add(std::vector<unsigned char> bytes, const char* name = nullptr);
  // Places every buffer in the subject's memory (after the last add, before the first get).
  void upload();
  void* get(size_t slot);
  // Brings buffer `first` and every later one back from the device, in one copy. In host memory,
  // checks the guard bytes after every buffer: a subject that wrote past one is a crash
  // (SubjectError internal) naming it. (On the device, compute-sanitizer's memcheck with
  // ATTNCHECK_SEPARATE_BUFFERS=1 sees each buffer's bounds.)
  void download(size_t first);
  // Buffer `slot`'s bytes as the subject left them (after download for a CUDA subject).
  std::vector<unsigned char> read(size_t slot) const;

 private:
  struct Slot {
    size_t offset, size;
    std::vector<unsigned char> bytes;
    const char* name;
  };
  // Where the next buffer would start: the bytes the block must hold (at least 1).
  size_t end() const;
#if defined(ATTNCHECK_HAVE_CUDA)
  std::vector<void*> separate_;
  std::unique_lock<std::mutex> lock_;
  std::chrono::steady_clock::time_point locked_at_;
#endif
  ac_memory mem_;
  std::vector<Slot> slots_;
};

}  // namespace attncheck
