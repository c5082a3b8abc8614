// AbiSubject: stages a case's bit tensors into an ac_subject's memory space, calls it, and reads
// the outputs back (see abi_subject.hpp). Elements are copied bit for bit; nothing is rounded.
// CUDA staging exists only in a CUDA build (ATTNCHECK_HAVE_CUDA); a CUDA subject in a host-only
// build refuses every call as unsupported.
#include "attncheck/abi_subject.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "attncheck/json_fields.hpp"
#include "attncheck/names.hpp"

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

uint32_t poison_bits(ac_dtype d) {
  return d == AC_DTYPE_F32 ? kPoisonF32 : d == AC_DTYPE_F16 ? kPoisonF16 : kPoisonBf16;
}

namespace {

// Bits (one uint32 per element) -> packed bytes of the element type.
std::vector<unsigned char> pack(ac_dtype d, const Bits& bits) {
  const size_t es = size_t(dtype_bytes(d));
  std::vector<unsigned char> out(bits.size() * es);
  for (size_t i = 0; i < bits.size(); ++i) {
    if (es == 4) {
      std::memcpy(&out[i * 4], &bits[i], 4);
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

template <class T>
std::vector<unsigned char> as_bytes(const std::vector<T>& v) {
  std::vector<unsigned char> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<float> poisoned_lse(size_t n) {
  float f;
  std::memcpy(&f, &kPoisonF32, 4);
  return std::vector<float>(n, f);
}

// LSE strides (token, head) of a [tokens, heads] tensor in the subject's declared layout.
struct LseStrides {
  int64_t token, head;
};
LseStrides lse_strides(ac_lse_layout layout, int64_t tokens, int64_t heads) {
  if (layout == AC_LSE_HEADS_TOKENS) return {1, tokens};
  return {heads, 1};
}

// Logical [tokens, heads] <-> declared layout.
std::vector<float> to_layout(const std::vector<float>& logical, ac_lse_layout layout, int64_t tokens,
                             int64_t heads) {
  if (layout == AC_LSE_TOKENS_HEADS) return logical;
  std::vector<float> out(logical.size());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) out[size_t(h * tokens + t)] = logical[size_t(t * heads + h)];
  return out;
}
std::vector<float> from_layout(const std::vector<float>& stored, ac_lse_layout layout, int64_t tokens,
                               int64_t heads) {
  if (layout == AC_LSE_TOKENS_HEADS) return stored;
  std::vector<float> out(stored.size());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) out[size_t(t * heads + h)] = stored[size_t(h * tokens + t)];
  return out;
}

// The buffers of one call in the subject's memory space, each at least one byte so no subject
// sees a null pointer for an empty tensor. Host subjects: one vector each. CUDA subjects: slices
// (256-byte aligned) of one device block kept for the process, filled by one copy from one pinned
// host block and read back by one copy. cudaMalloc and cudaFree per buffer (cudaFree waits for the
// device) and a copy per buffer made the subject's calls most of a CUDA gate's time. The blocks
// only grow, and one call uses them at a time (the lock is held from the upload to the end).
// With ATTNCHECK_SEPARATE_BUFFERS=1 each buffer is its own allocation of its exact size, so that
// compute-sanitizer's memcheck sees each buffer's own bounds.
class Staging {
 public:
  explicit Staging(ac_memory mem) : mem_(mem) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
#if defined(ATTNCHECK_HAVE_CUDA)
    // A call that failed skipped the device sync: its kernels may still be writing into the block,
    // which the next call refills. Wait before handing the block on (a no-op after a good call).
    if (lock_.owns_lock()) cudaDeviceSynchronize();
    for (void* p : separate_) cudaFree(p);
#endif
  }

  // Adds a buffer holding `bytes`; returns its slot. Outputs are added after every input.
  size_t add(std::vector<unsigned char> bytes) {
    const size_t at = slots_.empty() ? 0 : end();
    slots_.push_back({at, bytes.size(), std::move(bytes)});
    return slots_.size() - 1;
  }
  // Places every buffer in the subject's memory (after the last add, before the first get).
  void upload() {
    if (mem_ == AC_MEMORY_HOST) {
      for (auto& sl : slots_) sl.bytes.resize(std::max<size_t>(sl.size, 1));
      return;
    }
#if defined(ATTNCHECK_HAVE_CUDA)
    // One call on the device at a time per process, separate buffers too: the device server calls
    // from a thread per client.
    lock_ = std::unique_lock<std::mutex>(blocks().m);
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
  void* get(size_t slot) {
    if (mem_ == AC_MEMORY_HOST) return slots_[slot].bytes.data();
#if defined(ATTNCHECK_HAVE_CUDA)
    if (separate()) return separate_[slot];
    return blocks().device.at(slots_[slot].offset);
#else
    return nullptr;
#endif
  }
  // Brings buffer `first` and every later one back from the device, in one copy.
  void download(size_t first) {
    if (mem_ == AC_MEMORY_HOST) return;
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
  // Buffer `slot`'s bytes as the subject left them (after download for a CUDA subject).
  std::vector<unsigned char> read(size_t slot) const {
    const auto& bytes = slots_[slot].bytes;
    return {bytes.begin(), bytes.begin() + ptrdiff_t(slots_[slot].size)};
  }

 private:
  struct Slot {
    size_t offset, size;
    std::vector<unsigned char> bytes;
  };
  static size_t align(size_t n) { return (n + 255) / 256 * 256; }
  // Where the next buffer would start: the bytes the block must hold (at least 1).
  size_t end() const {
    return slots_.empty() ? 1 : align(slots_.back().offset + std::max<size_t>(slots_.back().size, 1));
  }
#if defined(ATTNCHECK_HAVE_CUDA)
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
      check(pinned ? cudaMallocHost(&p, need) : cudaMalloc(&p, need),
            pinned ? "cudaMallocHost" : "cudaMalloc");
      bytes = need;
    }
    unsigned char* at(size_t offset) const { return static_cast<unsigned char*>(p) + offset; }
  };
  struct Blocks {
    std::mutex m;
    Block device{false}, pinned{true};
  };
  // Kept for the process and never freed: a static destructor would run after the CUDA runtime's.
  static Blocks& blocks() {
    static Blocks* b = new Blocks;
    return *b;
  }
  static bool separate() {
    static const bool s = [] {
      const char* v = std::getenv("ATTNCHECK_SEPARATE_BUFFERS");
      return v && std::string(v) == "1";
    }();
    return s;
  }
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      throw SubjectError(SubjectError::Kind::device_fault, std::string(what) + ": " + cudaGetErrorString(e));
  }
  std::vector<void*> separate_;
  std::unique_lock<std::mutex> lock_;
#endif
  ac_memory mem_;
  std::vector<Slot> slots_;
};

void require_tensor_size(const char* what, size_t got, size_t want) {
  if (got != want)
    throw SubjectError(SubjectError::Kind::internal, std::string("case tensor ") + what + " has " +
                                                         std::to_string(got) + " elements, expected " +
                                                         std::to_string(want));
}

// After a CUDA subject returns, surface asynchronous faults the subject did not report.
void sync_device(ac_memory mem) {
#if defined(ATTNCHECK_HAVE_CUDA)
  if (mem != AC_MEMORY_CUDA) return;
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess)
    throw SubjectError(SubjectError::Kind::device_fault,
                       std::string("device fault after the call: ") + cudaGetErrorString(e));
#else
  (void)mem;
#endif
}

void throw_on_error(int rc, const std::string& subject, const char* op, const char* err) {
  if (rc == AC_OK) return;
  std::string why = err[0] ? json_fields::printable(err, 500) : std::string("no reason given");
  std::string msg = subject + " " + op + ": " + why;
  if (rc == AC_ERR_UNSUPPORTED) throw SubjectError(SubjectError::Kind::unsupported, msg);
  if (rc == AC_ERR_DEVICE) throw SubjectError(SubjectError::Kind::device_fault, msg);
  throw SubjectError(SubjectError::Kind::internal, msg + " (code " + std::to_string(rc) + ")");
}

// Calls one entry point of a plugin subject and turns its outcome into a SubjectError. The
// plugin is foreign code: its error text is terminated here whatever it wrote (it may fill the
// buffer without a NUL), and a C++ exception that escapes across the C ABI is a failure of the
// subject (internal), never a pass.
template <class Call>
void call_plugin(const std::string& subject, const char* op, Call&& call) {
  char err[512] = {0};
  int rc;
  try {
    rc = call(err, sizeof err);
  } catch (const std::exception& e) {
    throw SubjectError(SubjectError::Kind::internal,
                       subject + " " + op + ": the plugin threw a C++ exception across the C ABI: " +
                           json_fields::printable(e.what(), 300));
  } catch (...) {
    throw SubjectError(SubjectError::Kind::internal,
                       subject + " " + op + ": the plugin threw an exception across the C ABI");
  }
  err[sizeof err - 1] = '\0';
  throw_on_error(rc, subject, op, err);
}

}  // namespace

AbiSubject::AbiSubject(const ac_subject& s, std::string origin, std::shared_ptr<void> keep_alive)
    : subject_(s),
      name_(s.name ? s.name : ""),
      description_(s.description ? s.description : ""),
      origin_(std::move(origin)),
      keep_alive_(std::move(keep_alive)) {}

std::string AbiSubject::backend() const { return subject_.caps.memory == AC_MEMORY_CUDA ? "cuda" : "host"; }

MergeOutput AbiSubject::merge(const MergeInput& in) {
  if (!has_op(AC_OP_MERGE) || !subject_.merge)
    throw SubjectError(SubjectError::Kind::unsupported, name_ + " has no merge");
  const ac_memory mem = subject_.caps.memory;
  const int64_t tokens = in.num_tokens, heads = in.num_heads;
  const size_t n_out = size_t(tokens * heads * in.head_size), n_lse = size_t(tokens * heads);
  require_tensor_size("prefix_out", in.prefix_out.size(), n_out);
  require_tensor_size("suffix_out", in.suffix_out.size(), n_out);
  require_tensor_size("prefix_lse", in.prefix_lse.size(), n_lse);
  require_tensor_size("suffix_lse", in.suffix_lse.size(), n_lse);
  const ac_lse_layout layout = subject_.caps.lse_layout;

  Staging st(mem);
  const size_t prefix = st.add(pack(in.dtype, in.prefix_out)), suffix = st.add(pack(in.dtype, in.suffix_out));
  const size_t prefix_lse = st.add(as_bytes(to_layout(in.prefix_lse, layout, tokens, heads)));
  const size_t suffix_lse = st.add(as_bytes(to_layout(in.suffix_lse, layout, tokens, heads)));
  const size_t out = st.add(poisoned(in.dtype, n_out)), out_lse = st.add(as_bytes(poisoned_lse(n_lse)));
  st.upload();

  const LseStrides ls = lse_strides(layout, tokens, heads);
  ac_merge_args a{};
  a.dtype = in.dtype;
  a.num_tokens = in.num_tokens;
  a.num_heads = in.num_heads;
  a.head_size = in.head_size;
  a.out = st.get(out);
  a.out_stride_token = heads * in.head_size;
  a.out_stride_head = in.head_size;
  a.out_lse = static_cast<float*>(st.get(out_lse));
  a.prefix_out = st.get(prefix);
  a.prefix_stride_token = a.out_stride_token;
  a.prefix_stride_head = a.out_stride_head;
  a.prefix_lse = static_cast<const float*>(st.get(prefix_lse));
  a.suffix_out = st.get(suffix);
  a.suffix_stride_token = a.out_stride_token;
  a.suffix_stride_head = a.out_stride_head;
  a.suffix_lse = static_cast<const float*>(st.get(suffix_lse));
  a.lse_stride_token = ls.token;
  a.lse_stride_head = ls.head;
  a.stream = nullptr;

  if (before_call_) before_call_();
  call_plugin(name_, "merge",
              [&](char* err, size_t len) { return subject_.merge(subject_.self, &a, err, len); });
  sync_device(mem);

  st.download(out);
  MergeOutput result;
  result.out = unpack(in.dtype, st.read(out));
  const auto lse_bytes = st.read(out_lse);
  std::vector<float> stored(n_lse);
  if (n_lse) std::memcpy(stored.data(), lse_bytes.data(), n_lse * 4);
  result.lse = from_layout(stored, layout, tokens, heads);
  return result;
}

SoftmaxOutput AbiSubject::softmax(const SoftmaxInput& in) {
  if (!has_op(AC_OP_SOFTMAX) || !subject_.softmax)
    throw SubjectError(SubjectError::Kind::unsupported, name_ + " has no softmax");
  const ac_memory mem = subject_.caps.memory;
  const size_t n = size_t(int64_t(in.rows) * in.cols);
  require_tensor_size("x", in.x.size(), n);
  Staging st(mem);
  const size_t x = st.add(pack(in.dtype, in.x)), y = st.add(poisoned(in.dtype, n));
  st.upload();
  ac_softmax_args a{};
  a.dtype = in.dtype;
  a.rows = in.rows;
  a.cols = in.cols;
  a.x = st.get(x);
  a.y = st.get(y);
  a.row_stride = in.cols;
  a.stream = nullptr;
  if (before_call_) before_call_();
  call_plugin(name_, "softmax",
              [&](char* err, size_t len) { return subject_.softmax(subject_.self, &a, err, len); });
  sync_device(mem);
  st.download(y);
  return SoftmaxOutput{unpack(in.dtype, st.read(y))};
}

AttentionOutput AbiSubject::attention(const AttentionInput& in, const AttentionOptions& opt) {
  if (!(has_op(AC_OP_ATTENTION) || has_op(AC_OP_SPLITKV)) || !subject_.attention)
    throw SubjectError(SubjectError::Kind::unsupported, name_ + " has no attention");
  if (in.seqlens_q.size() != in.seqlens_k.size())
    throw SubjectError(SubjectError::Kind::internal, "seqlens_q and seqlens_k differ in length");
  const ac_memory mem = subject_.caps.memory;
  const int32_t num_seqs = int32_t(in.seqlens_q.size());
  std::vector<int32_t> cu_q(size_t(num_seqs) + 1, 0), cu_k(size_t(num_seqs) + 1, 0);
  std::vector<int64_t> cu_mask(size_t(num_seqs) + 1, 0);
  int32_t max_q = 0, max_k = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    cu_q[size_t(s) + 1] = cu_q[size_t(s)] + in.seqlens_q[size_t(s)];
    cu_k[size_t(s) + 1] = cu_k[size_t(s)] + in.seqlens_k[size_t(s)];
    cu_mask[size_t(s) + 1] = cu_mask[size_t(s)] + int64_t(in.seqlens_q[size_t(s)]) * in.seqlens_k[size_t(s)];
    max_q = std::max(max_q, in.seqlens_q[size_t(s)]);
    max_k = std::max(max_k, in.seqlens_k[size_t(s)]);
  }
  const int64_t total_q = cu_q.back(), total_k = cu_k.back();
  const size_t n_q = size_t(total_q * in.num_heads * in.head_size);
  const size_t n_kv = size_t(total_k * in.num_kv_heads * in.head_size);
  require_tensor_size("q", in.q.size(), n_q);
  require_tensor_size("k", in.k.size(), n_kv);
  require_tensor_size("v", in.v.size(), n_kv);
  const bool has_mask = !in.mask.empty();
  if (has_mask) require_tensor_size("mask", in.mask.size(), size_t(cu_mask.back()));
  const bool wants_lse = (subject_.caps.features & AC_FEAT_LSE) != 0;
  const size_t n_lse = size_t(total_q * in.num_heads);
  const ac_lse_layout layout = subject_.caps.lse_layout;

  Staging st(mem);
  const size_t q = st.add(pack(in.dtype, in.q)), k = st.add(pack(in.dtype, in.k)),
               v = st.add(pack(in.dtype, in.v));
  const size_t cu_q_s = st.add(as_bytes(cu_q)), cu_k_s = st.add(as_bytes(cu_k));
  const size_t mask = st.add(as_bytes(in.mask)), cu_mask_s = st.add(as_bytes(cu_mask));
  const size_t out = st.add(poisoned(in.dtype, n_q)),
               lse = st.add(as_bytes(poisoned_lse(wants_lse ? n_lse : 0)));
  st.upload();

  ac_attention_args a{};
  a.dtype = in.dtype;
  a.num_seqs = num_seqs;
  a.cu_seqlens_q = static_cast<const int32_t*>(st.get(cu_q_s));
  a.cu_seqlens_k = static_cast<const int32_t*>(st.get(cu_k_s));
  a.cu_seqlens_q_host = cu_q.data();
  a.cu_seqlens_k_host = cu_k.data();
  a.max_seqlen_q = max_q;
  a.max_seqlen_k = max_k;
  a.num_heads = in.num_heads;
  a.num_kv_heads = in.num_kv_heads;
  a.head_size = in.head_size;
  a.q = st.get(q);
  a.k = st.get(k);
  a.v = st.get(v);
  a.out = st.get(out);
  a.lse = wants_lse ? static_cast<float*>(st.get(lse)) : nullptr;
  a.softmax_scale = in.softmax_scale;
  a.causal = in.causal ? 1 : 0;
  a.mask = has_mask ? static_cast<const uint8_t*>(st.get(mask)) : nullptr;
  a.cu_mask = has_mask ? static_cast<const int64_t*>(st.get(cu_mask_s)) : nullptr;
  a.cu_mask_host = has_mask ? cu_mask.data() : nullptr;
  a.tiling = subject_.caps.num_tilings > 0 ? opt.tiling : -1;  // -1: the subject declares no tilings
  a.num_splits = opt.num_splits;
  a.fold_order = opt.fold_order;
  a.stream = nullptr;

  if (before_call_) before_call_();
  call_plugin(name_, "attention",
              [&](char* err, size_t len) { return subject_.attention(subject_.self, &a, err, len); });
  sync_device(mem);

  st.download(out);
  AttentionOutput result;
  result.out = unpack(in.dtype, st.read(out));
  if (wants_lse) {
    const auto bytes = st.read(lse);
    std::vector<float> stored(n_lse);
    if (n_lse) std::memcpy(stored.data(), bytes.data(), n_lse * 4);
    result.lse = from_layout(stored, layout, total_q, in.num_heads);
  }
  return result;
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

std::vector<std::unique_ptr<Subject>> adapt_subjects(const std::vector<ac_subject>& subjects,
                                                     const std::string& origin,
                                                     std::shared_ptr<void> keep_alive) {
  std::vector<std::unique_ptr<Subject>> out;
  out.reserve(subjects.size());
  for (const ac_subject& s : subjects) out.push_back(std::make_unique<AbiSubject>(s, origin, keep_alive));
  return out;
}

}  // namespace attncheck
