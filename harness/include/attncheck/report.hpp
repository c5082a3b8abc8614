// Reports: what one `attncheck check` (or `tiling`) run leaves behind, as a directory of
//   report.json  the full record (schema in reports/README.md; read back by --baseline and merge)
//   report.md    a short summary for a pull-request comment: the verdict in one sentence, then the
//                results by error / budget, failures first, each failure with its case's context
//   report.html  the same as one self-contained page (CI artifact), with the run's figures once
//                `attncheck plot` has drawn them (embed_plots_in_report)
//   junit.xml    one testcase per (subject, property), for CI systems
// Each file is written by the one atomic writer (atomic_file.hpp), so a reader (or a Ctrl-C)
// never sees a half-written file. Shard reports combine with merge_reports.
// The code: report.cpp (entries, verdicts), report_json.cpp (report.json both ways),
// report_render.cpp (Markdown, HTML, JUnit), report_dir.cpp (the directory and its manifest),
// report_merge.cpp (shards).
//
// Merging shards: counts, failures, non-finite counts, histograms and drift counts add; max is the
// max; mean is the count-weighted mean; each quantile (p99 ulp, p99 cancel ulp, p50 and p99 of
// error/budget) is the max of the shards' quantiles, an upper bound of the union's: at most a
// fraction 1 - q of each shard lies above its own q-quantile (the order statistic at ceil(q n) - 1),
// so at most 1 - q of the union lies above the max, and the union's q-quantile is not above it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attncheck/properties.hpp"

namespace attncheck {

constexpr int kReportSchemaVersion = 1;
extern const char* const kToolVersion;  // attncheck's version (version.hpp)

struct ReportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One (subject, property) result, as stored.
struct ReportEntry {
  std::string subject, backend, origin, property;
  std::string status = "passed";  // passed | failed | crashed | interrupted
  std::string failure_class;
  int64_t cases_run = 0, failures = 0;
  std::vector<OutputStats> stats;  // per dtype and output
  std::vector<std::string> corpus_files;
  std::string message, counterexample, rc_reproduce, reproduce_command;
  std::string context;    // the failing case's shape and flags in one phrase (case_context.hpp)
  WorstElement quoted;    // the element the message quotes; where "" when none
  std::string signature;  // failure_signature (properties.hpp); "" when none
  std::vector<DistinctFailure> other_failures;  // the further distinct failures (--max-failures)
  // What the property holds to the budget (PropertyInfo::budget_use): which statistics a report
  // prints as err/budget.
  PropertyInfo::BudgetUse budget_use = PropertyInfo::BudgetUse::every_output;
  double seconds = 0;
  int64_t cases_to_first_failure = -1;
  double seconds_to_first_failure = -1;  // excludes shrinking
  double shrink_seconds = 0;
  bool shrink_cut = false;  // shrinking stopped by --shrink-time or Ctrl-C
  double max_drift_ulp = 0;
  Spread spread;  // run_to_run of a subject declared nondeterministic, batch_invariance of one not declared
                  // batch invariant; written when compared > 0
  std::vector<DriftCounts> drift_by_splits;  // split_order_drift (PropertyResult)
  // Attention rows judged, of them escalated to the exact path, of those uncertified (PropertyResult).
  int64_t rows_judged = 0, rows_escalated = 0, rows_uncertified = 0;
  TimeSplit time_split;     // seconds in the subject, judging, writing cases (PropertyResult)
  std::vector<int> shards;  // the shards that contributed (merge_reports)
  // The pair's position in the plan of the unsharded run (subjects, then properties); -1 unknown
  // (a report from before it was written). A shard's results carry it so that merge_reports can
  // put them back in the single run's order.
  int64_t plan_index = -1;
};

struct TilingEntry {
  std::string subject, backend, dtype;
  std::vector<TilingRow> rows;
};

struct Report {
  int schema_version = kReportSchemaVersion;
  std::string tool_version = kToolVersion;
  std::string git_describe;
  std::string timestamp;  // UTC, ISO 8601
  std::string command;    // the command line
  std::string backend, device;
  uint64_t seed = 1;
  int num_cases = 0;
  int shard_index = 0, shard_count = 1;
  std::vector<int> shards_merged;  // after merge_reports: every shard index included
  std::string suite;               // gate | full | custom
  std::string shape_set;  // what generated the cases (max_size, max_keys); baselines compare only equal ones
  bool interrupted = false;  // Ctrl-C: the report holds what completed
  std::vector<double> histogram_edges;
  std::vector<ReportEntry> entries;
  std::vector<TilingEntry> tilings;
  nlohmann::json baseline;  // null, or the comparison against --baseline (see baseline.hpp)
  // null, or {jobs, wall_seconds, devices: [{device, pairs, busy_seconds}], device_servers:
  // [{device, calls, device_seconds, redone, redone_first}]} (calls: the built-in subjects' calls
  // a device server made, -1 unknown; redone: those of its calls that failed there and that the
  // children then made themselves, worker::served_redone)
  nlohmann::json parallel;

  // pass: every entry passed (and not interrupted, baseline ok, no shard missing); fail: a
  // property failed or the baseline comparison found a regression; crashed: a subject crashed or
  // faulted the device; partial: nothing failed, but the merged report lacks shards
  // (missing_shards), so it is not the campaign's verdict.
  std::string verdict() const;
  // The shards of shard_count that a merged report does not hold; empty for a run's own report.
  std::vector<int> missing_shards() const;
  // The shards this report holds: its own, or those merged into it.
  std::vector<int> shards_held() const;
};

ReportEntry entry_from_result(const PropertyResult& r, const Subject& s, int shard_index);

nlohmann::json report_to_json(const Report&);
Report report_from_json(const nlohmann::json&);    // ReportError with one line on a bad document
Report read_report_file(const std::string& path);  // ReportError naming the file

// One subject's invariance over the dimensions the run varied, one phrase per dimension: run to run
// (run_to_run), the batch around a sequence (batch_invariance), the split count and the fold order
// (split_order_drift). "invariant ..." when every output compared kept its bits, "variant ..."
// with the share of outputs that changed and by how much, "failed: ..." where a declared
// invariance broke, "-" where the property did not run on the subject.
struct InvarianceRow {
  std::string subject, run_to_run, batch, split_count, fold_order, chunked_prefill;
};
std::vector<InvarianceRow> invariance_matrix(const Report&);

// The verdict as one sentence a user can act on: "PASS: 82 of 82 subject x property results
// passed", "FAIL: 3 of 7 properties failed on my-fa2: accuracy, lse_convention, empty_row_contract".
std::string verdict_sentence(const Report&);

// The statistics of an entry that its property judges (ReportEntry::budget_use): err/budget over
// the judged outputs only (judged false: the property applies no budget, and none is printed);
// the plain ulp error over the same outputs. A failed entry's maxima include the element its
// failure quotes: the statistics otherwise describe the cases before the first failure.
struct JudgedStats {
  bool judged = true;
  bool measured = false;  // any output measured (split_equals_whole and run_to_run record none)
  double max_ratio = 0, p99_ratio = 0, max_ulp = 0, p99_ulp = 0;
  int64_t nonfinite = 0;
};
JudgedStats judged_stats(const ReportEntry&);
// The entries as the reports list them: crashed, failed, interrupted, then passing; within each,
// largest judged err/budget first (entries that judge no budget last), then in run order.
std::vector<const ReportEntry*> entries_by_verdict(const Report&);
// "context: message" (or the message alone): a failure's line wherever it is printed (the
// reports, check's stderr, replay).
std::string failure_line(const ReportEntry&);
std::string failure_line(const std::string& context, const std::string& message);
// One quoted element with every number of it, as report.md, junit.xml and `replay` print it:
// "O[token=0,head=0,d=1]  inputs ...  exact ...  rounded ...  output ...  ulp 3 (cancellation-aware
// 2.5)  err/budget 1.7".
std::string element_line(const WorstElement&);

std::string render_markdown(const Report&);
std::string render_junit(const Report&);
// figures: (file name under plots/, SVG text) pairs, drawn into the page in that order.
std::string render_html(const Report&, const std::vector<std::pair<std::string, std::string>>& figures = {});

// Create dir (and parents) and check it is writable: the CLI calls this before any work.
// Throws ReportError naming the directory as `what` says ("report directory", "corpus directory").
void ensure_writable_dir(const std::string& dir, const std::string& what = "report directory");
// Write report.json, report.md, report.html and junit.xml into dir (each atomically, see above),
// then manifest.json with the hash of each. The page embeds no figure: those of an earlier run may
// still lie in dir/plots.
void write_report_dir(const std::string& dir, const Report&);
// After `attncheck plot` has drawn dir/plots: report.html again, with the run's figures that decide
// (plots/summary.svg, then every plots/budget-*.svg) in it, and the manifest. ReportError when dir
// holds no complete report.
void embed_plots_in_report(const std::string& dir);
// What is wrong with the report set in dir (empty: complete, or no report yet): a file missing,
// or a file whose hash differs from the manifest's (a run killed between two renames).
std::vector<std::string> check_report_set(const std::string& dir);

// The shard of shard_count that runs the (subject, property) pair: a hash of the two names, so a
// pair's shard does not move when other subjects or properties come and go.
int pair_shard(const std::string& subject, const std::string& property, int shard_count);
// Shard indices for a message: "1", "0, 2", "3-7, 9" (ascending).
std::string shard_list(const std::vector<int>& shards);
// "shard 1 of 2 missing", "shards 2-5 of 8 missing"; empty when none is (Report::missing_shards).
std::string missing_shards_phrase(const Report&);

// Combine shard reports (same seed, cases, suite and shape set; distinct shards) into one, its
// results in the single run's order (by plan_index; results without one follow, as they came),
// and their baseline comparisons into one (merge_baseline_comparisons). ReportError when they do
// not belong to one campaign. Shards may be missing: the result says so (missing_shards, verdict).
Report merge_reports(const std::vector<Report>&);

std::string utc_timestamp();
}  // namespace attncheck
