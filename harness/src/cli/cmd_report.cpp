// `attncheck report merge`: shard report directories combined into the unsharded run's report.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "common.hpp"
#include "options.hpp"
#include "plot.hpp"

namespace attncheck::cli {
namespace {

namespace fs = std::filesystem;

struct MergeOptions {
  std::vector<std::string> dirs;
  std::string out;
  bool no_plots = false;
  bool allow_partial = false;
};

int run_report_merge(const MergeOptions& o) {
  std::vector<Report> parts;
  for (const auto& d : o.dirs) {
    if (path_within(d, o.out))
      throw UsageError("report merge: --out " + o.out + " holds the shard report " + d +
                       ", which the merge would replace: write the merged report elsewhere");
    const std::string path = fs::is_directory(d) ? d + "/report.json" : d;
    try {
      parts.push_back(read_report_file(path));
    } catch (const ReportError& e) {
      throw UsageError(e.what());
    }
  }
  prepare_report_dir(o.out, false);
  Report merged;
  try {
    merged = merge_reports(parts);
  } catch (const ReportError& e) {
    throw UsageError(e.what());
  }
  // Without every shard the merged report is not the campaign's: a gate that merged what it found
  // would pass on the shards that did not fail.
  const std::string absent = missing_shards_phrase(merged);
  if (!absent.empty() && !o.allow_partial)
    throw UsageError("report merge: " + absent + " (given: " + shard_list(merged.shards_merged) +
                     "); merge every shard, or pass --allow-partial for a report that says so");
  write_report_dir(o.out, merged);
  if (!o.no_plots) render_plots(o.out, false);
  if (merged.baseline.is_object())
    for (const auto& g : merged.baseline.value("regressions", nlohmann::json::array()))
      std::fprintf(stderr, "REGRESSION %s\n", g.get<std::string>().c_str());
  std::printf("attncheck: %s: %zu shard reports merged (shards", merged.verdict().c_str(), parts.size());
  for (int s : merged.shards_merged) std::printf(" %d", s);
  std::printf(" of %d)%s; report in %s/\n", merged.shard_count, absent.empty() ? "" : ("; " + absent).c_str(),
              o.out.c_str());
  return worst_exit(merged);
}

}  // namespace

// `report` holds one subcommand, merge, and requires it: run() is merge's.
Command add_report_command(CLI::App& app, Common&) {
  auto o = std::make_shared<MergeOptions>();
  Command c;
  c.app = app.add_subcommand("report", "report directories");
  c.app->require_subcommand(1);
  CLI::App* merge = c.app->add_subcommand("merge", "combine shard report directories into one");
  merge->add_option("dirs", o->dirs, "shard report directories")->required();
  merge->add_option("--out", o->out, "output directory")->required()->check(non_empty());
  merge->add_flag("--no-plots", o->no_plots, "do not render plots");
  merge->add_flag("--allow-partial", o->allow_partial,
                  "merge even when shards are missing: the verdict is partial (exit 1 unless worse)");
  c.run = [o] { return run_report_merge(*o); };
  return c;
}

}  // namespace attncheck::cli
