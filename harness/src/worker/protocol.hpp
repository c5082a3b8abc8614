// The worker protocol, versions 1 to 4 (harness/WORKER_PROTOCOL.md is its one description): the
// vocabulary shared by the harness side (WorkerSubject) and attncheck's own C++ worker
// (attncheck-isolate). Messages are single lines of JSON; tensors travel through a shared-memory
// arena, never through the pipe, so a 4096 x 32 x 128 merge costs one copy in and one copy out.
//
// Capabilities are written with names rather than bits ("merge", "fp16", "heads_tokens", "causal")
// so a worker in any language can declare them without this header; caps_from_json turns them
// back into an ac_caps and rejects unknown words with one line naming the field.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/plugin_abi.h"
#include "attncheck/subject.hpp"

namespace attncheck::worker {

// The newest version this side speaks (the hello request names it) and the oldest it accepts in
// a reply. Version 2 adds subject fields (refuses_zero_keys, flushes_subnormals, empty_lse
// "undefined", no tilings); a version-1 reply is read without them. Version 3 has every reply echo
// its request's "seq", so that a reply sent twice is never read as the next call's. Version 4
// carries the engines' variants: subject fields variants, page_sizes and head_pairs, and the
// attention requests' variant fields (ABI version 3's ac_caps and ac_attention_args).
constexpr int kProtocolVersion = 4;
// The C ABI version whose validation a worker's declarations get: protocol 3 changed only the
// messages, not what a subject may declare; protocol 4 declares what ABI version 3 does.
constexpr uint32_t abi_version_of_protocol(int protocol) {
  return protocol >= 4 ? 3u : protocol >= 2 ? 2u : 1u;
}
// The reply to `request` with its sequence number: every worker of this attncheck answers so.
nlohmann::json with_seq(const nlohmann::json& request, nlohmann::json reply);
constexpr int kMinProtocolVersion = 1;
// The worker finds the arena at this file descriptor (a memfd the harness creates and grows).
constexpr int kArenaFd = 3;
// Every tensor in the arena starts at a multiple of this many bytes (vector loads, cache lines).
constexpr size_t kArenaAlign = 256;

// The device server's handover (serve.hpp): one byte on a Unix socket carrying a file descriptor
// (SCM_RIGHTS), the client's arena. send_fd is false and receive_fd -1 when it fails; the
// received descriptor is close-on-exec.
bool send_fd(int socket, int fd);
int receive_fd(int socket);

// A message that breaks the protocol: bad JSON, a missing field, an unknown word. One line.
struct ProtocolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An ac_caps that owns its arrays (head sizes, tilings, page sizes, head pairs), as the handshake
// delivers them.
struct DeclaredSubject {
  std::string name, description;
  ac_caps caps{};
  std::vector<int32_t> head_sizes;
  std::vector<ac_tiling> tilings;
  std::vector<int32_t> page_sizes;
  std::vector<ac_head_pair> head_pairs;

  DeclaredSubject() = default;
  DeclaredSubject(const DeclaredSubject& o) { *this = o; }
  DeclaredSubject& operator=(const DeclaredSubject& o);  // re-points caps at the own arrays
};

// Written as protocol kProtocolVersion.
nlohmann::json caps_to_json(const std::string& name, const std::string& description, const ac_caps& caps);
// Read as `protocol` says: a version-2 field in a version-1 reply, or a version-4 field (variants,
// page_sizes, head_pairs) in an older one, is refused rather than ignored, since dropping a
// declared contract would judge the subject by the wrong rules.
DeclaredSubject caps_from_json(const nlohmann::json& j, int protocol = kProtocolVersion);  // ProtocolError

const char* layout_word(ac_lse_layout);
ac_fold fold_from_word(const std::string&);
ac_dtype dtype_from_word(const std::string&);

// One tensor's place in the arena and its shape, as a request or reply names it.
struct TensorRef {
  std::string dtype;                    // "fp32" | "fp16" | "bf16" | "u8" | "i32"
  std::vector<int64_t> shape, strides;  // strides in elements, row-major contiguous
  size_t offset = 0, bytes = 0;
};
nlohmann::json tensor_json(const TensorRef&);
TensorRef tensor_from_json(const nlohmann::json&, const char* what);

// Arena layout helper: hands out aligned, non-overlapping byte ranges.
class Layout {
 public:
  TensorRef add(const std::string& dtype, std::vector<int64_t> shape);
  size_t size() const { return end_; }

 private:
  size_t end_ = 0;
};

// Tensor bytes in the arena <-> the harness's bit tensors (one uint32 per element) and logical
// [tokens, heads] LSEs (the arena holds them in the subject's declared layout).
void put_bits(unsigned char* base, const TensorRef& t, ac_dtype d, const Bits& bits);
void fill_bits(unsigned char* base, const TensorRef& t, ac_dtype d, uint32_t pattern, size_t n);
Bits get_bits(const unsigned char* base, const TensorRef& t, ac_dtype d, size_t n);
void put_lse(unsigned char* base, const TensorRef& t, ac_lse_layout layout, const std::vector<float>& logical,
             int64_t tokens, int64_t heads);
std::vector<float> get_lse(const unsigned char* base, const TensorRef& t, ac_lse_layout layout,
                           int64_t tokens, int64_t heads);
std::vector<int64_t> lse_shape(ac_lse_layout layout, int64_t tokens, int64_t heads);

}  // namespace attncheck::worker
