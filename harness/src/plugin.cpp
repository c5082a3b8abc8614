// Plugin loading and capability validation (see plugin.hpp). The library is opened RTLD_NOW so
// an unresolved symbol inside it fails here, with dlerror's words, rather than mid-run. Handles
// are never dlclose'd: a CUDA plugin's static runtime may still have work registered at exit,
// and unloading it before the process ends buys nothing.
#include "attncheck/plugin.hpp"

#include <dlfcn.h>

#include <set>

#include "attncheck/abi_subject.hpp"

namespace attncheck {

namespace {

bool valid_name(const char* n) {
  if (!n || !*n) return false;
  for (const char* p = n; *p; ++p) {
    const char c = *p;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> validate_subject(const ac_subject& s) {
  std::vector<std::string> problems;
  auto bad = [&](const std::string& p) { problems.push_back(p); };
  const ac_caps& c = s.caps;
  if (!valid_name(s.name)) bad("name must be non-empty letters, digits, '-', '_', '.'");
  if (!s.description) bad("description is NULL");
  const uint32_t known_ops = AC_OP_MERGE | AC_OP_SOFTMAX | AC_OP_ATTENTION | AC_OP_SPLITKV;
  if (c.ops == 0) bad("declares no operation (caps.ops = 0)");
  if (c.ops & ~known_ops) bad("unknown bits in caps.ops");
  const uint32_t known_dtypes =
      AC_DTYPE_BIT(AC_DTYPE_F32) | AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
  if (c.dtypes == 0) bad("declares no dtype (caps.dtypes = 0)");
  if (c.dtypes & ~known_dtypes) bad("unknown bits in caps.dtypes");
  if (c.memory != AC_MEMORY_HOST && c.memory != AC_MEMORY_CUDA) bad("caps.memory is neither host nor cuda");
  if (c.head_sizes) {
    if (c.num_head_sizes <= 0) bad("caps.head_sizes given with num_head_sizes <= 0");
    for (int32_t i = 0; i < c.num_head_sizes; ++i)
      if (c.head_sizes[i] <= 0) bad("caps.head_sizes holds a size <= 0");
  } else if (c.head_size_min < 1 || c.head_size_max < c.head_size_min) {
    bad("head size range [" + std::to_string(c.head_size_min) + ", " +
        std::to_string(c.head_size_max) + "] is empty or starts below 1");
  }
  if (c.lse_base != 0 && c.lse_base != 2) bad("caps.lse_base must be 0 (natural) or 2");
  if (c.lse_layout != AC_LSE_HEADS_TOKENS && c.lse_layout != AC_LSE_TOKENS_HEADS)
    bad("caps.lse_layout is not a known layout");
  if (c.empty_lse_sign != -1 && c.empty_lse_sign != 1) bad("caps.empty_lse_sign must be -1 or +1");
  if ((c.ops & AC_OP_MERGE) && !s.merge) bad("declares merge but the merge function is NULL");
  if ((c.ops & AC_OP_SOFTMAX) && !s.softmax) bad("declares softmax but the softmax function is NULL");
  const bool attention_like = (c.ops & (AC_OP_ATTENTION | AC_OP_SPLITKV)) != 0;
  if (attention_like) {
    if (!s.attention) bad("declares attention/split-KV but the attention function is NULL");
    if (!c.tilings || c.num_tilings <= 0) bad("declares attention/split-KV but no tilings");
    for (int32_t i = 0; c.tilings && i < c.num_tilings; ++i)
      if (c.tilings[i].br <= 0 || c.tilings[i].bc <= 0)
        bad("tiling " + std::to_string(i) + " has Br or Bc <= 0");
  }
  if (c.ops & AC_OP_SPLITKV) {
    if (c.max_splits < 1) bad("declares split-KV but caps.max_splits < 1");
    const uint32_t known_folds = AC_FOLD_BIT(AC_FOLD_LEFT) | AC_FOLD_BIT(AC_FOLD_RIGHT) | AC_FOLD_BIT(AC_FOLD_TREE);
    if (c.fold_orders == 0 || (c.fold_orders & ~known_folds)) bad("split-KV fold_orders empty or unknown");
  }
  return problems;
}

std::string first_duplicate_name(const std::vector<std::unique_ptr<Subject>>& subjects) {
  std::set<std::string> seen;
  for (const auto& s : subjects)
    if (!seen.insert(s->name()).second) return s->name();
  return "";
}

LoadedPlugin load_plugin(const std::string& path) {
  const std::string where = "plugin " + path + ": ";
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    throw PluginError(where + "cannot load: " + (e ? e : "unknown dlopen error"));
  }
  auto version_fn = reinterpret_cast<ac_plugin_abi_version_fn>(dlsym(handle, "attncheck_plugin_abi_version"));
  if (!version_fn)
    throw PluginError(where + "missing symbol attncheck_plugin_abi_version (not an attncheck plugin, or not extern \"C\")");
  const uint32_t version = version_fn();
  if (version != AC_ABI_VERSION)
    throw PluginError(where + "ABI version " + std::to_string(version) + ", this attncheck speaks version " +
                      std::to_string(AC_ABI_VERSION) + " (rebuild the plugin against this plugin_abi.h)");
  auto plugin_fn = reinterpret_cast<ac_plugin_fn>(dlsym(handle, "attncheck_plugin"));
  if (!plugin_fn) throw PluginError(where + "missing symbol attncheck_plugin");
  const ac_plugin* p = plugin_fn();
  if (!p) throw PluginError(where + "attncheck_plugin() returned NULL");
  if (p->abi_version != AC_ABI_VERSION)
    throw PluginError(where + "ac_plugin.abi_version is " + std::to_string(p->abi_version) + ", expected " +
                      std::to_string(AC_ABI_VERSION));
  if (p->num_subjects <= 0 || !p->subjects) throw PluginError(where + "declares no subjects");

  LoadedPlugin out;
  out.path = path;
  out.name = p->name ? p->name : path;
  std::vector<ac_subject> subjects(p->subjects, p->subjects + p->num_subjects);
  std::set<std::string> names;
  for (size_t i = 0; i < subjects.size(); ++i) {
    const ac_subject& s = subjects[i];
    // Built with append rather than operator+ chains: GCC 12 -Wrestrict misfires on those.
    std::string label;
    if (s.name) {
      label.append(1, '\'').append(s.name).append(1, '\'');
    } else {
      label.append("#").append(std::to_string(i));
    }
    const auto problems = validate_subject(s);
    if (!problems.empty()) throw PluginError(where + "subject " + label + ": " + problems.front());
    if (!names.insert(s.name).second) throw PluginError(where + "subject name " + label + " declared twice");
  }
  // The handle stays open for the process's lifetime (see the file comment).
  std::shared_ptr<void> keep(handle, [](void*) {});
  out.subjects = adapt_subjects(subjects, path, keep);
  return out;
}

}  // namespace attncheck
