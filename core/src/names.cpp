#include "attncheck/names.hpp"

#include <array>
#include <utility>

namespace attncheck {
namespace {

template <class T, size_t N>
const char* name_of(const std::array<std::pair<T, const char*>, N>& table, T value, const char* missing) {
  for (const auto& [v, n] : table)
    if (v == value) return n;
  return missing;
}
template <class T, size_t N>
std::optional<T> value_of(const std::array<std::pair<T, const char*>, N>& table, std::string_view name) {
  for (const auto& [v, n] : table)
    if (name == n) return v;
  return std::nullopt;
}
template <class T, size_t N>
std::string joined(const std::array<std::pair<T, const char*>, N>& table) {
  std::string out;
  for (const auto& [v, n] : table) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

constexpr std::array<std::pair<uint32_t, const char*>, 4> kOps{{{AC_OP_MERGE, "merge"},
                                                                {AC_OP_SOFTMAX, "softmax"},
                                                                {AC_OP_ATTENTION, "attention"},
                                                                {AC_OP_SPLITKV, "splitkv"}}};
constexpr std::array<std::pair<ac_dtype, const char*>, 3> kDtypes{
    {{AC_DTYPE_F32, "fp32"}, {AC_DTYPE_F16, "fp16"}, {AC_DTYPE_BF16, "bf16"}}};
constexpr std::array<std::pair<ac_fold, const char*>, 3> kFolds{
    {{AC_FOLD_LEFT, "left"}, {AC_FOLD_RIGHT, "right"}, {AC_FOLD_TREE, "tree"}}};
constexpr std::array<std::pair<RunStatus, const char*>, 5> kStatuses{
    {{RunStatus::passed, "passed"},
     {RunStatus::failed, "failed"},
     {RunStatus::crashed, "crashed"},
     {RunStatus::not_applicable, "not_applicable"},
     {RunStatus::interrupted, "interrupted"}}};

}  // namespace

const char* op_name(uint32_t op) { return name_of(kOps, op, "unknown"); }
std::optional<uint32_t> op_from(std::string_view name) { return value_of(kOps, name); }
const char* dtype_name(ac_dtype d) { return name_of(kDtypes, d, "unknown"); }
int dtype_bytes(ac_dtype d) { return d == AC_DTYPE_F32 ? 4 : 2; }
std::optional<ac_dtype> dtype_from(std::string_view name) { return value_of(kDtypes, name); }
const char* fold_name(ac_fold f) { return name_of(kFolds, f, "unknown"); }
std::optional<ac_fold> fold_from(std::string_view name) { return value_of(kFolds, name); }
const char* status_name(RunStatus s) { return name_of(kStatuses, s, "unknown"); }
std::optional<RunStatus> status_from(std::string_view name) { return value_of(kStatuses, name); }
std::string op_names() { return joined(kOps); }
std::string dtype_names() { return joined(kDtypes); }
std::string fold_names() { return joined(kFolds); }

}  // namespace attncheck
