// The one names table: the spelling of operations, dtypes, fold orders, attention features and
// variants, the boolean contract bits and result statuses in case files, reports, the worker
// protocol, the CLI and messages. Every reader and writer goes through it, so a name is written
// once and a file or message written by one part is always readable by another.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attncheck/plugin_abi.h"

namespace attncheck {

// A value and its name. Each table lists every known value once, in the ABI's order; a set of
// values (a bit mask of ac_caps) is spelled as the names of its members in table order.
template <class T>
struct Spelling {
  T value;
  const char* name;
};
std::span<const Spelling<uint32_t>> op_spellings();        // AC_OP_* bits
std::span<const Spelling<ac_dtype>> dtype_spellings();     // members of ac_caps.dtypes by AC_DTYPE_BIT
std::span<const Spelling<ac_fold>> fold_spellings();       // members of ac_caps.fold_orders by AC_FOLD_BIT
std::span<const Spelling<uint32_t>> feature_spellings();   // AC_FEAT_* bits
std::span<const Spelling<uint32_t>> variant_spellings();   // AC_VAR_* bits
std::span<const Spelling<ac_dtype>> kv_dtype_spellings();  // members of ac_caps.kv_dtypes by AC_DTYPE_BIT
std::span<const Spelling<uint32_t>> fp8_spellings();       // AC_FP8_* bits
// The AC_CAP_* bits the worker protocol spells as boolean fields ("flushes_subnormals": true).
std::span<const Spelling<uint32_t>> flag_field_spellings();

// The FP8 formats (an FP8 KV cache's kv_dtype), as ac_caps.kv_dtypes bits, and membership.
inline constexpr uint32_t kFp8DtypeBits =
    AC_DTYPE_BIT(AC_DTYPE_E4M3) | AC_DTYPE_BIT(AC_DTYPE_E5M2) | AC_DTYPE_BIT(AC_DTYPE_E4M3FNUZ);
// Through unsigned: a value outside the enum (a plugin's bad dtype) is a shift of 32 or more, refused first.
constexpr bool is_fp8(ac_dtype d) {
  const auto bit = static_cast<uint32_t>(d);
  return bit < 32u && ((kFp8DtypeBits >> bit) & 1u) != 0;
}

const char* op_name(uint32_t op);  // AC_OP_MERGE -> "merge"; "unknown" for other bits
std::optional<uint32_t> op_from(std::string_view name);
const char* dtype_name(ac_dtype);     // "fp32" | "fp16" | "bf16"
int dtype_bytes(ac_dtype);            // storage bytes of one element: 4 (fp32), 2 (fp16, bf16), 1 (FP8)
const char* kv_dtype_name(ac_dtype);  // an FP8 KV cache's format: "e4m3fn" | "e5m2" | "e4m3fnuz"
std::optional<ac_dtype> dtype_from(std::string_view name);
std::optional<ac_dtype> kv_dtype_from(std::string_view name);
const char* fold_name(ac_fold);  // "left" | "right" | "tree"
std::optional<ac_fold> fold_from(std::string_view name);
// AC_FEAT_CAUSAL -> "causal", AC_FEAT_NAIVE_EXP -> "naive_exp", ...; "unknown" for another value.
const char* feature_name(uint32_t feature);
std::optional<uint32_t> feature_from(std::string_view name);
// AC_CAP_FTZ_ARITHMETIC -> "ftz_arithmetic"; "unknown" for a bit not in flag_field_spellings().
const char* flag_name(uint32_t flag);
// AC_VAR_PAGED_KV -> "paged_kv", AC_VAR_SINKS -> "sinks", ...; "unknown" for another value.
const char* variant_name(uint32_t variant);
std::optional<uint32_t> variant_from(std::string_view name);

// The fold orders of an ac_caps.fold_orders mask, in table order (left, right, tree).
std::vector<ac_fold> folds_in(uint32_t fold_orders);

// The outcome of one (subject, property) run, as reports spell it.
enum class RunStatus { passed, failed, crashed, not_applicable, interrupted };
const char* status_name(RunStatus);
std::optional<RunStatus> status_from(std::string_view name);

// "a, b, c": the accepted names, for messages.
std::string op_names();
std::string dtype_names();
std::string kv_dtype_names();
std::string fold_names();
std::string feature_names();
std::string variant_names();
std::string fp8_names();

}  // namespace attncheck
