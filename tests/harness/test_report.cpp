// Reports and the CI gate, on reports built by hand here (no properties run):
//  - report.json round trip: every field written is read back equal (including inf ulp values);
//  - junit.xml is well-formed XML (checked by Python's ElementTree, an independent parser) and
//    counts one testcase per (subject, property) plus the baseline case;
//  - the gate flags a regression built into a copy of a report (p99 grown past the stated
//    tolerance, a new non-finite, passed -> failed) and passes an identical report;
//  - merging two shard reports gives the union (counts add, max is max, quantiles the max of the
//    shards', drift counts add per split count, corpus files union), its results in the single
//    run's order (each result's position in the unsharded plan, read back from report.json);
//  - shards and baselines: each shard compares its share of the baseline's pairs, and the shards'
//    comparisons add up to the whole run's (built here by filtering one report); merge keeps them,
//    from one baseline only; a baseline must hold the run's pairs; a merge lacking shards is
//    partial, never a pass.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "attncheck/baseline.hpp"
#include "attncheck/json_fields.hpp"
#include "attncheck/report.hpp"

using namespace attncheck;

namespace {

OutputStats stats(const std::string& dtype, const std::string& output, int64_t count, double max_ulp,
                  double p99) {
  OutputStats s;
  s.dtype = dtype;
  s.output = output;
  s.count = count;
  s.max_ulp = max_ulp;
  s.p99_ulp = p99;
  s.mean_ulp = p99 / 2;
  s.p50_ratio = p99 / 8;
  s.p99_ratio = p99 / 4;
  s.max_ratio = max_ulp / 4;
  s.histogram = {count - 1, 1, 0};
  return s;
}

DriftCounts drift(int num_splits, int64_t outputs, int64_t fold_differ, double fold_max,
                  int64_t splits_differ, double splits_max) {
  DriftCounts d;
  d.num_splits = num_splits;
  d.fold_outputs = outputs;
  d.fold_differ = fold_differ;
  d.fold_max_ulp = fold_max;
  d.splits_outputs = num_splits > 1 ? outputs : 0;
  d.splits_differ = splits_differ;
  d.splits_max_ulp = splits_max;
  return d;
}

Report sample_report(int shard = 0, int shard_count = 1) {
  Report r;
  r.timestamp = "2025-01-01T00:00:00Z";
  r.command = "attncheck check";
  r.backend = "host";
  r.seed = 7;
  r.num_cases = 50;
  r.shard_index = shard;
  r.shard_count = shard_count;
  r.suite = "gate";
  r.shape_set = "max_size=100,max_keys=64";
  r.histogram_edges = {0, 0.5, 1, INFINITY};
  ReportEntry a;
  a.subject = "merge";
  a.backend = "host";
  a.origin = "builtin";
  a.property = "accuracy";
  a.cases_run = 50;
  a.stats = {stats("fp16", "O", 1000, 0.75, 0.5), stats("fp16", "LSE", 100, 1.0, 0.5)};
  a.seconds = 1.5;
  a.time_split = {0.25, 0.5, 0.375, 0.125, 0.0625};  // generate, subject, judge, write_ahead, judge_exact
  a.shards = {shard};
  a.corpus_files = {"corpus/a-" + std::to_string(shard) + ".json"};
  ReportEntry b = a;
  b.subject = "fused";
  b.property = "empty_row";
  b.status = "failed";
  b.failure_class = "empty_row";
  b.failures = 1;
  b.message = "LSE <+inf> & O = \"nan\"";  // characters XML and Markdown must escape
  b.stats = {stats("bf16", "O", 10, INFINITY, 2.0)};
  b.stats[0].nonfinite = 3;
  b.reproduce_command = "attncheck replay x.json --subject fused";
  r.entries = {a, b};
  TilingEntry t;
  t.subject = "fused";
  t.backend = "host";
  t.dtype = "fp16";
  TilingRow row;
  row.br = 64;
  row.bc = 32;
  row.stats = stats("fp16", "O", 10, 1.5, 1.0);
  t.rows = {row};
  r.tilings = {t};
  return r;
}

// sample_report with a third entry, split-KV drift measured at num_splits 1 and 2.
Report with_drift(Report r) {
  ReportEntry d = r.entries[0];
  d.subject = "splitkv";
  d.property = "split_order_drift";
  d.stats = {stats("fp16", "O", 400, 3.0, 1.0)};
  d.drift_by_splits = {drift(1, 400, 0, 0, 0, 0), drift(2, 400, 10, 2.0, 30, 4.5)};
  r.entries.push_back(d);
  return r;
}

}  // namespace

TEST_CASE("report.json round trips every field", "[report]") {
  const Report r = with_drift(sample_report());
  const nlohmann::json j = report_to_json(r);
  CHECK(j.at("schema_version") == kReportSchemaVersion);
  CHECK(j.at("verdict") == "fail");
  CHECK(j.at("results").at(1).at("stats").at(0).at("max_ulp") == "inf");
  const Report back = report_from_json(nlohmann::json::parse(j.dump()));
  CHECK(report_to_json(back) == j);
  CHECK(std::isinf(back.entries[1].stats[0].max_ulp));
  CHECK(back.tilings.at(0).rows.at(0).bc == 32);
  // error / budget quantiles (the stats helper: p50 = p99 / 8, p99 = p99 / 4, max = max ulp / 4).
  const nlohmann::json& s0 = j.at("results").at(0).at("stats").at(0);
  CHECK(s0.at("p50_ratio") == 0.0625);
  CHECK(s0.at("p99_ratio") == 0.125);
  CHECK(s0.at("max_ratio") == 0.1875);
  CHECK(back.entries[0].stats[0].p50_ratio == 0.0625);
  CHECK(back.tilings[0].rows[0].stats.max_ratio == 0.375);
  CHECK(std::isinf(back.entries[1].stats[0].max_ratio));
  // Drift: the per-split counts, and the totals derived from them: fold orders differ in 10 of
  // 2 x 400 outputs, split counts in 30 of 400 (num_splits = 2 against 1).
  const nlohmann::json& d = j.at("results").at(2);
  CHECK(d.at("drift_fold_differ_fraction") == 10.0 / 800);
  CHECK(d.at("drift_splits_differ_fraction") == 30.0 / 400);
  CHECK(d.at("drift_fold_max_ulp") == 2.0);
  CHECK(d.at("drift_splits_max_ulp") == 4.5);
  REQUIRE(back.entries[2].drift_by_splits.size() == 2);
  CHECK(back.entries[2].drift_by_splits[1].splits_differ == 30);
  CHECK(back.entries[0].drift_by_splits.empty());
  CHECK(!j.at("results").at(0).contains("drift_by_splits"));
  const nlohmann::json& ts = j.at("results").at(0).at("time_split");
  CHECK(ts.at("generate") == 0.25);
  CHECK(ts.at("subject") == 0.5);
  CHECK(ts.at("judge") == 0.375);
  CHECK(ts.at("write_ahead") == 0.125);
  CHECK(ts.at("judge_exact") == 0.0625);
  CHECK(back.entries[0].time_split.judge == 0.375);
  CHECK(back.entries[0].time_split.judge_exact == 0.0625);
}

TEST_CASE("report.json without the newer fields reads them as 0", "[report]") {
  nlohmann::json j = report_to_json(with_drift(sample_report()));
  for (auto& e : j.at("results")) {
    for (const char* k : {"drift_by_splits", "drift_fold_differ_fraction", "drift_fold_max_ulp",
                          "drift_splits_differ_fraction", "drift_splits_max_ulp", "time_split"})
      e.erase(k);
    for (auto& s : e.at("stats"))
      for (const char* k : {"p50_ratio", "p99_ratio", "max_ratio"}) s.erase(k);
  }
  const Report back = report_from_json(j);
  CHECK(back.entries[0].stats[0].max_ratio == 0);
  CHECK(back.entries[0].stats[0].p50_ratio == 0);
  CHECK(back.entries[0].stats[0].max_ulp == 0.75);
  CHECK(back.entries[2].drift_by_splits.empty());
  CHECK(back.entries[0].time_split.subject == 0);
  // Counts that contradict each other are refused.
  nlohmann::json bad = report_to_json(with_drift(sample_report()));
  bad["results"][2]["drift_by_splits"][1]["splits_differ"] = 401;
  CHECK_THROWS_AS(report_from_json(bad), ReportError);
}

TEST_CASE("report_from_json refuses documents that are not reports", "[report]") {
  CHECK_THROWS_AS(report_from_json(nlohmann::json::parse("{\"a\": 1}")), ReportError);
  nlohmann::json j = report_to_json(sample_report());
  j["schema_version"] = 99;
  CHECK_THROWS_AS(report_from_json(j), ReportError);
  j = report_to_json(sample_report());
  j["results"][0].erase("cases_run");
  CHECK_THROWS_AS(report_from_json(j), ReportError);
}

TEST_CASE("junit.xml is well-formed and has one testcase per result", "[report]") {
  Report r = sample_report();
  r.baseline = compare_to_baseline(r, r).to_json();
  const std::string xml = render_junit(r);
  CHECK(xml.find("<+inf>") == std::string::npos);  // escaped
  size_t testcases = 0;
  for (size_t p = xml.find("<testcase "); p != std::string::npos; p = xml.find("<testcase ", p + 1))
    ++testcases;
  CHECK(testcases == 3);  // two results + the baseline case
  const auto dir = std::filesystem::temp_directory_path() / ("ac_junit_" + std::to_string(::getpid()));
  write_report_dir(dir.string(), r);
  for (const char* f : {"report.json", "report.md", "report.html", "junit.xml"})
    CHECK(std::filesystem::exists(dir / f));
  // No temporary directory is left behind.
  for (const auto& e : std::filesystem::directory_iterator(dir))
    CHECK(e.path().filename().string().rfind(".tmp-", 0) != 0);
  if (std::filesystem::exists("/usr/bin/python3")) {
    const std::string cmd =
        "/usr/bin/python3 -c \"import sys, xml.etree.ElementTree as E; t = E.parse(sys.argv[1]); "
        "sys.exit(0 if len(t.getroot().findall('.//testcase')) == 3 else 1)\" " +
        (dir / "junit.xml").string();
    CHECK(std::system(cmd.c_str()) == 0);
  }
  CHECK(read_report_file((dir / "report.json").string()).entries.size() == 2);
  std::filesystem::remove_all(dir);
}

TEST_CASE("report.md lists the worst offenders first", "[report]") {
  const std::string md = render_markdown(sample_report());
  const size_t fused = md.find("| fused"), merge = md.find("| merge");
  REQUIRE(fused != std::string::npos);
  REQUIRE(merge != std::string::npos);
  CHECK(fused < merge);
  CHECK(md.find("## FAIL: 1 of 1 properties failed on fused: empty_row") == 0);
  // merge: max err/budget max(0.75, 1) / 4, p99 err/budget 0.5 / 4, then max ulp max(0.75, 1) and
  // p99 ulp 0.5, after the budget columns.
  CHECK(md.find("| max err/budget | p99 err/budget | cases | non-finite | max ulp | p99 ulp |") !=
        std::string::npos);
  CHECK(md.find("| accuracy | 0.25 | 0.125 | 50 | 0 | 1 | 0.5 |") != std::string::npos);
}

TEST_CASE("report.md names a single shard, or the shards a merged report holds", "[report]") {
  Report r = sample_report();
  r.shard_index = 1;
  r.shard_count = 3;
  CHECK(render_markdown(r).find(", shard 1/3,") != std::string::npos);
  // A merged report's shard_index is its first shard's; "shard 0/3 (3 shards merged)" read as one.
  r.shard_index = 0;
  r.shards_merged = {0, 1, 2};
  const std::string md = render_markdown(r);
  CHECK(md.find(", shards 0, 1, 2 of 3 merged,") != std::string::npos);
  CHECK(md.find("shard 0/3") == std::string::npos);
}

TEST_CASE("the gate passes an identical report and flags built-in regressions", "[baseline]") {
  const Report base = sample_report();
  const BaselineComparison same = compare_to_baseline(base, base);
  CHECK(same.ok());
  CHECK(same.compared == 2);

  Report worse = base;
  // Tolerance: p99 may grow to max(0.5 + 0.5, 0.5 x 1.25) = 1.0 ulp; 1.0 passes, 1.01 fails.
  worse.entries[0].stats[0].p99_ulp = 1.0;
  CHECK(compare_to_baseline(worse, base).ok());
  worse.entries[0].stats[0].p99_ulp = 1.01;
  const BaselineComparison c = compare_to_baseline(worse, base);
  REQUIRE(c.regressions.size() == 1);
  CHECK(c.regressions[0].find("merge (host) / accuracy fp16 O: p99 ulp") == 0);

  Report nonfinite = base;
  nonfinite.entries[0].stats[1].nonfinite = 2;
  REQUIRE(compare_to_baseline(nonfinite, base).regressions.size() == 1);

  Report failed = base;
  failed.entries[0].status = "failed";
  const auto f = compare_to_baseline(failed, base);
  REQUIRE(f.regressions.size() == 1);
  CHECK(f.regressions[0].find("passed in the baseline, failed now") != std::string::npos);
}

TEST_CASE("the gate skips what does not apply and says so", "[baseline]") {
  const Report base = sample_report();
  Report cur = base;
  cur.entries.pop_back();           // fused/empty_row not run
  cur.entries[0].stats.pop_back();  // LSE not measured
  cur.seed = 8;                     // different cases: ulp metrics not comparable
  cur.entries[0].stats[0].max_ulp = 100;
  const BaselineComparison c = compare_to_baseline(cur, base);
  CHECK(c.ok());
  CHECK(!c.ulp_compared);
  CHECK(c.skipped.size() == 3);
}

TEST_CASE("merging two shard reports gives the union", "[report]") {
  Report s0 = with_drift(sample_report(0, 2)), s1 = with_drift(sample_report(1, 2));
  s1.entries[0].stats[0].max_ulp = 2.0;
  s1.entries[0].stats[0].mean_ulp = 1.0;  // s0's is 0.25
  s1.entries[0].stats[0].max_ratio = 0.5;
  s1.entries[0].stats[0].p50_ratio = 0.01;  // below s0's 0.0625
  s1.entries[2].drift_by_splits = {drift(2, 400, 12, 7.0, 30, 1.0), drift(3, 100, 1, 1.0, 5, 2.0)};
  const Report m = merge_reports({s0, s1});
  CHECK(m.shards_merged == std::vector<int>{0, 1});
  REQUIRE(m.entries.size() == 3);
  const ReportEntry& e = m.entries[0];
  CHECK(e.cases_run == 100);
  CHECK(e.time_split.subject == 2 * 0.5);  // seconds add up over shards
  CHECK(e.corpus_files.size() == 2);
  CHECK(e.stats[0].count == 2000);
  CHECK(e.stats[0].max_ulp == 2.0);
  CHECK(e.stats[0].mean_ulp == Approx((0.25 * 1000 + 1.0 * 1000) / 2000));
  CHECK(e.stats[0].histogram == std::vector<int64_t>{1998, 2, 0});
  // Quantiles merge to the larger shard's (an upper bound of the union's), max to the max.
  CHECK(e.stats[0].p50_ratio == 0.5 / 8);
  CHECK(e.stats[0].p99_ratio == 0.5 / 4);
  CHECK(e.stats[0].max_ratio == 2.0 / 4);
  // Drift counts add per split count, so the merged fractions are exact; maxima take the max.
  const ReportEntry& d = m.entries[2];
  REQUIRE(d.drift_by_splits.size() == 3);
  CHECK(d.drift_by_splits[0].fold_outputs == 400);  // num_splits = 1 from shard 0 only
  CHECK(d.drift_by_splits[1].fold_differ == 10 + 12);
  CHECK(d.drift_by_splits[1].splits_differ == 60);
  CHECK(d.drift_by_splits[1].fold_max_ulp == 7.0);
  CHECK(d.drift_by_splits[2].num_splits == 3);
  CHECK(drift_total(d.drift_by_splits).splits_differ_fraction() == (60.0 + 5) / (800 + 100));
  CHECK(m.entries[1].failures == 2);
  CHECK(m.entries[1].stats[0].nonfinite == 6);
  CHECK_THROWS_AS(merge_reports({s0, s0}), ReportError);  // the same shard twice
  Report other = s1;
  other.seed = 9;
  CHECK_THROWS_AS(merge_reports({s0, other}), ReportError);
}

TEST_CASE("merged shard reports list their results in the single run's order", "[report]") {
  // The single run: merge/accuracy, fused/empty_row, splitkv/split_order_drift, in plan order.
  Report single = with_drift(sample_report());
  for (size_t i = 0; i < single.entries.size(); ++i) single.entries[i].plan_index = int64_t(i);
  // Shard 0 of 2 holds the first and the last pair, shard 1 the middle one; each is read back from
  // its report.json, as `report merge` reads them.
  Report s0 = single, s1 = single;
  s0.shard_count = s1.shard_count = 2;
  s1.shard_index = 1;
  s0.entries = {single.entries[0], single.entries[2]};
  s1.entries = {single.entries[1]};
  const auto read_back = [](const Report& r) {
    return report_from_json(nlohmann::json::parse(report_to_json(r).dump()));
  };
  const auto order = [](const Report& r) {
    std::vector<std::string> pairs;
    for (const auto& e : r.entries) pairs.push_back(e.subject + "/" + e.property);
    return pairs;
  };
  const std::vector<std::string> want = order(single);
  CHECK(order(merge_reports({read_back(s0), read_back(s1)})) == want);
  CHECK(order(merge_reports({read_back(s1), read_back(s0)})) == want);
  // Results without a plan position (older reports) keep the order they came in.
  for (auto* r : {&s0, &s1})
    for (auto& e : r->entries) e.plan_index = -1;
  CHECK(order(merge_reports({s0, s1})) == std::vector<std::string>{want[0], want[2], want[1]});
}

TEST_CASE("printable_tail keeps the end of a long text, escapes whole", "[report][json]") {
  using attncheck::json_fields::printable_tail;
  CHECK(printable_tail("short", 10) == "short");
  // 26 letters in 10 characters: "..." and the last 7.
  CHECK(printable_tail("abcdefghijklmnopqrstuvwxyz", 10) == "...tuvwxyz");
  // A newline is the 4 characters \x0a: kept whole ("...", \x0a, "end" is exactly 10) ...
  CHECK(printable_tail("aaaaaaaaaa\nend", 10) == "...\\x0aend");
  // ... or left out whole when it does not fit (9: "..." and "end" leave 3).
  CHECK(printable_tail("aaaaaaaaaa\nend", 9) == "...end");
}

TEST_CASE("a shard compares the baseline's pairs of its share; the shards together, the whole run's",
          "[baseline][shards]") {
  const Report base = with_drift(sample_report());
  Report worse = base;
  for (auto& e : worse.entries) e.stats[0].p99_ulp = 100;  // past any allowance of a finite p99
  const BaselineComparison whole = compare_to_baseline(worse, base);
  REQUIRE(whole.regressions.size() == 3);
  for (int count : {2, 3}) {
    std::vector<std::string> regressions;
    std::vector<std::pair<std::vector<int>, nlohmann::json>> comparisons;
    int compared = 0;
    for (int i = 0; i < count; ++i) {
      Report shard = worse;
      shard.shard_index = i;
      shard.shard_count = count;
      shard.entries.clear();
      for (const auto& e : worse.entries)
        if (pair_shard(e.subject, e.property, count) == i) shard.entries.push_back(e);
      const BaselineComparison c = compare_to_baseline(shard, base);
      // The pairs draw the same cases in every shard: the ulp comparisons apply.
      CHECK(c.ulp_compared);
      CHECK(c.skipped.empty());
      CHECK(c.other_shards == int(base.entries.size() - shard.entries.size()));
      CHECK(c.id == whole.id);
      compared += c.compared;
      regressions.insert(regressions.end(), c.regressions.begin(), c.regressions.end());
      comparisons.emplace_back(std::vector<int>{i}, c.to_json());
    }
    CHECK(compared == whole.compared);
    std::vector<std::string> want = whole.regressions;
    std::sort(want.begin(), want.end());
    std::sort(regressions.begin(), regressions.end());
    CHECK(regressions == want);
    const nlohmann::json merged = merge_baseline_comparisons(comparisons, count);
    CHECK(merged.at("compared") == whole.compared);
    CHECK(merged.at("other_shards") == 0);
    CHECK(merged.at("ok") == false);
    CHECK(merged.at("regressions").size() == 3);
  }
}

TEST_CASE("a baseline gates only runs whose pairs it holds", "[baseline][shards]") {
  Report base = sample_report();
  CHECK(baseline_coverage_problem(base, 0, 1).empty());
  CHECK(baseline_coverage_problem(base, 2, 3).empty());
  base.shard_count = 2;  // shard 0 of 2, as `check --shard 0/2` wrote it
  CHECK(baseline_coverage_problem(base, 0, 2).empty());
  CHECK(baseline_coverage_problem(base, 1, 2)
            .find("it holds shard 0 of 2 only, not the pairs of shard 1 of 2") == 0);
  CHECK(baseline_coverage_problem(base, 0, 1).find("it holds shard 0 of 2 only, not the whole run's pairs") ==
        0);
  CHECK(!baseline_coverage_problem(base, 0, 4).empty());
  base.shards_merged = {0, 1};  // merged from every shard: a complete run
  CHECK(baseline_coverage_problem(base, 0, 1).empty());
  CHECK(baseline_coverage_problem(base, 1, 3).empty());
  base.shard_count = 4;
  base.shards_merged = {0, 2};
  CHECK(baseline_coverage_problem(base, 2, 4).empty());
  CHECK(baseline_coverage_problem(base, 1, 4).find("it holds shards 0, 2 of 4 only") == 0);
}

TEST_CASE("report merge carries the shards' baseline comparisons, from one baseline only",
          "[report][baseline]") {
  const auto gated = [](int shard, const std::string& id, std::vector<std::string> regressions,
                        std::vector<std::string> skipped, int compared) {
    Report r = sample_report(shard, 2);
    r.entries.pop_back();  // merge/accuracy passed: only the baseline can fail the merge
    BaselineComparison c;
    c.path = "base/report.json";
    c.id = id;
    c.regressions = std::move(regressions);
    c.skipped = std::move(skipped);
    c.compared = compared;
    r.baseline = c.to_json();
    return r;
  };
  const Report s0 = gated(0, "abc", {"r0"}, {"k0", "ulp comparisons"}, 1);
  const Report s1 = gated(1, "abc", {"r1"}, {"ulp comparisons"}, 2);
  const Report m = merge_reports({s1, s0});
  CHECK(m.verdict() == "fail");
  CHECK(m.baseline.at("regressions") == nlohmann::json({"r0", "r1"}));           // in shard order
  CHECK(m.baseline.at("skipped") == nlohmann::json({"k0", "ulp comparisons"}));  // said once
  CHECK(m.baseline.at("compared") == 3);
  CHECK(m.baseline.at("id") == "abc");
  CHECK(verdict_sentence(m) ==
        "FAIL: 2 regressions against the baseline base/report.json; every property passed");

  CHECK(merge_reports({gated(0, "abc", {}, {}, 1), gated(1, "abc", {}, {}, 1)}).verdict() == "pass");
  const auto refused = [](const std::vector<Report>& parts) {
    try {
      merge_reports(parts);
    } catch (const ReportError& e) {
      return std::string(e.what());
    }
    return std::string("merged");
  };
  CHECK(refused({s0, gated(1, "xyz", {}, {}, 1)})
            .find("compared with different baselines (shard 0: "
                  "base/report.json (id abc); shard 1: base/report.json "
                  "(id xyz))") != std::string::npos);
  Report none = s1;
  none.baseline = nullptr;
  CHECK(refused({s0, none}) ==
        "report merge: shard 0 compared with a baseline, shard 1 with none: not one gate");
  Report older = s1;
  older.baseline.erase("id");  // written before baselines had an id
  CHECK(refused({s0, older}).find("shard 1 does not say which baseline") != std::string::npos);
  Report plain0 = s0, plain1 = s1;
  plain0.baseline = plain1.baseline = nullptr;
  CHECK(merge_reports({plain0, plain1}).baseline.is_null());
}

TEST_CASE("a merge without every shard is partial, never a pass", "[report][shards]") {
  CHECK(shard_list({0, 1, 2, 3, 5, 7, 8}) == "0-3, 5, 7, 8");
  CHECK(shard_list({4}) == "4");
  Report s0 = sample_report(0, 3);
  s0.entries.pop_back();  // every result passed
  const Report m = merge_reports({s0});
  CHECK(m.missing_shards() == std::vector<int>{1, 2});
  CHECK(m.verdict() == "partial");
  CHECK(verdict_sentence(m) ==
        "PARTIAL: shards 1, 2 of 3 missing; 1 of 1 subject x property results of the shards present passed");
  CHECK(render_junit(m).find("<failure type=\"partial\" message=\"shards 1, 2 of 3 missing\"/>") !=
        std::string::npos);
  // A failure in the shards present is the verdict, with the missing shards said beside it.
  const Report f = merge_reports({sample_report(0, 3)});
  CHECK(f.verdict() == "fail");
  CHECK(verdict_sentence(f) ==
        "FAIL: 1 of 1 properties failed on fused: empty_row (shards 1, 2 of 3 missing)");
  // A shard's own report is whole: its verdict is its results'.
  CHECK(s0.verdict() == "pass");
  CHECK(merge_reports({s0, sample_report(1, 3), sample_report(2, 3)}).missing_shards().empty());
}

TEST_CASE("the invariance matrix: one phrase per subject and dimension, from the results", "[report]") {
  Report r;
  auto entry = [&](const std::string& subject, const std::string& property, const std::string& status) {
    ReportEntry e;
    e.subject = subject;
    e.property = property;
    e.status = status;
    e.cases_run = 100;
    r.entries.push_back(e);
    return &r.entries.back();
  };
  // fused: bit for bit run to run, declared batch invariant (no spread recorded).
  entry("fused", "run_to_run", "passed");
  entry("fused", "batch_invariance", "passed");
  entry("fused", "accuracy", "passed");
  // flash: not declared batch invariant; 3 of 40 outputs changed by at most 2 ulps.
  ReportEntry* b = entry("flash", "batch_invariance", "passed");
  b->spread = Spread{40, 3, 2, 0.5};
  // splitkv: declared invariant and failed; split counts move 5 of 20 outputs, folds none.
  entry("splitkv", "batch_invariance", "failed")->failure_class = "batch_variant";
  ReportEntry* d = entry("splitkv", "split_order_drift", "passed");
  DriftCounts c2;
  c2.num_splits = 2;
  c2.fold_outputs = 10;
  c2.splits_outputs = 20;
  c2.splits_differ = 5;
  c2.splits_max_ulp = 1;
  d->drift_by_splits = {c2};
  // chunked_prefill: fused declared and bit for bit; splitkv reported, 4 of 30 outputs moved by 3
  // ulps; flash declared and failed.
  entry("fused", "chunked_prefill", "passed");
  entry("splitkv", "chunked_prefill", "passed")->spread = Spread{30, 4, 3, 0.25};
  entry("flash", "chunked_prefill", "failed")->failure_class = "chunk_variant";
  const auto m = invariance_matrix(r);
  REQUIRE(m.size() == 3);
  CHECK(m[0].subject == "fused");
  CHECK(m[0].run_to_run == "invariant (100 cases, bit for bit)");
  CHECK(m[0].batch == "invariant (declared; 100 cases, bit for bit)");
  CHECK(m[0].split_count == "-");
  CHECK(m[1].batch == "variant: 3 of 40 outputs changed, by at most 2 ulps (0.5 accuracy budgets)");
  CHECK(m[1].run_to_run == "-");
  CHECK(m[2].batch == "failed: declared invariant, bits changed");
  CHECK(m[2].split_count == "variant: 5 of 20 outputs changed, by at most 1 ulps");
  CHECK(m[2].fold_order == "invariant (10 outputs compared)");
  CHECK(m[0].chunked_prefill == "invariant (declared; 100 cases, bit for bit)");
  CHECK(m[1].chunked_prefill == "failed: declared invariant, bits changed");
  CHECK(m[2].chunked_prefill ==
        "variant: 4 of 30 outputs changed, by at most 3 ulps (0.25 accuracy budgets)");
  // Written to report.json and report.md.
  const auto j = report_to_json(r);
  REQUIRE(j.at("invariance").size() == 3);
  CHECK(j["invariance"][1]["batch"] == m[1].batch);
  CHECK(j["invariance"][2]["chunked_prefill"] == m[2].chunked_prefill);
  // Each spread's note says what changed: a batch, or the chunks of a prompt.
  const std::string md = render_markdown(r);
  CHECK(md.find(
            "not declared batch invariant: 4 of 30 outputs changed between a prompt whole and in chunks, by "
            "at most 0.25 accuracy budgets") != std::string::npos);
  CHECK(md.find("3 of 40 outputs changed between a sequence alone and in a batch") != std::string::npos);
  CHECK(render_markdown(r).find("| flash | - | variant: 3 of 40 outputs changed") != std::string::npos);
}

TEST_CASE("the batch cell names the dimensions that triggered the changes; report.json keeps them",
          "[report]") {
  Report r;
  ReportEntry e;
  e.subject = "flash";
  e.property = "batch_invariance";
  e.status = "passed";
  e.cases_run = 100;
  // 4 cases probed: batch size changed the bits in 3, position in 1, no probe alone in 1.
  e.spread = Spread{40, 3, 2, 0.5};
  e.spread.probed = 4;
  e.spread.triggered[kBatchSize] = 3;
  e.spread.triggered[kPosition] = 1;
  e.spread.none_isolated = 1;
  r.entries.push_back(e);
  const std::string cell =
      "variant: 3 of 40 outputs changed, by at most 2 ulps (0.5 accuracy budgets); triggered by batch size "
      "(3 of 4 cases probed), position (1 of 4), none isolated (1 of 4)";
  REQUIRE(invariance_matrix(r).size() == 1);
  CHECK(invariance_matrix(r)[0].batch == cell);
  CHECK(render_markdown(r).find(cell) != std::string::npos);
  // Written and read back: the same counts, so the same cell.
  const nlohmann::json j = report_to_json(r);
  const auto& sp = j["results"][0]["run_to_run_spread"];
  CHECK(sp["probed"] == 4);
  CHECK(sp["triggered_by"]["batch size"] == 3);
  CHECK(sp["triggered_by"]["neighbour lengths"] == 0);
  CHECK(sp["none_isolated"] == 1);
  const Report back = report_from_json(j);
  REQUIRE(back.entries.size() == 1);
  const Spread& s = back.entries[0].spread;
  CHECK(s.probed == 4);
  CHECK(s.triggered == e.spread.triggered);
  CHECK(s.none_isolated == 1);
  CHECK(invariance_matrix(back)[0].batch == cell);
  // A spread without probes writes none, and a dimension the names table lacks is refused.
  Report plain = r;
  plain.entries[0].spread = Spread{40, 3, 2, 0.5};
  CHECK(!report_to_json(plain)["results"][0]["run_to_run_spread"].contains("probed"));
  nlohmann::json bad = j;
  bad["results"][0]["run_to_run_spread"]["triggered_by"]["tile shape"] = 1;
  CHECK_THROWS_AS(report_from_json(bad), ReportError);
  bad = j;
  bad["results"][0]["run_to_run_spread"]["triggered_by"]["position"] = 5;  // more than probed
  CHECK_THROWS_AS(report_from_json(bad), ReportError);
  // A pass's message (cases the subject refused, skipped) leads its row's note, the spread after it.
  r.entries[0].message = "3 cases skipped, refused by the subject: 3x \"a batch of more than 2 sequences\"";
  CHECK(render_markdown(r).find("| 3 cases skipped, refused by the subject: 3x \"a batch of more than 2 "
                                "sequences\"; not declared batch invariant: 3 of 40") != std::string::npos);
}
