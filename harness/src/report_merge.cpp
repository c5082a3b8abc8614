// report merge: shard reports of one campaign into one (the rules are in report.hpp's header), their
// baseline comparisons with them (baseline.hpp).
#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "attncheck/baseline.hpp"
#include "attncheck/report.hpp"
#include "report_internal.hpp"

namespace attncheck {

using nlohmann::json;
using report_detail::status_rank;

namespace {
void merge_stats(std::vector<OutputStats>& into, const std::vector<OutputStats>& from) {
  for (const auto& s : from) {
    auto it = std::find_if(into.begin(), into.end(),
                           [&](const OutputStats& x) { return x.dtype == s.dtype && x.output == s.output; });
    if (it == into.end()) {
      into.push_back(s);
      continue;
    }
    const int64_t n = it->count + s.count;
    it->mean_ulp = n ? (it->mean_ulp * double(it->count) + s.mean_ulp * double(s.count)) / double(n) : 0.0;
    it->count = n;
    it->nonfinite += s.nonfinite;
    it->max_ulp = std::max(it->max_ulp, s.max_ulp);
    it->p99_ulp = std::max(it->p99_ulp, s.p99_ulp);  // upper bound of the union's p99 (file comment)
    it->max_cancel_ulp = std::max(it->max_cancel_ulp, s.max_cancel_ulp);
    it->p99_cancel_ulp = std::max(it->p99_cancel_ulp, s.p99_cancel_ulp);
    it->p50_ratio = std::max(it->p50_ratio, s.p50_ratio);  // upper bounds, as p99 (file comment)
    it->p99_ratio = std::max(it->p99_ratio, s.p99_ratio);
    it->max_ratio = std::max(it->max_ratio, s.max_ratio);
    if (it->histogram.size() < s.histogram.size()) it->histogram.resize(s.histogram.size(), 0);
    for (size_t i = 0; i < s.histogram.size(); ++i) it->histogram[i] += s.histogram[i];
  }
}
}  // namespace

Report merge_reports(const std::vector<Report>& parts) {
  if (parts.empty()) throw ReportError("report merge: no reports given");
  const Report& first = parts.front();
  Report out = first;
  out.entries.clear();
  out.tilings.clear();
  out.shards_merged.clear();
  out.interrupted = false;
  std::vector<std::pair<std::vector<int>, json>> comparisons;  // each shard's baseline comparison
  std::set<int> shards;
  std::map<std::tuple<std::string, std::string, std::string>, size_t> index;
  std::set<std::string> tiling_keys;
  for (const Report& p : parts) {
    auto differs = [&](const std::string& what, const std::string& a, const std::string& b) {
      if (a != b)
        throw ReportError("report merge: shards disagree on " + what + " ('" + a + "' vs '" + b +
                          "'): not one campaign");
    };
    differs("seed", std::to_string(first.seed), std::to_string(p.seed));
    differs("cases", std::to_string(first.num_cases), std::to_string(p.num_cases));
    differs("shard count", std::to_string(first.shard_count), std::to_string(p.shard_count));
    differs("suite", first.suite, p.suite);
    differs("shape set", first.shape_set, p.shape_set);
    differs("backend", first.backend, p.backend);
    const std::vector<int> mine = p.shards_held();
    for (int s : mine)
      if (!shards.insert(s).second)
        throw ReportError("report merge: shard " + std::to_string(s) + " given twice");
    comparisons.emplace_back(mine, p.baseline);
    out.interrupted = out.interrupted || p.interrupted;
    for (const auto& e : p.entries) {
      const auto key = std::make_tuple(e.subject, e.backend, e.property);
      auto it = index.find(key);
      if (it == index.end()) {
        index[key] = out.entries.size();
        out.entries.push_back(e);
        continue;
      }
      ReportEntry& m = out.entries[it->second];
      if (status_rank(e.status) > status_rank(m.status)) {
        m.status = e.status;
        m.failure_class = e.failure_class;
        m.message = e.message;
        m.context = e.context;
        m.quoted = e.quoted;
        m.signature = e.signature;
        m.other_failures = e.other_failures;
        m.counterexample = e.counterexample;
        m.rc_reproduce = e.rc_reproduce;
        m.reproduce_command = e.reproduce_command;
        m.cases_to_first_failure = e.cases_to_first_failure;
        m.seconds_to_first_failure = e.seconds_to_first_failure;
        m.shrink_seconds = e.shrink_seconds;
        m.shrink_cut = e.shrink_cut;
      }
      m.cases_run += e.cases_run;
      m.failures += e.failures;
      m.seconds += e.seconds;
      m.max_drift_ulp = std::max(m.max_drift_ulp, e.max_drift_ulp);
      m.spread.add(e.spread);
      add_drift(m.drift_by_splits, e.drift_by_splits);
      m.rows_judged += e.rows_judged;
      m.rows_escalated += e.rows_escalated;
      m.rows_uncertified += e.rows_uncertified;
      m.time_split += e.time_split;
      for (const auto& f : e.corpus_files)
        if (std::find(m.corpus_files.begin(), m.corpus_files.end(), f) == m.corpus_files.end())
          m.corpus_files.push_back(f);
      m.shards.insert(m.shards.end(), e.shards.begin(), e.shards.end());
      std::sort(m.shards.begin(), m.shards.end());
      merge_stats(m.stats, e.stats);
    }
    for (const auto& t : p.tilings)
      if (tiling_keys.insert(t.subject + "/" + t.backend + "/" + t.dtype).second) out.tilings.push_back(t);
  }
  // Shards hold disjoint parts of one plan, each in plan order: concatenated, they are shard by
  // shard. Sorting by plan position gives the single run's order (stable: results without a
  // position, from older reports, keep the order they came in, after the others).
  std::stable_sort(out.entries.begin(), out.entries.end(), [](const ReportEntry& a, const ReportEntry& b) {
    const auto pos = [](const ReportEntry& e) {
      return e.plan_index < 0 ? std::numeric_limits<int64_t>::max() : e.plan_index;
    };
    return pos(a) < pos(b);
  });
  out.baseline = merge_baseline_comparisons(comparisons, first.shard_count);
  out.shards_merged.assign(shards.begin(), shards.end());
  out.shard_index = out.shards_merged.front();
  out.timestamp = utc_timestamp();
  out.command = "attncheck report merge";
  return out;
}

}  // namespace attncheck
