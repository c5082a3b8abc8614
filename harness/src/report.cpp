// Report entries and verdicts, and the helpers every report file shares (report_internal.hpp).
// The files themselves: report_json.cpp, report_render.cpp, report_dir.cpp, report_merge.cpp.
#include "attncheck/report.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "attncheck/hash.hpp"
#include "attncheck/version.hpp"
#include "report_internal.hpp"

namespace attncheck {

const char* const kToolVersion = ATTNCHECK_VERSION;  // project(VERSION) in the root CMakeLists.txt

namespace report_detail {

int status_rank(const std::string& s) {
  if (s == "crashed") return 3;
  if (s == "failed") return 2;
  if (s == "interrupted") return 1;
  return 0;
}

std::string short_number(double x, int prec) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (std::isnan(x)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", prec, x);
  return buf;
}

nlohmann::json num(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

double get_num(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    if (s == "nan") return NAN;
  }
  throw ReportError("expected a number, got " + j.dump());
}

const char* budget_use_name(PropertyInfo::BudgetUse u) {
  switch (u) {
    case PropertyInfo::BudgetUse::lse_only:
      return "lse_only";
    case PropertyInfo::BudgetUse::none:
      return "none";
    default:
      return "every_output";
  }
}

}  // namespace report_detail

using report_detail::status_rank;

std::string Report::verdict() const {
  int worst = 0;
  for (const auto& e : entries) worst = std::max(worst, status_rank(e.status));
  if (worst == 3) return "crashed";
  if (worst == 2) return "fail";
  if (baseline.is_object() && !baseline.value("ok", true)) return "fail";
  if (!missing_shards().empty()) return "partial";
  if (interrupted || worst == 1) return "interrupted";
  return "pass";
}

std::vector<int> Report::shards_held() const {
  return shards_merged.empty() ? std::vector<int>{shard_index} : shards_merged;
}

std::vector<int> Report::missing_shards() const {
  std::vector<int> missing;
  if (shards_merged.empty()) return missing;  // a run's own report: its shard is the whole of it
  for (int s = 0; s < shard_count; ++s)
    if (!std::binary_search(shards_merged.begin(), shards_merged.end(), s)) missing.push_back(s);
  return missing;
}

int pair_shard(const std::string& subject, const std::string& property, int shard_count) {
  // The subject's name ends with a NUL byte, so ("ab", "c") and ("a", "bc") hash apart.
  const uint64_t h = hash::fnv1a64(property, hash::fnv1a64(subject + '\0'));
  return int(h % uint64_t(shard_count));
}

std::string shard_list(const std::vector<int>& shards) {
  std::string out;
  for (size_t i = 0; i < shards.size();) {
    size_t j = i;
    while (j + 1 < shards.size() && shards[j + 1] == shards[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(shards[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(shards[j]);
    i = j + 1;
  }
  return out;
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
  e.context = r.context;
  e.quoted = r.quoted;
  e.signature = r.signature;
  e.other_failures = r.other_failures;
  if (const PropertyInfo* p = find_property(r.property)) e.budget_use = p->budget_use;
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

JudgedStats judged_stats(const ReportEntry& e) {
  JudgedStats j;
  j.judged = e.budget_use != PropertyInfo::BudgetUse::none;
  for (const OutputStats& s : e.stats) {
    if (e.budget_use == PropertyInfo::BudgetUse::lse_only && s.output != "LSE") continue;
    j.measured = j.measured || s.count > 0;
    j.max_ulp = std::max(j.max_ulp, s.max_ulp);
    j.p99_ulp = std::max(j.p99_ulp, s.p99_ulp);
    j.nonfinite += s.nonfinite;
    if (!j.judged) continue;
    j.max_ratio = std::max(j.max_ratio, s.max_ratio);
    j.p99_ratio = std::max(j.p99_ratio, s.p99_ratio);
  }
  if (e.status == "failed" && !e.quoted.where.empty()) {
    j.measured = true;
    j.max_ulp = std::max(j.max_ulp, e.quoted.ulp);
    if (j.judged) j.max_ratio = std::max(j.max_ratio, e.quoted.ratio);
  }
  if (!j.judged) j.max_ratio = j.p99_ratio = 0;
  return j;
}

std::vector<const ReportEntry*> entries_by_verdict(const Report& r) {
  std::vector<const ReportEntry*> rows;
  for (const auto& e : r.entries) rows.push_back(&e);
  std::stable_sort(rows.begin(), rows.end(), [](const ReportEntry* a, const ReportEntry* b) {
    const int ra = status_rank(a->status), rb = status_rank(b->status);
    if (ra != rb) return ra > rb;
    const JudgedStats ja = judged_stats(*a), jb = judged_stats(*b);
    if (ja.judged != jb.judged) return ja.judged;
    // NaN compares as the largest: an undefined ratio must not hide below the passing ones.
    const auto key = [](double x) { return std::isnan(x) ? INFINITY : x; };
    return key(ja.max_ratio) > key(jb.max_ratio);
  });
  return rows;
}

std::string failure_line(const std::string& context, const std::string& message) {
  return context.empty() ? message : context + ": " + message;
}

std::string failure_line(const ReportEntry& e) { return failure_line(e.context, e.message); }

namespace {

// "d of c outputs changed, by at most U ulps" (and B accuracy budgets where measured), and where
// batch_invariance probed the changes, the dimensions that triggered them: "; triggered by batch
// size (3 of 4 cases probed), position (1 of 4)", or "none isolated (k of N)".
std::string spread_phrase(const Spread& s) {
  std::string p = std::to_string(s.differing) + " of " + std::to_string(s.compared) +
                  " outputs changed, by at most " + report_detail::short_number(s.max_ulps) + " ulps";
  if (s.max_budget > 0) p += " (" + report_detail::short_number(s.max_budget) + " accuracy budgets)";
  if (s.probed == 0) return p;
  std::string by;
  auto add = [&](const std::string& name, int64_t cases) {
    if (cases == 0) return;
    by += (by.empty() ? "; triggered by " : ", ") + name + " (" + std::to_string(cases) + " of " +
          std::to_string(s.probed) + (by.empty() ? " cases probed)" : ")");
  };
  for (int d = 0; d < kBatchDimensions; ++d) add(kBatchDimensionNames[size_t(d)], s.triggered[size_t(d)]);
  add(batch_dimensions_phrase(0), s.none_isolated);
  return p + by;
}

std::string run_to_run_cell(const ReportEntry& e) {
  if (e.status == "failed" && e.failure_class == "nondeterministic") return "failed: two launches differ";
  if (e.status != "passed") return e.status;
  if (e.spread.compared == 0) return "invariant (" + std::to_string(e.cases_run) + " cases, bit for bit)";
  if (e.spread.differing == 0)
    return "invariant in " + std::to_string(e.cases_run) + " cases (declared nondeterministic)";
  return "variant by design: " + spread_phrase(e.spread);
}

// batch_invariance's cell, and chunked_prefill's (its failure class chunk_variant).
std::string batch_cell(const ReportEntry& e) {
  if (e.status == "failed" && (e.failure_class == "batch_variant" || e.failure_class == "chunk_variant"))
    return "failed: declared invariant, bits changed";
  if (e.status != "passed") return e.status;
  if (e.spread.compared == 0)
    return "invariant (declared; " + std::to_string(e.cases_run) + " cases, bit for bit)";
  if (e.spread.differing == 0) return "invariant in " + std::to_string(e.cases_run) + " cases (not declared)";
  return "variant: " + spread_phrase(e.spread);
}

// Across split counts (splits) or fold orders, from split_order_drift's counts over every split count.
std::string drift_cell(const ReportEntry& e, bool splits) {
  if (e.status != "passed" && e.status != "failed") return e.status;
  int64_t outputs = 0, differ = 0;
  double ulps = 0;
  for (const DriftCounts& d : e.drift_by_splits) {
    if (d.num_splits == 0) continue;  // drift_total's sum, when present
    outputs += splits ? d.splits_outputs : d.fold_outputs;
    differ += splits ? d.splits_differ : d.fold_differ;
    ulps = std::max(ulps, splits ? d.splits_max_ulp : d.fold_max_ulp);
  }
  if (outputs == 0) return "-";
  if (differ == 0) return "invariant (" + std::to_string(outputs) + " outputs compared)";
  return "variant: " + std::to_string(differ) + " of " + std::to_string(outputs) +
         " outputs changed, by at most " + report_detail::short_number(ulps) + " ulps";
}

}  // namespace

std::vector<InvarianceRow> invariance_matrix(const Report& r) {
  std::vector<InvarianceRow> rows;
  for (const ReportEntry& e : r.entries) {
    const bool known = e.property == "run_to_run" || e.property == "batch_invariance" ||
                       e.property == "chunked_prefill" || e.property == "split_order_drift";
    if (!known || e.status == "not_applicable") continue;
    auto it = std::find_if(rows.begin(), rows.end(),
                           [&](const InvarianceRow& x) { return x.subject == e.subject; });
    if (it == rows.end()) {
      rows.push_back(InvarianceRow{e.subject, "-", "-", "-", "-", "-"});
      it = rows.end() - 1;
    }
    if (e.property == "run_to_run") it->run_to_run = run_to_run_cell(e);
    if (e.property == "batch_invariance") it->batch = batch_cell(e);
    if (e.property == "chunked_prefill") it->chunked_prefill = batch_cell(e);
    if (e.property == "split_order_drift") {
      it->split_count = drift_cell(e, true);
      it->fold_order = drift_cell(e, false);
    }
  }
  return rows;
}

namespace {
std::string results_sentence(const Report& r) {
  const std::string verdict = r.verdict();
  size_t passed = 0, applicable = 0;
  std::vector<std::string> subjects;  // failing subjects, in run order
  for (const auto& e : r.entries) {
    if (e.status == "not_applicable") continue;
    ++applicable;
    passed += e.status == "passed";
    if (status_rank(e.status) >= 2 &&
        std::find(subjects.begin(), subjects.end(), e.subject) == subjects.end())
      subjects.push_back(e.subject);
  }
  const std::string of = std::to_string(applicable);
  if (verdict == "pass")
    return "PASS: " + std::to_string(passed) + " of " + of + " subject x property results passed";
  if (verdict == "interrupted")
    return "INTERRUPTED: " + std::to_string(passed) + " of " + of +
           " subject x property results passed before Ctrl-C; none failed";
  std::string label = verdict == "crashed" ? "CRASHED: " : "FAIL: ";
  if (subjects.empty()) {  // the baseline comparison alone failed the run
    const size_t regs = r.baseline.value("regressions", nlohmann::json::array()).size();
    return label + std::to_string(regs) + " regression" + (regs == 1 ? "" : "s") + " against the baseline " +
           r.baseline.value("path", std::string()) + "; every property passed";
  }
  // Each failing subject with the properties it failed (crashed ones marked).
  auto failed_on = [&](const std::string& subject, size_t& bad, size_t& run) {
    std::string names;
    bad = run = 0;
    for (const auto& e : r.entries) {
      if (e.subject != subject || e.status == "not_applicable") continue;
      ++run;
      if (status_rank(e.status) < 2) continue;
      ++bad;
      names += (names.empty() ? "" : ", ") + e.property + (e.status == "crashed" ? " (crashed)" : "");
    }
    return names;
  };
  size_t bad = 0, run = 0;
  if (subjects.size() == 1) {
    const std::string names = failed_on(subjects[0], bad, run);
    return label + std::to_string(bad) + " of " + std::to_string(run) + " properties failed on " +
           subjects[0] + ": " + names;
  }
  size_t all_bad = 0;
  std::string parts;
  constexpr size_t kNamed = 6;  // a longer list is cut: the table below has every one
  for (size_t i = 0; i < subjects.size(); ++i) {
    const std::string names = failed_on(subjects[i], bad, run);
    all_bad += bad;
    if (i < kNamed) parts += (i ? "; " : "") + subjects[i] + " (" + names + ")";
  }
  if (subjects.size() > kNamed)
    parts += "; and " + std::to_string(subjects.size() - kNamed) + " more subjects";
  return label + std::to_string(all_bad) + " of " + of + " subject x property results failed on " +
         std::to_string(subjects.size()) + " subjects: " + parts;
}
}  // namespace

std::string missing_shards_phrase(const Report& r) {
  const std::vector<int> missing = r.missing_shards();
  if (missing.empty()) return {};
  return (missing.size() == 1 ? "shard " : "shards ") + shard_list(missing) + " of " +
         std::to_string(r.shard_count) + " missing";
}

std::string verdict_sentence(const Report& r) {
  const std::string absent = missing_shards_phrase(r);
  if (absent.empty()) return results_sentence(r);
  if (r.verdict() != "partial") return results_sentence(r) + " (" + absent + ")";
  size_t passed = 0, applicable = 0;
  for (const auto& e : r.entries) {
    applicable += e.status != "not_applicable";
    passed += e.status == "passed";
  }
  return "PARTIAL: " + absent + "; " + std::to_string(passed) + " of " + std::to_string(applicable) +
         " subject x property results of the shards present passed";
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
