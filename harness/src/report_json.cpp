// report.json both ways (schema: reports/README.md). Non-finite numbers, which JSON cannot hold,
// are written as the strings "inf", "-inf" and "nan" and read back as such.
#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "attncheck/json_fields.hpp"
#include "attncheck/report.hpp"
#include "report_internal.hpp"

namespace attncheck {

using nlohmann::json;
using report_detail::get_num;
using report_detail::num;
using report_detail::status_rank;

namespace {

// Integers are read as JSON integers within a stated range: a float (1e300) or an out-of-range
// value would otherwise convert with undefined behaviour or wrap. Counts stay below 2^40, so that
// merging up to 2^16 shards cannot overflow int64.
constexpr int64_t kMaxCount = int64_t(1) << 40;
constexpr int64_t kMaxShardCount = 1 << 16;
int64_t integer(const json& obj, const char* key, const std::string& where, int64_t lo, int64_t hi) {
  return json_fields::get_int<ReportError>(obj, key, where, lo, hi);
}
template <class T>
std::vector<T> integers_or_empty(const json& obj, const char* key, const std::string& where, int64_t lo,
                                 int64_t hi) {
  std::vector<T> out;
  if (!obj.is_object() || !obj.contains(key)) return out;
  const json& a = obj.at(key);
  if (!a.is_array()) throw ReportError(where + "." + key + " must be an array of integers");
  for (const json& e : a) out.push_back(T(integer(json{{key, e}}, key, where, lo, hi)));
  return out;
}

json stats_to_json(const OutputStats& s) {
  return json{{"dtype", s.dtype},
              {"output", s.output},
              {"count", s.count},
              {"nonfinite", s.nonfinite},
              {"max_ulp", num(s.max_ulp)},
              {"p99_ulp", num(s.p99_ulp)},
              {"mean_ulp", num(s.mean_ulp)},
              {"max_cancel_ulp", num(s.max_cancel_ulp)},
              {"p99_cancel_ulp", num(s.p99_cancel_ulp)},
              {"p50_ratio", num(s.p50_ratio)},
              {"p99_ratio", num(s.p99_ratio)},
              {"max_ratio", num(s.max_ratio)},
              {"histogram", s.histogram}};
}
OutputStats stats_from_json(const json& j) {
  OutputStats s;
  s.dtype = j.at("dtype").get<std::string>();
  s.output = j.at("output").get<std::string>();
  s.count = integer(j, "count", "stats", 0, kMaxCount);
  s.nonfinite = integer(j, "nonfinite", "stats", 0, kMaxCount);
  s.max_ulp = get_num(j.at("max_ulp"));
  s.p99_ulp = get_num(j.at("p99_ulp"));
  s.mean_ulp = get_num(j.at("mean_ulp"));
  s.max_cancel_ulp = get_num(j.value("max_cancel_ulp", json(0.0)));
  s.p99_cancel_ulp = get_num(j.value("p99_cancel_ulp", json(0.0)));
  s.p50_ratio = get_num(j.value("p50_ratio", json(0.0)));
  s.p99_ratio = get_num(j.value("p99_ratio", json(0.0)));
  s.max_ratio = get_num(j.value("max_ratio", json(0.0)));
  s.histogram = integers_or_empty<int64_t>(j, "histogram", "stats", 0, kMaxCount);
  return s;
}

json drift_to_json(const DriftCounts& d) {
  return json{{"num_splits", d.num_splits},
              {"fold_outputs", d.fold_outputs},
              {"fold_differ", d.fold_differ},
              {"fold_max_ulp", num(d.fold_max_ulp)},
              {"splits_outputs", d.splits_outputs},
              {"splits_differ", d.splits_differ},
              {"splits_max_ulp", num(d.splits_max_ulp)}};
}
DriftCounts drift_from_json(const json& j) {
  DriftCounts d;
  d.num_splits = int(integer(j, "num_splits", "drift_by_splits", 1, 1 << 20));
  d.fold_outputs = integer(j, "fold_outputs", "drift_by_splits", 0, kMaxCount);
  d.fold_differ = integer(j, "fold_differ", "drift_by_splits", 0, d.fold_outputs);
  d.fold_max_ulp = get_num(j.at("fold_max_ulp"));
  d.splits_outputs = integer(j, "splits_outputs", "drift_by_splits", 0, kMaxCount);
  d.splits_differ = integer(j, "splits_differ", "drift_by_splits", 0, d.splits_outputs);
  d.splits_max_ulp = get_num(j.at("splits_max_ulp"));
  return d;
}

json quoted_to_json(const WorstElement& w) {
  return json{{"where", w.where},
              {"inputs", w.input_bits},
              {"exact", w.exact},
              {"rounded_exact", w.rounded_exact},
              {"output", w.output_bits},
              {"ulp", num(w.ulp)},
              {"cancel_ulp", num(w.cancel_ulp)},
              {"err_budget", num(w.ratio)},
              {"allowed", num(w.allowed)},
              {"row", w.row}};
}
WorstElement quoted_from_json(const json& j) {
  if (!j.is_object()) throw ReportError("results: 'worst_element' must be an object");
  WorstElement w;
  w.where = j.value("where", "");
  w.input_bits = j.value("inputs", "");
  w.exact = j.value("exact", "");
  w.rounded_exact = j.value("rounded_exact", "");
  w.output_bits = j.value("output", "");
  w.ulp = get_num(j.value("ulp", json(0.0)));
  w.cancel_ulp = get_num(j.value("cancel_ulp", json(0.0)));
  w.ratio = get_num(j.value("err_budget", json(0.0)));
  w.allowed = get_num(j.value("allowed", json(0.0)));
  w.row = json_fields::get_int_or<ReportError>(j, "row", "worst_element", -1, kMaxCount, -1);
  return w;
}

PropertyInfo::BudgetUse budget_use_from(const json& x, const std::string& property) {
  if (x.contains("budget_use")) {
    const std::string u = x.value("budget_use", "");
    for (auto b : {PropertyInfo::BudgetUse::every_output, PropertyInfo::BudgetUse::lse_only,
                   PropertyInfo::BudgetUse::none})
      if (u == report_detail::budget_use_name(b)) return b;
    throw ReportError("results: unknown budget_use '" + u + "'");
  }
  // A report from before the field: the property's own, where this attncheck knows it.
  const PropertyInfo* p = find_property(property);
  return p ? p->budget_use : PropertyInfo::BudgetUse::every_output;
}

}  // namespace

json report_to_json(const Report& r) {
  json j;
  j["schema"] = "attncheck-report";
  j["schema_version"] = r.schema_version;
  j["tool_version"] = r.tool_version;
  j["git_describe"] = r.git_describe;
  j["timestamp"] = r.timestamp;
  j["command"] = r.command;
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["seed"] = r.seed;
  j["num_cases"] = r.num_cases;
  j["shard"] = {{"index", r.shard_index}, {"count", r.shard_count}, {"merged", r.shards_merged}};
  j["suite"] = r.suite;
  j["shape_set"] = r.shape_set;
  j["interrupted"] = r.interrupted;
  j["verdict"] = r.verdict();
  int passed = 0, failed = 0, crashed = 0, interrupted = 0;
  int64_t rows_judged = 0, rows_escalated = 0, rows_uncertified = 0;
  for (const auto& e : r.entries) {
    passed += e.status == "passed";
    failed += e.status == "failed";
    crashed += e.status == "crashed";
    interrupted += e.status == "interrupted";
    rows_judged += e.rows_judged;
    rows_escalated += e.rows_escalated;
    rows_uncertified += e.rows_uncertified;
  }
  j["summary"] = {{"results", r.entries.size()},
                  {"passed", passed},
                  {"failed", failed},
                  {"crashed", crashed},
                  {"interrupted", interrupted},
                  {"rows_judged", rows_judged},
                  {"rows_escalated", rows_escalated},
                  {"rows_uncertified", rows_uncertified}};
  // Derived from the results (invariance_matrix), for readers of the file; not read back.
  json invariance = json::array();
  for (const InvarianceRow& x : invariance_matrix(r))
    invariance.push_back({{"subject", x.subject},
                          {"run_to_run", x.run_to_run},
                          {"batch", x.batch},
                          {"split_count", x.split_count},
                          {"fold_order", x.fold_order},
                          {"chunked_prefill", x.chunked_prefill}});
  j["invariance"] = invariance;
  json edges = json::array();
  for (double e : r.histogram_edges) edges.push_back(num(e));
  j["histogram_edges"] = edges;
  json results = json::array();
  for (const auto& e : r.entries) {
    json stats = json::array();
    for (const auto& s : e.stats) stats.push_back(stats_to_json(s));
    results.push_back({{"subject", e.subject},
                       {"backend", e.backend},
                       {"origin", e.origin},
                       {"property", e.property},
                       {"status", e.status},
                       {"failure_class", e.failure_class},
                       {"cases_run", e.cases_run},
                       {"failures", e.failures},
                       {"seconds", num(e.seconds)},
                       {"cases_to_first_failure", e.cases_to_first_failure},
                       {"seconds_to_first_failure", num(e.seconds_to_first_failure)},
                       {"shrink_seconds", num(e.shrink_seconds)},
                       {"shrink_cut", e.shrink_cut},
                       {"max_drift_ulp", num(e.max_drift_ulp)},
                       {"rows_judged", e.rows_judged},
                       {"rows_escalated", e.rows_escalated},
                       {"rows_uncertified", e.rows_uncertified},
                       {"time_split",
                        {{"generate", num(e.time_split.generate)},
                         {"subject", num(e.time_split.subject)},
                         {"judge", num(e.time_split.judge)},
                         {"judge_exact", num(e.time_split.judge_exact)},
                         {"write_ahead", num(e.time_split.write_ahead)}}},
                       {"message", e.message},
                       {"counterexample", e.counterexample},
                       {"rc_reproduce", e.rc_reproduce},
                       {"reproduce_command", e.reproduce_command},
                       {"budget_use", report_detail::budget_use_name(e.budget_use)},
                       {"corpus_files", e.corpus_files},
                       {"shards", e.shards},
                       {"plan_index", e.plan_index},
                       {"stats", stats}});
    if (!e.context.empty()) results.back()["context"] = e.context;
    if (!e.quoted.where.empty()) results.back()["worst_element"] = quoted_to_json(e.quoted);
    if (!e.signature.empty()) results.back()["signature"] = e.signature;
    if (!e.other_failures.empty()) {
      json more = json::array();
      for (const DistinctFailure& f : e.other_failures) {
        json j = {{"signature", f.signature},
                  {"failure_class", f.failure_class},
                  {"message", f.message},
                  {"context", f.context},
                  {"counterexample", f.counterexample_summary},
                  {"corpus_file", f.corpus_file},
                  {"reproduce_command", f.reproduce_command},
                  {"cases_to_failure", f.cases_to_failure}};
        if (!f.quoted.where.empty()) j["worst_element"] = quoted_to_json(f.quoted);
        more.push_back(std::move(j));
      }
      results.back()["other_failures"] = std::move(more);
    }
    if (e.spread.compared > 0) {
      json sp = {{"compared", e.spread.compared},
                 {"differing", e.spread.differing},
                 {"max_ulps", num(e.spread.max_ulps)},
                 {"max_budget", num(e.spread.max_budget)}};
      if (e.spread.probed > 0) {
        // batch_invariance's attribution: cases probed, per dimension how many it changed.
        json by = json::object();
        for (int d = 0; d < kBatchDimensions; ++d)
          by[kBatchDimensionNames[size_t(d)]] = e.spread.triggered[size_t(d)];
        sp["probed"] = e.spread.probed;
        sp["triggered_by"] = std::move(by);
        sp["none_isolated"] = e.spread.none_isolated;
      }
      results.back()["run_to_run_spread"] = std::move(sp);
    }
    if (!e.drift_by_splits.empty()) {
      // The totals are derived from drift_by_splits (the record a merge adds), for readers.
      json& result = results.back();
      const DriftCounts all = drift_total(e.drift_by_splits);
      result["drift_fold_differ_fraction"] = all.fold_differ_fraction();
      result["drift_fold_max_ulp"] = num(all.fold_max_ulp);
      result["drift_splits_differ_fraction"] = all.splits_differ_fraction();
      result["drift_splits_max_ulp"] = num(all.splits_max_ulp);
      json by = json::array();
      for (const DriftCounts& d : e.drift_by_splits) by.push_back(drift_to_json(d));
      result["drift_by_splits"] = by;
    }
  }
  j["results"] = results;
  json tilings = json::array();
  for (const auto& t : r.tilings) {
    json rows = json::array();
    for (const auto& row : t.rows)
      rows.push_back({{"br", row.br},
                      {"bc", row.bc},
                      {"num_splits", row.num_splits},
                      {"fold", row.fold},
                      {"stats", stats_to_json(row.stats)}});
    tilings.push_back({{"subject", t.subject}, {"backend", t.backend}, {"dtype", t.dtype}, {"rows", rows}});
  }
  j["tilings"] = tilings;
  j["baseline"] = r.baseline;
  if (!r.parallel.is_null()) j["parallel"] = r.parallel;
  return j;
}

Report report_from_json(const json& j) {
  try {
    if (!j.is_object() || j.value("schema", "") != "attncheck-report")
      throw ReportError("not an attncheck report (missing \"schema\": \"attncheck-report\")");
    Report r;
    r.schema_version = int(integer(j, "schema_version", "report", 0, 1 << 20));
    if (r.schema_version != kReportSchemaVersion)
      throw ReportError("report schema version " + std::to_string(r.schema_version) +
                        ", this attncheck reads " + std::to_string(kReportSchemaVersion));
    r.tool_version = j.at("tool_version").get<std::string>();
    r.git_describe = j.value("git_describe", "");
    r.timestamp = j.value("timestamp", "");
    r.command = j.value("command", "");
    r.backend = j.at("backend").get<std::string>();
    r.device = j.value("device", "");
    r.seed = json_fields::get_uint64<ReportError>(j, "seed", "report");
    r.num_cases = int(integer(j, "num_cases", "report", 0, INT32_MAX));
    const json& shard = json_fields::field<ReportError>(j, "shard", "report");
    r.shard_count = int(integer(shard, "count", "shard", 1, kMaxShardCount));
    r.shard_index = int(integer(shard, "index", "shard", 0, r.shard_count - 1));
    r.shards_merged = integers_or_empty<int>(shard, "merged", "shard", 0, r.shard_count - 1);
    r.suite = j.value("suite", "");
    r.shape_set = j.value("shape_set", "");
    r.interrupted = j.value("interrupted", false);
    for (const auto& e : j.value("histogram_edges", json::array())) r.histogram_edges.push_back(get_num(e));
    for (const auto& x : j.at("results")) {
      ReportEntry e;
      e.subject = x.at("subject").get<std::string>();
      e.backend = x.at("backend").get<std::string>();
      e.origin = x.value("origin", "");
      e.property = x.at("property").get<std::string>();
      e.status = x.at("status").get<std::string>();
      if (status_rank(e.status) == 0 && e.status != "passed" && e.status != "not_applicable")
        throw ReportError("unknown status '" + e.status + "'");
      e.failure_class = x.value("failure_class", "");
      e.cases_run = integer(x, "cases_run", "results", 0, kMaxCount);
      e.failures = integer(x, "failures", "results", 0, kMaxCount);
      e.seconds = get_num(x.value("seconds", json(0.0)));
      e.cases_to_first_failure =
          json_fields::get_int_or<ReportError>(x, "cases_to_first_failure", "results", -1, kMaxCount, -1);
      e.seconds_to_first_failure = get_num(x.value("seconds_to_first_failure", json(-1.0)));
      e.shrink_seconds = get_num(x.value("shrink_seconds", json(0.0)));
      e.shrink_cut = json_fields::get_bool_or<ReportError>(x, "shrink_cut", "results", false);
      e.max_drift_ulp = get_num(x.value("max_drift_ulp", json(0.0)));
      if (x.contains("run_to_run_spread")) {
        const json& sp = x["run_to_run_spread"];
        if (!sp.is_object()) throw ReportError("results: 'run_to_run_spread' must be an object");
        e.spread.compared = integer(sp, "compared", "run_to_run_spread", 0, kMaxCount);
        e.spread.differing = integer(sp, "differing", "run_to_run_spread", 0, e.spread.compared);
        e.spread.max_ulps = get_num(sp.at("max_ulps"));
        e.spread.max_budget = get_num(sp.value("max_budget", json(0.0)));
        if (sp.contains("probed")) {
          e.spread.probed = integer(sp, "probed", "run_to_run_spread", 0, kMaxCount);
          e.spread.none_isolated = integer(sp, "none_isolated", "run_to_run_spread", 0, e.spread.probed);
          const json& by = sp.value("triggered_by", json::object());
          if (!by.is_object()) throw ReportError("run_to_run_spread: 'triggered_by' must be an object");
          for (auto it = by.begin(); it != by.end(); ++it) {
            const std::string& key = it.key();
            const auto* at = std::find_if(kBatchDimensionNames.begin(), kBatchDimensionNames.end(),
                                          [&](const char* n) { return key == n; });
            if (at == kBatchDimensionNames.end())
              throw ReportError("run_to_run_spread: unknown dimension '" + key + "' in 'triggered_by'");
            e.spread.triggered[size_t(at - kBatchDimensionNames.begin())] =
                integer(by, key.c_str(), "triggered_by", 0, e.spread.probed);
          }
        }
      }
      for (const auto& d : x.value("drift_by_splits", json::array()))
        add_drift(e.drift_by_splits, {drift_from_json(d)});
      e.rows_judged = json_fields::get_int_or<ReportError>(x, "rows_judged", "results", 0, kMaxCount, 0);
      e.rows_escalated =
          json_fields::get_int_or<ReportError>(x, "rows_escalated", "results", 0, kMaxCount, 0);
      e.rows_uncertified =
          json_fields::get_int_or<ReportError>(x, "rows_uncertified", "results", 0, kMaxCount, 0);
      if (x.contains("time_split")) {
        const json& ts = x["time_split"];
        if (!ts.is_object()) throw ReportError("results: 'time_split' must be an object");
        e.time_split.generate = get_num(ts.value("generate", json(0.0)));
        e.time_split.subject = get_num(ts.value("subject", json(0.0)));
        e.time_split.judge = get_num(ts.value("judge", json(0.0)));
        e.time_split.write_ahead = get_num(ts.value("write_ahead", json(0.0)));
        e.time_split.judge_exact = get_num(ts.value("judge_exact", json(0.0)));
      }
      e.message = x.value("message", "");
      e.counterexample = x.value("counterexample", "");
      e.rc_reproduce = x.value("rc_reproduce", "");
      e.reproduce_command = x.value("reproduce_command", "");
      e.context = x.value("context", "");
      if (x.contains("worst_element")) e.quoted = quoted_from_json(x["worst_element"]);
      e.signature = x.value("signature", "");
      if (x.contains("other_failures")) {
        if (!x["other_failures"].is_array() || x["other_failures"].size() > size_t(kMaxFailuresLimit))
          throw ReportError("results[].other_failures must be an array of at most " +
                            std::to_string(kMaxFailuresLimit) + " failures");
        for (const json& j : x["other_failures"]) {
          if (!j.is_object()) throw ReportError("results[].other_failures[] must be objects");
          DistinctFailure f;
          f.signature = j.value("signature", "");
          f.failure_class = j.value("failure_class", "");
          f.message = j.value("message", "");
          f.context = j.value("context", "");
          f.counterexample_summary = j.value("counterexample", "");
          f.corpus_file = j.value("corpus_file", "");
          f.reproduce_command = j.value("reproduce_command", "");
          f.cases_to_failure = j.value("cases_to_failure", -1);
          if (j.contains("worst_element")) f.quoted = quoted_from_json(j["worst_element"]);
          e.other_failures.push_back(std::move(f));
        }
      }
      e.budget_use = budget_use_from(x, e.property);
      e.corpus_files = x.value("corpus_files", std::vector<std::string>{});
      e.shards = integers_or_empty<int>(x, "shards", "results", 0, kMaxShardCount - 1);
      e.plan_index = json_fields::get_int_or<ReportError>(x, "plan_index", "results", -1, kMaxCount, -1);
      for (const auto& s : x.at("stats")) e.stats.push_back(stats_from_json(s));
      r.entries.push_back(std::move(e));
    }
    for (const auto& t : j.value("tilings", json::array())) {
      TilingEntry te;
      te.subject = t.at("subject").get<std::string>();
      te.backend = t.value("backend", "");
      te.dtype = t.value("dtype", "");
      for (const auto& row : t.at("rows")) {
        TilingRow tr;
        tr.br = int(integer(row, "br", "tilings.rows", 0, 1 << 20));
        tr.bc = int(integer(row, "bc", "tilings.rows", 0, 1 << 20));
        tr.num_splits =
            int(json_fields::get_int_or<ReportError>(row, "num_splits", "tilings.rows", 1, 1 << 20, 1));
        tr.fold = row.value("fold", "");
        tr.stats = stats_from_json(row.at("stats"));
        te.rows.push_back(std::move(tr));
      }
      r.tilings.push_back(std::move(te));
    }
    r.baseline = j.value("baseline", json());
    r.parallel = j.value("parallel", json());
    return r;
  } catch (const json::exception& e) {
    throw ReportError(std::string("malformed report: ") + e.what());
  }
}

Report read_report_file(const std::string& path) {
  constexpr size_t kMaxReportBytes = size_t(256) << 20;
  const std::string text = json_fields::read_text_file<ReportError>(path, kMaxReportBytes, "report");
  const json j = json_fields::parse_strict<ReportError>(text, "report " + path);
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (const auto problems = check_report_set(dir.empty() ? "." : dir); !problems.empty())
    throw ReportError("report " + path +
                      ": the report directory is not one complete run: " + problems.front());
  try {
    return report_from_json(j);
  } catch (const ReportError& e) {
    throw ReportError("report " + path + ": " + e.what());
  }
}

}  // namespace attncheck
