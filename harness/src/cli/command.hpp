// The CLI's commands. Each cmd_<name>.cpp registers one subcommand (its options and what it runs)
// with add_<name>_command; main.cpp builds the app from them in the order --help lists them, and
// runs the one that was parsed.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "attncheck/memory.hpp"
#include "worker_subject.hpp"

namespace attncheck::cli {

// The options every subject-loading command shares, and how attncheck was started: owned by main,
// filled by CLI11 and by main before any command runs.
struct Common {
  std::string backend = "auto";
  std::vector<std::string> plugins;
  std::vector<std::string> worker_commands;  // --worker
  bool isolate = false;
  bool mutants = false;  // --mutants (replay): the built-in mutant kernels load beside the built-ins
  double call_timeout_s = worker::kDefaultCallTimeoutS;
  double max_memory_gib = default_max_memory_gib();  // --max-memory (memory.hpp)
  bool estimate_memory = false;                      // --estimate-memory: print the estimate, do nothing
  // argv[0] quoted for the shell when it was given as a path; "attncheck" when the shell found it
  // on PATH (reproduce commands start with it).
  std::string invoked_as = "attncheck";
  std::string command_line;  // argv joined with spaces (report.json's "command")
  char** argv = nullptr;     // check's children run the same command line
};

// --backend, --plugin, --worker, --isolate and --call-timeout on a subcommand.
void add_common_options(CLI::App* sub, Common& common);
// --max-memory on the commands whose input file decides their memory (replay, prefill).
void add_memory_option(CLI::App* sub, Common& common);
// A UsageError (exit 2) naming the estimate and the limit when `estimate_bytes` is past it.
void refuse_past_memory_limit(const std::string& what, double estimate_bytes, const Common& common);
// The input's whole estimate, once known: refused past the limit; with --estimate-memory printed
// ("estimated peak memory: BYTES bytes"), and true: the command ends there, exit 0.
bool memory_estimate_ends_command(const std::string& what, double estimate_bytes, const Common& common);

// A registered subcommand: run() when app->parsed().
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_list_command(CLI::App&, Common&);       // cmd_list.cpp
Command add_check_command(CLI::App&, Common&);      // cmd_check.cpp
Command add_replay_command(CLI::App&, Common&);     // cmd_replay.cpp
Command add_prefill_command(CLI::App&, Common&);    // cmd_prefill.cpp
Command add_tiling_command(CLI::App&, Common&);     // cmd_tiling.cpp
Command add_round_command(CLI::App&, Common&);      // cmd_reference.cpp
Command add_exact_command(CLI::App&, Common&);      // cmd_reference.cpp
Command add_report_command(CLI::App&, Common&);     // cmd_report.cpp (report merge)
Command add_selfcheck_command(CLI::App&, Common&);  // cmd_reference.cpp
Command add_mutants_command(CLI::App&, Common&);    // cmd_mutants.cpp
Command add_plot_command(CLI::App&, Common&);       // plot.cpp
Command add_bench_command(CLI::App&, Common&);      // cmd_bench.cpp

}  // namespace attncheck::cli
