// One self-contained, bit-exact test case: the unit the corpus stores, `attncheck replay` re-runs
// and the properties shrink to. A case names its operation, the subject and property that produced
// it, the options it ran with, and every input tensor as bit patterns. The file format (JSON, one
// object per file, tensors as little-endian bytes in hex or base64) is documented in
// corpus/README.md; case_to_json / case_from_json are its only writer and reader.
//
// Conventions: the merge input's LSEs are read in the base the replaying subject declares (the
// case stores numbers, not a base); `lse_base` and `empty_lse_sign` record what the subject that
// produced the case declared, for the reader.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "attncheck/names.hpp"
#include "attncheck/subject.hpp"

namespace attncheck {

// A malformed, truncated or inconsistent case file. what() is one line naming the problem.
struct CaseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Case {
  std::string op;            // "merge" | "softmax" | "attention" | "splitkv" | "quantize"
  std::string subject;       // the subject it was generated for (replay may target any other)
  std::string property;      // the property that produced it ("" for hand-written cases)
  AttentionOptions options;  // tiling, num_splits, fold order (attention / splitkv)
  int lse_base = 0;          // informational: 0 natural, 2 base two
  int empty_lse_sign = -1;   // informational: the producing subject's empty-row sentinel
  std::variant<MergeInput, SoftmaxInput, AttentionInput, QuantizeInput> input;
  uint64_t seed = 0;         // the run's seed (0 for hand-written cases)
  std::string rc_reproduce;  // RapidCheck reproduce string of the failure, "" if none
  std::string note;          // free text: what the case exercises, why it failed
  // Row kinds (case_context.hpp, avoidable ones) left unjudged where the case was found: a later
  // round of a search reports a second defect with the first's rows excused, and its replay
  // excuses them too, so that it quotes what the round quoted. Empty: every row judged.
  std::vector<std::string> excused_rows;
};

// Names (names.hpp) read from a case file or the command line: CaseError if unknown.
uint32_t op_from_name(const std::string& name);
ac_dtype dtype_from_name(const std::string&);

// Serialise. Tensors of up to 64 elements are written in hex (readable in a diff), longer ones in
// base64; both are little-endian bytes of the storage format (2 bytes for fp16/bf16, 4 for fp32
// and for LSEs). Deterministic: the same case gives the same text.
std::string case_to_json(const Case&);
// Parse and validate (sizes consistent with the shapes, known op and dtype, the variant matching
// the op). Throws CaseError with a one-line reason on anything malformed or truncated.
Case case_from_json(const std::string& text);

// A name (op, subject, property) as one part of a case file's name: letters, digits, '-' and '_'
// kept, every other byte '_', "none" for an empty name. A plugin names its subjects, so the part
// never holds a path separator, a dot or a control character, and is never empty. At most
// kMaxFileNamePart characters: a longer name keeps its first 47 and a hash of the whole name.
constexpr size_t kMaxFileNamePart = 64;
std::string file_name_part(std::string_view name);

// Write atomically into dir (created if missing): a temporary file in dir, flushed, then renamed,
// so a reader or a crash never sees a partial file. The name is
// <op>-<subject>-<property>-<first 16 hex digits of the FNV-1a hash of the JSON>.json, each name as
// file_name_part writes it; writing the same case twice gives the same file. Returns the path. Throws
// CaseError if dir is unwritable.
std::string write_case_atomic(const std::string& dir, const Case&);
// The same, to an explicit path: the write-ahead file before a subject call, written to survive the
// process (Durability::process), not a machine crash.
void write_case_atomic_to(const std::string& path, const Case&);
// Read and parse one file; CaseError (with the path in the message) on any problem.
Case read_case_file(const std::string& path);
// The largest legal case (2^28 elements a tensor, three tensors, base64) is under 4 GiB of text;
// corpus cases are kilobytes. A stated bound keeps /dev/zero or a huge file from being read.
constexpr size_t kMaxCaseFileBytes = size_t(1) << 30;

// The write-ahead file: the case a subject is about to be called on, written before the call so
// that a crash leaves its reproducer behind (RunConfig::write_ahead). Named and recognised here
// only: <dir>/inflight-<subject>-<property>-0.json (the "-0" is kept so that files of earlier
// versions keep their meaning).
std::string write_ahead_path(const std::string& dir, const std::string& subject, const std::string& property);
bool is_write_ahead_file(const std::string& path);
// Keeps the write-ahead files of dir as ordinary corpus cases (write_case_atomic; the note then
// starts with `why`) and removes them: those of (subject, property) when both are given, else
// every one. Returns (kept path, subject) per case kept; `unreadable` gets the file name and the
// reader's error for files that are not readable cases, which are left in place (a write-ahead
// file is written atomically, so such a file is foreign).
struct KeptWriteAhead {
  std::string path, subject;
};
struct UnreadableWriteAhead {
  std::string name, why;
};
std::vector<KeptWriteAhead> keep_write_ahead_cases(const std::string& dir, const std::string& why,
                                                   const std::string& subject = "",
                                                   const std::string& property = "",
                                                   std::vector<UnreadableWriteAhead>* unreadable = nullptr);

// The first way an attention input's variants break the rules of plugin_abi.h (version 3), as one
// line naming the field, or "" when they hold: head_size_v 0 .. AC_MAX_HEAD_SIZE; softcap 0 or
// finite in (0, AC_MAX_SOFTCAP]; each window side -1 .. AC_MAX_WINDOW; sinks empty or num_heads
// values in [-AC_MAX_SINK, AC_MAX_SINK]; paged: page_size 1 .. AC_MAX_PAGE_SIZE, num_pages 1 .. 2^24,
// max_blocks enough for the longest sequence, block_table [num_seqs, max_blocks] with every entry inside the
// pool; an FP8 KV cache's k_descale and v_descale one value, one per KV head or one per (sequence, KV head)
// each, alike, positive and finite (none without an FP8 kv_dtype). The tensors' sizes are the reader's check.
std::string attention_variant_problem(const AttentionInput&);
// "" or why `a` is not V inside K as it says (AC_VAR_V_IN_K: v equals the first head_size_v columns
// of K's rows, head_size_v at most head_size); "" where it does not say so.
std::string v_in_k_problem(const AttentionInput& a);
// The same input with K and V gathered from their pages into the contiguous layout
// [total_k, num_kv_heads, d] (what the reference and an unpaged subject read); an unpaged input is
// returned unchanged. Assumes attention_variant_problem holds.
AttentionInput gather_pages(const AttentionInput&);
// `in` with contiguous K and V: `in` itself, or its gathered copy, held in `storage`, when it is
// paged. The one way every reader that wants contiguous keys (the reference, the judges, the
// properties' cuts) gets them.
const AttentionInput& contiguous_kv(const AttentionInput& in, AttentionInput& storage);
// The input a subject declaring `variants` (AC_VAR_* bits) and the call limits of `caps`
// (max_call_seqs, max_call_tokens, max_call_keys) is called with: `in`, or its gathered copy in
// `storage` when `in` is paged and the subject does not declare paged K / V. Throws SubjectError
// (unsupported) naming `subject` and the first variant `in` uses that it does not declare (an FP8
// KV cache counts: its format in caps.kv_dtypes, per-KV-head descales in caps.fp8; a paged case,
// its page size in caps.page_sizes where the subject declares paged K / V), or the
// first declared limit the call is past (the case is then skipped and counted with that reason,
// never passed to the subject).
const AttentionInput& input_for_subject(const AttentionInput& in, uint32_t variants, const ac_caps& caps,
                                        const std::string& subject, AttentionInput& storage);
// The first declared call limit of `caps` that `in` is past, as "12 sequences, max_call_seqs 8",
// or "" when it fits them all.
std::string past_call_limits(const AttentionInput& in, const ac_caps& caps);

// The first variant `in` uses that `variants` (AC_VAR_* bits) does not declare, as "a softcap
// (AC_VAR_SOFTCAP)", or "" when it uses none. Paged K / V is left out: a subject that does not
// declare it is called on the gathered input.
std::string undeclared_variant(const AttentionInput& in, uint32_t variants);

// The first FP8 output `in` asks for that a subject declaring `caps` does not write (caps.kv_dtypes,
// and per-head scales only with AC_FP8_DESCALE_PER_KV_HEAD), as "does not write e5m2 (caps.kv_dtypes)",
// or "" when it writes them: what a call refuses (unsupported) and replay reports not applicable.
std::string undeclared_fp8_output(const QuantizeInput& in, const ac_caps& caps);
std::string undeclared_fp8_output(const MergeInput& in, const ac_caps& caps);

// Shape summary of a case, for the shrunk-counterexample size the mutation self-test reports:
// tokens = query rows (merge: tokens, softmax: rows), keys = keys per row (max over sequences;
// softmax: cols; merge: 2 states), heads = query heads.
struct CaseSize {
  int64_t tokens = 0, keys = 0, heads = 0, head_size = 0;
  int64_t head_size_v = 0;  // V's own head size where it differs from head_size; else 0
};
CaseSize case_size(const Case&);
std::string describe_size(const CaseSize&);  // "tokens=1 keys=3 heads=1 d=1" (d=192/128: V's own)

}  // namespace attncheck
