// Option parsing shared by the CLI's subcommands (main.cpp, mutants.cpp).
#pragma once
#include <sstream>
#include <string>
#include <vector>

namespace attncheck::cli {

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

}  // namespace attncheck::cli
