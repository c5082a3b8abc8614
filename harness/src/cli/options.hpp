// Option parsing shared by the CLI's subcommands (cmd_*.cpp): exit codes, numeric limits, list options.
#pragma once
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "attncheck/json_fields.hpp"

namespace attncheck::cli {

// The exit codes of every subcommand (the table in the README): 0 pass, 1 a property failed or a
// gate found a regression, 2 usage or input error before any work, 3 a subject crashed or hung,
// 130 interrupted (Ctrl-C) with nothing failed, 143 the same stopped by SIGTERM.
constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitCrashed = 3, kExitInterrupted = 130,
              kExitTerminated = 143;

// The stated range of every numeric option, checked by CLI11 before any work (exit 2, one line).
// The bounds keep one run within memory and patience: a case of max_keys keys holds
// keys x KV heads x head size elements per tensor, and cases are generated one at a time.
struct Limits {
  static constexpr int kMaxCases = 100000;         // --cases, --peer-cases
  static constexpr int kMaxTilingCases = 10000;    // tiling --cases (every case runs once per tiling)
  static constexpr int kMaxKeys = 65536;           // --max-keys
  static constexpr int kMaxBatch = 4096;           // --max-batch (sequences in one batch_invariance case)
  static constexpr int kMaxChunk = 1 << 20;        // prefill --chunk
  static constexpr int kMaxShards = 1 << 16;       // check --shard I/N
  static constexpr int kMaxShrinkSeconds = 86400;  // check --shrink-time
};

// Repeatable options that also take comma-separated lists: {"a,b", "c"} -> {"a", "b", "c"}.
inline std::vector<std::string> split_csv(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    std::stringstream ss(item);
    std::string part;
    while (std::getline(ss, part, ','))
      if (!part.empty()) out.push_back(part);
  }
  return out;
}

// A check for CLI11 on list options: the value names at least one item. "" or "," is a typo that,
// read as no list, would silently select everything.
inline CLI::Validator names_something() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return split_csv({text}).empty() ? "must name at least one item" : "";
      },
      "LIST");
}

// A check for CLI11: a decimal unsigned 64-bit integer, digits only ("-1" and " 1" are refused,
// where a plain conversion would wrap or skip the space).
inline CLI::Validator decimal_u64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return json_fields::parse_decimal_u64(text) ? std::string()
                                                    : "must be a decimal integer in [0, 2^64 - 1]";
      },
      "UINT64");
}

// A check for CLI11: a number in [lo, hi]. CLI::Range alone lets NaN through (no comparison with
// NaN is true), and a NaN limit turns its guard off (--max-memory nan compares false with every
// estimate).
inline CLI::Validator finite_range(double lo, double hi) {
  const CLI::Validator nan_check(
      [](std::string& text) -> std::string {
        double v = 0.0;
        return CLI::detail::lexical_cast(text, v) && std::isnan(v) ? "must be a number, not " + text : "";
      },
      "");
  return CLI::Range(lo, hi) & nan_check;
}

// A check for CLI11: a non-empty value (an empty --subject or --report-dir is a typo).
inline CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "must not be empty" : ""; }, "TEXT");
}

}  // namespace attncheck::cli
