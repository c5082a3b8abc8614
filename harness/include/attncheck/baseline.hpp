// The CI gate: compare this run's report with a baseline report.json and fail on regressions.
//
// A regression, per (subject, backend, property) present in both, and per (dtype, output) stats
// row present in both:
//   - status: the baseline passed and this run failed or crashed;
//   - non-finite: this run has non-finite outputs where the baseline had none;
//   - max ulp or p99 ulp grew beyond the tolerance: new > max(old + abs_ulp, old * rel_factor),
//     by default max(old + 0.5 ulp, old x 1.25), whichever is larger.
// The ulp comparisons apply only when both runs drew the same cases (same seed, case count, shard
// and shape set); otherwise they are skipped and said so, while status and non-finite are still
// compared. Entries of the baseline that do not apply (subjects, properties, dtypes or outputs
// this run did not have) are skipped and listed, never counted as regressions.
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
  std::vector<std::string> regressions;  // one line each: subject/property dtype output: what
  std::vector<std::string> skipped;      // one line each: what and why
  std::vector<std::string> notes;        // version differences etc.
  int compared = 0;                      // (subject, property) pairs compared
  bool ulp_compared = true;
  bool ok() const { return regressions.empty(); }
  nlohmann::json to_json() const;
};

BaselineComparison compare_to_baseline(const Report& current, const Report& baseline,
                                       const GateTolerance& tol = {});

}  // namespace attncheck
