// Capability words and arena layout of the worker protocol (see protocol.hpp and
// harness/WORKER_PROTOCOL.md). Each rejection names the field and the word it did not know.
#include "protocol.hpp"

#include <sys/socket.h>

#include <climits>
#include <cstring>
#include <span>
#include <utility>

#include "attncheck/names.hpp"
#include "attncheck/staging.hpp"

namespace attncheck::worker {

using nlohmann::json;

namespace {

// An ac_caps bit set in words: its names.hpp table, how a member is a bit of the set, and the
// names listed for a message.
template <class T>
struct WordSet {
  std::span<const Spelling<T>> table;
  uint32_t (*bit)(T);
  std::string (*names)();
};
const WordSet<uint32_t> kOps{op_spellings(), [](uint32_t op) { return op; }, op_names};
const WordSet<ac_dtype> kDtypes{dtype_spellings(), [](ac_dtype d) { return AC_DTYPE_BIT(d); }, dtype_names};
const WordSet<uint32_t> kFeatures{feature_spellings(), [](uint32_t f) { return f; }, feature_names};
const WordSet<ac_fold> kFolds{fold_spellings(), [](ac_fold f) { return AC_FOLD_BIT(f); }, fold_names};
const WordSet<uint32_t> kVariants{variant_spellings(), [](uint32_t v) { return v; }, variant_names};
const WordSet<ac_dtype> kKvDtypes{kv_dtype_spellings(), [](ac_dtype d) { return AC_DTYPE_BIT(d); },
                                  kv_dtype_names};
const WordSet<uint32_t> kFp8{fp8_spellings(), [](uint32_t f) { return f; }, fp8_names};

template <class T>
json words_of(uint32_t bits, const WordSet<T>& set) {
  json a = json::array();
  for (const auto& [value, name] : set.table)
    if (bits & set.bit(value)) a.push_back(name);
  return a;
}

template <class T>
uint32_t bits_of(const json& j, const char* field, const WordSet<T>& set) {
  if (!j.is_array()) throw ProtocolError(std::string("'") + field + "' must be a list of words");
  uint32_t bits = 0;
  for (const json& w : j) {
    if (!w.is_string()) throw ProtocolError(std::string("'") + field + "' holds a non-string");
    bool known = false;
    for (const auto& [value, name] : set.table)
      if (w.get<std::string>() == name) {
        bits |= set.bit(value);
        known = true;
      }
    if (!known)
      throw ProtocolError(std::string("unknown word '") + w.get<std::string>() + "' in '" + field +
                          "' (known: " + set.names() + ")");
  }
  return bits;
}

const json& need(const json& j, const char* field) {
  if (!j.is_object() || !j.contains(field)) throw ProtocolError(std::string("missing field '") + field + "'");
  return j.at(field);
}

// A declared number, as the int32_t of ac_caps: one outside int32_t is refused rather than
// wrapped (2^32 + 64 would read as 64), so that validate_subject's ranges see the value declared.
int32_t as_int32(const json& v, const std::string& field) {
  if (!v.is_number_integer()) throw ProtocolError("'" + field + "' must be an integer");
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT32_MAX)
                                           : v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX;
  if (!fits) throw ProtocolError("'" + field + "' " + v.dump() + " is out of range (a 32-bit integer)");
  return int32_t(v.get<int64_t>());
}

int32_t need_int32(const json& j, const char* field) { return as_int32(need(j, field), field); }

std::string need_string(const json& j, const char* field) {
  const json& v = need(j, field);
  if (!v.is_string()) throw ProtocolError(std::string("'") + field + "' must be a string");
  return v.get<std::string>();
}

}  // namespace

DeclaredSubject& DeclaredSubject::operator=(const DeclaredSubject& o) {
  if (this == &o) return *this;
  name = o.name;
  description = o.description;
  caps = o.caps;
  head_sizes = o.head_sizes;
  tilings = o.tilings;
  page_sizes = o.page_sizes;
  head_pairs = o.head_pairs;
  caps.head_sizes = head_sizes.empty() ? nullptr : head_sizes.data();
  caps.num_head_sizes = int32_t(head_sizes.size());
  caps.tilings = tilings.empty() ? nullptr : tilings.data();
  caps.num_tilings = int32_t(tilings.size());
  caps.page_sizes = page_sizes.empty() ? nullptr : page_sizes.data();
  caps.num_page_sizes = int32_t(page_sizes.size());
  caps.head_pairs = head_pairs.empty() ? nullptr : head_pairs.data();
  caps.num_head_pairs = int32_t(head_pairs.size());
  return *this;
}

const char* layout_word(ac_lse_layout l) {
  return l == AC_LSE_TOKENS_HEADS ? "tokens_heads" : "heads_tokens";
}
ac_fold fold_from_word(const std::string& w) {
  if (const auto f = fold_from(w)) return *f;
  throw ProtocolError("unknown fold order '" + w + "'");
}
ac_dtype dtype_from_word(const std::string& w) {
  if (const auto d = dtype_from(w)) return *d;
  throw ProtocolError("unknown dtype '" + w + "'");
}

json caps_to_json(const std::string& name, const std::string& description, const ac_caps& c) {
  json j;
  j["name"] = name;
  j["description"] = description;
  j["ops"] = words_of(c.ops, kOps);
  j["dtypes"] = words_of(c.dtypes, kDtypes);
  j["memory"] = c.memory == AC_MEMORY_CUDA ? "cuda" : "host";
  if (c.head_sizes) {
    j["head_sizes"] = std::vector<int32_t>(c.head_sizes, c.head_sizes + c.num_head_sizes);
  } else {
    j["head_size_min"] = c.head_size_min;
    j["head_size_max"] = c.head_size_max;
  }
  j["lse_base"] = c.lse_base == 2 ? "2" : "e";
  j["lse_layout"] = layout_word(c.lse_layout);
  j["empty_lse"] = (c.flags & AC_CAP_EMPTY_LSE_UNDEFINED) ? "undefined"
                   : c.empty_lse_sign > 0                 ? "+inf"
                                                          : "-inf";
  for (const auto& [bit, field] : flag_field_spellings()) j[field] = (c.flags & bit) != 0;
  j["features"] = words_of(c.features, kFeatures);
  json t = json::array();
  for (int32_t i = 0; c.tilings && i < c.num_tilings; ++i) t.push_back({c.tilings[i].br, c.tilings[i].bc});
  j["tilings"] = t;
  j["max_splits"] = c.max_splits;
  j["fold_orders"] = words_of(c.fold_orders, kFolds);
  // Version 4, written only where declared: a subject without variants reads as it did in version 3.
  if (c.variants) j["variants"] = words_of(c.variants, kVariants);
  if (c.page_sizes && c.num_page_sizes > 0)
    j["page_sizes"] = std::vector<int32_t>(c.page_sizes, c.page_sizes + c.num_page_sizes);
  if (c.head_pairs && c.num_head_pairs > 0) {
    json p = json::array();
    for (int32_t i = 0; i < c.num_head_pairs; ++i) p.push_back({c.head_pairs[i].qk, c.head_pairs[i].v});
    j["head_pairs"] = p;
  }
  if (c.max_call_seqs > 0) j["max_call_seqs"] = c.max_call_seqs;
  if (c.max_call_tokens > 0) j["max_call_tokens"] = c.max_call_tokens;
  if (c.max_call_keys > 0) j["max_call_keys"] = c.max_call_keys;
  if (c.kv_dtypes) j["kv_dtypes"] = words_of(c.kv_dtypes, kKvDtypes);
  if (c.fp8) j["fp8"] = words_of(c.fp8, kFp8);
  return j;
}

namespace {
bool need_bool(const json& j, const char* field, int protocol) {
  if (!j.contains(field)) return false;
  if (protocol < 2)
    throw ProtocolError(std::string("'") + field + "' needs protocol 2 (the worker answered protocol " +
                        std::to_string(protocol) + ")");
  if (!j[field].is_boolean()) throw ProtocolError(std::string("'") + field + "' must be true or false");
  return j[field].get<bool>();
}

// A version-4 field: refused in an older reply where it declares anything (an empty list declares
// nothing, and a version-3 reader ignored it).
bool has_v4_field(const json& j, const char* field, int protocol) {
  if (!j.contains(field)) return false;
  const json& v = j[field];
  if (protocol < 4 && !(v.is_array() && v.empty()))
    throw ProtocolError(std::string("'") + field + "' needs protocol 4 (the worker answered protocol " +
                        std::to_string(protocol) + ")");
  return true;
}

// A declared size list entry: an integer in lo..hi, refused with the field and the entry's place.
int32_t size_in(const json& v, const std::string& field, int32_t lo, int32_t hi) {
  const int32_t n = as_int32(v, field);
  if (n < lo || n > hi)
    throw ProtocolError("'" + field + "' " + std::to_string(n) + " is out of range " + std::to_string(lo) +
                        ".." + std::to_string(hi));
  return n;
}
}  // namespace

DeclaredSubject caps_from_json(const json& j, int protocol) {
  DeclaredSubject s;
  s.name = need_string(j, "name");
  s.description =
      j.contains("description") && j["description"].is_string() ? j["description"].get<std::string>() : "";
  ac_caps& c = s.caps;
  c.ops = bits_of(need(j, "ops"), "ops", kOps);
  if ((c.ops & AC_OP_QUANTIZE) && protocol < 4)
    throw ProtocolError("'ops' holds \"quantize\", which needs protocol 4 (the worker answered protocol " +
                        std::to_string(protocol) + ")");
  c.dtypes = bits_of(need(j, "dtypes"), "dtypes", kDtypes);
  const std::string mem = need_string(j, "memory");
  if (mem != "host" && mem != "cuda")
    throw ProtocolError("'memory' must be \"host\" or \"cuda\", not '" + mem + "'");
  c.memory = mem == "cuda" ? AC_MEMORY_CUDA : AC_MEMORY_HOST;
  if (j.contains("head_sizes")) {
    const json& hs = j["head_sizes"];
    if (!hs.is_array() || hs.empty())
      throw ProtocolError("'head_sizes' must be a non-empty list of integers");
    // More entries than any valid declaration holds are refused before they are copied.
    if (hs.size() > AC_MAX_HEAD_SIZES)
      throw ProtocolError("'head_sizes' holds " + std::to_string(hs.size()) + " sizes, more than " +
                          std::to_string(AC_MAX_HEAD_SIZES));
    for (const json& h : hs) {
      if (!h.is_number_integer()) throw ProtocolError("'head_sizes' holds a non-integer");
      s.head_sizes.push_back(as_int32(h, "head_sizes"));
    }
  } else {
    c.head_size_min = need_int32(j, "head_size_min");
    c.head_size_max = need_int32(j, "head_size_max");
  }
  const std::string base = j.contains("lse_base") ? need_string(j, "lse_base") : "e";
  if (base != "e" && base != "2")
    throw ProtocolError("'lse_base' must be \"e\" or \"2\", not '" + base + "'");
  c.lse_base = base == "2" ? 2 : 0;
  const std::string layout = j.contains("lse_layout") ? need_string(j, "lse_layout") : "heads_tokens";
  if (layout != "heads_tokens" && layout != "tokens_heads")
    throw ProtocolError("'lse_layout' must be \"heads_tokens\" or \"tokens_heads\", not '" + layout + "'");
  c.lse_layout = layout == "tokens_heads" ? AC_LSE_TOKENS_HEADS : AC_LSE_HEADS_TOKENS;
  const std::string empty = j.contains("empty_lse") ? need_string(j, "empty_lse") : "-inf";
  if (empty == "undefined" && protocol < 2)
    throw ProtocolError("'empty_lse' \"undefined\" needs protocol 2 (the worker answered protocol " +
                        std::to_string(protocol) + ")");
  if (empty != "-inf" && empty != "+inf" && empty != "undefined")
    throw ProtocolError("'empty_lse' must be \"-inf\", \"+inf\" or \"undefined\", not '" + empty + "'");
  c.empty_lse_sign = empty == "+inf" ? 1 : empty == "undefined" ? 0 : -1;
  if (empty == "undefined") c.flags |= AC_CAP_EMPTY_LSE_UNDEFINED;
  for (const auto& [bit, field] : flag_field_spellings())
    if (need_bool(j, field, protocol)) c.flags |= bit;
  c.features = j.contains("features") ? bits_of(j["features"], "features", kFeatures) : 0;
  if (j.contains("tilings")) {
    const json& t = j["tilings"];
    if (!t.is_array()) throw ProtocolError("'tilings' must be a list of [br, bc] pairs");
    if (t.size() > AC_MAX_TILINGS)
      throw ProtocolError("'tilings' holds " + std::to_string(t.size()) + " tilings, more than " +
                          std::to_string(AC_MAX_TILINGS));
    for (const json& p : t) {
      if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer())
        throw ProtocolError("'tilings' entries must be [br, bc] integer pairs");
      s.tilings.push_back({as_int32(p[0], "tilings"), as_int32(p[1], "tilings")});
    }
  }
  c.max_splits = j.contains("max_splits") ? need_int32(j, "max_splits") : 0;
  c.fold_orders = j.contains("fold_orders") ? bits_of(j["fold_orders"], "fold_orders", kFolds) : 0;
  // Version 4: the variants. The lists are bounded before they are copied and every entry is
  // checked here, so that a bad size is named by its protocol field; whether the lists fit the
  // variants declared is validate_subject's check, as for a plugin.
  if (has_v4_field(j, "variants", protocol)) c.variants = bits_of(j["variants"], "variants", kVariants);
  if (has_v4_field(j, "page_sizes", protocol)) {
    const json& p = j["page_sizes"];
    if (!p.is_array()) throw ProtocolError("'page_sizes' must be a list of integers");
    if (p.size() > AC_MAX_PAGE_SIZES)
      throw ProtocolError("'page_sizes' holds " + std::to_string(p.size()) + " sizes, more than " +
                          std::to_string(AC_MAX_PAGE_SIZES));
    for (size_t i = 0; i < p.size(); ++i)
      s.page_sizes.push_back(size_in(p[i], "page_sizes[" + std::to_string(i) + "]", 1, AC_MAX_PAGE_SIZE));
  }
  if (has_v4_field(j, "head_pairs", protocol)) {
    const json& p = j["head_pairs"];
    if (!p.is_array()) throw ProtocolError("'head_pairs' must be a list of [qk, v] pairs");
    if (p.size() > AC_MAX_HEAD_PAIRS)
      throw ProtocolError("'head_pairs' holds " + std::to_string(p.size()) + " pairs, more than " +
                          std::to_string(AC_MAX_HEAD_PAIRS));
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string field = "head_pairs[" + std::to_string(i) + "]";
      if (!p[i].is_array() || p[i].size() != 2)
        throw ProtocolError("'" + field + "' must be a [qk, v] pair of integers");
      s.head_pairs.push_back(
          {size_in(p[i][0], field, 1, AC_MAX_HEAD_SIZE), size_in(p[i][1], field, 1, AC_MAX_HEAD_SIZE)});
    }
  }
  // Version 4: the call limits, 0 (or absent) for none.
  if (has_v4_field(j, "max_call_seqs", protocol))
    c.max_call_seqs = size_in(j["max_call_seqs"], "max_call_seqs", 0, INT32_MAX);
  if (has_v4_field(j, "max_call_tokens", protocol))
    c.max_call_tokens = size_in(j["max_call_tokens"], "max_call_tokens", 0, INT32_MAX);
  if (has_v4_field(j, "max_call_keys", protocol)) {
    const json& v = j["max_call_keys"];
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) ||
        v.get<int64_t>() < 0)
      throw ProtocolError("'max_call_keys' must be an integer from 0 (no limit) to 2^63 - 1");
    c.max_call_keys = v.get<int64_t>();
  }
  // Version 4: an FP8 KV cache (the formats, and descales per KV head); whether they fit the ops
  // is validate_subject's check, as for a plugin.
  if (has_v4_field(j, "kv_dtypes", protocol)) c.kv_dtypes = bits_of(j["kv_dtypes"], "kv_dtypes", kKvDtypes);
  if (has_v4_field(j, "fp8", protocol)) c.fp8 = bits_of(j["fp8"], "fp8", kFp8);
  s = DeclaredSubject(s);  // points caps at the own arrays
  return s;
}

json with_seq(const json& request, json reply) {
  if (request.is_object() && request.contains("seq")) reply["seq"] = request["seq"];
  return reply;
}

json tensor_json(const TensorRef& t) {
  return {{"dtype", t.dtype},
          {"shape", t.shape},
          {"strides", t.strides},
          {"offset", t.offset},
          {"bytes", t.bytes}};
}

TensorRef tensor_from_json(const json& j, const char* what) {
  try {
    TensorRef t;
    t.dtype = j.at("dtype").get<std::string>();
    t.shape = j.at("shape").get<std::vector<int64_t>>();
    t.strides = j.at("strides").get<std::vector<int64_t>>();
    t.offset = j.at("offset").get<size_t>();
    t.bytes = j.at("bytes").get<size_t>();
    return t;
  } catch (const json::exception&) {
    throw ProtocolError(std::string("tensor '") + what +
                        "' is not a {dtype, shape, strides, offset, bytes} object");
  }
}

TensorRef Layout::add(const std::string& dtype, std::vector<int64_t> shape) {
  TensorRef t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.strides.assign(t.shape.size(), 1);
  for (size_t i = t.shape.size(); i-- > 1;) t.strides[i - 1] = t.strides[i] * t.shape[i];
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  const size_t es = dtype == "fp32" || dtype == "i32"                   ? 4
                    : dtype == "u8" || kv_dtype_from(dtype).has_value() ? 1
                    : dtype == "i64"                                    ? 8
                                                                        : 2;
  t.bytes = size_t(n) * es;
  t.offset = end_;
  end_ += (t.bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  return t;
}

// Fills n elements of the arena at `t` from bit patterns (one uint32 per element).
void put_bits(unsigned char* base, const TensorRef& t, ac_dtype d, const Bits& bits) {
  unsigned char* p = base + t.offset;
  if (d == AC_DTYPE_F32) {
    if (!bits.empty()) std::memcpy(p, bits.data(), bits.size() * 4);
    return;
  }
  if (dtype_bytes(d) == 1) {  // FP8 codes
    for (size_t i = 0; i < bits.size(); ++i) p[i] = static_cast<unsigned char>(bits[i]);
    return;
  }
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint16_t h = uint16_t(bits[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}
// Written in place: a temporary Bits of the pattern would be a fresh allocation per call, whose
// page faults cost more than the fill (reserve_bits says why).
void fill_bits(unsigned char* base, const TensorRef& t, ac_dtype d, uint32_t pattern, size_t n) {
  unsigned char* p = base + t.offset;
  if (d == AC_DTYPE_F32) {
    for (size_t i = 0; i < n; ++i) std::memcpy(p + 4 * i, &pattern, 4);
    return;
  }
  if (dtype_bytes(d) == 1) {  // FP8 codes (a quantiser's, a merge's output)
    std::memset(p, int(pattern & 0xffu), n);
    return;
  }
  const uint16_t h = uint16_t(pattern);
  for (size_t i = 0; i < n; ++i) std::memcpy(p + 2 * i, &h, 2);
}
Bits get_bits(const unsigned char* base, const TensorRef& t, ac_dtype d, size_t n) {
  Bits out = reserve_bits(n);
  const unsigned char* p = base + t.offset;
  // Appended rather than resized and overwritten: one pass over the fresh pages, not two.
  if (d == AC_DTYPE_F32) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(p);  // offsets are kArenaAlign-aligned
    out.insert(out.end(), w, w + n);
    return out;
  }
  if (dtype_bytes(d) == 1) {  // FP8 codes
    out.insert(out.end(), p, p + n);
    return out;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    out.push_back(h);
  }
  return out;
}

// LSE [tokens, heads] logical <-> the declared layout, in the arena.
void put_lse(unsigned char* base, const TensorRef& t, ac_lse_layout layout, const std::vector<float>& logical,
             int64_t tokens, int64_t heads) {
  float* p = reinterpret_cast<float*>(base + t.offset);
  for (int64_t tk = 0; tk < tokens; ++tk)
    for (int64_t h = 0; h < heads; ++h)
      p[layout == AC_LSE_TOKENS_HEADS ? tk * heads + h : h * tokens + tk] = logical[size_t(tk * heads + h)];
}
std::vector<float> get_lse(const unsigned char* base, const TensorRef& t, ac_lse_layout layout,
                           int64_t tokens, int64_t heads) {
  const float* p = reinterpret_cast<const float*>(base + t.offset);
  std::vector<float> out(size_t(tokens * heads));
  for (int64_t tk = 0; tk < tokens; ++tk)
    for (int64_t h = 0; h < heads; ++h)
      out[size_t(tk * heads + h)] = p[layout == AC_LSE_TOKENS_HEADS ? tk * heads + h : h * tokens + tk];
  return out;
}
std::vector<int64_t> lse_shape(ac_lse_layout layout, int64_t tokens, int64_t heads) {
  return layout == AC_LSE_TOKENS_HEADS ? std::vector<int64_t>{tokens, heads}
                                       : std::vector<int64_t>{heads, tokens};
}

namespace {
// One byte and room for one descriptor: what send_fd writes and receive_fd reads.
struct FdMessage {
  char byte = 'A';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};
}  // namespace

bool send_fd(int socket, int fd) {
  FdMessage m;
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return ::sendmsg(socket, &m.msg, MSG_NOSIGNAL) == 1;
}

int receive_fd(int socket) {
  FdMessage m;
  if (::recvmsg(socket, &m.msg, MSG_CMSG_CLOEXEC) != 1) return -1;
  int fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m.msg); c; c = CMSG_NXTHDR(&m.msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

}  // namespace attncheck::worker
