// Reports: what one `attncheck check` (or `tiling`) run leaves behind, as a directory of
//   report.json  the full record (schema in reports/README.md; read back by --baseline and merge)
//   report.md    a short summary for a pull-request comment, worst offenders first
//   junit.xml    one testcase per (subject, property), for CI systems
// Each file is written by the one atomic writer (atomic_file.hpp), so a reader (or a Ctrl-C)
// never sees a half-written file. Shard reports combine with merge_reports.
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
  double seconds = 0;
  int64_t cases_to_first_failure = -1;
  double seconds_to_first_failure = -1;  // excludes shrinking
  double shrink_seconds = 0;
  bool shrink_cut = false;  // shrinking stopped by --shrink-time or Ctrl-C
  double max_drift_ulp = 0;
  Spread spread;  // run_to_run of a subject declared nondeterministic; written when compared > 0
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
  // [{device, calls}]} (calls: the built-in subjects' calls a device server made, -1 unknown)
  nlohmann::json parallel;

  // pass: every entry passed (and not interrupted, baseline ok); fail: a property failed or the
  // baseline comparison found a regression; crashed: a subject crashed or faulted the device.
  std::string verdict() const;
};

ReportEntry entry_from_result(const PropertyResult& r, const Subject& s, int shard_index);

nlohmann::json report_to_json(const Report&);
Report report_from_json(const nlohmann::json&);    // ReportError with one line on a bad document
Report read_report_file(const std::string& path);  // ReportError naming the file

std::string render_markdown(const Report&);
std::string render_junit(const Report&);

// Create dir (and parents) and check it is writable: the CLI calls this before any work.
// Throws ReportError naming the directory as `what` says ("report directory", "corpus directory").
void ensure_writable_dir(const std::string& dir, const std::string& what = "report directory");
// Write report.json, report.md and junit.xml into dir (each atomically, see above), then
// manifest.json with the hash of each.
void write_report_dir(const std::string& dir, const Report&);
// What is wrong with the report set in dir (empty: complete, or no report yet): a file missing,
// or a file whose hash differs from the manifest's (a run killed between two renames).
std::vector<std::string> check_report_set(const std::string& dir);

// Combine shard reports (same seed, cases, suite and shape set; distinct shards) into one, its
// results in the single run's order (by plan_index; results without one follow, as they came).
// ReportError when they do not belong to one campaign.
Report merge_reports(const std::vector<Report>&);

std::string utc_timestamp();
}  // namespace attncheck
