#include "attncheck/json_fields.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>
#include <vector>

namespace attncheck::json_fields {

namespace {

// One byte as printable writes it: itself when printable ASCII, else \xNN.
std::string escaped(unsigned char ch) {
  if (ch >= 0x20 && ch < 0x7f) return std::string(1, char(ch));
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", ch);
  return buf;
}

}  // namespace

std::string printable(std::string_view text, size_t max) {
  std::string out;
  for (unsigned char ch : text) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    out += escaped(ch);
  }
  return out;
}

std::string printable_tail(std::string_view text, size_t max) {
  const std::string all = printable(text, std::string::npos);
  if (all.size() <= max) return all;
  // Escaped bytes, from the end, while they fit after the "...".
  std::vector<std::string> pieces;
  size_t used = 3;
  for (size_t i = text.size(); i-- > 0;) {
    std::string e = escaped(static_cast<unsigned char>(text[i]));
    if (used + e.size() > max) break;
    used += e.size();
    pieces.push_back(std::move(e));
  }
  std::string out = "...";
  for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) out += *it;
  return out;
}

std::optional<std::string> try_read_text_file(const std::string& path, size_t max_bytes, std::string& error) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    // A path too long or a directory without search permission is not a missing file.
    error = ec && ec != std::errc::no_such_file_or_directory ? ec.message() : "no such file";
    return std::nullopt;
  }
  if (!fs::is_regular_file(st)) {
    error = fs::is_directory(st) ? "is a directory" : "is not a regular file";
    return std::nullopt;
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (ec || size > max_bytes) {
    error = ec ? "cannot read its size" : "larger than " + std::to_string(max_bytes >> 20) + " MiB";
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot open";
    return std::nullopt;
  }
  std::string text(size_t(size), '\0');
  in.read(text.data(), std::streamsize(size));
  if (in.gcount() != std::streamsize(size)) {
    error = "read error";
    return std::nullopt;
  }
  return text;
}

std::optional<uint64_t> parse_decimal_u64(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return std::nullopt;
    const uint64_t digit = uint64_t(ch - '0');
    if (v > (UINT64_MAX - digit) / 10) return std::nullopt;
    v = v * 10 + digit;
  }
  return v;
}

std::optional<json> try_parse_strict(std::string_view text, std::string& error) {
  // The callback sees every event of the parse: it bounds the depth before the library recurses
  // and keeps, per open object, the keys seen so far.
  std::vector<std::set<std::string>> keys;
  std::string problem;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (!problem.empty()) return false;
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) {
          problem = "nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels";
          return false;
        }
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        return true;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        return true;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second) {
          problem = "duplicate key \"" + printable(parsed.get<std::string>(), 40) + "\"";
          return false;
        }
        return true;
      default:
        return true;
    }
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true);
  } catch (const json::exception& e) {
    error = problem.empty() ? "invalid JSON: " + printable(e.what(), 160) : problem;
    return std::nullopt;
  }
  if (!problem.empty()) {
    error = problem;
    return std::nullopt;
  }
  return j;
}

}  // namespace attncheck::json_fields
