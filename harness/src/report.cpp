// Report directories: JSON record, Markdown summary, JUnit XML (see report.hpp and
// reports/README.md for the schema). Non-finite numbers, which JSON cannot hold, are written as
// the strings "inf", "-inf" and "nan" and read back as such.
#include "attncheck/report.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "attncheck/atomic_file.hpp"
#include "attncheck/hash.hpp"
#include "attncheck/json_fields.hpp"
#include "attncheck/version.hpp"

namespace attncheck {

const char* const kToolVersion = ATTNCHECK_VERSION;  // project(VERSION) in the root CMakeLists.txt

using nlohmann::json;

namespace {

json num(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}
double get_num(const json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    if (s == "nan") return NAN;
  }
  throw ReportError("expected a number, got " + j.dump());
}

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

int status_rank(const std::string& s) {  // worse is larger; passed and not_applicable are 0
  if (s == "crashed") return 3;
  if (s == "failed") return 2;
  if (s == "interrupted") return 1;
  return 0;
}

// The largest value of one statistic over an entry's outputs (dtypes, O and LSE).
double worst(const ReportEntry& e, double OutputStats::*field) {
  double m = 0;
  for (const auto& s : e.stats) m = std::max(m, s.*field);
  return m;
}
int64_t nonfinite_total(const ReportEntry& e) {
  int64_t n = 0;
  for (const auto& s : e.stats) n += s.nonfinite;
  return n;
}

std::string xml_escape(const std::string& in) {
  std::string out;
  for (unsigned char c : in) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // XML 1.0 forbids most control characters even escaped.
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
          out += '?';
        else
          out += char(c);
    }
  }
  return out;
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s)
    out += (c == '|') ? std::string("\\|") : (c == '\n') ? std::string(" ") : std::string(1, c);
  return out;
}

std::string fmt(double x, int prec = 3) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (std::isnan(x)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", prec, x);
  return buf;
}

}  // namespace

std::string Report::verdict() const {
  int worst = 0;
  for (const auto& e : entries) worst = std::max(worst, status_rank(e.status));
  if (worst == 3) return "crashed";
  if (worst == 2) return "fail";
  if (baseline.is_object() && !baseline.value("ok", true)) return "fail";
  if (interrupted || worst == 1) return "interrupted";
  return "pass";
}

ReportEntry entry_from_result(const PropertyResult& r, const Subject& s, int shard_index) {
  ReportEntry e;
  e.subject = r.subject.empty() ? s.name() : r.subject;
  e.backend = s.backend();
  e.origin = s.origin();
  e.property = r.property;
  e.status = status_name(r.status);
  e.failure_class = r.failure_class;
  e.cases_run = r.cases_run;
  e.failures = r.failures;
  e.stats = r.stats;
  e.corpus_files = r.corpus_files;
  e.message = r.message;
  e.counterexample = r.counterexample_summary;
  e.rc_reproduce = r.rc_reproduce;
  e.reproduce_command = r.reproduce_command;
  e.seconds = r.seconds;
  e.cases_to_first_failure = r.cases_to_first_failure;
  e.seconds_to_first_failure = r.seconds_to_first_failure;
  e.shrink_seconds = r.shrink_seconds;
  e.shrink_cut = r.shrink_cut;
  e.max_drift_ulp = r.max_drift_ulp;
  e.spread = r.spread;
  e.drift_by_splits = r.drift_by_splits;
  e.rows_judged = r.rows_judged;
  e.rows_escalated = r.rows_escalated;
  e.rows_uncertified = r.rows_uncertified;
  e.time_split = r.time_split;
  e.shards = {shard_index};
  return e;
}

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
                         {"write_ahead", num(e.time_split.write_ahead)}}},
                       {"message", e.message},
                       {"counterexample", e.counterexample},
                       {"rc_reproduce", e.rc_reproduce},
                       {"reproduce_command", e.reproduce_command},
                       {"corpus_files", e.corpus_files},
                       {"shards", e.shards},
                       {"plan_index", e.plan_index},
                       {"stats", stats}});
    if (e.spread.compared > 0)
      results.back()["run_to_run_spread"] = {{"compared", e.spread.compared},
                                             {"differing", e.spread.differing},
                                             {"max_ulps", num(e.spread.max_ulps)},
                                             {"max_budget", num(e.spread.max_budget)}};
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
      }
      e.message = x.value("message", "");
      e.counterexample = x.value("counterexample", "");
      e.rc_reproduce = x.value("rc_reproduce", "");
      e.reproduce_command = x.value("reproduce_command", "");
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

std::string render_markdown(const Report& r) {
  std::vector<const ReportEntry*> rows;
  for (const auto& e : r.entries) rows.push_back(&e);
  // Worst offenders first: crashed, failed, interrupted, then by largest max ulp.
  std::stable_sort(rows.begin(), rows.end(), [](const ReportEntry* a, const ReportEntry* b) {
    const int ra = status_rank(a->status), rb = status_rank(b->status);
    if (ra != rb) return ra > rb;
    return worst(*a, &OutputStats::max_ulp) > worst(*b, &OutputStats::max_ulp);
  });
  int bad = 0;
  for (const auto* e : rows) bad += e->status != "passed";
  const std::string verdict = r.verdict();
  std::ostringstream o;
  std::string upper = verdict;
  std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
  o << "## attncheck: " << upper << " (" << bad << " of " << rows.size()
    << " subject x property results not passing)\n\n";
  o << "backend " << r.backend << (r.device.empty() || r.device == r.backend ? "" : " (" + r.device + ")")
    << ", seed " << r.seed << ", " << r.num_cases << " cases, suite " << r.suite;
  if (r.shards_merged.size() > 1) {
    o << ", shards";
    for (size_t i = 0; i < r.shards_merged.size(); ++i) o << (i ? ", " : " ") << r.shards_merged[i];
    o << " of " << r.shard_count << " merged";
  } else {
    o << ", shard " << r.shard_index << "/" << r.shard_count;
  }
  o << ", attncheck " << r.tool_version << (r.git_describe.empty() ? "" : " (" + r.git_describe + ")")
    << "\n";
  if (r.interrupted) o << "\n**Interrupted**: this report holds what completed before Ctrl-C.\n";
  if (r.baseline.is_object()) {
    const auto regs = r.baseline.value("regressions", json::array());
    o << "\n**Baseline** " << r.baseline.value("path", "") << ": "
      << (regs.empty() ? "no regression" : std::to_string(regs.size()) + " regression(s)") << ", "
      << r.baseline.value("compared", 0) << " compared, " << r.baseline.value("skipped", json::array()).size()
      << " skipped\n";
    for (const auto& g : regs) o << "- " << g.get<std::string>() << "\n";
  }
  o << "\n| subject | property | status | cases | max ulp | p99 ulp | max err/budget | non-finite | note |\n";
  o << "|---|---|---|---:|---:|---:|---:|---:|---|\n";
  const size_t limit = 25;
  size_t shown = 0;
  for (const auto* e : rows) {
    if (shown == limit) break;
    ++shown;
    std::string note =
        e->status == "passed" ? "" : e->failure_class + (e->message.empty() ? "" : ": " + e->message);
    if (e->status == "passed" && e->spread.compared > 0)
      note = "nondeterministic by design: " + std::to_string(e->spread.differing) + " of " +
             std::to_string(e->spread.compared) + " outputs differed run to run, by at most " +
             fmt(e->spread.max_budget) + " accuracy budgets (" + fmt(e->spread.max_ulps) +
             " representable values apart)";
    if (note.size() > 160) note = note.substr(0, 157) + "...";
    o << "| " << md_cell(e->subject) << " (" << e->backend << ") | " << md_cell(e->property) << " | "
      << (e->status == "passed" ? "pass" : "**" + e->status + "**") << " | " << e->cases_run << " | "
      << fmt(worst(*e, &OutputStats::max_ulp)) << " | " << fmt(worst(*e, &OutputStats::p99_ulp)) << " | "
      << fmt(worst(*e, &OutputStats::max_ratio)) << " | " << nonfinite_total(*e) << " | " << md_cell(note)
      << " |\n";
  }
  if (rows.size() > shown)
    o << "\n" << rows.size() - shown << " more results not shown (all passing); see report.json.\n";
  bool header = false;
  for (const auto* e : rows) {
    if (e->status == "passed") continue;
    if (!header) o << "\n### Reproduce\n\n";
    header = true;
    o << "- `" << e->subject << "` / `" << e->property
      << "`: " << (e->counterexample.empty() ? "" : e->counterexample + "; ")
      << (e->reproduce_command.empty() ? "(no reproducer)" : "`" + e->reproduce_command + "`") << "\n";
  }
  return o.str();
}

std::string render_junit(const Report& r) {
  std::map<std::string, std::vector<const ReportEntry*>> by_subject;
  for (const auto& e : r.entries) by_subject[e.subject + " (" + e.backend + ")"].push_back(&e);
  int tests = 0, failures = 0, errors = 0;
  double total = 0;
  for (const auto& e : r.entries) {
    ++tests;
    failures += e.status == "failed";
    errors += e.status == "crashed" || e.status == "interrupted";
    total += e.seconds;
  }
  const bool baseline_case = r.baseline.is_object();
  const auto regs = baseline_case ? r.baseline.value("regressions", json::array()) : json::array();
  if (baseline_case) {
    ++tests;
    failures += !regs.empty();
  }
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<testsuites name=\"attncheck\" tests=\"" << tests << "\" failures=\"" << failures << "\" errors=\""
    << errors << "\" time=\"" << fmt(total, 6) << "\">\n";
  for (const auto& [suite, entries] : by_subject) {
    int sf = 0, se = 0;
    double st = 0;
    for (const auto* e : entries) {
      sf += e->status == "failed";
      se += e->status == "crashed" || e->status == "interrupted";
      st += e->seconds;
    }
    o << "  <testsuite name=\"" << xml_escape("attncheck." + suite) << "\" tests=\"" << entries.size()
      << "\" failures=\"" << sf << "\" errors=\"" << se << "\" time=\"" << fmt(st, 6) << "\">\n";
    for (const auto* e : entries) {
      o << "    <testcase classname=\"" << xml_escape("attncheck." + e->subject) << "\" name=\""
        << xml_escape(e->property) << "\" time=\"" << fmt(e->seconds, 6) << "\">";
      const std::string detail = "cases run " + std::to_string(e->cases_run) + ", failures " +
                                 std::to_string(e->failures) + "\ncounterexample: " + e->counterexample +
                                 "\nreproduce: " + e->reproduce_command + "\nrapidcheck: " + e->rc_reproduce;
      if (e->status == "failed") {
        o << "\n      <failure type=\"" << xml_escape(e->failure_class) << "\" message=\""
          << xml_escape(e->message) << "\">" << xml_escape(detail) << "</failure>\n    ";
      } else if (e->status == "crashed" || e->status == "interrupted") {
        o << "\n      <error type=\""
          << xml_escape(e->status + (e->failure_class.empty() ? "" : ":" + e->failure_class))
          << "\" message=\"" << xml_escape(e->message) << "\">" << xml_escape(detail) << "</error>\n    ";
      }
      o << "</testcase>\n";
    }
    o << "  </testsuite>\n";
  }
  if (baseline_case) {
    o << "  <testsuite name=\"attncheck.baseline\" tests=\"1\" failures=\"" << (!regs.empty())
      << "\" errors=\"0\">\n";
    o << "    <testcase classname=\"attncheck.baseline\" name=\"no_regression\">";
    if (!regs.empty()) {
      std::string all;
      for (const auto& g : regs) all += g.get<std::string>() + "\n";
      o << "\n      <failure type=\"regression\" message=\""
        << xml_escape(std::to_string(regs.size()) + " regression(s) against the baseline") << "\">"
        << xml_escape(all) << "</failure>\n    ";
    }
    o << "</testcase>\n  </testsuite>\n";
  }
  o << "</testsuites>\n";
  return o.str();
}

void ensure_writable_dir(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw ReportError(what + " " + dir + " cannot be created: " + (ec ? ec.message() : "not a directory"));
  const std::string probe = dir + "/.attncheck-write-probe";
  {
    std::ofstream f(probe);
    if (!f) throw ReportError(what + " " + dir + " is not writable");
  }
  fs::remove(probe, ec);
}

namespace {
constexpr const char* kManifest = "manifest.json";
std::string content_hash(const std::string& text) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash::fnv1a64(text)));
  return buf;
}
}  // namespace

void write_report_dir(const std::string& dir, const Report& r) {
  ensure_writable_dir(dir);
  // Each file is replaced atomically; the manifest, written last, records the hash of every file
  // of the set, so a reader can tell a complete set from one that a kill interrupted between two
  // renames (check_report_set).
  const std::pair<const char*, std::string> files[] = {
      {"report.json", report_to_json(r).dump(2, ' ', false, json::error_handler_t::replace) + "\n"},
      {"report.md", render_markdown(r)},
      {"junit.xml", render_junit(r)}};
  json manifest = {{"schema", "attncheck-report-manifest"}, {"files", json::object()}};
  for (const auto& [name, text] : files) manifest["files"][name] = content_hash(text);
  try {
    for (const auto& [name, text] : files) write_file_atomic(dir + "/" + name, text);
    write_file_atomic(dir + "/" + kManifest, manifest.dump(1) + "\n");
  } catch (const AtomicWriteError& e) {
    throw ReportError(e.what());
  }
}

std::vector<std::string> check_report_set(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> problems;
  const fs::path manifest_path = fs::path(dir) / kManifest;
  std::error_code ec;
  if (!fs::exists(manifest_path, ec)) return problems;  // no report written here yet
  auto slurp = [](const fs::path& p, std::string& out) {
    std::string error;
    auto text = json_fields::try_read_text_file(p.string(), size_t(256) << 20, error);
    if (text) out = std::move(*text);
    return text.has_value();
  };
  std::string text;
  std::string error;
  std::optional<json> m;
  if (slurp(manifest_path, text)) m = json_fields::try_parse_strict(text, error);
  if (!m || !m->is_object() || !m->contains("files") || !(*m)["files"].is_object()) {
    problems.push_back(std::string(kManifest) + " is unreadable");
    return problems;
  }
  for (const auto& [name, hash] : (*m)["files"].items()) {
    std::string content;
    if (!slurp(fs::path(dir) / name, content))
      problems.push_back(name + " is missing");
    else if (!hash.is_string() || content_hash(content) != hash.get<std::string>())
      problems.push_back(name +
                         " belongs to another run than the manifest (a run was interrupted while writing)");
  }
  return problems;
}

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
  out.baseline = json();
  out.interrupted = false;
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
    const std::vector<int> mine = p.shards_merged.empty() ? std::vector<int>{p.shard_index} : p.shards_merged;
    for (int s : mine)
      if (!shards.insert(s).second)
        throw ReportError("report merge: shard " + std::to_string(s) + " given twice");
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
  out.shards_merged.assign(shards.begin(), shards.end());
  out.shard_index = out.shards_merged.front();
  out.timestamp = utc_timestamp();
  out.command = "attncheck report merge";
  return out;
}

std::string utc_timestamp() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace attncheck
