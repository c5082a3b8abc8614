// check's finish: tiling rows, the baseline gate, the report directory and the final line.
#include <cstdio>

#include "attncheck/baseline.hpp"
#include "check.hpp"
#include "plot.hpp"

namespace attncheck::cli {

int finish_check(CheckPlan& plan, const CheckOptions& o) {
  Report& report = plan.report;
  // Tiling rows (full suite or --tiling): every tiling, split count and fold order.
  if ((o.tiling || o.suite == "full") && !report.interrupted) {
    for (Subject* s : plan.subjects) {
      if (!(s->has_op(AC_OP_ATTENTION) || s->has_op(AC_OP_SPLITKV))) continue;
      for (auto& t : tiling_entries(*s, tiling_report(*s, plan.base_cfg)))
        report.tilings.push_back(std::move(t));
    }
  }

  if (plan.baseline) {
    BaselineComparison c = compare_to_baseline(report, *plan.baseline);
    c.path = o.baseline;
    report.baseline = c.to_json();
    if (!o.quiet || !c.ok()) {
      for (const auto& g : c.regressions) std::fprintf(stderr, "REGRESSION %s\n", g.c_str());
      if (!o.quiet)
        for (const auto& s : c.skipped) std::fprintf(stderr, "baseline skipped: %s\n", s.c_str());
    }
  }
  write_report_dir(o.report_dir, report);
  if (!o.no_plots) render_plots(o.report_dir, o.quiet);
  // Each failure once more beside the final line, with its case and the element it quotes: the
  // pairs' own lines scroll past as the run goes, and a failure must read true without the report.
  if (!o.quiet)
    for (const ReportEntry& e : report.entries) {
      if (e.status != "failed" && e.status != "crashed") continue;
      std::fprintf(stderr, "%s %s / %s: %s: %s\n", e.status == "failed" ? "FAIL" : "CRASHED",
                   e.subject.c_str(), e.property.c_str(), e.failure_class.c_str(), failure_line(e).c_str());
      if (!e.quoted.where.empty())
        std::fprintf(stderr, "  quoted element: %s\n", element_line(e.quoted).c_str());
    }
  int passed = 0;
  for (const auto& e : report.entries) passed += e.status == "passed";
  std::printf(
      "attncheck: %s: %d of %zu subject x property results passed%s; report in %s/ (report.md, report.html, "
      "junit.xml, "
      "report.json)\n",
      report.verdict().c_str(), passed, report.entries.size(), report.interrupted ? " (interrupted)" : "",
      o.report_dir.c_str());
  return worst_exit(report);
}

}  // namespace attncheck::cli
