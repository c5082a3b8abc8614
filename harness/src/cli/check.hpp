// `attncheck check`, in four steps: the plan (check_plan.cpp: options validated, the (subject,
// property) pairs and the shard's share of them), the scheduler (check_schedule.cpp: the pairs run
// in child processes, the --worker pairs on a thread of the parent), the child runner
// (check_child.cpp: one pair in this process) and the finish (check_finish.cpp: tiling rows,
// baseline comparison, the report, the final line). cmd_check.cpp registers the options and runs
// the steps.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attncheck/report.hpp"
#include "common.hpp"

namespace attncheck::cli {

struct CheckOptions {
  std::vector<std::string> subjects, properties, dtypes;
  std::string suite = "gate", report_dir = "attncheck-report", corpus_dir, baseline, shard = "0/1";
  RunOptions run;  // --seed, --cases, --max-keys, --no-shrink, --shrink-time; dtypes and corpus by the plan
  bool quiet = false, no_plots = false, tiling = false;
  int jobs = 0;  // 0: every core
  std::string devices = "all";
};

// What one check run does, validated before any work.
struct CheckPlan {
  // Set in a child of the parent's pool: the index of its pair in the plan and its result file.
  std::optional<std::pair<size_t, std::string>> child;
  SubjectSet set;
  std::vector<Subject*> subjects;
  // The (subject, property) pairs of this shard, in plan order, and each pair's position in the
  // unsharded plan (kept in its result: `report merge` orders the shards' results by it).
  std::vector<std::pair<Subject*, const PropertyInfo*>> pairs;
  std::vector<int64_t> position;
  int shard_index = 0, shard_count = 1;
  std::optional<Report> baseline;
  std::string corpus_dir;
  RunConfig base_cfg;          // every pair's RunConfig before its subject's own settings
  Report report;               // the header: command, backend, seed, shard, suite, shape set
  bool estimate_only = false;  // --estimate-memory: the estimate was printed, nothing more to do
  // The pairs run at once: --jobs, or every core, fewer where their memory would pass --max-memory.
  int jobs = 1;
  std::vector<std::string> devices;  // --devices: the indices children are pinned to; empty: none
};

// Everything validated, the directories made ready (by the parent), the shard's pairs chosen.
// A child clears common.worker_commands: the parent runs the --worker pairs.
CheckPlan make_check_plan(const CheckOptions& o, Common& common, const std::atomic<bool>* cancel);

// One pair of the plan, run in this process: what a child runs, and the parent's --worker pairs.
// on_case is called after each case.
ReportEntry run_pair_here(const CheckPlan& plan, const Common& common, size_t i,
                          const std::function<void(int)>& on_case);
// What a child process does: its pair's entry, written to its result file.
int run_child(const CheckPlan& plan, const Common& common);

// Runs every pair of the plan (children, and the --worker pairs on a thread here); fills
// plan.report's entries (plan order), parallel and interrupted.
void run_scheduled(CheckPlan& plan, const CheckOptions& o, const Common& common);

// Tiling rows, the baseline comparison, the report directory and the final line; the exit code.
int finish_check(CheckPlan& plan, const CheckOptions& o);

}  // namespace attncheck::cli
