// Baseline comparison for the CI gate (rules in baseline.hpp).
#include "attncheck/baseline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "report_internal.hpp"

namespace attncheck {

using nlohmann::json;

namespace {
std::string fmt(double x) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

// Whether the pair is one that report r's shards run (every pair, for an unsharded run).
bool runs_pair(const Report& r, const std::string& subject, const std::string& property) {
  if (r.shard_count <= 1) return true;
  const std::vector<int> held = r.shards_held();
  return std::find(held.begin(), held.end(), pair_shard(subject, property, r.shard_count)) != held.end();
}

std::string shards_phrase(const std::vector<int>& shards) {
  return (shards.size() == 1 ? "shard " : "shards ") + shard_list(shards);
}
}  // namespace

nlohmann::json BaselineComparison::to_json() const {
  return {{"path", path},
          {"id", id},
          {"ok", ok()},
          {"compared", compared},
          {"other_shards", other_shards},
          {"ulp_compared", ulp_compared},
          {"regressions", regressions},
          {"skipped", skipped},
          {"notes", notes},
          {"tolerance",
           "max and p99 ulp may grow to max(old + 0.5, old x 1.25); no new non-finite; no passed -> failed"}};
}

BaselineComparison compare_to_baseline(const Report& cur, const Report& base, const GateTolerance& tol) {
  BaselineComparison c;
  c.id = baseline_id(base);
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
  if (!stream_diffs.empty()) {
    c.ulp_compared = false;
    std::string why;
    for (const auto& d : stream_diffs) why += (why.empty() ? "" : ", ") + d;
    c.skipped.push_back("ulp comparisons (max, p99): the runs drew different cases (" + why + ")");
  }

  using Key = std::tuple<std::string, std::string, std::string>;
  std::map<Key, const ReportEntry*> now;
  for (const auto& e : cur.entries) now[{e.subject, e.backend, e.property}] = &e;
  std::set<Key> in_baseline;
  for (const auto& old : base.entries) {
    // Another shard runs this pair and compares it: counted, not skipped, so that the shards'
    // comparisons add up to the unsharded run's.
    if (!runs_pair(cur, old.subject, old.property)) {
      ++c.other_shards;
      continue;
    }
    in_baseline.insert({old.subject, old.backend, old.property});
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
  for (const auto& e : cur.entries)
    if (e.status != "not_applicable" && !in_baseline.count({e.subject, e.backend, e.property}))
      c.skipped.push_back(e.subject + " (" + e.backend + ") / " + e.property + ": not in the baseline");
  return c;
}

std::string baseline_id(const Report& baseline) {
  return report_detail::content_hash(report_to_json(baseline).dump());
}

std::string baseline_coverage_problem(const Report& baseline, int shard_index, int shard_count) {
  const std::vector<int> held = baseline.shards_held();
  if (baseline.shard_count <= 1 || int(held.size()) == baseline.shard_count) return {};  // a complete run
  if (shard_count == baseline.shard_count && std::find(held.begin(), held.end(), shard_index) != held.end())
    return {};
  const std::string run = shard_count <= 1 ? "the whole run's pairs"
                                           : "the pairs of shard " + std::to_string(shard_index) + " of " +
                                                 std::to_string(shard_count);
  return "it holds " + shards_phrase(held) + " of " + std::to_string(baseline.shard_count) + " only, not " +
         run + "; gate against a complete baseline (`attncheck report merge` of all its shards)";
}

json merge_baseline_comparisons(const std::vector<std::pair<std::vector<int>, json>>& shards,
                                int shard_count) {
  auto parts = shards;
  std::sort(parts.begin(), parts.end());  // regressions and skipped lines in shard order
  std::vector<int> compared, not_compared;
  std::map<std::string, std::vector<int>> by_id;  // baseline id: the shards compared with it
  std::map<std::string, std::string> path_of;     // baseline id: the path the first shard gave
  for (const auto& [held, b] : parts) {
    std::vector<int>& into = b.is_object() ? compared : not_compared;
    into.insert(into.end(), held.begin(), held.end());
    if (!b.is_object()) continue;
    const std::string id = b.value("id", std::string());
    if (id.empty())
      throw ReportError(
          "report merge: the baseline comparison of " + shards_phrase(held) +
          " does not say which baseline it used (a report of an older attncheck): run it again");
    by_id[id].insert(by_id[id].end(), held.begin(), held.end());
    path_of.emplace(id, b.value("path", std::string()));
  }
  if (compared.empty()) return json();
  std::sort(compared.begin(), compared.end());
  std::sort(not_compared.begin(), not_compared.end());
  if (!not_compared.empty())
    throw ReportError("report merge: " + shards_phrase(compared) + " compared with a baseline, " +
                      shards_phrase(not_compared) + " with none: not one gate");
  if (by_id.size() > 1) {
    std::vector<std::pair<std::vector<int>, std::string>> groups;  // in shard order, for the message
    for (auto& [id, held] : by_id) {
      std::sort(held.begin(), held.end());
      groups.emplace_back(held, id);
    }
    std::sort(groups.begin(), groups.end());
    std::string which;
    for (const auto& [held, id] : groups)
      which += (which.empty() ? "" : "; ") + shards_phrase(held) + ": " + path_of[id] + " (id " + id + ")";
    throw ReportError("report merge: the shards were compared with different baselines (" + which +
                      "): gate every shard against one");
  }
  const json& first = parts.front().second;
  json regressions = json::array(), skipped = json::array(), notes = json::array();
  int pairs = 0;
  bool ulp_compared = true;
  const auto add_once = [](json& into, const json& line) {
    if (std::find(into.begin(), into.end(), line) == into.end()) into.push_back(line);
  };
  for (const auto& [held, b] : parts) {
    for (const auto& g : b.value("regressions", json::array())) regressions.push_back(g);
    // A shard skips its own pairs only; what every shard says alike (the cases differ, a version
    // note) is said once.
    for (const auto& k : b.value("skipped", json::array())) add_once(skipped, k);
    for (const auto& n : b.value("notes", json::array())) add_once(notes, n);
    pairs += b.value("compared", 0);
    ulp_compared = ulp_compared && b.value("ulp_compared", true);
  }
  json merged = {{"path", first.value("path", std::string())},
                 {"id", first.value("id", std::string())},
                 {"ok", regressions.empty()},
                 {"compared", pairs},
                 {"ulp_compared", ulp_compared},
                 {"regressions", regressions},
                 {"skipped", skipped},
                 {"notes", notes},
                 {"tolerance", first.value("tolerance", std::string())}};
  // Every shard present: no pair is left to another shard. Without some, how many of the
  // baseline's pairs they hold is not recorded, and the count is left out rather than guessed.
  if (int(compared.size()) == shard_count) merged["other_shards"] = 0;
  return merged;
}

}  // namespace attncheck
