// A case's tensors in the subject's memory space (see staging_buffers.hpp).
#include "staging_buffers.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "attncheck/names.hpp"
#include "attncheck/staging.hpp"

#if defined(ATTNCHECK_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace attncheck {

std::vector<unsigned char> pack(ac_dtype d, const Bits& bits) {
  const size_t es = size_t(dtype_bytes(d));
  std::vector<unsigned char> out(bits.size() * es);
  for (size_t i = 0; i < bits.size(); ++i) {
    if (es == 4) {
      std::memcpy(&out[i * 4], &bits[i], 4);
    } else if (es == 1) {
      out[i] = static_cast<unsigned char>(bits[i]);
    } else {
      const uint16_t h = uint16_t(bits[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

Bits unpack(ac_dtype d, const std::vector<unsigned char>& bytes) {
  const size_t es = size_t(dtype_bytes(d));
  Bits out(bytes.size() / es);
  for (size_t i = 0; i < out.size(); ++i) {
    if (es == 4) {
      std::memcpy(&out[i], &bytes[i * 4], 4);
    } else if (es == 1) {
      out[i] = bytes[i];
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = h;
    }
  }
  return out;
}

std::vector<unsigned char> poisoned(ac_dtype d, size_t elements) {
  return pack(d, Bits(elements, poison_bits(d)));
}

std::vector<float> poisoned_lse(size_t n) {
  float f;
  std::memcpy(&f, &kPoisonF32, 4);
  return std::vector<float>(n, f);
}

LseStrides lse_strides(ac_lse_layout layout, int64_t tokens, int64_t heads) {
  if (layout == AC_LSE_HEADS_TOKENS) return {1, tokens};
  return {heads, 1};
}

namespace {
// a, a row-major [rows, cols], as [cols, rows].
std::vector<float> transposed(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> out(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[size_t(c * rows + r)] = a[size_t(r * cols + c)];
  return out;
}
}  // namespace

std::vector<float> to_layout(const std::vector<float>& logical, ac_lse_layout layout, int64_t tokens,
                             int64_t heads) {
  return layout == AC_LSE_TOKENS_HEADS ? logical : transposed(logical, tokens, heads);
}
std::vector<float> from_layout(const std::vector<float>& stored, ac_lse_layout layout, int64_t tokens,
                               int64_t heads) {
  return layout == AC_LSE_TOKENS_HEADS ? stored : transposed(stored, heads, tokens);
}

namespace {

size_t align(size_t n) { return (n + 255) / 256 * 256; }

#if defined(ATTNCHECK_HAVE_CUDA)
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw SubjectError(SubjectError::Kind::device_fault, std::string(what) + ": " + cudaGetErrorString(e));
}
// One of the two blocks: device memory, or pinned host memory for the copies.
struct Block {
  bool pinned = false;
  void* p = nullptr;
  size_t bytes = 0;
  // At least `need` bytes; the contents are not kept (every call refills the block).
  void reserve(size_t need) {
    if (bytes >= need) return;
    if (p && pinned) cudaFreeHost(p);
    if (p && !pinned) cudaFree(p);
    p = nullptr;
    bytes = 0;
    check(pinned ? cudaMallocHost(&p, need) : cudaMalloc(&p, need), pinned ? "cudaMallocHost" : "cudaMalloc");
    bytes = need;
  }
  unsigned char* at(size_t offset) const { return static_cast<unsigned char*>(p) + offset; }
};
struct Blocks {
  std::mutex m;
  Block device{false}, pinned{true};
};
// Kept for the process and never freed: a static destructor would run after the CUDA runtime's.
Blocks& blocks() {
  static Blocks* b = new Blocks;
  return *b;
}
std::atomic<int64_t> g_device_ns{0};  // staging_device_seconds
bool separate() {
  static const bool s = [] {
    const char* v = std::getenv("ATTNCHECK_SEPARATE_BUFFERS");
    return v && std::string(v) == "1";
  }();
  return s;
}
#endif

}  // namespace

double staging_device_seconds() {
#if defined(ATTNCHECK_HAVE_CUDA)
  return double(g_device_ns.load()) * 1e-9;
#else
  return 0.0;
#endif
}

Staging::~Staging() {
#if defined(ATTNCHECK_HAVE_CUDA)
  // A call that failed skipped the device sync: its kernels may still be writing into the block,
  // which the next call refills. Wait before handing the block on (a no-op after a good call).
  if (lock_.owns_lock()) {
    cudaDeviceSynchronize();
    g_device_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - locked_at_)
            .count();
  }
  for (void* p : separate_) cudaFree(p);
#endif
}

size_t Staging::add(std::vector<unsigned char> bytes, const char* name) {
  const size_t at = slots_.empty() ? 0 : end();
  slots_.push_back({at, bytes.size(), std::move(bytes), name});
  return slots_.size() - 1;
}

// Host buffers are followed by kGuardBytes of kGuardByte: a subject that writes a little past a
// buffer's end (an off-by-one tile, an LSE row too many) changes them, where the heap would
// otherwise take the bytes silently. An empty buffer's one byte is guard too.
constexpr size_t kGuardBytes = 64;
constexpr unsigned char kGuardByte = 0xa5;

void Staging::upload() {
  if (mem_ == AC_MEMORY_HOST) {
    for (auto& sl : slots_) sl.bytes.resize(sl.size + kGuardBytes, kGuardByte);
    return;
  }
#if defined(ATTNCHECK_HAVE_CUDA)
  // One call on the device at a time per process, separate buffers too: the device server calls
  // from a thread per client.
  lock_ = std::unique_lock<std::mutex>(blocks().m);
  locked_at_ = std::chrono::steady_clock::now();
  if (separate()) {
    for (auto& sl : slots_) {
      void* p = nullptr;
      check(cudaMalloc(&p, std::max<size_t>(sl.size, 1)), "cudaMalloc");
      separate_.push_back(p);
      if (sl.size) check(cudaMemcpy(p, sl.bytes.data(), sl.size, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    }
    return;
  }
  const size_t total = end();
  Blocks& b = blocks();
  b.device.reserve(total);
  b.pinned.reserve(total);
  for (const auto& sl : slots_)
    if (sl.size) std::memcpy(b.pinned.at(sl.offset), sl.bytes.data(), sl.size);
  check(cudaMemcpy(b.device.p, b.pinned.p, total, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
#else
  throw SubjectError(SubjectError::Kind::unsupported, "this attncheck build has no CUDA");
#endif
}

void* Staging::get(size_t slot) {
  if (mem_ == AC_MEMORY_HOST) return slots_[slot].bytes.data();
#if defined(ATTNCHECK_HAVE_CUDA)
  if (separate()) return separate_[slot];
  return blocks().device.at(slots_[slot].offset);
#else
  return nullptr;
#endif
}

void Staging::download(size_t first) {
  if (mem_ == AC_MEMORY_HOST) {
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& sl = slots_[i];
      for (size_t b = sl.size; b < sl.bytes.size(); ++b)
        if (sl.bytes[b] != kGuardByte)
          throw SubjectError(SubjectError::Kind::internal,
                             "the subject wrote past the end of its " +
                                 (sl.name ? std::string(sl.name) : "input buffer " + std::to_string(i)) +
                                 " buffer (" + std::to_string(sl.size) + " bytes; byte " +
                                 std::to_string(b - sl.size) + " past it changed)");
    }
    return;
  }
#if defined(ATTNCHECK_HAVE_CUDA)
  if (separate()) {
    for (size_t i = first; i < slots_.size(); ++i)
      if (slots_[i].size)
        check(cudaMemcpy(slots_[i].bytes.data(), separate_[i], slots_[i].size, cudaMemcpyDeviceToHost),
              "cudaMemcpy D2H");
    return;
  }
  Blocks& b = blocks();
  const size_t from = slots_[first].offset;
  check(cudaMemcpy(b.pinned.at(from), b.device.at(from), end() - from, cudaMemcpyDeviceToHost),
        "cudaMemcpy D2H");
  for (size_t i = first; i < slots_.size(); ++i)
    if (slots_[i].size) std::memcpy(slots_[i].bytes.data(), b.pinned.at(slots_[i].offset), slots_[i].size);
#endif
}

std::vector<unsigned char> Staging::read(size_t slot) const {
  const auto& bytes = slots_[slot].bytes;
  return {bytes.begin(), bytes.begin() + ptrdiff_t(slots_[slot].size)};
}

size_t Staging::end() const {
  return slots_.empty() ? 1 : align(slots_.back().offset + std::max<size_t>(slots_.back().size, 1));
}

}  // namespace attncheck
