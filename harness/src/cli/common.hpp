// What the CLI's commands share: the input-error type, loading and picking subjects and
// properties, preparing report and corpus directories, the options that shape a run's cases
// (RunOptions, turned into a RunConfig by run_config), reproduce contexts, and the progress line.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/abi_subject.hpp"
#include "attncheck/properties.hpp"
#include "attncheck/report.hpp"
#include "attncheck/reproduce.hpp"
#include "command.hpp"

namespace attncheck::cli {

// git describe of the source tree at build time (the build writes its definition:
// cmake/git_describe.cmake; reports and --version carry it).
extern const char* const kGitDescribe;

// An input problem: one line, exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Messages name paths and values from the user's files: shown with control characters escaped,
// so an error is always one line.
std::string one_line(const std::string& text);

// Built-ins of the chosen backend plus every plugin's and worker's subjects, names unique.
struct SubjectSet {
  std::vector<std::unique_ptr<Subject>> all;
  std::string backend_note;
  Backend backend = Backend::host;
  std::vector<std::string> notes;  // plugin subjects skipped, etc.
  size_t first_plugin = 0;         // all[first_plugin..] came from plugins
};
SubjectSet load_subject_set(const Common& common);

// skip_unknown: names not in the set are left out (a child of check, which loads no worker).
std::vector<Subject*> pick_subjects(SubjectSet& set, const std::vector<std::string>& names,
                                    bool plugins_given, bool skip_unknown = false);

// --suite long: realistic attention rows. The gate's properties that take attention or split-KV
// subjects, on those subjects only, with keys up to kLongSuiteTokens, d = 128, fp16 and bf16, and
// one attention case in four the Llama-3-8B layer case (32 / 8 heads) over kLongSuiteTokens
// tokens, judged on sampled rows (RunConfig::layer_tokens).
constexpr int kLongSuiteTokens = 8192, kLongSuiteCases = 10;
constexpr uint32_t kLongSuiteOps = AC_OP_ATTENTION | AC_OP_SPLITKV;

// Whether a property belongs to a suite (gate, full or long): the one rule pick_properties and
// `list` share.
bool in_suite(const PropertyInfo& p, const std::string& suite);
std::vector<const PropertyInfo*> pick_properties(const std::vector<std::string>& names,
                                                 const std::string& suite);

// A report directory, made ready before any work: locked for this run (lock_dir), writable, no
// report file shadowed by a directory, temporaries of killed writers removed, and a set left mixed
// by a killed run named.
void prepare_report_dir(const std::string& dir, bool quiet);
// Whether `path` (a file or directory, existing or not) is `dir` or lies under it, as weakly
// canonical paths: an input a run reads from the directory it is about to replace.
bool path_within(const std::string& path, const std::string& dir);
// A corpus directory, made ready before any work and locked for this run. A write-ahead file is
// the case a subject was running when an earlier run died: it is kept as an ordinary corpus case
// (its name then says what it holds) and reported, never silently overwritten.
void prepare_corpus_dir(const std::string& dir, bool quiet);
// Holds dir for the rest of this process (an exclusive flock on DIR/.attncheck-lock, released by
// the kernel when the process ends, however it ends). A directory another live attncheck holds is
// a usage error naming that process: its write-ahead files and temporaries are live, not left by
// a run that died, and two runs' reports would overwrite each other. `what` names the directory.
void lock_dir(const std::string& dir, const std::string& what);
constexpr const char* kLockFileName = ".attncheck-lock";

// The options that shape a run's cases and failures, as check, tiling and mutants take them.
struct RunOptions {
  uint64_t seed = 1;
  int cases = 100;
  int max_keys = RunConfig{}.max_keys;
  int max_batch = 0;             // 0: the backend's default
  std::vector<ac_dtype> dtypes;  // empty: every dtype a subject has
  bool long_suite = false;       // --suite long: d = 128 and the layer case on long rows
  std::string corpus_dir;        // "" writes no corpus file
  bool no_shrink = false;
  double shrink_time = RunConfig{}.shrink_seconds;  // seconds per failure
  int max_failures = RunConfig{}.max_failures;      // distinct failures per (subject, property)
};
// The one translation of those options into a RunConfig.
RunConfig run_config(const RunOptions& o);

// How a reproduce command of subject s, in a run on `backend`, is pasted: the program as invoked,
// the subject's source (its worker, or this run's plugins, isolated or not) and, for a worker,
// the environment it was started with that a fresh shell lacks (PYTHONPATH, PYTHONHOME where set).
ReproduceContext reproduce_context(const Common& common, const Subject& s, const std::string& backend);

// A subject's tiling rows as report entries, one per dtype (dtype order).
std::vector<TilingEntry> tiling_entries(const Subject& s, const std::vector<TilingRow>& rows);

// report.json's shape_set: the RunConfig fields that shape the cases.
std::string shape_set_of(const RunConfig& cfg);

// The exit code of a report's verdict.
int worst_exit(const Report& r);

}  // namespace attncheck::cli
