// Baseline comparison for the CI gate (rules in baseline.hpp).
#include "attncheck/baseline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

namespace attncheck {

namespace {
std::string fmt(double x) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}
}  // namespace

nlohmann::json BaselineComparison::to_json() const {
  return {{"path", path},
          {"ok", ok()},
          {"compared", compared},
          {"ulp_compared", ulp_compared},
          {"regressions", regressions},
          {"skipped", skipped},
          {"notes", notes},
          {"tolerance",
           "max and p99 ulp may grow to max(old + 0.5, old x 1.25); no new non-finite; no passed -> failed"}};
}

BaselineComparison compare_to_baseline(const Report& cur, const Report& base, const GateTolerance& tol) {
  BaselineComparison c;
  if (base.tool_version != cur.tool_version)
    c.notes.push_back("baseline from attncheck " + base.tool_version + ", this is " + cur.tool_version);
  std::vector<std::string> stream_diffs;
  if (base.seed != cur.seed)
    stream_diffs.push_back("seed " + std::to_string(base.seed) + " vs " + std::to_string(cur.seed));
  if (base.num_cases != cur.num_cases)
    stream_diffs.push_back("cases " + std::to_string(base.num_cases) + " vs " +
                           std::to_string(cur.num_cases));
  if (base.shape_set != cur.shape_set)
    stream_diffs.push_back("shape set '" + base.shape_set + "' vs '" + cur.shape_set + "'");
  if (base.shard_count != cur.shard_count || base.shard_index != cur.shard_index ||
      base.shards_merged != cur.shards_merged)
    stream_diffs.push_back("shards differ");
  if (!stream_diffs.empty()) {
    c.ulp_compared = false;
    std::string why;
    for (const auto& d : stream_diffs) why += (why.empty() ? "" : ", ") + d;
    c.skipped.push_back("ulp comparisons (max, p99): the runs drew different cases (" + why + ")");
  }

  using Key = std::tuple<std::string, std::string, std::string>;
  std::map<Key, const ReportEntry*> now;
  for (const auto& e : cur.entries) now[{e.subject, e.backend, e.property}] = &e;
  for (const auto& old : base.entries) {
    const std::string label = old.subject + " (" + old.backend + ") / " + old.property;
    auto it = now.find({old.subject, old.backend, old.property});
    if (it == now.end()) {
      c.skipped.push_back(label + ": not run this time");
      continue;
    }
    if (old.status == "not_applicable" || it->second->status == "not_applicable") {
      c.skipped.push_back(label + ": not applicable");
      continue;
    }
    const ReportEntry& e = *it->second;
    ++c.compared;
    if (old.status == "passed" && (e.status == "failed" || e.status == "crashed"))
      c.regressions.push_back(label + ": passed in the baseline, " + e.status + " now" +
                              (e.failure_class.empty() ? "" : " (" + e.failure_class + ")"));
    for (const auto& os : old.stats) {
      const std::string row = label + " " + os.dtype + " " + os.output;
      auto ns = std::find_if(e.stats.begin(), e.stats.end(), [&](const OutputStats& s) {
        return s.dtype == os.dtype && s.output == os.output;
      });
      if (ns == e.stats.end()) {
        c.skipped.push_back(row + ": not measured this time");
        continue;
      }
      if (os.nonfinite == 0 && ns->nonfinite > 0)
        c.regressions.push_back(row + ": " + std::to_string(ns->nonfinite) +
                                " new non-finite output(s), none in the baseline");
      if (!c.ulp_compared) continue;
      if (ns->max_ulp > tol.allowed(os.max_ulp))
        c.regressions.push_back(row + ": max ulp " + fmt(os.max_ulp) + " -> " + fmt(ns->max_ulp) +
                                " (allowed " + fmt(tol.allowed(os.max_ulp)) + ")");
      if (ns->p99_ulp > tol.allowed(os.p99_ulp))
        c.regressions.push_back(row + ": p99 ulp " + fmt(os.p99_ulp) + " -> " + fmt(ns->p99_ulp) +
                                " (allowed " + fmt(tol.allowed(os.p99_ulp)) + ")");
    }
  }
  return c;
}

}  // namespace attncheck
