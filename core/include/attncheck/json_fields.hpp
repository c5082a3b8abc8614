// The one JSON reading style for every file attncheck reads (case files, reports, baselines,
// prefill scenarios): strict parsing, then typed field access that names the field on error.
//
// parse_json_strict refuses, with one line: invalid JSON or UTF-8, nesting deeper than
// kMaxJsonDepth (a deep file would otherwise overflow the stack in the library's recursive
// copies), and duplicate keys in one object (the library keeps the last one silently, so a file
// could say two things at once). Messages never echo raw file text: control characters are shown
// escaped, so an error stays on one line.
//
// Field access throws Err (the caller's error type, e.g. CaseError) with "<where>.<key> ..." text.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace attncheck::json_fields {

using json = nlohmann::json;

constexpr int kMaxJsonDepth = 64;

// One line for a message: control and non-ASCII bytes escaped, cut to `max` characters.
std::string printable(std::string_view text, size_t max = 80);
// As printable, but the end is kept: at most `max` characters, "..." and then the text's last
// characters (an escape is kept whole or left out). For a program's stderr, whose last line is
// the one that says why it died.
std::string printable_tail(std::string_view text, size_t max);
// The longest one-line error the CLI prints (it cuts longer ones there with printable).
constexpr size_t kMaxMessageChars = 400;

// The whole of a regular file of at most `max_bytes` bytes (devices, pipes, directories and larger
// files are refused before anything is read); Err with "<what> <path>: <reason>" otherwise.
std::optional<std::string> try_read_text_file(const std::string& path, size_t max_bytes, std::string& error);
template <class Err>
std::string read_text_file(const std::string& path, size_t max_bytes, const std::string& what) {
  std::string error;
  std::optional<std::string> text = try_read_text_file(path, max_bytes, error);
  if (!text) throw Err(what + " " + path + ": " + error);
  return std::move(*text);
}

// Digits only (no sign, no spaces), at most 2^64 - 1; std::nullopt otherwise.
std::optional<uint64_t> parse_decimal_u64(std::string_view text);

// Parses `text`; on failure returns std::nullopt and sets `error` to one line.
std::optional<json> try_parse_strict(std::string_view text, std::string& error);

template <class Err>
json parse_strict(std::string_view text, const std::string& what) {
  std::string error;
  std::optional<json> j = try_parse_strict(text, error);
  if (!j) throw Err(what + ": " + error);
  return std::move(*j);
}

template <class Err>
const json& field(const json& obj, const char* key, const std::string& where) {
  if (!obj.is_object()) throw Err(where + " must be a JSON object");
  const auto it = obj.find(key);
  if (it == obj.end()) throw Err(where + ": missing field \"" + key + "\"");
  return *it;
}

// Throws Err naming the first field of obj that `known` does not list: a misspelt field would
// otherwise read as absent, and the file would mean something other than what it says.
template <class Err>
void only_fields(const json& obj, std::span<const std::string_view> known, const std::string& where) {
  if (!obj.is_object()) throw Err(where + " must be a JSON object");
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (std::find(known.begin(), known.end(), std::string_view(it.key())) == known.end())
      throw Err(where + ": unknown field \"" + printable(it.key()) + "\"");
}
template <class Err>
void only_fields(const json& obj, std::initializer_list<std::string_view> known, const std::string& where) {
  only_fields<Err>(obj, std::span<const std::string_view>(known.begin(), known.size()), where);
}

template <class Err>
std::string get_string(const json& obj, const char* key, const std::string& where) {
  const json& f = field<Err>(obj, key, where);
  if (!f.is_string()) throw Err(where + "." + key + " must be a string");
  return f.get<std::string>();
}

template <class Err>
int64_t get_int(const json& obj, const char* key, const std::string& where, int64_t lo, int64_t hi) {
  const json& f = field<Err>(obj, key, where);
  if (!f.is_number_integer()) throw Err(where + "." + key + " must be an integer");
  // Unsigned values beyond int64 are out of every range we accept.
  if (f.is_number_unsigned() && f.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    throw Err(where + "." + key + " out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  const int64_t v = f.get<int64_t>();
  if (v < lo || v > hi)
    throw Err(where + "." + key + " = " + std::to_string(v) + " out of range [" + std::to_string(lo) + ", " +
              std::to_string(hi) + "]");
  return v;
}

template <class Err>
uint64_t get_uint64(const json& obj, const char* key, const std::string& where) {
  const json& f = field<Err>(obj, key, where);
  if (!f.is_number_unsigned()) throw Err(where + "." + key + " must be a non-negative integer");
  return f.get<uint64_t>();
}

template <class Err>
bool get_bool(const json& obj, const char* key, const std::string& where) {
  const json& f = field<Err>(obj, key, where);
  if (!f.is_boolean()) throw Err(where + "." + key + " must be true or false");
  return f.get<bool>();
}

// A number, or one of the strings "inf", "-inf", "nan" (JSON cannot hold non-finite numbers).
template <class Err>
double get_number(const json& f, const std::string& where) {
  if (f.is_number()) return f.get<double>();
  if (f.is_string()) {
    const std::string s = f.get<std::string>();
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    if (s == "nan") return NAN;
  }
  throw Err(where + " must be a number (or \"inf\", \"-inf\", \"nan\")");
}
template <class Err>
double get_number(const json& obj, const char* key, const std::string& where) {
  return get_number<Err>(field<Err>(obj, key, where), where + "." + key);
}

// Optional fields: absent gives the default; present with the wrong type is an error, never a
// silent default.
template <class Err>
std::string get_string_or(const json& obj, const char* key, const std::string& where,
                          const std::string& dflt) {
  return obj.is_object() && obj.contains(key) ? get_string<Err>(obj, key, where) : dflt;
}
template <class Err>
int64_t get_int_or(const json& obj, const char* key, const std::string& where, int64_t lo, int64_t hi,
                   int64_t dflt) {
  return obj.is_object() && obj.contains(key) ? get_int<Err>(obj, key, where, lo, hi) : dflt;
}
template <class Err>
bool get_bool_or(const json& obj, const char* key, const std::string& where, bool dflt) {
  return obj.is_object() && obj.contains(key) ? get_bool<Err>(obj, key, where) : dflt;
}
template <class Err>
double get_number_or(const json& obj, const char* key, const std::string& where, double dflt) {
  return obj.is_object() && obj.contains(key) ? get_number<Err>(obj, key, where) : dflt;
}

}  // namespace attncheck::json_fields
