// The one names table: the spelling of operations, dtypes, fold orders and result statuses in case
// files, reports, the CLI and messages. Every reader and writer goes through it, so a name is
// written once and a file written by one part is always readable by another.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "attncheck/plugin_abi.h"

namespace attncheck {

const char* op_name(uint32_t op);  // AC_OP_MERGE -> "merge"; "unknown" for other bits
std::optional<uint32_t> op_from(std::string_view name);
const char* dtype_name(ac_dtype);  // "fp32" | "fp16" | "bf16"
int dtype_bytes(ac_dtype);         // storage bytes of one element: 4 (fp32), 2 (fp16, bf16)
std::optional<ac_dtype> dtype_from(std::string_view name);
const char* fold_name(ac_fold);  // "left" | "right" | "tree"
std::optional<ac_fold> fold_from(std::string_view name);

// The outcome of one (subject, property) run, as reports spell it.
enum class RunStatus { passed, failed, crashed, not_applicable, interrupted };
const char* status_name(RunStatus);
std::optional<RunStatus> status_from(std::string_view name);

// "a, b, c": the accepted names, for messages.
std::string op_names();
std::string dtype_names();
std::string fold_names();

}  // namespace attncheck
