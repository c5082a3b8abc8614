// Pictures of a report directory: `attncheck plot REPORT_DIR`, and what `check`, `tiling` and
// `report merge` call after writing a report. Runs harness/plots/plot_report.py (installed as
// share/attncheck/plot_report.py) with a python3 from PATH; the report files never depend on it.
#pragma once
#include <string>

#include "attncheck/pythons.hpp"

namespace attncheck {

enum class PlotStatus { drawn, no_report, no_script, no_python, no_matplotlib, failed };

// Draws REPORT_DIR/plots from REPORT_DIR/report.json. Anything but `drawn` is explained in one
// line on stderr unless quiet; a missing python3 or matplotlib line says how to get the pictures.
PlotStatus render_plots(const std::string& report_dir, bool quiet);

// The plot script: $ATTNCHECK_PLOT_SCRIPT when set, else the installed copy relative to this
// binary (bin/../share/attncheck/), else the source tree's. Empty when the chosen one is missing.
std::string find_plot_script(std::string* tried = nullptr);

// `attncheck plot` is registered by add_plot_command (cli/command.hpp), defined in plot.cpp.

}  // namespace attncheck
