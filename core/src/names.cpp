#include "attncheck/names.hpp"

#include <array>

namespace attncheck {
namespace {

template <class T>
const char* name_of(std::span<const Spelling<T>> table, T value, const char* missing) {
  for (const auto& [v, n] : table)
    if (v == value) return n;
  return missing;
}
template <class T>
std::optional<T> value_of(std::span<const Spelling<T>> table, std::string_view name) {
  for (const auto& [v, n] : table)
    if (name == n) return v;
  return std::nullopt;
}
template <class T>
std::string joined(std::span<const Spelling<T>> table) {
  std::string out;
  for (const auto& [v, n] : table) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

constexpr std::array<Spelling<uint32_t>, 5> kOps{{{AC_OP_MERGE, "merge"},
                                                  {AC_OP_SOFTMAX, "softmax"},
                                                  {AC_OP_ATTENTION, "attention"},
                                                  {AC_OP_SPLITKV, "splitkv"},
                                                  {AC_OP_QUANTIZE, "quantize"}}};
constexpr std::array<Spelling<ac_dtype>, 3> kDtypes{
    {{AC_DTYPE_F32, "fp32"}, {AC_DTYPE_F16, "fp16"}, {AC_DTYPE_BF16, "bf16"}}};
// FP8 KV cache formats (kv_dtype), never Q's or O's dtype: their own table.
constexpr std::array<Spelling<ac_dtype>, 3> kKvDtypes{
    {{AC_DTYPE_E4M3, "e4m3fn"}, {AC_DTYPE_E5M2, "e5m2"}, {AC_DTYPE_E4M3FNUZ, "e4m3fnuz"}}};
constexpr std::array<Spelling<ac_fold>, 3> kFolds{
    {{AC_FOLD_LEFT, "left"}, {AC_FOLD_RIGHT, "right"}, {AC_FOLD_TREE, "tree"}}};
constexpr std::array<Spelling<uint32_t>, 8> kFeatures{{{AC_FEAT_CAUSAL, "causal"},
                                                       {AC_FEAT_MASK, "mask"},
                                                       {AC_FEAT_VARLEN, "varlen"},
                                                       {AC_FEAT_GQA, "gqa"},
                                                       {AC_FEAT_LSE, "lse"},
                                                       {AC_FEAT_NAIVE_EXP, "naive_exp"},
                                                       {AC_FEAT_SCORES_IN_INPUT_TYPE, "scores_in_input_type"},
                                                       {AC_FEAT_FLUSHED_EXP, "flushed_exp"}}};
constexpr std::array<Spelling<uint32_t>, 6> kVariants{{{AC_VAR_PAGED_KV, "paged_kv"},
                                                       {AC_VAR_HEAD_SIZE_V, "head_size_v"},
                                                       {AC_VAR_SOFTCAP, "softcap"},
                                                       {AC_VAR_WINDOW, "window"},
                                                       {AC_VAR_SINKS, "sinks"},
                                                       {AC_VAR_V_IN_K, "v_in_k"}}};
constexpr std::array<Spelling<uint32_t>, 10> kFp8{{{AC_FP8_DESCALE_PER_KV_HEAD, "descale_per_kv_head"},
                                                   {AC_FP8_Q, "fp8_q"},
                                                   {AC_FP8_P_E4M3, "p_e4m3"},
                                                   {AC_FP8_DESCALE_PER_SEQUENCE, "descale_per_sequence"},
                                                   {AC_FP8_SATURATE, "saturate"},
                                                   {AC_FP8_Q_REQUIRED, "fp8_q_required"},
                                                   {AC_FP8_TRUNCATED_SUMS, "truncated_sums"},
                                                   {AC_FP8_P_SCALE, "p_scale"},
                                                   {AC_FP8_OUT, "fp8_out"},
                                                   {AC_FP8_AMAX, "amax"}}};
// The contract bits the worker protocol writes as boolean fields (AC_CAP_EMPTY_LSE_UNDEFINED is
// spelled as empty_lse "undefined" instead).
constexpr std::array<Spelling<uint32_t>, 6> kFlagFields{
    {{AC_CAP_REFUSES_ZERO_KEYS, "refuses_zero_keys"},
     {AC_CAP_FLUSHES_SUBNORMALS, "flushes_subnormals"},
     {AC_CAP_NONDETERMINISTIC, "nondeterministic"},
     {AC_CAP_FTZ_ARITHMETIC, "ftz_arithmetic"},
     {AC_CAP_BATCH_INVARIANT, "batch_invariant"},
     {AC_CAP_EMPTY_STATES_ZERO_O, "empty_states_zero_o"}}};
constexpr std::array<Spelling<RunStatus>, 5> kStatuses{{{RunStatus::passed, "passed"},
                                                        {RunStatus::failed, "failed"},
                                                        {RunStatus::crashed, "crashed"},
                                                        {RunStatus::not_applicable, "not_applicable"},
                                                        {RunStatus::interrupted, "interrupted"}}};

}  // namespace

std::span<const Spelling<uint32_t>> op_spellings() { return kOps; }
std::span<const Spelling<ac_dtype>> dtype_spellings() { return kDtypes; }
std::span<const Spelling<ac_fold>> fold_spellings() { return kFolds; }
std::span<const Spelling<uint32_t>> feature_spellings() { return kFeatures; }
std::span<const Spelling<uint32_t>> variant_spellings() { return kVariants; }
std::span<const Spelling<ac_dtype>> kv_dtype_spellings() { return kKvDtypes; }
std::span<const Spelling<uint32_t>> fp8_spellings() { return kFp8; }
std::span<const Spelling<uint32_t>> flag_field_spellings() { return kFlagFields; }

const char* op_name(uint32_t op) { return name_of<uint32_t>(kOps, op, "unknown"); }
std::optional<uint32_t> op_from(std::string_view name) { return value_of<uint32_t>(kOps, name); }
const char* dtype_name(ac_dtype d) { return name_of<ac_dtype>(kDtypes, d, "unknown"); }
int dtype_bytes(ac_dtype d) { return d == AC_DTYPE_F32 ? 4 : is_fp8(d) ? 1 : 2; }
std::optional<ac_dtype> dtype_from(std::string_view name) { return value_of<ac_dtype>(kDtypes, name); }
const char* kv_dtype_name(ac_dtype d) { return name_of<ac_dtype>(kKvDtypes, d, "unknown"); }
std::optional<ac_dtype> kv_dtype_from(std::string_view name) { return value_of<ac_dtype>(kKvDtypes, name); }
const char* fold_name(ac_fold f) { return name_of<ac_fold>(kFolds, f, "unknown"); }
std::optional<ac_fold> fold_from(std::string_view name) { return value_of<ac_fold>(kFolds, name); }
const char* feature_name(uint32_t f) { return name_of<uint32_t>(kFeatures, f, "unknown"); }
std::optional<uint32_t> feature_from(std::string_view name) { return value_of<uint32_t>(kFeatures, name); }
const char* variant_name(uint32_t v) { return name_of<uint32_t>(kVariants, v, "unknown"); }
std::optional<uint32_t> variant_from(std::string_view name) { return value_of<uint32_t>(kVariants, name); }
const char* flag_name(uint32_t flag) { return name_of<uint32_t>(kFlagFields, flag, "unknown"); }
const char* status_name(RunStatus s) { return name_of<RunStatus>(kStatuses, s, "unknown"); }
std::optional<RunStatus> status_from(std::string_view name) { return value_of<RunStatus>(kStatuses, name); }

std::vector<ac_fold> folds_in(uint32_t fold_orders) {
  std::vector<ac_fold> out;
  for (const auto& [f, n] : kFolds)
    if (fold_orders & AC_FOLD_BIT(f)) out.push_back(f);
  return out;
}

std::string op_names() { return joined<uint32_t>(kOps); }
std::string dtype_names() { return joined<ac_dtype>(kDtypes); }
std::string kv_dtype_names() { return joined<ac_dtype>(kKvDtypes); }
std::string fold_names() { return joined<ac_fold>(kFolds); }
std::string feature_names() { return joined<uint32_t>(kFeatures); }
std::string variant_names() { return joined<uint32_t>(kVariants); }
std::string fp8_names() { return joined<uint32_t>(kFp8); }

}  // namespace attncheck
