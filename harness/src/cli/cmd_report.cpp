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
};

int run_report_merge(const MergeOptions& o) {
  std::vector<Report> parts;
  for (const auto& d : o.dirs) {
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
  write_report_dir(o.out, merged);
  if (!o.no_plots) render_plots(o.out, false);
  std::printf("attncheck: %s: %zu shard reports merged (shards", merged.verdict().c_str(), parts.size());
  for (int s : merged.shards_merged) std::printf(" %d", s);
  std::printf(" of %d); report in %s/\n", merged.shard_count, o.out.c_str());
  if (int(merged.shards_merged.size()) != merged.shard_count)
    std::printf("note: %d of %d shards present\n", int(merged.shards_merged.size()), merged.shard_count);
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
  c.run = [o] { return run_report_merge(*o); };
  return c;
}

}  // namespace attncheck::cli
