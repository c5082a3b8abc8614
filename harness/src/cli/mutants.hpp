// `attncheck mutants`: the mutation self-test. Registered on the CLI by main.cpp with
// one call; everything else lives in mutants.cpp.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace attncheck::cli {

struct MutantsCommand {
  CLI::App* app = nullptr;  // the subcommand; run() when app->parsed()
  std::function<int()> run;
};
MutantsCommand add_mutants_command(CLI::App& app);

}  // namespace attncheck::cli
