// `attncheck check`: the properties over the subjects, a report directory. Its options and the
// order of its steps; the steps are in check_plan.cpp, check_schedule.cpp, check_child.cpp and
// check_finish.cpp (check.hpp).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <memory>

#include "attncheck/generators.hpp"
#include "check.hpp"
#include "options.hpp"
#include "pair_pool.hpp"
#include "process.hpp"

namespace attncheck::cli {
namespace {

// Set from the SIGINT and SIGTERM handlers: the running pairs stop after their case (a worker in a
// call is stopped at once), and what finished is written. g_stop_signal says which signal came.
std::atomic<bool> g_interrupted{false};
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop(int sig) {
  g_interrupted.store(true);
  g_stop_signal.store(sig);
  // A second Ctrl-C (or SIGTERM) kills at once.
  ::signal(sig, SIG_DFL);
}
// A child of check --jobs gets Ctrl-C twice: from the terminal (its process group) and forwarded
// by its parent. Both ask it to stop after its case; a second Ctrl-C kills the parent, and the
// kernel then kills the child (PR_SET_PDEATHSIG).
extern "C" void on_stop_child(int sig) {
  g_interrupted.store(true);
  g_stop_signal.store(sig);
}

int run_check(const CheckOptions& o, Common& common) {
  // The handlers come before the plan: making it starts each --worker (a Python worker's start is
  // most of a short run), and a SIGTERM meanwhile must stop the run with its report, not kill it
  // without one. The workers' calls see the flag only once the plan is made; the run then stops
  // before its first case.
  for (int sig : {SIGINT, SIGTERM}) ::signal(sig, child_pair_from_env() ? on_stop_child : on_stop);
  CheckPlan plan = make_check_plan(o, common, &g_interrupted);
  if (plan.estimate_only) return kExitOk;
  const bool child = plan.child.has_value();
  if (!o.quiet && !child) {
    // The backend is where the built-ins run: a run of plugins or workers alone has none to name.
    const auto builtins = plan.set.all.begin(), plugins = builtins + std::ptrdiff_t(plan.set.first_plugin);
    const bool builtin_runs = std::any_of(plan.pairs.begin(), plan.pairs.end(), [&](const auto& pair) {
      return std::any_of(builtins, plugins, [&](const auto& s) { return s.get() == pair.first; });
    });
    if (builtin_runs) std::fprintf(stderr, "%s\n", plan.set.backend_note.c_str());
    for (const auto& n : plan.set.notes) std::fprintf(stderr, "%s\n", n.c_str());
  }
  worker::set_cancel_flag(&g_interrupted);
  if (plan.shard_count > 1 && plan.pairs.empty() && !child) {
    write_report_dir(o.report_dir, plan.report);
    std::printf(
        "attncheck: shard %d/%d holds none of the %s (subject, property) pairs; empty report in %s/\n",
        plan.shard_index, plan.shard_count, "chosen", o.report_dir.c_str());
    return kExitOk;
  }
  if (child) return run_child(plan, common);
  run_scheduled(plan, o, common);
  const int rc = finish_check(plan, o);
  // Stopped by SIGTERM with nothing failed: the shell's convention for that signal.
  return rc == kExitInterrupted && g_stop_signal.load() == SIGTERM ? kExitTerminated : rc;
}

}  // namespace

Command add_check_command(CLI::App& app, Common& common) {
  auto co = std::make_shared<CheckOptions>();
  Command c;
  CLI::App* check = app.add_subcommand("check", "run properties over subjects and write a report directory");
  c.app = check;
  add_common_options(check, common);
  add_memory_option(check, common);
  check
      ->add_option(
          "--subject", co->subjects,
          "subject names (repeatable or comma-separated; default: all, or the plugins' when --plugin)")
      ->check(names_something());
  check
      ->add_option("--property", co->properties,
                   "property names (repeatable or comma-separated; overrides --suite)")
      ->check(names_something());
  check->add_option(
      "--suite", co->suite,
      "gate (default, fast) | full | long (attention subjects: keys to 8192, d 128, fp16/bf16, the "
      "Llama-3-8B layer on sampled rows; 10 cases)");
  check->add_option("--seed", co->run.seed, "seed of the case stream (default 1)")->check(decimal_u64());
  check->add_option("--cases", co->run.cases, "cases per (subject, property) (default 100)")
      ->check(CLI::Range(1, Limits::kMaxCases));
  check->add_option("--max-keys", co->run.max_keys, "longest key row generated (default 64)")
      ->check(CLI::Range(1, Limits::kMaxKeys));
  check
      ->add_option("--max-batch", co->run.max_batch,
                   "batch_invariance: most sequences in a batch, the victim and its neighbours (default " +
                       std::to_string(gen::kMaxBatchHost) + " on the host twins, " +
                       std::to_string(gen::kMaxBatchDevice) + " on a device)")
      ->check(CLI::Range(1, Limits::kMaxBatch));
  check
      ->add_option("--dtype", co->dtypes,
                   "only these dtypes (fp32, fp16, bf16; repeatable or comma-separated; default: every "
                   "dtype a subject has)")
      ->check(names_something());
  check->add_option("--report-dir", co->report_dir, "report directory (default attncheck-report)")
      ->check(non_empty());
  check
      ->add_option("--corpus-dir", co->corpus_dir,
                   "where shrunk failures are written (default REPORT_DIR/corpus)")
      ->check(non_empty());
  check->add_option("--baseline", co->baseline, "baseline report.json: fail on regressions against it");
  check->add_option("--shard", co->shard,
                    "I/N: run shard I (0-based) of N; shards split the (subject, property) pairs, each pair "
                    "running exactly the cases of the unsharded run");
  check->add_flag("--no-shrink", co->run.no_shrink, "keep each failure's first failing case, unshrunk");
  check
      ->add_option("--shrink-time", co->run.shrink_time,
                   "seconds each failure may spend shrinking (default 20; batch_invariance at most " +
                       std::to_string(int(kBatchShrinkSeconds)) + "); then the smallest case so far is kept")
      ->check(finite_range(0.0, double(Limits::kMaxShrinkSeconds)));
  check
      ->add_option(
          "--max-failures", co->run.max_failures,
          "distinct failures kept per (subject, property), each shrunk and saved (default 3; 1 stops at "
          "the first)")
      ->check(CLI::Range(1, kMaxFailuresLimit));
  check->add_flag("--tiling", co->tiling,
                  "also run every tiling / split count of attention subjects (always with --suite full)");
  check
      ->add_option("--jobs", co->jobs,
                   "(subject, property) pairs run at once, each in its own process (default: every core)")
      ->check(CLI::Range(1, 1024));
  check->add_option(
      "--devices", co->devices,
      "all (default: every visible GPU) or device indices 0,1,...: children run round-robin on them");
  check->add_flag("--quiet", co->quiet, "print only the final line and regressions");
  check->add_flag("--no-plots", co->no_plots, "do not render plots");
  c.run = [co, check, &common] {
    CheckOptions o = *co;
    if (o.suite == "long") {
      // The long suite's defaults; an explicit option still wins.
      if (!check->count("--max-keys")) o.run.max_keys = kLongSuiteTokens;
      if (!check->count("--cases")) o.run.cases = kLongSuiteCases;
      if (o.dtypes.empty()) o.dtypes = {"fp16", "bf16"};
    }
    return run_check(o, common);
  };
  return c;
}

}  // namespace attncheck::cli
