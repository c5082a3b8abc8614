// See plot.hpp. The script is started by run_captured (no shell), so report directories with
// spaces or quotes in their names need no escaping.
#include "plot.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include "attncheck/report.hpp"
#include "cli/command.hpp"
#include "cli/options.hpp"

#ifndef ATTNCHECK_PLOT_SCRIPT_FROM_BIN
#define ATTNCHECK_PLOT_SCRIPT_FROM_BIN ""
#endif
#ifndef ATTNCHECK_PLOT_SCRIPT_SOURCE
#define ATTNCHECK_PLOT_SCRIPT_SOURCE ""
#endif

namespace attncheck {
namespace fs = std::filesystem;

namespace {

// plot_report.py's exit status when its python has no matplotlib (EXIT_NO_MATPLOTLIB there).
constexpr int kScriptNoMatplotlib = 3;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

std::string how_to_get_pictures(const std::string& report_dir) {
  return "for pictures: apt-get install python3-matplotlib, then attncheck plot " + report_dir;
}

}  // namespace

std::string find_plot_script(std::string* tried) {
  std::string chosen;
  if (const char* env = std::getenv("ATTNCHECK_PLOT_SCRIPT"); env && *env) {
    chosen = env;
  } else {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    const std::string from_bin = ATTNCHECK_PLOT_SCRIPT_FROM_BIN;
    if (!ec && !from_bin.empty() && is_file(exe.parent_path() / from_bin))
      chosen = (exe.parent_path() / from_bin).lexically_normal().string();
    else
      chosen = ATTNCHECK_PLOT_SCRIPT_SOURCE;
  }
  if (tried) *tried = chosen;
  return !chosen.empty() && is_file(chosen) ? chosen : std::string();
}

PlotStatus render_plots(const std::string& report_dir, bool quiet) {
  auto note = [&](const std::string& line) {
    if (!quiet) std::fprintf(stderr, "%s\n", line.c_str());
  };
  const std::string report = report_dir + "/report.json";
  if (!is_file(report)) {
    note("plots: no report.json in " + report_dir);
    return PlotStatus::no_report;
  }
  std::string tried;
  const std::string script = find_plot_script(&tried);
  if (script.empty()) {
    note("plots skipped: plot script " + (tried.empty() ? std::string("plot_report.py") : tried) +
         " not found (set ATTNCHECK_PLOT_SCRIPT)");
    return PlotStatus::no_script;
  }
  const auto pythons = pythons_on_path();
  if (pythons.empty()) {
    note("plots skipped: no python3 on PATH; " + how_to_get_pictures(report_dir));
    return PlotStatus::no_python;
  }
  for (const auto& python : pythons) {
    const CapturedRun r = run_captured({python, script, report, "--out", report_dir + "/plots"});
    if (r.status == kScriptNoMatplotlib) continue;  // try the next python3 on PATH
    if (r.status == 0) {
      if (!quiet && !r.output.empty()) std::fprintf(stderr, "%s", r.output.c_str());
      try {
        embed_plots_in_report(report_dir);  // report.html shows the figures that decide
      } catch (const ReportError& e) {
        note(std::string("plots drawn; report.html left without them: ") + e.what());
      }
      return PlotStatus::drawn;
    }
    if (!quiet) {
      if (!r.output.empty()) std::fprintf(stderr, "%s", r.output.c_str());
      std::fprintf(stderr, "plots: %s %s failed (report files are complete)\n", python.c_str(),
                   script.c_str());
    }
    return PlotStatus::failed;
  }
  note("plots skipped: no python3 on PATH has matplotlib; " + how_to_get_pictures(report_dir));
  return PlotStatus::no_matplotlib;
}

namespace cli {

Command add_plot_command(CLI::App& app, Common&) {
  auto dir = std::make_shared<std::string>();
  Command c;
  c.app = app.add_subcommand(
      "plot", "draw a report directory's pictures into REPORT_DIR/plots (python3, matplotlib)");
  c.app->add_option("report_dir", *dir, "report directory (holds report.json)")->required();
  // Exit 0 drawn; 1 the script failed; 2 nothing drawn (no report, script, python3 or matplotlib).
  c.run = [dir]() {
    switch (render_plots(*dir, false)) {
      case PlotStatus::drawn:
        std::printf("attncheck: plots in %s/plots/\n", dir->c_str());
        return kExitOk;
      case PlotStatus::failed:
        return kExitFailed;
      default:
        return kExitUsage;
    }
  };
  return c;
}

}  // namespace cli
}  // namespace attncheck
