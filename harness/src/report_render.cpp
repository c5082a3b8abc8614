// report.md, report.html and junit.xml from a Report. All three open with the verdict sentence and
// list results in entries_by_verdict's order, each failure with its case's context, the element
// its message quotes and the command that reproduces it.
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "attncheck/report.hpp"
#include "report_internal.hpp"

namespace attncheck {

using nlohmann::json;
using report_detail::short_number;
using report_detail::status_rank;

namespace {

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

std::string cut(std::string s, size_t n) {
  if (s.size() > n) s = s.substr(0, n - 3) + "...";
  return s;
}

// The run's header line: where, with what seed and cases, which attncheck.
std::string run_line(const Report& r) {
  std::ostringstream o;
  o << "backend " << r.backend << (r.device.empty() || r.device == r.backend ? "" : " (" + r.device + ")")
    << ", seed " << r.seed << ", " << r.num_cases << " cases, suite " << r.suite;
  if (r.shards_merged.size() > 1) {
    o << ", shards";
    for (size_t i = 0; i < r.shards_merged.size(); ++i) o << (i ? ", " : " ") << r.shards_merged[i];
    o << " of " << r.shard_count << " merged";
  } else {
    o << ", shard " << r.shard_index << "/" << r.shard_count;
  }
  o << ", attncheck " << r.tool_version << (r.git_describe.empty() ? "" : " (" + r.git_describe + ")");
  return o.str();
}

// A passing row's spread: what changed where bits may change (an undeclared batch or chunk
// invariance, a declared nondeterminism); "" when nothing was compared.
std::string spread_note(const ReportEntry& e) {
  if (e.spread.compared == 0) return "";
  const std::string how =
      e.property == "batch_invariance"
          ? "not declared batch invariant: %s changed between a sequence alone and in a batch"
      : e.property == "chunked_prefill"
          ? "not declared batch invariant: %s changed between a prompt whole and in chunks"
          : "nondeterministic by design: %s differed run to run";
  const std::string counted =
      std::to_string(e.spread.differing) + " of " + std::to_string(e.spread.compared) + " outputs";
  const size_t at = how.find("%s");
  return how.substr(0, at) + counted + how.substr(at + 2) + ", by at most " +
         short_number(e.spread.max_budget) + " accuracy budgets (" + short_number(e.spread.max_ulps) +
         " representable values apart)";
}

// The note of a passing row: its message (cases skipped because the subject refused them, a
// cancelled run; first, as the cell is cut at 200 characters), then its spread.
std::string pass_note(const ReportEntry& e) {
  const std::string spread = spread_note(e);
  if (e.message.empty()) return spread;
  return spread.empty() ? e.message : e.message + "; " + spread;
}

const char* const kColumnsExplained =
    "**err/budget** is an output's error divided by the error it is allowed (the cancellation-aware "
    "bound of `properties/src/budgets.cpp`); an output passes at 1 or below, so a result whose max is "
    "above 1 failed. \"-\": the property judges non-finite values, sentinels or overflow rows, not "
    "errors against the budget, and prints no err/budget. A failed row's maxima include the element its "
    "failure quotes; the other statistics describe the cases before the first failure. An empty cell: the "
    "property records no per-output statistics (it compares launches or pieces of a case). **max ulp, "
    "p99 ulp**: the plain ulp error of the output format, reported and never judged (an output that "
    "cancels to near zero has a tiny ulp of its own, so its plain ulp error can be huge within budget).";

struct Row {
  const ReportEntry* e;
  JudgedStats j;
  std::string status, max_ratio, p99_ratio, max_ulp, p99_ulp;
};
// A statistic's cell: "-" for an err/budget the property does not judge, empty where nothing was
// measured (a "0" there would read as a perfect result).
Row row_of(const ReportEntry& e) {
  Row r{&e, judged_stats(e), e.status == "passed" ? "pass" : e.status, "-", "-", "", ""};
  if (!r.j.measured) {
    if (r.j.judged) r.max_ratio = r.p99_ratio = "";
    return r;
  }
  if (r.j.judged) {
    r.max_ratio = short_number(r.j.max_ratio);
    r.p99_ratio = short_number(r.j.p99_ratio);
  }
  r.max_ulp = short_number(r.j.max_ulp);
  r.p99_ulp = short_number(r.j.p99_ulp);
  return r;
}

std::string baseline_line(const Report& r) {
  const auto regs = r.baseline.value("regressions", json::array());
  return "Baseline " + r.baseline.value("path", std::string()) + ": " +
         (regs.empty() ? "no regression" : std::to_string(regs.size()) + " regression(s)") + ", " +
         std::to_string(r.baseline.value("compared", 0)) + " compared, " +
         std::to_string(r.baseline.value("skipped", json::array()).size()) + " skipped";
}

std::string html_escape(const std::string& s) { return xml_escape(s); }

// One failure as report.md and report.html list it: an entry's first failure and each further
// distinct one (--max-failures) alike.
struct FailureView {
  const std::string &context, &message;
  const WorstElement& quoted;
  const std::string &counterexample, &reproduce;
};
FailureView view_of(const ReportEntry& e) {
  return {e.context, e.message, e.quoted, e.counterexample, e.reproduce_command};
}
FailureView view_of(const DistinctFailure& f) {
  return {f.context, f.message, f.quoted, f.counterexample_summary, f.reproduce_command};
}

// Markdown list items, each line after `indent`.
void markdown_failure(std::ostream& o, const FailureView& f, const char* indent) {
  if (!f.context.empty()) o << indent << "- case: " << f.context << "\n";
  o << indent << "- " << f.message << "\n";
  if (!f.quoted.where.empty()) o << indent << "- quoted element: `" << element_line(f.quoted) << "`\n";
  if (!f.counterexample.empty()) o << indent << "- shrunk case: " << f.counterexample << "\n";
  o << indent << "- reproduce: " << (f.reproduce.empty() ? "(no reproducer)" : "`" + f.reproduce + "`")
    << "\n";
}

// An HTML list.
void html_failure(std::ostream& o, const FailureView& f) {
  o << "<ul>\n";
  if (!f.context.empty()) o << "<li>case: " << html_escape(f.context) << "</li>\n";
  o << "<li>" << html_escape(f.message) << "</li>\n";
  if (!f.quoted.where.empty())
    o << "<li>quoted element: <code>" << html_escape(element_line(f.quoted)) << "</code></li>\n";
  if (!f.counterexample.empty()) o << "<li>shrunk case: " << html_escape(f.counterexample) << "</li>\n";
  o << "<li>reproduce: "
    << (f.reproduce.empty() ? "(no reproducer)" : "<code>" + html_escape(f.reproduce) + "</code>")
    << "</li>\n</ul>\n";
}

}  // namespace

std::string element_line(const WorstElement& w) {
  std::string line = w.where + "  inputs " + w.input_bits + "  exact " + w.exact + "  rounded " +
                     w.rounded_exact + "  output " + w.output_bits + "  ulp " + short_number(w.ulp) +
                     " (cancellation-aware " + short_number(w.cancel_ulp) + ")  err/budget " +
                     short_number(w.ratio);
  // Over budget with a zero allowance: any error at all fails, however few ulps it is; the line
  // says so, as the failure message does, or "ulp 0" beside err/budget above 1 reads as a
  // contradiction.
  if (w.ratio > 1 && w.allowed == 0) line += "  (allowance 0: only the exact value passes)";
  return line;
}

std::string render_markdown(const Report& r) {
  const std::vector<const ReportEntry*> rows = entries_by_verdict(r);
  std::ostringstream o;
  o << "## " << verdict_sentence(r) << "\n\n" << run_line(r) << "\n";
  if (r.interrupted) o << "\n**Interrupted**: this report holds what completed before Ctrl-C.\n";
  if (r.baseline.is_object()) {
    o << "\n**" << baseline_line(r) << "**\n";
    for (const auto& g : r.baseline.value("regressions", json::array()))
      o << "- " << g.get<std::string>() << "\n";
  }
  o << "\n| status | subject | property | max err/budget | p99 err/budget | cases | non-finite | max ulp | "
       "p99 ulp "
       "| note |\n";
  o << "|---|---|---|---:|---:|---:|---:|---:|---:|---|\n";
  const size_t limit = 25;
  size_t shown = 0;
  for (const ReportEntry* e : rows) {
    if (shown == limit) break;
    ++shown;
    const Row x = row_of(*e);
    const std::string note =
        e->status == "passed" ? pass_note(*e) : e->failure_class + ": " + failure_line(*e);
    o << "| " << (e->status == "passed" ? "pass" : "**" + e->status + "**") << " | " << md_cell(e->subject)
      << " (" << e->backend << ") | " << md_cell(e->property) << " | " << x.max_ratio << " | " << x.p99_ratio
      << " | " << e->cases_run << " | " << x.j.nonfinite << " | " << x.max_ulp << " | " << x.p99_ulp << " | "
      << md_cell(cut(note, 200)) << " |\n";
  }
  if (rows.size() > shown)
    o << "\n" << rows.size() - shown << " more results not shown (all passing); see report.json.\n";
  o << "\n" << kColumnsExplained << "\n";
  if (const auto inv = invariance_matrix(r); !inv.empty()) {
    o << "\n### Invariance\n\nWhether a subject's bits stayed the same when the run changed one thing: "
         "the launch (run to run), the batch around a sequence, the split count, the fold order, the "
         "chunks a prompt is prefilled in.\n\n"
         "| subject | run to run | batch | split count | fold order | chunked prefill |\n"
         "|---|---|---|---|---|---|\n";
    for (const InvarianceRow& x : inv)
      o << "| " << md_cell(x.subject) << " | " << md_cell(x.run_to_run) << " | " << md_cell(x.batch) << " | "
        << md_cell(x.split_count) << " | " << md_cell(x.fold_order) << " | " << md_cell(x.chunked_prefill)
        << " |\n";
  }
  bool header = false;
  for (const ReportEntry* e : rows) {
    if (e->status == "passed") continue;
    if (!header) o << "\n### Failures\n";
    header = true;
    o << "\n**" << e->subject << " / " << e->property << "**: " << e->status
      << (e->failure_class.empty() ? "" : " (" + e->failure_class + ")") << "\n\n";
    markdown_failure(o, view_of(*e), "");
    if (!e->signature.empty() && !e->other_failures.empty()) o << "- signature: " << e->signature << "\n";
    for (size_t i = 0; i < e->other_failures.size(); ++i) {
      o << "\n  **failure " << i + 2 << "** (" << e->other_failures[i].signature << ")\n\n";
      markdown_failure(o, view_of(e->other_failures[i]), "  ");
    }
  }
  return o.str();
}

std::string render_html(const Report& r, const std::vector<std::pair<std::string, std::string>>& figures) {
  const std::vector<const ReportEntry*> rows = entries_by_verdict(r);
  const std::string verdict = r.verdict();
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<title>" << html_escape(verdict_sentence(r)) << "</title>\n"
    << "<style>\n"
       "body{font-family:system-ui,sans-serif;margin:1.5em;max-width:84em;color:#222}\n"
       "h1{font-size:1.3em;padding:.4em .6em;border-radius:4px}\n"
       "h1.pass{background:#e3f4e1}h1.fail,h1.crashed,h1.partial{background:#fbe3e1}h1.interrupted{"
       "background:#fff3cd}\n"
       "table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:.2em .5em}\n"
       "td.n{text-align:right;font-variant-numeric:tabular-nums}tr.failed td,tr.crashed "
       "td{background:#fdf0ef}\n"
       "code{font-size:.85em;background:#f4f4f4;padding:0 .2em;word-break:break-all}\n"
       "figure{margin:1em 0}figure svg{max-width:100%;height:auto}\n"
       "</style>\n</head>\n<body>\n";
  o << "<h1 id=\"verdict\" class=\"" << html_escape(verdict) << "\">" << html_escape(verdict_sentence(r))
    << "</h1>\n";
  o << "<p>" << html_escape(run_line(r)) << "</p>\n";
  if (r.interrupted)
    o << "<p><strong>Interrupted</strong>: this report holds what completed before Ctrl-C.</p>\n";
  if (r.baseline.is_object()) {
    o << "<p><strong>" << html_escape(baseline_line(r)) << "</strong></p>\n<ul>\n";
    for (const auto& g : r.baseline.value("regressions", json::array()))
      o << "<li>" << html_escape(g.get<std::string>()) << "</li>\n";
    o << "</ul>\n";
  }
  for (const auto& [name, svg] : figures)
    o << "<figure>\n" << svg << "\n<figcaption>plots/" << html_escape(name) << "</figcaption>\n</figure>\n";
  if (figures.empty())
    o << "<p>Figures: <code>attncheck plot REPORT_DIR</code> draws them into plots/ and into this "
         "page.</p>\n";
  o << "<table id=\"results\">\n<tr><th>status</th><th>subject</th><th>property</th><th>max "
       "err/budget</th><th>p99 "
       "err/budget</th><th>cases</th><th>non-finite</th><th>max ulp</th><th>p99 ulp</th><th>note</th></tr>\n";
  for (const ReportEntry* e : rows) {
    const Row x = row_of(*e);
    const std::string note =
        e->status == "passed" ? pass_note(*e) : e->failure_class + ": " + failure_line(*e);
    o << "<tr class=\"" << html_escape(e->status) << "\"><td>" << html_escape(x.status) << "</td><td>"
      << html_escape(e->subject) << " (" << html_escape(e->backend) << ")</td><td>"
      << html_escape(e->property) << "</td><td class=\"n\">" << x.max_ratio << "</td><td class=\"n\">"
      << x.p99_ratio << "</td><td class=\"n\">" << e->cases_run << "</td><td class=\"n\">" << x.j.nonfinite
      << "</td><td class=\"n\">" << x.max_ulp << "</td><td class=\"n\">" << x.p99_ulp << "</td><td>"
      << html_escape(cut(note, 200)) << "</td></tr>\n";
  }
  o << "</table>\n";
  std::string explained = kColumnsExplained;
  std::string plain;  // the Markdown emphasis and code marks of the explanation, dropped
  for (char c : explained)
    if (c != '*' && c != '`') plain += c;
  o << "<p>" << html_escape(plain) << "</p>\n";
  if (const auto inv = invariance_matrix(r); !inv.empty()) {
    o << "<h2>Invariance</h2>\n<table id=\"invariance\">\n<tr><th>subject</th><th>run to "
         "run</th><th>batch</th>"
         "<th>split count</th><th>fold order</th><th>chunked prefill</th></tr>\n";
    for (const InvarianceRow& x : inv)
      o << "<tr><td>" << html_escape(x.subject) << "</td><td>" << html_escape(x.run_to_run) << "</td><td>"
        << html_escape(x.batch) << "</td><td>" << html_escape(x.split_count) << "</td><td>"
        << html_escape(x.fold_order) << "</td><td>" << html_escape(x.chunked_prefill) << "</td></tr>\n";
    o << "</table>\n";
  }
  bool header = false;
  for (const ReportEntry* e : rows) {
    if (e->status == "passed") continue;
    if (!header) o << "<h2>Failures</h2>\n";
    header = true;
    o << "<section class=\"failure\">\n<h3>" << html_escape(e->subject + " / " + e->property) << ": "
      << html_escape(e->status)
      << (e->failure_class.empty() ? "" : " (" + html_escape(e->failure_class) + ")") << "</h3>\n";
    html_failure(o, view_of(*e));
    for (size_t i = 0; i < e->other_failures.size(); ++i) {
      o << "<h4>failure " << i + 2 << " (" << html_escape(e->other_failures[i].signature) << ")</h4>\n";
      html_failure(o, view_of(e->other_failures[i]));
    }
    o << "</section>\n";
  }
  o << "</body>\n</html>\n";
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
  // A merge that lacks shards fails a testcase of its own: the results present may all pass.
  const std::string missing = missing_shards_phrase(r);
  if (!missing.empty()) {
    ++tests;
    ++failures;
  }
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<testsuites name=\"attncheck\" tests=\"" << tests << "\" failures=\"" << failures << "\" errors=\""
    << errors << "\" time=\"" << short_number(total, 6) << "\">\n";
  for (const auto& [suite, entries] : by_subject) {
    int sf = 0, se = 0;
    double st = 0;
    for (const auto* e : entries) {
      sf += e->status == "failed";
      se += e->status == "crashed" || e->status == "interrupted";
      st += e->seconds;
    }
    o << "  <testsuite name=\"" << xml_escape("attncheck." + suite) << "\" tests=\"" << entries.size()
      << "\" failures=\"" << sf << "\" errors=\"" << se << "\" time=\"" << short_number(st, 6) << "\">\n";
    for (const auto* e : entries) {
      o << "    <testcase classname=\"" << xml_escape("attncheck." + e->subject) << "\" name=\""
        << xml_escape(e->property) << "\" time=\"" << short_number(e->seconds, 6) << "\">";
      std::string detail = "cases run " + std::to_string(e->cases_run) + ", failures " +
                           std::to_string(e->failures) + (e->context.empty() ? "" : "\ncase: " + e->context) +
                           (e->quoted.where.empty() ? "" : "\nquoted element: " + element_line(e->quoted)) +
                           "\ncounterexample: " + e->counterexample + "\nreproduce: " + e->reproduce_command +
                           "\nrapidcheck: " + e->rc_reproduce;
      for (size_t i = 0; i < e->other_failures.size(); ++i) {
        const DistinctFailure& f = e->other_failures[i];
        detail += "\n\nfailure " + std::to_string(i + 2) + " (" + f.signature +
                  "): " + failure_line(f.context, f.message) +
                  (f.quoted.where.empty() ? "" : "\nquoted element: " + element_line(f.quoted)) +
                  "\nreproduce: " + f.reproduce_command;
      }
      if (e->status == "failed") {
        o << "\n      <failure type=\"" << xml_escape(e->failure_class) << "\" message=\""
          << xml_escape(failure_line(*e)) << "\">" << xml_escape(detail) << "</failure>\n    ";
      } else if (e->status == "crashed" || e->status == "interrupted") {
        o << "\n      <error type=\""
          << xml_escape(e->status + (e->failure_class.empty() ? "" : ":" + e->failure_class))
          << "\" message=\"" << xml_escape(failure_line(*e)) << "\">" << xml_escape(detail)
          << "</error>\n    ";
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
  if (!missing.empty()) {
    o << "  <testsuite name=\"attncheck.shards\" tests=\"1\" failures=\"1\" errors=\"0\">\n";
    o << "    <testcase classname=\"attncheck.shards\" name=\"every_shard_merged\">\n      <failure "
         "type=\"partial\" "
         "message=\""
      << xml_escape(missing) << "\"/>\n    </testcase>\n  </testsuite>\n";
  }
  o << "</testsuites>\n";
  return o.str();
}

}  // namespace attncheck
