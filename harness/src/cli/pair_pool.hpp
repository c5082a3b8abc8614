// Parallel (subject, property) runs in child processes.
//
// RapidCheck keeps its implicit parameters (the random source, the generation size) in
// process-wide stacks, so two properties cannot run on two threads of one process. `check
// --jobs N` therefore runs each (subject, property) pair in a child process: the same attncheck
// binary with the same command line, told by two environment variables which pair to run and where
// to write its result. A pair's cases depend only on (seed, shard, property, subject), never on
// the pair's neighbours, so the merged report is identical for every N; the parent writes it in
// plan order.
//
// A child that dies (a plugin's segfault, abort or exit) costs only its pair: the parent records
// it as crashed with the signal or exit status and the child's last stderr lines, and the
// write-ahead case in the corpus is the reproducer. --devices gives each child one GPU through
// CUDA_VISIBLE_DEVICES, round-robin.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace attncheck::cli {

constexpr const char* kChildPairEnv = "ATTNCHECK_CHILD_PAIR";      // index into the plan
constexpr const char* kChildResultEnv = "ATTNCHECK_CHILD_RESULT";  // where the child writes its entry
constexpr const char* kChildParentEnv = "ATTNCHECK_CHILD_PARENT";  // the parent's pid

struct ChildOutcome {
  size_t pair = 0;
  bool result_written = false;  // the child wrote its result file
  int exit_code = -1;           // when it exited
  int signal = 0;               // when a signal killed it
  std::string stderr_tail;      // its last stderr lines (for a crash report)
  std::string result_path;
  std::string device;  // its CUDA_VISIBLE_DEVICES ("" when inherited)
  double seconds = 0;  // wall time from start to exit
};

struct PoolOptions {
  int jobs = 1;
  std::vector<std::string> devices;  // CUDA_VISIBLE_DEVICES values, round-robin; empty: inherit
  std::string scratch_dir;           // where result files go
  // Device ("" when inherited) -> the socket of its device server, named to its children.
  std::map<std::string, std::string> device_servers;
  const std::atomic<bool>* cancel = nullptr;
};

// Runs `pairs` (indices into the children's plan, started in this order, at most `jobs` at a time)
// as children of /proc/self/exe with argv; calls done() in the parent, from this thread, as each
// finishes, with ChildOutcome::pair the pair's index.
void run_pairs_in_children(char** argv, const std::vector<size_t>& pairs, const PoolOptions&,
                           const std::function<void(const ChildOutcome&)>& done);

// In a child: the pair to run and the result path, when this process is one.
std::optional<std::pair<size_t, std::string>> child_pair_from_env();

}  // namespace attncheck::cli
