// report.md, report.html and junit.xml read true at a glance: a passing and a failing report, built
// by hand, each checked for
//  - the first line: the verdict as one sentence ("PASS: 3 of 3 ...", "FAIL: 2 of 3 properties
//    failed on my-fa2: accuracy, lse_convention");
//  - the order: failures first, then by the err/budget the property judged, largest first; a
//    property that judges no budget (no_spurious_nonfinite) prints "-" and comes last, whatever
//    its measured ratio;
//  - the context phrase of every failure, in the table, the Failures section, junit's message and
//    the page; the quoted element with its numbers; the reproduce command.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "attncheck/report.hpp"

using namespace attncheck;

namespace {

OutputStats ratio_stats(const std::string& output, double max_ratio, double max_ulp) {
  OutputStats s;
  s.dtype = "fp16";
  s.output = output;
  s.count = 100;
  s.max_ulp = max_ulp;
  s.p99_ulp = max_ulp / 2;
  s.max_ratio = max_ratio;
  s.p99_ratio = max_ratio / 2;
  return s;
}

ReportEntry entry(const std::string& subject, const std::string& property, double max_ratio, double max_ulp,
                  PropertyInfo::BudgetUse use = PropertyInfo::BudgetUse::every_output) {
  ReportEntry e;
  e.subject = subject;
  e.backend = "host";
  e.property = property;
  e.cases_run = 100;
  e.budget_use = use;
  e.stats = {ratio_stats("O", max_ratio, max_ulp)};
  return e;
}

Report passing_report() {
  Report r;
  r.backend = "host";
  r.seed = 1;
  r.num_cases = 100;
  r.suite = "gate";
  // Plain ulp and err/budget disagree on purpose: the table follows err/budget.
  r.entries = {entry("fused", "accuracy", 0.1, 1.9e39), entry("splitkv", "accuracy", 0.9, 3.0),
               entry("fused", "no_spurious_nonfinite", 2.89e39, 5.0, PropertyInfo::BudgetUse::none),
               entry("merge", "accuracy", 0.5, 2.0)};
  return r;
}

Report failing_report() {
  Report r = passing_report();
  ReportEntry a = entry("my-fa2", "accuracy", 0.2, 1.0);
  a.status = "failed";
  a.failure_class = "accuracy";
  a.failures = 1;
  a.context = "fp16, causal (bottom-right), Tq=1 Tk=2, 1 head, d=8, tiling 64x64, row 0 sees 1 of 2 keys";
  a.message =
      "over budget: O[token=0,head=0,d=0]: exact 0.5, got 0x1p+0 (ulp 1024, cancel-ulp 1024, err/budget 300)";
  a.quoted.where = "O[token=0,head=0,d=0]";
  a.quoted.exact = "0.5";
  a.quoted.rounded_exact = "0x1p-1";
  a.quoted.output_bits = "0x3c00 (0x1p+0)";
  a.quoted.ulp = 1024;
  a.quoted.cancel_ulp = 1024;
  a.quoted.ratio = 300;
  a.quoted.allowed = 0.5 / 300;  // |1 - 0.5| over it: 300
  a.counterexample = "tokens=1 keys=2 heads=1 d=8";
  a.reproduce_command = "attncheck replay corpus/a.json --subject my-fa2";
  ReportEntry b = entry("my-fa2", "lse_convention", 5.0, 2.0, PropertyInfo::BudgetUse::lse_only);
  b.stats.push_back(ratio_stats("LSE", 40.0, 7.0));
  b.status = "failed";
  b.failure_class = "lse_base";
  b.failures = 1;
  b.context = "fp16, no mask, Tq=2 Tk=2, 1 head, d=8, rows see 2 keys";
  b.message = "LSE is in base 2 but the subject declares base e";
  b.reproduce_command = "attncheck replay corpus/b.json --subject my-fa2";
  ReportEntry c = entry("my-fa2", "empty_row_contract", 0, 0, PropertyInfo::BudgetUse::none);
  r.entries.insert(r.entries.end(), {c, b, a});
  return r;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// Positions of the needles in text, in order; each must be found.
std::vector<size_t> positions(const std::string& text, const std::vector<std::string>& needles) {
  std::vector<size_t> at;
  for (const auto& n : needles) {
    at.push_back(text.find(n));
    INFO(n);
    CHECK(at.back() != std::string::npos);
  }
  return at;
}

}  // namespace

TEST_CASE("a passing report opens with PASS and sorts by the err/budget judged", "[report][render]") {
  const Report r = passing_report();
  const std::string md = render_markdown(r);
  CHECK(first_line(md) == "## PASS: 4 of 4 subject x property results passed");
  const auto at = positions(
      md, {"| splitkv (host) | accuracy | 0.9 |", "| merge (host) | accuracy | 0.5 |",
           "| fused (host) | accuracy | 0.1 |", "| fused (host) | no_spurious_nonfinite | - | - |"});
  CHECK(std::is_sorted(at.begin(), at.end()));
  // The unjudged ratio is not printed anywhere; the plain ulp statistics stay, after the budget.
  CHECK(md.find("2.89e+39") == std::string::npos);
  CHECK(md.find("| 0.1 | 0.05 | 100 | 0 | 1.9e+39 | 9.5e+38 |") != std::string::npos);
  // The column is explained once, under the table, with its pass line.
  const size_t explained = md.find("**err/budget** is an output's error divided by the error it is allowed");
  CHECK(explained != std::string::npos);
  CHECK(explained > at.back());
  CHECK(md.find("passes at 1 or below") != std::string::npos);
  CHECK(md.find("### Failures") == std::string::npos);

  const std::string html = render_html(r);
  CHECK(html.find("<h1 id=\"verdict\" class=\"pass\">PASS: 4 of 4 subject x property results passed</h1>") !=
        std::string::npos);
  const auto hat = positions(html, {"<td>splitkv (host)</td>", "<td>merge (host)</td>",
                                    "<td>fused (host)</td><td>accuracy", "<td>no_spurious_nonfinite</td>"});
  CHECK(std::is_sorted(hat.begin(), hat.end()));
  CHECK(html.find("2.89e+39") == std::string::npos);
}

TEST_CASE("a failing report names the failed properties first, each with its context", "[report][render]") {
  const Report r = failing_report();
  const std::string md = render_markdown(r);
  CHECK(first_line(md) == "## FAIL: 2 of 3 properties failed on my-fa2: lse_convention, accuracy");
  // Failures first, by err/budget (the quoted element's 300 over lse_convention's LSE 40, whose O
  // is not judged), then the passing rows by err/budget, the unjudged last.
  const auto at = positions(md, {"| **failed** | my-fa2 (host) | accuracy | 300 |",
                                 "| **failed** | my-fa2 (host) | lse_convention | 40 |",
                                 "| pass | splitkv (host) | accuracy | 0.9 |",
                                 "| pass | my-fa2 (host) | empty_row_contract | - |"});
  CHECK(std::is_sorted(at.begin(), at.end()));
  // The context, in the table's note and in the Failures section, with the quoted element and the
  // reproduce command.
  CHECK(
      md.find(
          "| accuracy: fp16, causal (bottom-right), Tq=1 Tk=2, 1 head, d=8, tiling 64x64, row 0 sees 1 of 2 "
          "keys: over budget") != std::string::npos);
  const size_t failures = md.find("### Failures");
  REQUIRE(failures != std::string::npos);
  CHECK(md.find("- case: fp16, causal (bottom-right), Tq=1 Tk=2", failures) != std::string::npos);
  CHECK(md.find("- case: fp16, no mask, Tq=2 Tk=2", failures) != std::string::npos);
  CHECK(md.find("- quoted element: `O[token=0,head=0,d=0]  inputs   exact 0.5  rounded 0x1p-1  output 0x3c00 "
                "(0x1p+0)  ulp 1.02e+03 (cancellation-aware 1.02e+03)  err/budget 300`",
                failures) != std::string::npos);
  CHECK(md.find("- reproduce: `attncheck replay corpus/a.json --subject my-fa2`", failures) !=
        std::string::npos);

  const std::string xml = render_junit(r);
  CHECK(xml.find(
            "message=\"fp16, causal (bottom-right), Tq=1 Tk=2, 1 head, d=8, tiling 64x64, row 0 sees 1 of 2 "
            "keys: over budget") != std::string::npos);

  const std::string html = render_html(r);
  CHECK(
      html.find("<h1 id=\"verdict\" class=\"fail\">FAIL: 2 of 3 properties failed on my-fa2: lse_convention, "
                "accuracy</h1>") != std::string::npos);
  CHECK(html.find(
            "<li>case: fp16, causal (bottom-right), Tq=1 Tk=2, 1 head, d=8, tiling 64x64, row 0 sees 1 of 2 "
            "keys</li>") != std::string::npos);
  CHECK(html.find("<code>attncheck replay corpus/a.json --subject my-fa2</code>") != std::string::npos);
  // Every row of the table, one per result, and the header.
  size_t rows = 0;
  for (size_t p = html.find("<tr"); p != std::string::npos; p = html.find("<tr", p + 1)) ++rows;
  CHECK(rows == r.entries.size() + 1);
}

TEST_CASE("the verdict sentence names each failing subject, crashes and a baseline-only failure",
          "[report][render]") {
  Report r = failing_report();
  ReportEntry x = entry("splitkv", "run_to_run", 0, 0);
  x.status = "crashed";
  x.failure_class = "device_fault";
  r.entries.push_back(x);
  CHECK(verdict_sentence(r) ==
        "CRASHED: 3 of 8 subject x property results failed on 2 subjects: my-fa2 (lse_convention, accuracy); "
        "splitkv (run_to_run (crashed))");
  Report b = passing_report();
  b.baseline = {{"ok", false}, {"path", "base.json"}, {"regressions", {"REGRESSION fused / accuracy"}}};
  CHECK(verdict_sentence(b) == "FAIL: 1 regression against the baseline base.json; every property passed");
}

TEST_CASE("report.html is written with the set, and takes the figures once drawn", "[report][render]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ac_html_" + std::to_string(::getpid()));
  write_report_dir(dir.string(), failing_report());
  CHECK(fs::exists(dir / "report.html"));
  CHECK(check_report_set(dir.string()).empty());
  fs::create_directories(dir / "plots");
  std::ofstream(dir / "plots" / "summary.svg")
      << "<?xml version=\"1.0\"?>\n<!DOCTYPE svg>\n<svg xmlns=\"http://www.w3.org/2000/svg\"><text>summary "
         "figure</text></svg>\n";
  std::ofstream(dir / "plots" / "histogram-x-host.svg") << "<svg><text>not on the page</text></svg>\n";
  embed_plots_in_report(dir.string());
  std::ifstream in(dir / "report.html");
  std::stringstream page;
  page << in.rdbuf();
  CHECK(page.str().find(
            "<figure>\n<svg xmlns=\"http://www.w3.org/2000/svg\"><text>summary figure</text></svg>") !=
        std::string::npos);
  CHECK(page.str().find("<?xml") == std::string::npos);
  CHECK(page.str().find("not on the page") == std::string::npos);
  // The manifest follows the page: the set is still one complete run.
  CHECK(check_report_set(dir.string()).empty());
  fs::remove_all(dir);
}

TEST_CASE("a property that records no per-output statistics gets empty cells, not zeros",
          "[report][render]") {
  Report r = passing_report();
  ReportEntry e = entry("fused", "split_equals_whole", 0, 0);
  e.stats.clear();
  r.entries.push_back(e);
  CHECK(render_markdown(r).find("| pass | fused (host) | split_equals_whole |  |  | 100 | 0 |  |  |") !=
        std::string::npos);
}

TEST_CASE("an element line over a zero allowance says so; over a nonzero one it does not",
          "[report][render]") {
  WorstElement w;
  w.where = "O[token=0,head=0,d=0]";
  w.exact = "1e-45";
  w.output_bits = "0x00000000 (0x0p+0)";
  w.ulp = 0.7;
  w.ratio = std::numeric_limits<double>::infinity();
  w.allowed = 0;  // only the exact value passes
  CHECK(element_line(w).find("err/budget inf  (allowance 0: only the exact value passes)") !=
        std::string::npos);
  w.allowed = 1e-46;
  w.ratio = 14;
  CHECK(element_line(w).find("allowance") == std::string::npos);
  w.allowed = 0;
  w.ratio = 0;  // exact: within a zero allowance
  CHECK(element_line(w).find("allowance") == std::string::npos);
}
