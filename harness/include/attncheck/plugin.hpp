// Plugins: a user's kernel as a shared library exporting the C ABI of plugin_abi.h.
//
// load_plugin(path) dlopens the library, reads attncheck_plugin_abi_version() first (a missing
// symbol or another version is refused before anything else in the library is touched), then
// attncheck_plugin(), and validates every declared subject (validate_subject). Any problem is a
// PluginError whose what() is one line naming the file and the problem; the CLI turns it into
// exit code 2 before any work is done.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/plugin_abi.h"
#include "attncheck/subject.hpp"

namespace attncheck {

struct PluginError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct LoadedPlugin {
  std::string path;
  std::string name;  // ac_plugin.name
  std::vector<std::unique_ptr<Subject>> subjects;
};

LoadedPlugin load_plugin(const std::string& path);

// Problems with one declared subject (empty when it is valid): name syntax, known op / dtype /
// layout / fold / flag bits, head sizes, LSE base and sentinel (0 exactly when the empty LSE is
// declared undefined), a function pointer for each declared operation, tilings with positive Br,
// Bc (at least one for attention and split-KV in version 1), max_splits and fold orders for
// split-KV. `abi_version` is the version the subject was declared under: version 1 has no flags.
std::vector<std::string> validate_subject(const ac_subject& s, uint32_t abi_version = AC_ABI_VERSION_MAX);

// A version-1 (version-2) plugin's subject in the current layout, with no contract flags (no
// version-3 fields).
ac_subject subject_from_v1(const ac_subject_v1& v);
ac_subject subject_from_v2(const ac_subject_v2& v);

// Names must be unique across everything loaded (built-ins and plugins): returns the first
// duplicate name, or "" when all are distinct.
std::string first_duplicate_name(const std::vector<std::unique_ptr<Subject>>& subjects);

}  // namespace attncheck
