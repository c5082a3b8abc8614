// `attncheck bench`: the built-in kernels' benchmark (kernels/bench/suite.h), bench.json, and the
// speed gate against a baseline (attncheck/bench_report.hpp). Registered by main.cpp with one call.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace attncheck::cli {

struct BenchCommand {
  CLI::App* app = nullptr;  // the subcommand; run() when app->parsed()
  std::function<int()> run;
};
BenchCommand add_bench_command(CLI::App& app);

}  // namespace attncheck::cli
