// The CI gate: compare this run's report with a baseline report.json and fail on regressions.
//
// A regression, per (subject, backend, property) present in both, and per (dtype, output) stats
// row present in both:
//   - status: the baseline passed and this run failed or crashed;
//   - non-finite: this run has non-finite outputs where the baseline had none;
//   - max ulp or p99 ulp grew beyond the tolerance: new > max(old + abs_ulp, old * rel_factor),
//     by default max(old + 0.5 ulp, old x 1.25), whichever is larger.
// The ulp comparisons apply only when both runs drew the same cases (same seed, case count and
// shape set; a pair draws the same cases in whichever shard runs it, seed.hpp); otherwise they are
// skipped and said so, while status and non-finite are still compared. Entries that do not apply
// (subjects, properties, dtypes or outputs one of the runs did not have) are skipped and listed,
// never counted as regressions.
//
// Shards: shard I of N compares the baseline's entries of the pairs that shard I of N runs
// (pair_shard), and counts the rest as other shards', so the comparisons of all N shards together
// are the unsharded run's comparison; `report merge` puts them back together
// (merge_baseline_comparisons). The baseline must hold every pair of the run's share
// (baseline_coverage_problem): a complete run, or a shard report of the same shard count that
// holds the run's shard. A shard of the baseline against the whole run, or against another shard
// count, would leave pairs uncompared without a word.
#pragma once
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attncheck/report.hpp"

namespace attncheck {

struct GateTolerance {
  double abs_ulp = 0.5;
  double rel_factor = 1.25;
  double allowed(double old) const { return std::max(old + abs_ulp, old * rel_factor); }
};

struct BaselineComparison {
  std::string path;
  std::string id;  // baseline_id of the baseline: which baseline it was, wherever its file lay
  std::vector<std::string> regressions;  // one line each: subject/property dtype output: what
  std::vector<std::string> skipped;      // one line each: what and why
  std::vector<std::string> notes;        // version differences etc.
  int compared = 0;                      // (subject, property) pairs compared
  int other_shards = 0;                  // the baseline's pairs that other shards run and compare
  bool ulp_compared = true;
  bool ok() const { return regressions.empty(); }
  nlohmann::json to_json() const;
};

BaselineComparison compare_to_baseline(const Report& current, const Report& baseline,
                                       const GateTolerance& tol = {});

// What a baseline's identity is: a hash of the report as read (report.json's fields), so copies
// of one baseline agree and two baselines that differ in any field do not.
std::string baseline_id(const Report& baseline);

// Why `baseline` cannot gate shard shard_index of shard_count (the whole run when shard_count is
// 1), in one sentence; empty when it holds every pair of that share.
std::string baseline_coverage_problem(const Report& baseline, int shard_index, int shard_count);

// The comparisons of a campaign's shards (report.json's `baseline` of each, with the shard indices
// each report holds; shard_count of the campaign) as the one comparison of the merged report: regressions,
// skipped entries and counts add up. ReportError when they cannot be one: a shard compared with no baseline
// beside shards compared with one, or shards compared with different baselines. Null when none had one.
nlohmann::json merge_baseline_comparisons(
    const std::vector<std::pair<std::vector<int>, nlohmann::json>>& shards, int shard_count);

}  // namespace attncheck
