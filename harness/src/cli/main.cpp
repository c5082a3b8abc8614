// attncheck: the command line. Runs the properties (properties/) over subjects (built-in kernels
// of kernels/ and users' plugins), judged against the exact reference (reference/), and writes a
// report directory (report.json, report.md, junit.xml, plots). Every input problem (unknown
// subject or property, missing or incompatible plugin, unreadable baseline, unwritable report
// directory) is found before any work is done and exits 2 with one line naming it.
//
// Exit codes: 0 all hold; 1 a property failed (or the baseline gate found a regression);
// 2 usage or input error; 3 a subject crashed or faulted the device (its case is in the corpus);
// 130 interrupted by Ctrl-C with nothing failed so far (the report holds what completed).
//
// This file builds the app from the commands (cmd_*.cpp, command.hpp), runs the parsed one and
// turns what escapes it into one line and an exit code.
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attncheck/abi_subject.hpp"
#include "attncheck/case.hpp"
#include "attncheck/json_fields.hpp"
#include "attncheck/reference/precision.hpp"
#include "attncheck/report.hpp"
#include "common.hpp"
#include "options.hpp"
#include "pair_pool.hpp"
#include "process.hpp"
#include "serve.hpp"

namespace ac = attncheck;
using ac::cli::kExitCrashed, ac::cli::kExitUsage, ac::cli::one_line;

namespace {

// Code attncheck loads runs in this process where nothing isolates it: a plugin's constructors and
// attncheck_plugin() at load time, and the calls of replay, prefill and tiling (check runs a
// plugin's pairs in child processes). If that code ends the process, its status must not be read
// as attncheck's (exit(0) while loading read as "all hold"): an exit() before main returns, and a
// fatal signal, give one line and exit 3. The pairs' child processes (pair_pool.cpp) are left to
// their parent, which reports how they died. _exit() cannot be caught in the process; --isolate
// hosts each plugin in a worker process of its own, where it can.
std::atomic<bool> g_main_returned{false};

void exit_before_main_returned() {
  if (g_main_returned.load()) return;
  std::fflush(stdout);
  std::fputs(
      "attncheck: the process was ended by exit() in code it loaded (a plugin or subject) before "
      "attncheck finished: a crash\n",
      stderr);
  ::_exit(kExitCrashed);
}

// Only async-signal-safe calls: write and _exit.
void on_fatal_signal(int sig) {
  char line[160] = "attncheck: the process received a fatal signal ";
  size_t n = std::strlen(line);
  char digits[8];
  int k = 0;
  for (int v = sig; v > 0 && k < 8; v /= 10) digits[k++] = char('0' + v % 10);
  while (k > 0 && n < sizeof line - 1) line[n++] = digits[--k];
  const char tail[] = " (in code it loaded, or in attncheck): a crash\n";
  for (size_t i = 0; tail[i] && n < sizeof line - 1; ++i) line[n++] = tail[i];
  (void)!::write(STDERR_FILENO, line, n);
  ::_exit(kExitCrashed);
}

void guard_this_process() {
  std::atexit(exit_before_main_returned);
  // Under a sanitizer its own handlers report the fault: they are left in place.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) ::signal(sig, on_fatal_signal);
#endif
}

int run(int argc, char** argv) {
  // Every case allocates and frees tensors of up to a few MiB (a batch of 140 sequences, its
  // outputs, the victims' copies). glibc's defaults hand the freed heap top back to the kernel and
  // fault it in again at the next case: half of batch_invariance's time at 140 sequences went to
  // page faults and zeroing. Chunks up to 32 MiB come from the heap, and up to 1 GiB of its free
  // top is kept; larger tensors are still mapped and unmapped on their own, so the peak stays that
  // of the live tensors plus the kept top.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (const auto rc = ac::worker::device_server_main(argc, argv, ac::load_builtin_subjects)) return *rc;
  if (!ac::cli::child_pair_from_env()) guard_this_process();
  // What a worker starts and leaves behind is found and ended with the worker (process.hpp).
  ac::worker::adopt_orphans();
  ac::cli::Common common;
  // A path when attncheck was started by one, so that a printed command runs the same binary when
  // pasted in the same directory.
  if (argc > 0 && std::strchr(argv[0], '/') != nullptr) common.invoked_as = ac::worker::shell_word(argv[0]);
  for (int i = 0; i < argc; ++i) common.command_line += (i ? " " : "") + std::string(argv[i]);
  common.argv = argv;

  CLI::App app{"attncheck: checks attention kernels against exact (arbitrary-precision) answers"};
  app.require_subcommand(1);
  const std::string git_describe = ac::cli::kGitDescribe;
  app.set_version_flag("--version", std::string("attncheck ") + ac::kToolVersion +
                                        (git_describe.empty() ? "" : " (" + git_describe + ")"));
  // In the order --help lists them.
  const std::vector<ac::cli::Command> commands = {
      ac::cli::add_list_command(app, common),      ac::cli::add_check_command(app, common),
      ac::cli::add_replay_command(app, common),    ac::cli::add_prefill_command(app, common),
      ac::cli::add_tiling_command(app, common),    ac::cli::add_round_command(app, common),
      ac::cli::add_exact_command(app, common),     ac::cli::add_report_command(app, common),
      ac::cli::add_selfcheck_command(app, common), ac::cli::add_mutants_command(app, common),
      ac::cli::add_plot_command(app, common),      ac::cli::add_bench_command(app, common)};

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, exit 2: CLI11's own exit codes differ. CLI11 reads an unknown first word as a
    // missing command; the line names the word and the commands instead.
    std::string what = one_line(e.what());
    if (argc > 1 && argv[1][0] != '-' && app.get_subcommands().empty()) {
      std::string names;
      for (const CLI::App* sub : app.get_subcommands([](CLI::App* a) { return !a->get_group().empty(); }))
        names += (names.empty() ? "" : ", ") + sub->get_name();
      what = "unknown command '" + ac::json_fields::printable(argv[1]) + "' (commands: " + names + ")";
    }
    // CLI11 reads "-inf" and "-nan" as options (its negative numbers are digits only): such a
    // value has to follow "--", and the line says so.
    for (int i = 1; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
      char* end = nullptr;
      if (argv[i][0] == '-' && std::isalpha(static_cast<unsigned char>(argv[i][1])) &&
          (std::strtod(argv[i], &end), *end == '\0')) {
        what += "; a value such as '" + ac::json_fields::printable(argv[i]) +
                "' goes after '--' (attncheck round --to e5m2 -- -inf)";
        break;
      }
    }
    std::fprintf(stderr, "attncheck: %s (see attncheck --help)\n", what.c_str());
    return kExitUsage;
  }

  try {
    for (const auto& command : commands)
      if (command.app->parsed()) return command.run();
  } catch (const ac::cli::UsageError& e) {
    std::fprintf(stderr, "attncheck: %s\n", one_line(e.what()).c_str());
    return kExitUsage;
  } catch (const ac::ref::ReferenceError& e) {
    std::fprintf(stderr, "attncheck: %s\n", one_line(e.what()).c_str());
    return kExitUsage;
  } catch (const ac::CaseError& e) {
    std::fprintf(stderr, "attncheck: %s\n", one_line(e.what()).c_str());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attncheck: internal error: %s\n", one_line(e.what()).c_str());
    return kExitCrashed;
  }
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  const int rc = run(argc, argv);
  g_main_returned.store(true);
  return rc;
}
