// Plugin loading and capability validation (see plugin.hpp). The library is opened RTLD_NOW so
// an unresolved symbol inside it fails here, with dlerror's words, rather than mid-run. Handles
// are never dlclose'd: a CUDA plugin's static runtime may still have work registered at exit,
// and unloading it before the process ends buys nothing.
#include "attncheck/plugin.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <set>

#include "attncheck/abi_subject.hpp"
#include "attncheck/json_fields.hpp"

namespace attncheck {

namespace {

bool valid_name(const char* n) {
  if (!n || !*n) return false;
  for (const char* p = n; *p; ++p) {
    const char c = *p;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// " is out of range LO..HI": the tail of a range problem's line.
std::string out_of(int64_t lo, int64_t hi) {
  return " is out of range " + std::to_string(lo) + ".." + std::to_string(hi);
}

// A version-1 subject must read the same through either layout: every field they share sits at
// the same offset, so the copy below is field by field only for clarity.
#define AC_SAME_OFFSET(f) \
  static_assert(offsetof(ac_caps, f) == offsetof(ac_caps_v1, f), "ac_caps." #f " moved")
AC_SAME_OFFSET(ops);
AC_SAME_OFFSET(dtypes);
AC_SAME_OFFSET(memory);
AC_SAME_OFFSET(head_size_min);
AC_SAME_OFFSET(head_size_max);
AC_SAME_OFFSET(head_sizes);
AC_SAME_OFFSET(num_head_sizes);
AC_SAME_OFFSET(lse_base);
AC_SAME_OFFSET(lse_layout);
AC_SAME_OFFSET(empty_lse_sign);
AC_SAME_OFFSET(features);
AC_SAME_OFFSET(tilings);
AC_SAME_OFFSET(num_tilings);
AC_SAME_OFFSET(max_splits);
AC_SAME_OFFSET(fold_orders);
#undef AC_SAME_OFFSET
static_assert(offsetof(ac_caps, flags) >= offsetof(ac_caps_v1, fold_orders) + sizeof(uint32_t));
// Version 2's layout is version 3's up to `flags`: the version-3 fields trail it.
static_assert(offsetof(ac_caps, flags) == offsetof(ac_caps_v2, flags), "ac_caps.flags moved");
static_assert(offsetof(ac_caps, variants) >= offsetof(ac_caps_v2, flags) + sizeof(uint32_t),
              "ac_caps.variants overlaps version 2");

}  // namespace

ac_subject subject_from_v1(const ac_subject_v1& v) {
  ac_subject s{};
  s.name = v.name;
  s.description = v.description;
  const ac_caps_v1& a = v.caps;
  ac_caps& c = s.caps;
  c.ops = a.ops;
  c.dtypes = a.dtypes;
  c.memory = a.memory;
  c.head_size_min = a.head_size_min;
  c.head_size_max = a.head_size_max;
  c.head_sizes = a.head_sizes;
  c.num_head_sizes = a.num_head_sizes;
  c.lse_base = a.lse_base;
  c.lse_layout = a.lse_layout;
  c.empty_lse_sign = a.empty_lse_sign;
  c.features = a.features;
  c.tilings = a.tilings;
  c.num_tilings = a.num_tilings;
  c.max_splits = a.max_splits;
  c.fold_orders = a.fold_orders;
  c.flags = 0;  // version 1 has no contract bits
  s.merge = v.merge;
  s.softmax = v.softmax;
  s.attention = v.attention;
  s.self = v.self;
  return s;
}

ac_subject subject_from_v2(const ac_subject_v2& v) {
  ac_subject s{};
  s.name = v.name;
  s.description = v.description;
  // The shared prefix is laid out alike (asserted above); the version-3 fields stay 0.
  std::memcpy(&s.caps, &v.caps, offsetof(ac_caps_v2, flags) + sizeof(uint32_t));
  s.merge = v.merge;
  s.softmax = v.softmax;
  s.attention = v.attention;
  s.self = v.self;
  return s;
}

std::vector<std::string> validate_subject(const ac_subject& s, uint32_t abi_version) {
  std::vector<std::string> problems;
  auto bad = [&](const std::string& p) { problems.push_back(p); };
  const ac_caps& c = s.caps;
  if (!valid_name(s.name)) bad("name must be non-empty letters, digits, '-', '_', '.'");
  // A name becomes part of corpus and write-ahead file names, and of every report line.
  else if (std::strlen(s.name) > AC_MAX_NAME_CHARS)
    bad("name is " + std::to_string(std::strlen(s.name)) + " characters long, more than " +
        std::to_string(AC_MAX_NAME_CHARS));
  if (!s.description) bad("description is NULL");
  const uint32_t known_ops = AC_OP_MERGE | AC_OP_SOFTMAX | AC_OP_ATTENTION | AC_OP_SPLITKV | AC_OP_QUANTIZE;
  if (c.ops == 0) bad("declares no operation (caps.ops = 0)");
  if (c.ops & ~known_ops) bad("unknown bits in caps.ops");
  const uint32_t known_dtypes =
      AC_DTYPE_BIT(AC_DTYPE_F32) | AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
  const uint32_t fp8_dtypes = kFp8DtypeBits;
  if (c.dtypes == 0) bad("declares no dtype (caps.dtypes = 0)");
  if (c.dtypes & fp8_dtypes)
    bad("declares an FP8 dtype in caps.dtypes (Q's and O's); an FP8 KV cache is caps.kv_dtypes");
  if (c.dtypes & ~(known_dtypes | fp8_dtypes)) bad("unknown bits in caps.dtypes");
  if (c.memory != AC_MEMORY_HOST && c.memory != AC_MEMORY_CUDA) bad("caps.memory is neither host nor cuda");
  // The ranges of plugin_abi.h (AC_MAX_*): each bounds what the declaration makes attncheck
  // allocate or loop over.
  if (c.head_sizes) {
    // The entries are read only where their count is in range: past it the array may be shorter.
    if (c.num_head_sizes <= 0 || c.num_head_sizes > AC_MAX_HEAD_SIZES)
      bad("caps.num_head_sizes " + std::to_string(c.num_head_sizes) + out_of(1, AC_MAX_HEAD_SIZES));
    else
      for (int32_t i = 0; i < c.num_head_sizes; ++i)
        if (c.head_sizes[i] < 1 || c.head_sizes[i] > AC_MAX_HEAD_SIZE)
          bad("caps.head_sizes[" + std::to_string(i) + "] " + std::to_string(c.head_sizes[i]) +
              out_of(1, AC_MAX_HEAD_SIZE));
  } else if (c.head_size_min < 1 || c.head_size_max < c.head_size_min) {
    bad("head size range [" + std::to_string(c.head_size_min) + ", " + std::to_string(c.head_size_max) +
        "] is empty or starts below 1");
  } else if (c.head_size_min > AC_MAX_HEAD_SIZE) {
    bad("caps.head_size_min " + std::to_string(c.head_size_min) + out_of(1, AC_MAX_HEAD_SIZE));
  }
  if (c.max_splits < 0 || c.max_splits > AC_MAX_SPLITS)
    bad("caps.max_splits " + std::to_string(c.max_splits) + out_of(0, AC_MAX_SPLITS));
  if (c.num_tilings > AC_MAX_TILINGS)
    bad("caps.num_tilings " + std::to_string(c.num_tilings) + out_of(0, AC_MAX_TILINGS));
  if (c.lse_base != 0 && c.lse_base != 2) bad("caps.lse_base must be 0 (natural) or 2");
  if (c.lse_layout != AC_LSE_HEADS_TOKENS && c.lse_layout != AC_LSE_TOKENS_HEADS)
    bad("caps.lse_layout is not a known layout");
  if (abi_version < 2 && c.flags != 0) bad("caps.flags is a version-2 field; this subject is version 1");
  if (c.flags & ~uint32_t(AC_CAP_KNOWN_V2)) bad("unknown bits in caps.flags");
  if (c.flags & AC_CAP_EMPTY_LSE_UNDEFINED) {
    if (c.empty_lse_sign != 0) bad("caps.empty_lse_sign must be 0 with AC_CAP_EMPTY_LSE_UNDEFINED");
  } else if (c.empty_lse_sign != -1 && c.empty_lse_sign != 1) {
    bad(abi_version < 2 ? "caps.empty_lse_sign must be -1 or +1"
                        : "caps.empty_lse_sign must be -1 or +1 (or 0 with AC_CAP_EMPTY_LSE_UNDEFINED)");
  }
  if (abi_version < 3 &&
      (c.variants || c.page_sizes || c.num_page_sizes || c.head_pairs || c.num_head_pairs || c.kv_dtypes ||
       c.fp8 || c.max_call_seqs || c.max_call_tokens || c.max_call_keys))
    bad("caps.variants and the fields after it are version-3 fields; this subject is version " +
        std::to_string(abi_version));
  if (c.variants & ~uint32_t(AC_VAR_KNOWN_V3)) bad("unknown bits in caps.variants");
  if (c.variants && !(c.ops & (AC_OP_ATTENTION | AC_OP_SPLITKV)))
    bad("caps.variants declared by a subject without attention or split-KV");
  if (c.kv_dtypes & ~fp8_dtypes)
    bad("caps.kv_dtypes holds a bit other than AC_DTYPE_E4M3, AC_DTYPE_E5M2 and AC_DTYPE_E4M3FNUZ");
  if (c.fp8 & ~uint32_t(AC_FP8_KNOWN)) bad("unknown bits in caps.fp8");
  if (c.fp8 && !c.kv_dtypes) bad("caps.fp8 declared without an FP8 KV dtype in caps.kv_dtypes");
  if (c.kv_dtypes && !(c.ops & (AC_OP_ATTENTION | AC_OP_SPLITKV | AC_OP_QUANTIZE | AC_OP_MERGE)))
    bad("caps.kv_dtypes declared by a subject without attention, split-KV, quantize or merge");
  if ((c.ops & AC_OP_MERGE) && c.kv_dtypes && !(c.fp8 & AC_FP8_SATURATE))
    bad("a merge writing FP8 outputs (caps.kv_dtypes) declares their saturating cast (AC_FP8_SATURATE)");
  if (abi_version < 3 && (c.ops & AC_OP_QUANTIZE)) bad("declares quantize, a version-3 operation");
  if ((c.ops & AC_OP_QUANTIZE) && !c.kv_dtypes)
    bad("declares quantize but no FP8 format to write (caps.kv_dtypes)");
  if ((c.ops & AC_OP_QUANTIZE) && !s.quantize) bad("declares quantize but the quantize function is NULL");
  if ((c.fp8 & (AC_FP8_Q | AC_FP8_P_E4M3 | AC_FP8_DESCALE_PER_SEQUENCE)) &&
      !(c.ops & (AC_OP_ATTENTION | AC_OP_SPLITKV)))
    bad("caps.fp8 declares AC_FP8_Q, AC_FP8_P_E4M3 or AC_FP8_DESCALE_PER_SEQUENCE (an attention's FP8 cache) "
        "without attention or split-KV");
  if ((c.fp8 & AC_FP8_Q_REQUIRED) && !(c.fp8 & AC_FP8_Q))
    bad("caps.fp8 declares AC_FP8_Q_REQUIRED (every FP8 call with Q in FP8) without AC_FP8_Q");
  if ((c.fp8 & AC_FP8_TRUNCATED_SUMS) && !(c.fp8 & AC_FP8_Q))
    bad("caps.fp8 declares AC_FP8_TRUNCATED_SUMS (e4m3 products on the tensor cores) without AC_FP8_Q");
  if ((c.fp8 & AC_FP8_P_SCALE) && !(c.fp8 & AC_FP8_P_E4M3))
    bad("caps.fp8 declares AC_FP8_P_SCALE (P's scale per call) without AC_FP8_P_E4M3");
  if ((c.fp8 & AC_FP8_SATURATE) && !(c.ops & (AC_OP_QUANTIZE | AC_OP_MERGE)) && !(c.fp8 & AC_FP8_OUT))
    bad("caps.fp8 declares AC_FP8_SATURATE (a quantiser's, a merge's or an FP8 output's casts) without "
        "AC_OP_QUANTIZE, AC_OP_MERGE or AC_FP8_OUT");
  if ((c.fp8 & AC_FP8_OUT) && !(c.ops & (AC_OP_ATTENTION | AC_OP_SPLITKV)))
    bad("caps.fp8 declares AC_FP8_OUT (an attention's FP8 output) without attention or split-KV");
  if ((c.fp8 & AC_FP8_AMAX) && !(c.ops & (AC_OP_ATTENTION | AC_OP_SPLITKV)))
    bad("caps.fp8 declares AC_FP8_AMAX (an attention's maxima of P and O) without attention or split-KV");
  if (c.max_call_seqs < 0)
    bad("caps.max_call_seqs " + std::to_string(c.max_call_seqs) + " is negative (0: no limit)");
  if (c.max_call_tokens < 0)
    bad("caps.max_call_tokens " + std::to_string(c.max_call_tokens) + " is negative (0: no limit)");
  if (c.max_call_keys < 0)
    bad("caps.max_call_keys " + std::to_string(c.max_call_keys) + " is negative (0: no limit)");
  if (c.variants & AC_VAR_PAGED_KV) {
    if (!c.page_sizes || c.num_page_sizes < 1 || c.num_page_sizes > AC_MAX_PAGE_SIZES)
      bad("declares AC_VAR_PAGED_KV but caps.num_page_sizes " + std::to_string(c.num_page_sizes) +
          out_of(1, AC_MAX_PAGE_SIZES) + " or caps.page_sizes is NULL");
    else
      for (int32_t i = 0; i < c.num_page_sizes; ++i) {
        if (c.page_sizes[i] < 1 || c.page_sizes[i] > AC_MAX_PAGE_SIZE)
          bad("caps.page_sizes[" + std::to_string(i) + "] " + std::to_string(c.page_sizes[i]) +
              out_of(1, AC_MAX_PAGE_SIZE));
        if (std::find(c.page_sizes, c.page_sizes + i, c.page_sizes[i]) != c.page_sizes + i)
          bad("caps.page_sizes[" + std::to_string(i) + "] " + std::to_string(c.page_sizes[i]) +
              " is named twice");
      }
  } else if (c.page_sizes || c.num_page_sizes) {
    bad("caps.page_sizes given without AC_VAR_PAGED_KV");
  }
  if (c.variants & AC_VAR_HEAD_SIZE_V) {
    if (!c.head_pairs || c.num_head_pairs < 1 || c.num_head_pairs > AC_MAX_HEAD_PAIRS)
      bad("declares AC_VAR_HEAD_SIZE_V but caps.num_head_pairs " + std::to_string(c.num_head_pairs) +
          out_of(1, AC_MAX_HEAD_PAIRS) + " or caps.head_pairs is NULL");
    else
      for (int32_t i = 0; i < c.num_head_pairs; ++i)
        if (c.head_pairs[i].qk < 1 || c.head_pairs[i].qk > AC_MAX_HEAD_SIZE || c.head_pairs[i].v < 1 ||
            c.head_pairs[i].v > AC_MAX_HEAD_SIZE)
          bad("caps.head_pairs[" + std::to_string(i) + "] (" + std::to_string(c.head_pairs[i].qk) + ", " +
              std::to_string(c.head_pairs[i].v) + "): a size" + out_of(1, AC_MAX_HEAD_SIZE));
  } else if (c.head_pairs || c.num_head_pairs) {
    bad("caps.head_pairs given without AC_VAR_HEAD_SIZE_V");
  }
  if ((c.variants & AC_VAR_V_IN_K) && !(c.variants & AC_VAR_HEAD_SIZE_V))
    bad("declares AC_VAR_V_IN_K (V inside K) without AC_VAR_HEAD_SIZE_V (a V head size below K's)");
  // V inside K is drawn for a pair whose V is narrower than K: without one it would never run.
  if ((c.variants & AC_VAR_V_IN_K) && (c.variants & AC_VAR_HEAD_SIZE_V) && c.head_pairs &&
      std::none_of(c.head_pairs, c.head_pairs + std::max(0, c.num_head_pairs),
                   [](const ac_head_pair& p) { return p.v < p.qk; }))
    bad("declares AC_VAR_V_IN_K (V inside K) but no caps.head_pairs entry has V's head size below K's");
  if ((c.ops & AC_OP_MERGE) && !s.merge) bad("declares merge but the merge function is NULL");
  if ((c.ops & AC_OP_SOFTMAX) && !s.softmax) bad("declares softmax but the softmax function is NULL");
  const bool attention_like = (c.ops & (AC_OP_ATTENTION | AC_OP_SPLITKV)) != 0;
  if (attention_like) {
    if (!s.attention) bad("declares attention/split-KV but the attention function is NULL");
    // Version 2 lets a black-box kernel declare none; version 1 plugins may index caps.tilings
    // with the call's tiling unconditionally, so they must declare one.
    if (abi_version < 2 && (!c.tilings || c.num_tilings <= 0))
      bad("declares attention/split-KV but no tilings (version 2 may declare none)");
    if (c.num_tilings < 0 || (c.num_tilings > 0 && !c.tilings))
      bad("caps.num_tilings is negative, or positive with tilings NULL");
    for (int32_t i = 0; c.tilings && c.num_tilings <= AC_MAX_TILINGS && i < c.num_tilings; ++i)
      if (c.tilings[i].br <= 0 || c.tilings[i].bc <= 0)
        bad("tiling " + std::to_string(i) + " has Br or Bc <= 0");
      else if (c.tilings[i].br > AC_MAX_TILE || c.tilings[i].bc > AC_MAX_TILE)
        bad("tiling " + std::to_string(i) + " (" + std::to_string(c.tilings[i].br) + ", " +
            std::to_string(c.tilings[i].bc) + "): Br or Bc" + out_of(1, AC_MAX_TILE));
  }
  if (c.ops & AC_OP_SPLITKV) {
    if (c.max_splits < 1) bad("declares split-KV but caps.max_splits < 1");
    const uint32_t known_folds =
        AC_FOLD_BIT(AC_FOLD_LEFT) | AC_FOLD_BIT(AC_FOLD_RIGHT) | AC_FOLD_BIT(AC_FOLD_TREE);
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
    throw PluginError(
        where + "missing symbol attncheck_plugin_abi_version (not an attncheck plugin, or not extern \"C\")");
  const uint32_t version = version_fn();
  if (version < AC_ABI_VERSION_MIN || version > AC_ABI_VERSION_MAX)
    throw PluginError(where + "ABI version " + std::to_string(version) + ", this attncheck speaks versions " +
                      std::to_string(AC_ABI_VERSION_MIN) + " to " + std::to_string(AC_ABI_VERSION_MAX) +
                      " (rebuild the plugin against this plugin_abi.h)");
  auto plugin_fn = reinterpret_cast<ac_plugin_fn>(dlsym(handle, "attncheck_plugin"));
  if (!plugin_fn) throw PluginError(where + "missing symbol attncheck_plugin");
  const ac_plugin* p = plugin_fn();
  if (!p) throw PluginError(where + "attncheck_plugin() returned NULL");
  // The plugin's two statements of its version must agree: the array's layout follows from it.
  if (p->abi_version != version)
    throw PluginError(where + "ac_plugin.abi_version is " + std::to_string(p->abi_version) +
                      ", but attncheck_plugin_abi_version() said " + std::to_string(version));
  if (p->num_subjects <= 0 || !p->subjects) throw PluginError(where + "declares no subjects");

  LoadedPlugin out;
  out.path = path;
  out.name = p->name ? p->name : path;
  std::vector<ac_subject> subjects;
  if (version == 1) {
    // Read with the version-1 stride and layout; `flags` and later fields are never read from it.
    const auto* v1 = reinterpret_cast<const ac_subject_v1*>(p->subjects);
    for (int32_t i = 0; i < p->num_subjects; ++i) subjects.push_back(subject_from_v1(v1[i]));
  } else if (version == 2) {
    // Read with the version-2 stride; the version-3 fields are 0.
    const auto* v2 = reinterpret_cast<const ac_subject_v2*>(p->subjects);
    for (int32_t i = 0; i < p->num_subjects; ++i) subjects.push_back(subject_from_v2(v2[i]));
  } else {
    subjects.assign(p->subjects, p->subjects + p->num_subjects);
  }
  std::set<std::string> names;
  for (size_t i = 0; i < subjects.size(); ++i) {
    const ac_subject& s = subjects[i];
    // Built with append rather than operator+ chains: GCC 12 -Wrestrict misfires on those.
    std::string label;
    if (s.name) {
      // Cut and escaped: an over-long name must leave room in the line for what is wrong with it.
      label.append(1, '\'').append(json_fields::printable(s.name, AC_MAX_NAME_CHARS)).append(1, '\'');
    } else {
      label.append("#").append(std::to_string(i));
    }
    const auto problems = validate_subject(s, version);
    if (!problems.empty()) throw PluginError(where + "subject " + label + ": " + problems.front());
    if (!names.insert(s.name).second) throw PluginError(where + "subject name " + label + " declared twice");
  }
  // The handle stays open for the process's lifetime (see the file comment).
  std::shared_ptr<void> keep(handle, [](void*) {});
  out.subjects = adapt_subjects(subjects, path, keep);
  return out;
}

}  // namespace attncheck
