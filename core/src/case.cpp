// The case file format (corpus/README.md): JSON, tensors as little-endian bytes of their storage
// format in hex ("hex:...") or base64 ("b64:..."), every float that may be non-finite (LSEs, the
// softmax scale) stored by its fp32 bits. Reading validates everything against the shapes and
// reports the first problem as a one-line CaseError; nothing here trusts the file.
#include "attncheck/case.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "attncheck/atomic_file.hpp"
#include "attncheck/case_context.hpp"
#include "attncheck/hash.hpp"
#include "attncheck/json_fields.hpp"
#include "attncheck/names.hpp"

namespace attncheck {
namespace {

using json = nlohmann::json;
constexpr int kFormatVersion = 1;
constexpr size_t kHexMaxElements = 64;

const char* kB64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// A float as a case-file error quotes it: %g keeps a tiny or huge scale readable (2e-39, 1e+37).
std::string quoted_float(float x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", double(x));
  return b;
}
// "" or why p is not a p_scale (plugin_abi.h: AC_MIN_P_SCALE .. AC_MAX_P_SCALE).
std::string p_scale_problem(float p) {
  if (p >= AC_MIN_P_SCALE && p <= AC_MAX_P_SCALE) return "";
  return "p_scale " + quoted_float(p) + " is not in [2^-126, " + std::to_string(int(AC_MAX_P_SCALE)) + "]";
}

// Appends to `out` (a prefix already there), written in place: a long-suite layer case carries
// 10^8 bytes.
void base64_encode(const std::vector<uint8_t>& bytes, std::string& out) {
  size_t o = out.size(), i = 0;
  out.resize(o + bytes.size() / 3 * 4);
  for (; i + 2 < bytes.size(); i += 3, o += 4) {
    const uint32_t n = (uint32_t(bytes[i]) << 16) | (uint32_t(bytes[i + 1]) << 8) | bytes[i + 2];
    out[o] = kB64[(n >> 18) & 63];
    out[o + 1] = kB64[(n >> 12) & 63];
    out[o + 2] = kB64[(n >> 6) & 63];
    out[o + 3] = kB64[n & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest) {
    uint32_t n = uint32_t(bytes[i]) << 16;
    if (rest == 2) n |= uint32_t(bytes[i + 1]) << 8;
    out.push_back(kB64[(n >> 18) & 63]);
    out.push_back(kB64[(n >> 12) & 63]);
    out.push_back(rest == 2 ? kB64[(n >> 6) & 63] : '=');
    out.push_back('=');
  }
}

std::vector<uint8_t> base64_decode(std::string_view s, const std::string& what) {
  int value_of[256];
  for (int& v : value_of) v = -1;
  for (int i = 0; i < 64; ++i) value_of[static_cast<unsigned char>(kB64[i])] = i;
  if (s.size() % 4 != 0)
    throw CaseError(what + ": base64 length " + std::to_string(s.size()) +
                    " is not a multiple of 4 (truncated?)");
  std::vector<uint8_t> out;
  out.reserve(s.size() / 4 * 3);
  for (size_t i = 0; i < s.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i + k];
      if (c == '=' && i + 4 == s.size() && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad) throw CaseError(what + ": base64 padding in the middle");
      v[k] = value_of[static_cast<unsigned char>(c)];
      if (v[k] < 0) throw CaseError(what + ": invalid base64 character at offset " + std::to_string(i + k));
    }
    const uint32_t n =
        (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out.push_back(uint8_t(n >> 16));
    if (pad < 2) out.push_back(uint8_t(n >> 8));
    if (pad < 1) out.push_back(uint8_t(n));
  }
  return out;
}

std::string hex_encode(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

std::vector<uint8_t> hex_decode(std::string_view s, const std::string& what) {
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw CaseError(what + ": invalid hex character '" + std::string(1, c) + "'");
  };
  if (s.size() % 2) throw CaseError(what + ": odd number of hex digits (truncated?)");
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(nibble(s[2 * i]) * 16 + nibble(s[2 * i + 1]));
  return out;
}

// Elements of `width` bytes (a uint32_t or uint8_t vector), little-endian, to text.
template <class Elems>
std::string encode_elements(const Elems& elems, int width) {
  std::vector<uint8_t> bytes(elems.size() * size_t(width));
  for (size_t i = 0; i < elems.size(); ++i)
    for (int b = 0; b < width; ++b)
      bytes[i * size_t(width) + size_t(b)] = uint8_t(uint32_t(elems[i]) >> (8 * b));
  if (elems.size() <= kHexMaxElements) return "hex:" + hex_encode(bytes);
  std::string text = "b64:";
  base64_encode(bytes, text);
  return text;
}

std::vector<uint32_t> decode_elements(const std::string& text, int width, const std::string& what) {
  std::vector<uint8_t> bytes;
  if (text.rfind("hex:", 0) == 0)
    bytes = hex_decode(std::string_view(text).substr(4), what);
  else if (text.rfind("b64:", 0) == 0)
    bytes = base64_decode(std::string_view(text).substr(4), what);
  else
    throw CaseError(what + ": tensor text must start with \"hex:\" or \"b64:\"");
  if (bytes.size() % width)
    throw CaseError(what + ": byte count " + std::to_string(bytes.size()) +
                    " is not a multiple of the element size");
  std::vector<uint32_t> out(bytes.size() / width);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t e = 0;
    for (int b = 0; b < width; ++b) e |= uint32_t(bytes[i * width + b]) << (8 * b);
    out[i] = e;
  }
  return out;
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::string encode_floats(const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = float_bits(v[i]);
  return encode_elements(bits, 4);
}
std::vector<float> decode_floats(const std::string& text, const std::string& what) {
  const auto bits = decode_elements(text, 4, what);
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bits_float(bits[i]);
  return out;
}

std::string bits_hex(uint32_t u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", u);
  return buf;
}

// The one JSON field style, with the case file's error type.
const json& field(const json& obj, const char* key, const std::string& where) {
  return json_fields::field<CaseError>(obj, key, where);
}
std::string get_string(const json& obj, const char* key, const std::string& where) {
  return json_fields::get_string<CaseError>(obj, key, where);
}
std::string get_string_or(const json& obj, const char* key, const std::string& where,
                          const std::string& dflt) {
  return json_fields::get_string_or<CaseError>(obj, key, where, dflt);
}
int64_t get_int(const json& obj, const char* key, const std::string& where, int64_t lo, int64_t hi) {
  return json_fields::get_int<CaseError>(obj, key, where, lo, hi);
}
bool get_bool(const json& obj, const char* key, const std::string& where) {
  return json_fields::get_bool<CaseError>(obj, key, where);
}
std::vector<int32_t> get_int_list(const json& obj, const char* key, const std::string& where) {
  const json& f = field(obj, key, where);
  if (!f.is_array()) throw CaseError(where + "." + key + " must be an array of integers");
  std::vector<int32_t> out;
  for (const json& e : f) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > (1 << 30))
      throw CaseError(where + "." + key + " must hold integers in [0, 2^30]");
    out.push_back(int32_t(e.get<int64_t>()));
  }
  return out;
}

// A float stored as its bits, exactly what the writer emits: "0x" and eight hex digits, finite.
float get_float_bits(const json& obj, const char* key, const std::string& where) {
  const std::string text = get_string(obj, key, where);
  const bool hex8 = text.size() == 10 && text.rfind("0x", 0) == 0 &&
                    text.find_first_not_of("0123456789abcdefABCDEF", 2) == std::string::npos;
  const std::string what = where + "." + key + " \"" + json_fields::printable(text) + "\"";
  if (!hex8) throw CaseError(what + " is not 0x and 8 hex digits");
  const float f = bits_float(uint32_t(std::stoul(text.substr(2), nullptr, 16)));
  if (!std::isfinite(f)) throw CaseError(what + " is not a finite float (NaN or infinity)");
  return f;
}

// get_float_bits' writer: `key`_bits (authoritative) and `key`, the value for the reader.
void put_float_bits(json& obj, const std::string& key, float f) {
  obj[key + "_bits"] = bits_hex(float_bits(f));
  obj[key] = double(f);
}
// A field that belongs to another one is refused without it, not left unread (read as absent, it
// would run another case): each of `fields` of the input needs `needs`, which `what` describes.
void refuse_orphans(const json& in, std::initializer_list<const char*> fields, const char* needs,
                    const char* what) {
  for (const char* f : fields)
    if (in.contains(f) && !in.contains(needs))
      throw CaseError("input." + std::string(f) + " without " + needs + " (" + what + ")");
}
// What put_float_bits' decimal copy needs: its bits.
constexpr const char* kDecimalCopy = "the bits are the value; the decimal is for the reader";

// An FP8 output's fields, a merge's or an attention's (AC_FP8_OUT): the format and the scale.
void write_fp8_output(json& in, ac_dtype out_dtype, float output_scale) {
  in["out_dtype"] = kv_dtype_name(out_dtype);
  put_float_bits(in, "output_scale", output_scale);
}
// Reads them where out_dtype is present (else leaves both unchanged); the scale's range is the
// caller's check.
void read_fp8_output(const json& in, const std::string& w, ac_dtype& out_dtype, float& output_scale) {
  refuse_orphans(in, {"output_scale_bits", "output_scale"}, "out_dtype", "an FP8 output's format");
  refuse_orphans(in, {"output_scale"}, "output_scale_bits", kDecimalCopy);
  if (!in.contains("out_dtype")) return;
  const std::string name = get_string(in, "out_dtype", w);
  const auto out = kv_dtype_from(name);
  if (!out)
    throw CaseError("input.out_dtype '" + json_fields::printable(name) + "' is not " + kv_dtype_names());
  out_dtype = *out;
  output_scale = get_float_bits(in, "output_scale_bits", w);
}
int64_t get_int_or(const json& obj, const char* key, const std::string& where, int64_t lo, int64_t hi,
                   int64_t dflt) {
  return json_fields::get_int_or<CaseError>(obj, key, where, lo, hi, dflt);
}

void expect_size(size_t got, int64_t want, const std::string& what) {
  if (int64_t(got) != want)
    throw CaseError(what + " has " + std::to_string(got) + " elements, the shape needs " +
                    std::to_string(want));
}

void check_half_bits(const Bits& b, ac_dtype d, const std::string& what) {
  if (d == AC_DTYPE_F32) return;
  const uint32_t top = dtype_bytes(d) == 1 ? 0xffu : 0xffffu;
  for (uint32_t e : b)
    if (e > top)
      throw CaseError(what + ": " + std::to_string(8 * dtype_bytes(d)) + "-bit element with bits above " +
                      (top == 0xffu ? "0xff" : "0xffff"));
}

// The options' fold order is written as "fold_order", the worker protocol's word for it; files
// written before that say "fold", which is read when "fold_order" is absent.
ac_fold read_fold_order(const json& options) {
  if (options.is_object() && options.contains("fold_order") && options.contains("fold"))
    throw CaseError("options has both fold_order and fold (its older name): give one");
  const char* key = options.is_object() && !options.contains("fold_order") && options.contains("fold")
                        ? "fold"
                        : "fold_order";
  const std::string s = get_string(options, key, "options");
  if (const auto f = fold_from(s)) return *f;
  throw CaseError(std::string("options.") + key + " must be one of " + fold_names() + ", not \"" +
                  json_fields::printable(s) + "\"");
}

constexpr int64_t kMaxDim = int64_t(1) << 24;
constexpr int64_t kMaxElements = int64_t(1) << 28;
// Work a case may declare beyond what its tensors carry, so that a small file cannot ask for
// hours: a softmax row costs a reference row even with no columns (tens of microseconds; generated
// cases have at most 5 rows), and attention scores number sum_i Tq_i Tk_i x heads x head size
// while the file holds only (Tq + Tk) x heads x head size elements. An attention case may declare
// kMaxAttentionWork, or kWorkPerElement times the elements its q, k and v hold if that is more: the
// long suite's layer (8192 queries over 8192 keys, 32 heads over 8, d = 128: 2^38 of work over
// 50 million elements, 5461 each) reads back, and hours of work need a file past the size bound.
constexpr int64_t kMaxSoftmaxRows = int64_t(1) << 16;
constexpr int64_t kMaxAttentionWork = int64_t(1) << 32;
constexpr int64_t kWorkPerElement = int64_t(1) << 13;

int64_t checked_product(std::initializer_list<int64_t> dims, const std::string& what) {
  int64_t p = 1;
  for (int64_t d : dims) {
    if (d < 0 || d > kMaxDim)
      throw CaseError(what + ": dimension " + std::to_string(d) + " is out of range 0..2^24");
    p *= d;
    if (p > kMaxElements) throw CaseError(what + ": more than 2^28 elements");
  }
  return p;
}

}  // namespace

uint32_t op_from_name(const std::string& name) {
  if (const auto op = op_from(name)) return *op;
  throw CaseError("unknown op \"" + json_fields::printable(name) + "\" (" + op_names() + ")");
}
ac_dtype dtype_from_name(const std::string& s) {
  if (const auto d = dtype_from(s)) return *d;
  throw CaseError("unknown dtype \"" + json_fields::printable(s) + "\" (" + dtype_names() + ")");
}

namespace {

// Each op's input fields: case_text writes them (a variant's only where the case has it, a float
// as its _bits with a decimal copy for the reader), and the reader refuses any other (a misspelt
// field would read as absent).
constexpr std::string_view kMergeFields[] = {"dtype",      "num_tokens",        "num_heads",   "head_size",
                                             "prefix_out", "suffix_out",        "prefix_lse",  "suffix_lse",
                                             "out_dtype",  "output_scale_bits", "output_scale"};
constexpr std::string_view kSoftmaxFields[] = {"dtype", "rows", "cols", "x"};
constexpr std::string_view kQuantizeFields[] = {"dtype",     "out_dtype", "num_tokens", "num_heads",
                                                "head_size", "scales",    "x"};
constexpr std::string_view kAttentionFields[] = {"dtype",
                                                 "num_heads",
                                                 "num_kv_heads",
                                                 "head_size",
                                                 "seqlens_q",
                                                 "seqlens_k",
                                                 "causal",
                                                 "softmax_scale_bits",
                                                 "softmax_scale",
                                                 "head_size_v",
                                                 "softcap_bits",
                                                 "softcap",
                                                 "window_left",
                                                 "window_right",
                                                 "sinks",
                                                 "v_in_k",
                                                 "kv_dtype",
                                                 "k_descale",
                                                 "v_descale",
                                                 "q_descale",
                                                 "p_scale_bits",
                                                 "p_scale",
                                                 "out_dtype",
                                                 "output_scale_bits",
                                                 "output_scale",
                                                 "amax",
                                                 "page_size",
                                                 "num_pages",
                                                 "max_blocks",
                                                 "block_table",
                                                 "mask",
                                                 "q",
                                                 "k",
                                                 "v"};
std::span<const std::string_view> input_fields(uint32_t op) {
  switch (op) {
    case AC_OP_MERGE:
      return kMergeFields;
    case AC_OP_SOFTMAX:
      return kSoftmaxFields;
    case AC_OP_QUANTIZE:
      return kQuantizeFields;
    default:
      return kAttentionFields;
  }
}

// The JSON text of a case. With `splice`, each tensor text of at least kSpliceChars goes into the
// tree as a placeholder and is put in the dumped text afterwards: base64 needs no escaping, and
// the dump's scan of 10^8 characters for it was half the time a long-suite layer case took to
// write. The placeholder is found as `"k": "\u0001k\u0001"`, quotes included, which no
// dumped string can hold (its quotes are escaped); were it not found exactly once, the text would
// be made without splicing. The text is the same either way.
constexpr size_t kSpliceChars = size_t(1) << 16;
std::string case_text(const Case& c, bool splice) {
  std::vector<std::pair<std::string, std::string>> spliced;  // field, tensor text
  auto tensor = [&](const std::string& field, std::string text) -> json {
    if (!splice || text.size() < kSpliceChars) return text;
    spliced.push_back({field, std::move(text)});
    return "\x01" + field + "\x01";
  };
  json j;
  j["format"] = "attncheck-case";
  j["version"] = kFormatVersion;
  j["op"] = c.op;
  j["subject"] = c.subject;
  j["property"] = c.property;
  j["note"] = c.note;
  j["seed"] = std::to_string(c.seed);  // a string: JSON readers elsewhere lose 64-bit integers
  j["rc_reproduce"] = c.rc_reproduce;
  if (!c.excused_rows.empty()) j["excused_rows"] = c.excused_rows;
  j["conventions"] = {{"lse_base", c.lse_base}, {"empty_lse_sign", c.empty_lse_sign}};
  j["options"] = {{"tiling", c.options.tiling},
                  {"num_splits", c.options.num_splits},
                  {"fold_order", fold_name(c.options.fold_order)}};
  json in;
  if (const auto* m = std::get_if<MergeInput>(&c.input)) {
    const int w = dtype_bytes(m->dtype);
    in = {{"dtype", dtype_name(m->dtype)},
          {"num_tokens", m->num_tokens},
          {"num_heads", m->num_heads},
          {"head_size", m->head_size},
          {"prefix_out", encode_elements(m->prefix_out, w)},
          {"suffix_out", encode_elements(m->suffix_out, w)},
          {"prefix_lse", encode_floats(m->prefix_lse)},
          {"suffix_lse", encode_floats(m->suffix_lse)}};
    if (m->fp8_out()) write_fp8_output(in, m->out_dtype, m->output_scale);
  } else if (const auto* s = std::get_if<SoftmaxInput>(&c.input)) {
    in = {{"dtype", dtype_name(s->dtype)},
          {"rows", s->rows},
          {"cols", s->cols},
          {"x", encode_elements(s->x, dtype_bytes(s->dtype))}};
  } else if (const auto* qz = std::get_if<QuantizeInput>(&c.input)) {
    in = {{"dtype", dtype_name(qz->dtype)},
          {"out_dtype", kv_dtype_name(qz->out_dtype)},
          {"num_tokens", qz->num_tokens},
          {"num_heads", qz->num_heads},
          {"head_size", qz->head_size},
          {"scales", encode_floats(qz->scales)},
          {"x", encode_elements(qz->x, dtype_bytes(qz->dtype))}};
  } else {
    const auto& a = std::get<AttentionInput>(c.input);
    in = {{"dtype", dtype_name(a.dtype)},
          {"num_heads", a.num_heads},
          {"num_kv_heads", a.num_kv_heads},
          {"head_size", a.head_size},
          {"seqlens_q", a.seqlens_q},
          {"seqlens_k", a.seqlens_k},
          {"causal", a.causal},
          {"softmax_scale_bits", bits_hex(float_bits(a.softmax_scale))},
          {"softmax_scale", double(a.softmax_scale)}};  // for the reader; the bits are authoritative
    // Assigned, not listed above: an initializer list's strings would be copied.
    // The variants are written only where they differ from the plain contract, so a plain case's
    // text (and its file name's hash) is what it was before they existed.
    if (a.head_size_v > 0) in["head_size_v"] = a.head_size_v;
    if (a.softcap != 0.0f) {
      put_float_bits(in, "softcap", a.softcap);
    }
    if (a.window_left != -1 || a.window_right != -1) {
      in["window_left"] = a.window_left;
      in["window_right"] = a.window_right;
    }
    if (!a.sinks.empty()) in["sinks"] = encode_floats(a.sinks);
    if (a.v_in_k) in["v_in_k"] = true;
    if (a.paged()) {
      in["page_size"] = a.page_size;
      in["num_pages"] = a.num_pages;
      in["max_blocks"] = a.max_blocks;
      in["block_table"] = a.block_table;
    }
    if (a.fp8_kv()) {
      in["kv_dtype"] = kv_dtype_name(a.kv_dtype);
      in["k_descale"] = encode_floats(a.k_descale);
      in["v_descale"] = encode_floats(a.v_descale);
      if (a.fp8_q()) in["q_descale"] = encode_floats(a.q_descale);
      if (a.p_scale != 0.0f) put_float_bits(in, "p_scale", a.p_scale);
    }
    if (a.fp8_out()) write_fp8_output(in, a.out_dtype, a.output_scale);
    if (a.want_amax) in["amax"] = true;
    const int wkv = dtype_bytes(a.k_dtype());
    in["mask"] = tensor("mask", a.mask.empty() ? std::string() : encode_elements(a.mask, 1));
    in["q"] = tensor("q", encode_elements(a.q, dtype_bytes(a.q_dtype())));
    in["k"] = tensor("k", encode_elements(a.k, wkv));
    in["v"] = tensor("v", encode_elements(a.v, wkv));
    if (!std::isfinite(a.softmax_scale)) in["softmax_scale"] = nullptr;
  }
  // The reader's table is the one list: a field written here and missing from it would make every
  // such file unreadable.
  json_fields::only_fields<std::logic_error>(in, input_fields(op_from_name(c.op)), "case_text: input");
  j["input"] = std::move(in);
  std::string text = j.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
  for (const auto& [field, tensor_text] : spliced) {
    const std::string inner = "\\u0001" + field + "\\u0001",
                      placeholder = "\"" + field + "\": \"" + inner + "\"";
    const size_t at = text.find(placeholder);
    if (at == std::string::npos || text.find(placeholder, at + 1) != std::string::npos)
      return case_text(c, false);
    text.replace(at + field.size() + 5, inner.size(), tensor_text);  // past `"k": "`
  }
  return text;
}

}  // namespace

std::string case_to_json(const Case& c) { return case_text(c, true); }

Case case_from_json(const std::string& text) {
  const json j = json_fields::parse_strict<CaseError>(text, "case file");
  const std::string top = "case";
  if (get_string(j, "format", top) != "attncheck-case")
    throw CaseError("not an attncheck case file (format field)");
  const int64_t version = get_int(j, "version", top, 0, 1 << 20);
  if (version != kFormatVersion)
    throw CaseError("case format version " + std::to_string(version) +
                    " is not supported (this build reads 1)");
  json_fields::only_fields<CaseError>(j,
                                      {"format", "version", "op", "subject", "property", "note", "seed",
                                       "rc_reproduce", "excused_rows", "conventions", "options", "input"},
                                      top);
  Case c;
  c.op = get_string(j, "op", top);
  const uint32_t op = op_from_name(c.op);
  c.subject = get_string_or(j, "subject", top, "");
  c.property = get_string_or(j, "property", top, "");
  c.note = get_string_or(j, "note", top, "");
  c.rc_reproduce = get_string_or(j, "rc_reproduce", top, "");
  if (j.contains("excused_rows")) {
    const json& ex = j.at("excused_rows");
    if (!ex.is_array() || ex.empty())
      throw CaseError("excused_rows must be a non-empty array of row kinds (left out when none)");
    for (const json& k : ex) {
      if (!k.is_string() || !row_kind_avoidable(k.get<std::string>()))
        throw CaseError("excused_rows holds \"" +
                        json_fields::printable(k.is_string() ? k.get<std::string>() : k.dump()) +
                        "\", which is no row kind a search excuses");
      c.excused_rows.push_back(k.get<std::string>());
    }
  }
  const std::string seed = get_string_or(j, "seed", top, "0");
  const auto parsed_seed = json_fields::parse_decimal_u64(seed);
  if (!parsed_seed)
    throw CaseError("seed \"" + json_fields::printable(seed) + "\" is not a decimal unsigned 64-bit integer");
  c.seed = *parsed_seed;
  if (auto it = j.find("conventions"); it != j.end()) {
    json_fields::only_fields<CaseError>(*it, {"lse_base", "empty_lse_sign"}, "conventions");
    c.lse_base = int(get_int(*it, "lse_base", "conventions", 0, 2));
    if (c.lse_base == 1) throw CaseError("conventions.lse_base must be 0 (natural) or 2");
    c.empty_lse_sign = int(get_int(*it, "empty_lse_sign", "conventions", -1, 1));
    if (c.empty_lse_sign == 0) throw CaseError("conventions.empty_lse_sign must be -1 or +1");
  }
  if (auto it = j.find("options"); it != j.end()) {
    json_fields::only_fields<CaseError>(*it, {"tiling", "num_splits", "fold_order", "fold"}, "options");
    c.options.tiling = int32_t(get_int(*it, "tiling", "options", 0, 1 << 20));
    c.options.num_splits = int32_t(get_int(*it, "num_splits", "options", 1, 1 << 20));
    c.options.fold_order = read_fold_order(*it);
  }
  const json& in = field(j, "input", top);
  const std::string w = "input";
  const ac_dtype dtype = dtype_from_name(get_string(in, "dtype", w));
  const int eb = dtype_bytes(dtype);
  json_fields::only_fields<CaseError>(in, input_fields(op), w);
  if (op == AC_OP_MERGE) {
    MergeInput m;
    m.dtype = dtype;
    m.num_tokens = int32_t(get_int(in, "num_tokens", w, 0, kMaxDim));
    m.num_heads = int32_t(get_int(in, "num_heads", w, 0, kMaxDim));
    m.head_size = int32_t(get_int(in, "head_size", w, 0, kMaxDim));
    const int64_t n_out = checked_product({m.num_tokens, m.num_heads, m.head_size}, w);
    const int64_t n_lse = checked_product({m.num_tokens, m.num_heads}, w);
    m.prefix_out = decode_elements(get_string(in, "prefix_out", w), eb, "input.prefix_out");
    m.suffix_out = decode_elements(get_string(in, "suffix_out", w), eb, "input.suffix_out");
    m.prefix_lse = decode_floats(get_string(in, "prefix_lse", w), "input.prefix_lse");
    m.suffix_lse = decode_floats(get_string(in, "suffix_lse", w), "input.suffix_lse");
    expect_size(m.prefix_out.size(), n_out, "input.prefix_out");
    expect_size(m.suffix_out.size(), n_out, "input.suffix_out");
    expect_size(m.prefix_lse.size(), n_lse, "input.prefix_lse");
    expect_size(m.suffix_lse.size(), n_lse, "input.suffix_lse");
    check_half_bits(m.prefix_out, dtype, "input.prefix_out");
    check_half_bits(m.suffix_out, dtype, "input.suffix_out");
    read_fp8_output(in, w, m.out_dtype, m.output_scale);
    if (m.fp8_out()) {
      if (!(m.output_scale > 0.0f) || !std::isfinite(m.output_scale))
        throw CaseError("input.output_scale " + quoted_float(m.output_scale) + " is not positive and finite");
    }
    c.input = std::move(m);
  } else if (op == AC_OP_SOFTMAX) {
    SoftmaxInput s;
    s.dtype = dtype;
    s.rows = int32_t(get_int(in, "rows", w, 0, kMaxSoftmaxRows));
    s.cols = int32_t(get_int(in, "cols", w, 0, kMaxDim));
    s.x = decode_elements(get_string(in, "x", w), eb, "input.x");
    expect_size(s.x.size(), checked_product({s.rows, s.cols}, w), "input.x");
    check_half_bits(s.x, dtype, "input.x");
    c.input = std::move(s);
  } else if (op == AC_OP_QUANTIZE) {
    QuantizeInput q;
    q.dtype = dtype;
    const std::string name = get_string(in, "out_dtype", w);
    const auto out = kv_dtype_from(name);
    if (!out)
      throw CaseError("input.out_dtype '" + json_fields::printable(name) + "' is not " + kv_dtype_names());
    q.out_dtype = *out;
    // A quantiser's case holds at least one element: one of nothing judges nothing.
    q.num_tokens = int32_t(get_int(in, "num_tokens", w, 1, kMaxDim));
    q.num_heads = int32_t(get_int(in, "num_heads", w, 1, kMaxDim));
    q.head_size = int32_t(get_int(in, "head_size", w, 1, kMaxDim));
    q.scales = decode_floats(get_string(in, "scales", w), "input.scales");
    if (q.scales.size() != 1 && q.scales.size() != size_t(q.num_heads))
      throw CaseError("input.scales holds " + std::to_string(q.scales.size()) +
                      " values, not 1 or num_heads (" + std::to_string(q.num_heads) + ")");
    for (float v : q.scales)
      if (!(v > 0.0f) || !std::isfinite(v))
        throw CaseError("input.scales holds " + quoted_float(v) + ": each scale is positive and finite");
    q.x = decode_elements(get_string(in, "x", w), eb, "input.x");
    expect_size(q.x.size(), checked_product({q.num_tokens, q.num_heads, q.head_size}, w), "input.x");
    check_half_bits(q.x, dtype, "input.x");
    c.input = std::move(q);
  } else {
    refuse_orphans(in, {"k_descale", "v_descale"}, "kv_dtype", "an FP8 cache's format");
    refuse_orphans(in, {"num_pages", "max_blocks", "block_table"}, "page_size", "paged K / V");
    refuse_orphans(in, {"softcap"}, "softcap_bits", kDecimalCopy);
    refuse_orphans(in, {"p_scale"}, "p_scale_bits", kDecimalCopy);
    AttentionInput a;
    a.dtype = dtype;
    a.num_heads = int32_t(get_int(in, "num_heads", w, 1, kMaxDim));
    a.num_kv_heads = int32_t(get_int(in, "num_kv_heads", w, 1, kMaxDim));
    a.head_size = int32_t(get_int(in, "head_size", w, 1, kMaxDim));
    if (a.num_heads % a.num_kv_heads) throw CaseError("input.num_heads must be a multiple of num_kv_heads");
    a.seqlens_q = get_int_list(in, "seqlens_q", w);
    a.seqlens_k = get_int_list(in, "seqlens_k", w);
    if (a.seqlens_q.size() != a.seqlens_k.size())
      throw CaseError("input.seqlens_q and seqlens_k differ in length");
    a.causal = get_bool(in, "causal", w);
    // No kernel is called with a NaN or infinite scale and the exact reference has no answer for
    // one: such a file is malformed, not a case a subject fails.
    a.softmax_scale = get_float_bits(in, "softmax_scale_bits", w);
    if (in.contains("softcap_bits")) a.softcap = get_float_bits(in, "softcap_bits", w);
    // Written only where V has a head size of its own: a 0 in a file is no value, not "none".
    if (in.contains("head_size_v")) a.head_size_v = int32_t(get_int(in, "head_size_v", w, 1, kMaxDim));
    a.window_left = int32_t(get_int_or(in, "window_left", w, -1, kMaxDim, -1));
    a.window_right = int32_t(get_int_or(in, "window_right", w, -1, kMaxDim, -1));
    // Present, sinks and q_descale hold values (the writer leaves them out otherwise): an empty one
    // read as absent would run the case without them.
    if (in.contains("sinks")) {
      a.sinks = decode_floats(get_string(in, "sinks", w), "input.sinks");
      if (a.sinks.empty())
        throw CaseError("input.sinks is empty: one per query head needs " + std::to_string(a.num_heads));
    }
    a.v_in_k = json_fields::get_bool_or<CaseError>(in, "v_in_k", w, false);
    if (in.contains("kv_dtype")) {
      const std::string name = get_string(in, "kv_dtype", w);
      const auto kv = kv_dtype_from(name);
      if (!kv)
        throw CaseError("input.kv_dtype '" + json_fields::printable(name) + "' is not " + kv_dtype_names());
      a.kv_dtype = *kv;
      a.k_descale = decode_floats(get_string(in, "k_descale", w), "input.k_descale");
      a.v_descale = decode_floats(get_string(in, "v_descale", w), "input.v_descale");
    }
    if (in.contains("q_descale")) {
      a.q_descale = decode_floats(get_string(in, "q_descale", w), "input.q_descale");
      if (a.q_descale.empty()) throw CaseError("input.q_descale is empty (Q in FP8 needs its descales)");
    }
    // p_scale 0 is the writer's "none", never written: a written 0 is out of range, not absent.
    if (in.contains("p_scale_bits")) {
      a.p_scale = get_float_bits(in, "p_scale_bits", w);
      if (const std::string why = p_scale_problem(a.p_scale); !why.empty()) throw CaseError("input." + why);
    }
    read_fp8_output(in, w, a.out_dtype, a.output_scale);
    a.want_amax = json_fields::get_bool_or<CaseError>(in, "amax", w, false);
    if (in.contains("page_size")) {
      a.page_size = int32_t(get_int(in, "page_size", w, 1, kMaxDim));
      a.num_pages = int32_t(get_int(in, "num_pages", w, 1, kMaxDim));
      a.max_blocks = int32_t(get_int(in, "max_blocks", w, 1, kMaxDim));
      a.block_table = get_int_list(in, "block_table", w);
    }
    int64_t total_q = 0, total_k = 0, mask_elems = 0;
    for (size_t i = 0; i < a.seqlens_q.size(); ++i) {
      total_q += a.seqlens_q[i];
      total_k += a.seqlens_k[i];
      mask_elems += checked_product({a.seqlens_q[i], a.seqlens_k[i]},
                                    "input: sequence " + std::to_string(i) + "'s queries x keys");
      if (total_q > kMaxDim || total_k > kMaxDim || mask_elems > kMaxElements)
        throw CaseError("input: sequences too long");
    }
    // In double: mask_elems <= 2^28 and the rest <= 2^24 each, far inside its range; the shapes
    // declared here are the tensors' sizes, checked as they are decoded below.
    // K and V hold a paged case's pool, which sequences may share page by page: the elements are
    // the pool's rows, not the keys they serve (a table that names one page a thousand times asks
    // for a thousand times the work its file holds).
    const double pool_rows = a.paged() ? double(a.num_pages) * a.page_size : double(total_k);
    const double work = double(mask_elems) * a.num_heads * a.head_size,
                 elements = (double(total_q) * a.num_heads + 2.0 * pool_rows * a.num_kv_heads) * a.head_size;
    if (work > std::max(double(kMaxAttentionWork), double(kWorkPerElement) * elements))
      throw CaseError(
          "input: attention work (sum Tq x Tk x heads x head size) beyond the bound (2^32, or 2^13 per "
          "element "
          "of q, k and v)");
    const std::string mask = get_string_or(in, "mask", w, "");
    if (!mask.empty()) {
      const auto m = decode_elements(mask, 1, "input.mask");
      expect_size(m.size(), mask_elems, "input.mask");
      a.mask.assign(m.begin(), m.end());
    }
    if (const std::string why = attention_variant_problem(a); !why.empty()) throw CaseError("input." + why);
    a.q = decode_elements(get_string(in, "q", w), dtype_bytes(a.q_dtype()), "input.q");
    const int ekv = dtype_bytes(a.k_dtype());
    a.k = decode_elements(get_string(in, "k", w), ekv, "input.k");
    a.v = decode_elements(get_string(in, "v", w), ekv, "input.v");
    const int64_t kv_rows =
        a.paged() ? checked_product({a.num_pages, a.page_size}, "input: num_pages x page_size") : total_k;
    expect_size(a.q.size(), checked_product({total_q, a.num_heads, a.head_size}, "input.q"), "input.q");
    expect_size(a.k.size(), checked_product({kv_rows, a.num_kv_heads, a.head_size}, "input.k"), "input.k");
    expect_size(a.v.size(), checked_product({kv_rows, a.num_kv_heads, a.dv()}, "input.v"), "input.v");
    check_half_bits(a.q, a.q_dtype(), "input.q");
    check_half_bits(a.k, a.k_dtype(), "input.k");
    check_half_bits(a.v, a.k_dtype(), "input.v");
    // V inside K compares the tensors, so only now (attention_variant_problem above saw none).
    if (const std::string why = v_in_k_problem(a); !why.empty()) throw CaseError("input." + why);
    c.input = std::move(a);
  }
  return c;
}

std::string file_name_part(std::string_view name) {
  std::string out;
  for (char ch : name)
    out.push_back(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ? ch : '_');
  if (out.size() > kMaxFileNamePart) {
    // A file name holds three parts, a hash and a temporary suffix within NAME_MAX (255): a long
    // name keeps its start, readable, and the hash of the whole name, which keeps two names that
    // share the start apart.
    char hash[20];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(hash::fnv1a64(name)));
    out = out.substr(0, kMaxFileNamePart - 17) + "-" + hash;
  }
  return out.empty() ? std::string("none") : out;
}

namespace {
void write_text_atomic(const std::string& path, const std::string& text,
                       Durability durability = Durability::power_loss) {
  try {
    write_file_atomic(path, text, durability);
  } catch (const AtomicWriteError& e) {
    throw CaseError(e.what());
  }
}
}  // namespace

void write_case_atomic_to(const std::string& path, const Case& c) {
  write_text_atomic(path, case_to_json(c), Durability::process);
}

std::string write_case_atomic(const std::string& dir, const Case& c) {
  const std::string text = case_to_json(c);
  char hash[20];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(hash::fnv1a64(text, hash::kLegacyStart)));
  const std::string name = file_name_part(c.op) + "-" + file_name_part(c.subject) + "-" +
                           file_name_part(c.property) + "-" + hash + ".json";
  const std::string path = (std::filesystem::path(dir.empty() ? "." : dir) / name).string();
  write_text_atomic(path, text);
  return path;
}

std::string write_ahead_path(const std::string& dir, const std::string& subject,
                             const std::string& property) {
  return (std::filesystem::path(dir) /
          ("inflight-" + file_name_part(subject) + "-" + file_name_part(property) + "-0.json"))
      .string();
}

bool is_write_ahead_file(const std::string& path) {
  const std::filesystem::path p(path);
  return p.filename().string().rfind("inflight-", 0) == 0 && p.extension() == ".json";
}

std::vector<KeptWriteAhead> keep_write_ahead_cases(const std::string& dir, const std::string& why,
                                                   const std::string& subject, const std::string& property,
                                                   std::vector<UnreadableWriteAhead>* unreadable) {
  std::vector<KeptWriteAhead> kept;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!is_write_ahead_file(it->path().string())) continue;
    try {
      Case c = read_case_file(it->path().string());
      if (!subject.empty() && (c.subject != subject || c.property != property)) continue;
      c.note = why + "; " + c.note;
      kept.push_back({write_case_atomic(dir, c), c.subject});
      std::filesystem::remove(it->path(), ec);
    } catch (const CaseError& e) {
      if (unreadable) unreadable->push_back({it->path().filename().string(), e.what()});
    }
  }
  return kept;
}

Case read_case_file(const std::string& path) {
  const std::string text = json_fields::read_text_file<CaseError>(path, kMaxCaseFileBytes, "case file");
  try {
    return case_from_json(text);
  } catch (const CaseError& e) {
    throw CaseError(path + ": " + e.what());
  }
}

CaseSize case_size(const Case& c) {
  CaseSize s;
  if (const auto* m = std::get_if<MergeInput>(&c.input)) {
    s = {m->num_tokens, 2, m->num_heads, m->head_size};
  } else if (const auto* x = std::get_if<SoftmaxInput>(&c.input)) {
    s = {x->rows, x->cols, 1, 0};
  } else if (const auto* q = std::get_if<QuantizeInput>(&c.input)) {
    s = {q->num_tokens, 0, q->num_heads, q->head_size};
  } else {
    const auto& a = std::get<AttentionInput>(c.input);
    int64_t tq = 0, tk = 0;
    for (size_t i = 0; i < a.seqlens_q.size(); ++i) {
      tq += a.seqlens_q[i];
      tk = std::max<int64_t>(tk, a.seqlens_k[i]);
    }
    s = {tq, tk, a.num_heads, a.head_size, a.dv() != a.head_size ? a.dv() : 0};
  }
  return s;
}

std::string describe_size(const CaseSize& s) {
  return "tokens=" + std::to_string(s.tokens) + " keys=" + std::to_string(s.keys) +
         " heads=" + std::to_string(s.heads) + " d=" + std::to_string(s.head_size) +
         (s.head_size_v > 0 ? "/" + std::to_string(s.head_size_v) : "");
}

std::string attention_variant_problem(const AttentionInput& a) {
  auto range = [](const char* what, int64_t v, int64_t lo, int64_t hi) -> std::string {
    if (v >= lo && v <= hi) return "";
    return std::string(what) + " " + std::to_string(v) + " is out of range " + std::to_string(lo) + ".." +
           std::to_string(hi);
  };
  std::string why;
  if (!(why = range("head_size_v", a.head_size_v, 0, AC_MAX_HEAD_SIZE)).empty()) return why;
  if (!std::isfinite(a.softcap) || a.softcap < 0.0f || a.softcap > AC_MAX_SOFTCAP)
    return "softcap " + quoted_float(a.softcap) + " is not 0 or in (0, " + quoted_float(AC_MAX_SOFTCAP) + "]";
  if (!(why = range("window_left", a.window_left, -1, AC_MAX_WINDOW)).empty()) return why;
  if (!(why = range("window_right", a.window_right, -1, AC_MAX_WINDOW)).empty()) return why;
  if (!a.sinks.empty()) {
    if (a.sinks.size() != size_t(a.num_heads))
      return "sinks has " + std::to_string(a.sinks.size()) + " values, one per query head needs " +
             std::to_string(a.num_heads);
    for (size_t i = 0; i < a.sinks.size(); ++i)
      if (!(std::fabs(a.sinks[i]) <= AC_MAX_SINK))
        return "sinks[" + std::to_string(i) + "] " + quoted_float(a.sinks[i]) + " is not finite in [-" +
               quoted_float(AC_MAX_SINK) + ", " + quoted_float(AC_MAX_SINK) + "]";
  }
  if (a.fp8_kv()) {
    for (const auto& [d, name] : {std::pair{&a.k_descale, "k_descale"}, std::pair{&a.v_descale, "v_descale"},
                                  std::pair{&a.q_descale, "q_descale"}}) {
      if (d == &a.q_descale && d->empty()) continue;  // q in dtype
      const size_t per_sequence = a.seqlens_q.size() * size_t(a.num_kv_heads);
      if (d->size() != 1 && d->size() != size_t(a.num_kv_heads) && d->size() != per_sequence)
        return std::string(name) + " has " + std::to_string(d->size()) +
               " values: one (per tensor), one per KV head (" + std::to_string(a.num_kv_heads) +
               ") or one per (sequence, KV head) (" + std::to_string(per_sequence) + ") needed";
      for (size_t i = 0; i < d->size(); ++i)
        if (!((*d)[i] > 0.0f && (*d)[i] <= AC_MAX_DESCALE))
          return std::string(name) + "[" + std::to_string(i) + "] " + quoted_float((*d)[i]) +
                 " is not in (0, 2^32] (plugin_abi.h AC_MAX_DESCALE)";
    }
    if (a.k_descale.size() != a.v_descale.size())
      return "k_descale and v_descale differ in granularity (" + std::to_string(a.k_descale.size()) +
             " and " + std::to_string(a.v_descale.size()) + " values)";
    if (a.fp8_q() && a.q_descale.size() != a.k_descale.size())
      return "q_descale and k_descale differ in granularity (" + std::to_string(a.q_descale.size()) +
             " and " + std::to_string(a.k_descale.size()) + " values)";
  } else if (!a.k_descale.empty() || !a.v_descale.empty() || !a.q_descale.empty()) {
    return "k_descale, v_descale and q_descale need an FP8 kv_dtype";
  }
  if (a.want_amax && !a.fp8_kv()) return "amax needs an FP8 kv_dtype";
  if (a.fp8_out() && !a.fp8_kv())
    return "out_dtype " + std::string(kv_dtype_name(a.out_dtype)) + " needs an FP8 kv_dtype";
  if (a.fp8_out() && (!(a.output_scale > 0.0f) || !std::isfinite(a.output_scale)))
    return "output_scale " + quoted_float(a.output_scale) + " is not positive and finite";
  if (a.p_scale != 0.0f) {
    if (!a.fp8_kv()) return "p_scale needs an FP8 kv_dtype";
    if (const std::string why = p_scale_problem(a.p_scale); !why.empty()) return why;
  }
  if (!(why = v_in_k_problem(a)).empty()) return why;
  if (!a.paged()) {
    if (a.num_pages || a.max_blocks || !a.block_table.empty())
      return "num_pages, max_blocks and block_table need page_size > 0";
    return "";
  }
  if (!(why = range("page_size", a.page_size, 1, AC_MAX_PAGE_SIZE)).empty()) return why;
  if (!(why = range("num_pages", a.num_pages, 1, int64_t(1) << 24)).empty()) return why;
  // A table of no columns is no table: the built-in kernels refuse one, so it is no case.
  if (!(why = range("max_blocks", a.max_blocks, 1, int64_t(1) << 24)).empty()) return why;
  const size_t seqs = a.seqlens_k.size();
  if (a.block_table.size() != seqs * size_t(std::max(a.max_blocks, 0)))
    return "block_table has " + std::to_string(a.block_table.size()) +
           " entries, [num_seqs, max_blocks] needs " +
           std::to_string(seqs * size_t(std::max(a.max_blocks, 0)));
  for (size_t s = 0; s < seqs; ++s) {
    const int64_t pages = (int64_t{a.seqlens_k[s]} + a.page_size - 1) / a.page_size;
    if (pages > a.max_blocks)
      return "sequence " + std::to_string(s) + " has " + std::to_string(a.seqlens_k[s]) +
             " keys, more than " + std::to_string(a.max_blocks) + " blocks of " +
             std::to_string(a.page_size) + " hold";
  }
  for (size_t i = 0; i < a.block_table.size(); ++i)
    if (a.block_table[i] < 0 || a.block_table[i] >= a.num_pages)
      return "block_table[" + std::to_string(i / size_t(a.max_blocks)) + "][" +
             std::to_string(i % size_t(a.max_blocks)) + "] = " + std::to_string(a.block_table[i]) +
             " is outside the pool of " + std::to_string(a.num_pages) + " pages";
  return "";
}

std::string v_in_k_problem(const AttentionInput& a) {
  if (!a.v_in_k) return "";
  const int64_t d = a.head_size, dv = a.dv();
  if (dv > d || d <= 0)
    return "v_in_k needs head_size_v (" + std::to_string(dv) + ") at most head_size (" + std::to_string(d) +
           ")";
  const size_t rows = a.k.size() / size_t(d);
  if (a.k.size() % size_t(d) != 0 || a.v.size() != rows * size_t(dv))
    return "v_in_k: v has " + std::to_string(a.v.size()) + " elements, the first " + std::to_string(dv) +
           " columns of K's " + std::to_string(rows) + " rows " + std::to_string(rows * size_t(dv));
  for (size_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < dv; ++c)
      if (a.v[r * size_t(dv) + size_t(c)] != a.k[r * size_t(d) + size_t(c)])
        return "v_in_k: v[" + std::to_string(r * size_t(dv) + size_t(c)) + "] is not K's row " +
               std::to_string(r) + " column " + std::to_string(c) +
               " (V inside K is the first head_size_v columns of K's rows)";
  return "";
}

std::string undeclared_fp8_output(const QuantizeInput& in, const ac_caps& caps) {
  if (!(caps.kv_dtypes & AC_DTYPE_BIT(in.out_dtype)))
    return std::string("does not write ") + kv_dtype_name(in.out_dtype) + " (caps.kv_dtypes)";
  if (in.scales.size() > 1 && !(caps.fp8 & AC_FP8_DESCALE_PER_KV_HEAD))
    return "takes one scale per tensor (no AC_FP8_DESCALE_PER_KV_HEAD)";
  return "";
}
std::string undeclared_fp8_output(const MergeInput& in, const ac_caps& caps) {
  if (in.fp8_out() && !(caps.kv_dtypes & AC_DTYPE_BIT(in.out_dtype)))
    return std::string("does not write ") + kv_dtype_name(in.out_dtype) + " merge outputs (caps.kv_dtypes)";
  return "";
}

std::string undeclared_variant(const AttentionInput& in, uint32_t variants) {
  const struct {
    bool used;
    uint32_t bit;
    const char* what;
  } uses[] = {
      {in.dv() != in.head_size, AC_VAR_HEAD_SIZE_V, "a V head size of its own (AC_VAR_HEAD_SIZE_V)"},
      {in.softcap != 0.0f, AC_VAR_SOFTCAP, "a softcap (AC_VAR_SOFTCAP)"},
      {in.window_left != -1 || in.window_right != -1, AC_VAR_WINDOW, "a sliding window (AC_VAR_WINDOW)"},
      {!in.sinks.empty(), AC_VAR_SINKS, "attention sinks (AC_VAR_SINKS)"},
  };
  for (const auto& u : uses)
    if (u.used && !(variants & u.bit)) return u.what;
  return "";
}

const AttentionInput& contiguous_kv(const AttentionInput& in, AttentionInput& storage) {
  if (!in.paged()) return in;
  storage = gather_pages(in);
  return storage;
}

std::string past_call_limits(const AttentionInput& in, const ac_caps& caps) {
  int64_t tokens = 0, keys = 0;
  for (size_t i = 0; i < in.seqlens_q.size(); ++i) {
    tokens += in.seqlens_q[i];
    keys += in.seqlens_k[i];
  }
  const struct {
    int64_t used, limit;
    const char *what, *field;
  } limits[] = {{int64_t(in.seqlens_q.size()), caps.max_call_seqs, "sequences", "max_call_seqs"},
                {tokens, caps.max_call_tokens, "query tokens", "max_call_tokens"},
                {keys, caps.max_call_keys, "keys", "max_call_keys"}};
  for (const auto& l : limits)
    if (l.limit > 0 && l.used > l.limit)
      return std::to_string(l.used) + " " + l.what + ", " + l.field + " " + std::to_string(l.limit);
  return "";
}

std::string undeclared_fp8(const AttentionInput& in, const ac_caps& caps) {
  if (!in.fp8_kv()) return "";
  if (!(caps.kv_dtypes & AC_DTYPE_BIT(in.kv_dtype)))
    return std::string("an FP8 KV cache in ") + kv_dtype_name(in.kv_dtype) + " (caps.kv_dtypes)";
  // One sequence's descales per KV head are its descales per (sequence, KV head) as well.
  const bool one_sequence = in.seqlens_q.size() == 1 && (caps.fp8 & AC_FP8_DESCALE_PER_SEQUENCE);
  if (in.descale_granularity() == 1 && !(caps.fp8 & AC_FP8_DESCALE_PER_KV_HEAD) && !one_sequence)
    return "descales per KV head (AC_FP8_DESCALE_PER_KV_HEAD)";
  if (in.descale_granularity() == 2 && !(caps.fp8 & AC_FP8_DESCALE_PER_SEQUENCE))
    return "descales per (sequence, KV head) (AC_FP8_DESCALE_PER_SEQUENCE)";
  if (in.fp8_q() && !(caps.fp8 & AC_FP8_Q)) return "Q in FP8 (AC_FP8_Q)";
  if (in.p_scale > 0.0f && !(caps.fp8 & AC_FP8_P_SCALE)) return "P's scale per call (AC_FP8_P_SCALE)";
  if (in.fp8_out() && !(caps.fp8 & AC_FP8_OUT)) return "O in FP8 (AC_FP8_OUT)";
  if (in.want_amax && !(caps.fp8 & AC_FP8_AMAX)) return "the maxima of P and O (AC_FP8_AMAX)";
  if (in.fp8_out() && !(caps.kv_dtypes & AC_DTYPE_BIT(in.out_dtype)))
    return std::string("O in ") + kv_dtype_name(in.out_dtype) + " (caps.kv_dtypes)";
  if (!in.fp8_q() && (caps.fp8 & AC_FP8_Q_REQUIRED))
    return "an FP8 cache beside Q in its input type (it declares AC_FP8_Q_REQUIRED)";
  return "";
}

const AttentionInput& input_for_subject(const AttentionInput& in_given, uint32_t variants,
                                        const ac_caps& caps, const std::string& subject,
                                        AttentionInput& storage) {
  // V inside K to a subject that does not declare it, or whose K a property changed since (so that
  // v no longer is K's columns): V as its own tensor, the same values.
  const bool share = in_given.v_in_k && (variants & AC_VAR_V_IN_K) && v_in_k_problem(in_given).empty();
  if (in_given.v_in_k && !share) {
    storage = in_given;
    storage.v_in_k = false;
  }
  const AttentionInput& in = in_given.v_in_k && !share ? storage : in_given;
  if (const std::string what = undeclared_variant(in, variants); !what.empty())
    throw SubjectError(SubjectError::Kind::unsupported, subject + " does not declare " + what);
  if (const std::string what = undeclared_fp8(in, caps); !what.empty())
    throw SubjectError(SubjectError::Kind::unsupported, subject + " does not declare " + what);
  if (const std::string past = past_call_limits(in, caps); !past.empty())
    throw SubjectError(SubjectError::Kind::unsupported,
                       "past " + subject + "'s declared call limits: " + past);
  if (in.paged() && (variants & AC_VAR_PAGED_KV)) {
    // A page size the subject does not declare (a case file's, or another subject's) is refused,
    // as its other undeclared variants are: never passed to a kernel that did not promise it.
    std::string sizes;
    for (int32_t i = 0; caps.page_sizes && i < caps.num_page_sizes; ++i) {
      if (caps.page_sizes[i] == in.page_size) return in;
      sizes += (sizes.empty() ? "" : ", ") + std::to_string(caps.page_sizes[i]);
    }
    throw SubjectError(SubjectError::Kind::unsupported, subject + " does not declare page size " +
                                                            std::to_string(in.page_size) +
                                                            " (caps.page_sizes: " + sizes + ")");
  }
  if (!in.paged()) return in;
  AttentionInput gathered = gather_pages(in);
  storage = std::move(gathered);
  return storage;
}

AttentionInput gather_pages(const AttentionInput& a) {
  if (!a.paged()) return a;
  AttentionInput g = a;
  g.page_size = g.num_pages = g.max_blocks = 0;
  g.block_table.clear();
  int64_t total_k = 0;
  for (int32_t t : a.seqlens_k) total_k += t;
  const size_t dk = size_t(a.num_kv_heads) * size_t(a.head_size),
               dv = size_t(a.num_kv_heads) * size_t(a.dv());
  g.k.assign(size_t(total_k) * dk, 0);
  g.v.assign(size_t(total_k) * dv, 0);
  int64_t first = 0;
  for (size_t s = 0; s < a.seqlens_k.size(); ++s) {
    for (int64_t j = 0; j < a.seqlens_k[s]; ++j) {
      const size_t from = size_t(a.kv_row(s, j, first)), to = size_t(first + j);
      std::copy_n(a.k.begin() + std::ptrdiff_t(from * dk), dk, g.k.begin() + std::ptrdiff_t(to * dk));
      std::copy_n(a.v.begin() + std::ptrdiff_t(from * dv), dv, g.v.begin() + std::ptrdiff_t(to * dv));
    }
    first += a.seqlens_k[s];
  }
  return g;
}

}  // namespace attncheck
