// check's scheduler: the plan's pairs in child processes (pair_pool.hpp), at most --jobs at a time,
// the --worker pairs on a thread of this process, and the device servers the children's built-in
// subjects make their calls in (serve.hpp).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "attncheck/backend.hpp"
#include "attncheck/json_fields.hpp"
#include "check.hpp"
#include "options.hpp"
#include "pair_pool.hpp"
#include "serve.hpp"

namespace attncheck::cli {
namespace {

namespace fs = std::filesystem;

// Progress: a rewritten line on a terminal; nothing between results otherwise (CI=true, pipes).
class Progress {
 public:
  Progress(bool quiet, int64_t total_cases) : total_(total_cases), start_(clock::now()) {
    const char* ci = std::getenv("CI");
    tty_ = !quiet && isatty(STDERR_FILENO) && !(ci && std::string(ci) == "true");
  }
  void update(int64_t done_before, int done_now, const std::string& what) {
    if (!tty_) return;
    const int64_t done = done_before + done_now;
    const double secs = std::chrono::duration<double>(clock::now() - start_).count();
    const double rate = secs > 0 ? double(done) / secs : 0;
    const double left = rate > 0 ? double(total_ - done) / rate : 0;
    std::fprintf(stderr, "\r\033[K%s  %lld/%lld cases  %.1f/s  ~%.0fs left", what.c_str(), (long long)done,
                 (long long)total_, rate, left);
    std::fflush(stderr);
  }
  void clear() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  using clock = std::chrono::steady_clock;
  bool tty_ = false;
  int64_t total_;
  clock::time_point start_;
};

std::string describe_death(const ChildOutcome& o, double call_timeout) {
  std::string why = o.signal == SIGALRM ? "hung: a subject call gave no answer within --call-timeout " +
                                              std::to_string(int(call_timeout)) + " s"
                    : o.signal
                        ? "killed by signal " + std::to_string(o.signal) + " (" + strsignal(o.signal) + ")"
                        : "exited with status " + std::to_string(o.exit_code) + " before reporting";
  std::string tail = o.stderr_tail;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  const std::string head = "the process running this pair " + why;
  if (tail.empty()) return head;
  // The quote keeps the end of stderr, where a dying program says why, and the whole line stays
  // within the one-line limit (a longer line is cut at its end).
  const std::string lead = head + "; its last stderr: ";
  const size_t room =
      json_fields::kMaxMessageChars > lead.size() + 40 ? json_fields::kMaxMessageChars - lead.size() : 40;
  return lead + json_fields::printable_tail(tail, room);
}

// The entry of a pair whose child died before reporting (or reported another pair): crashed, with
// the case it was running kept from the corpus's write-ahead file.
ReportEntry crashed_entry(const CheckPlan& plan, const Common& common, size_t i, const ChildOutcome& out,
                          const std::string& mismatch, double seconds) {
  const auto& [subject, property] = plan.pairs[i];
  ReportEntry e;
  e.subject = subject->name();
  e.backend = subject->backend();
  e.origin = subject->origin();
  e.property = property->name;
  e.status = "crashed";
  e.message = mismatch.empty() ? describe_death(out, common.call_timeout_s) : mismatch;
  e.failure_class = !mismatch.empty() ? "internal" : out.signal == SIGALRM ? "hung" : "process_died";
  e.shards = {plan.shard_index};
  e.seconds = seconds;
  const auto kept = keep_write_ahead_cases(
      plan.corpus_dir, "the case running when the subject's process died", subject->name(), property->name);
  if (!kept.empty()) {
    e.corpus_files.push_back(kept.front().path);
    e.reproduce_command = replay_command(reproduce_context(common, *subject, plan.report.backend),
                                         kept.front().path, subject->name());
  }
  return e;
}

}  // namespace

void run_scheduled(CheckPlan& plan, const CheckOptions& o, const Common& common) {
  const auto& pairs = plan.pairs;
  const int cases = o.run.cases;
  Progress progress(o.quiet, int64_t(pairs.size()) * cases);
  std::vector<std::optional<ReportEntry>> results(pairs.size());
  int64_t done_pairs = 0;
  std::mutex finished_mutex;  // the worker pairs' thread and the child pool both finish pairs
  auto finished = [&](size_t i, ReportEntry e) {
    const std::lock_guard<std::mutex> lock(finished_mutex);
    const auto& [subject, property] = pairs[i];
    ++done_pairs;
    e.plan_index = plan.position[i];
    progress.clear();
    if (!o.quiet)
      std::fprintf(stderr, "[%lld/%zu] %s / %s: %s (%lld cases, %.2f s)%s%s\n", (long long)done_pairs,
                   pairs.size(), subject->name().c_str(), property->name.c_str(), e.status.c_str(),
                   (long long)e.cases_run, e.seconds, e.status == "passed" ? "" : "  ",
                   e.status == "passed" ? "" : failure_line(e).c_str());
    if (!o.quiet)
      for (const DistinctFailure& f : e.other_failures)
        std::fprintf(stderr, "      also %s: %s\n", f.signature.c_str(),
                     failure_line(f.context, f.message).c_str());
    progress.update(done_pairs * cases, 0, "");
    results[i] = std::move(e);
  };
  const std::string scratch = o.report_dir + "/.tmp-pairs-" + std::to_string(::getpid()) + "-0";
  std::error_code scratch_ec;
  fs::create_directories(scratch, scratch_ec);
  if (scratch_ec) throw UsageError("cannot create " + scratch + ": " + scratch_ec.message());
  const bool cuda = plan.set.backend == Backend::cuda;
  PoolOptions pool;
  pool.devices = plan.devices;
  pool.jobs = plan.jobs;
  pool.scratch_dir = scratch;
  pool.cancel = plan.base_cfg.cancel;
  const auto t_start = std::chrono::steady_clock::now();
  std::map<std::string, std::pair<int, double>> device_use;  // device -> (pairs, busy seconds)
  std::map<std::string, worker::ServedRedone> redone;        // device -> its children's redone calls
  // Pairs of --worker subjects run here, one after another on one thread (RapidCheck's state is
  // per process, and this is the only thread of this process that uses it), each worker started
  // once for the run and isolated by its own process; the other pairs run in children meanwhile.
  std::vector<size_t> in_children, here;
  for (size_t i = 0; i < pairs.size(); ++i)
    (worker::worker_command_of(*pairs[i].first).empty() ? in_children : here).push_back(i);
  // The children's plan is in_children; they start costliest first (stable, so in plan order among
  // equals): a long pair started last would hold the run's end alone. Results are reported in plan
  // order whatever the start order.
  std::vector<size_t> start_order(in_children.size());
  for (size_t k = 0; k < start_order.size(); ++k) start_order[k] = k;
  std::stable_sort(start_order.begin(), start_order.end(), [&](size_t a, size_t b) {
    return pairs[in_children[a]].second->relative_cost > pairs[in_children[b]].second->relative_cost;
  });
  // One device server per device for the children's built-in subjects, when there is more than one
  // child at a time to share a device.
  worker::DeviceServers servers;
  const bool builtin_pairs = std::any_of(in_children.begin(), in_children.end(),
                                         [&](size_t i) { return pairs[i].first->origin() == "builtin"; });
  if (builtin_pairs && pool.jobs > 1 && in_children.size() > 1 && worker::DeviceServers::wanted(cuda)) {
    std::vector<std::string> devices = pool.devices;
    if (devices.empty()) devices.push_back("");
    servers.start(devices, backend_name(plan.set.backend), common.call_timeout_s, scratch, o.quiet);
    pool.device_servers = servers.sockets();
  }
  const std::atomic<bool>* cancel = plan.base_cfg.cancel;
  std::thread worker_pairs([&] {
    for (size_t i : here) {
      if (cancel->load()) break;
      finished(i, run_pair_here(plan, common, i, [](int) {}));
    }
  });
  run_pairs_in_children(common.argv, start_order, pool, [&](const ChildOutcome& child_out) {
    ChildOutcome out = child_out;
    out.pair = in_children[child_out.pair];
    const auto& [subject, property] = pairs[out.pair];
    auto& use = device_use[out.device.empty() ? "inherited" : out.device];
    ++use.first;
    use.second += out.seconds;
    std::string mismatch;
    if (out.result_written) {
      try {
        const Report part = read_report_file(out.result_path);
        if (part.parallel.is_object() && part.parallel.contains("served_redone")) {
          auto& r = redone[out.device.empty() ? "inherited" : out.device];
          if (r.calls == 0) r.first = part.parallel.value("served_redone_first", std::string());
          r.calls += part.parallel.value("served_redone", int64_t(0));
        }
        // The child's plan index must name the same pair here: a mix-up would file one pair's
        // verdict under another's name.
        if (part.entries.size() == 1 && part.entries.front().subject == subject->name() &&
            part.entries.front().property == property->name) {
          finished(out.pair, part.entries.front());
          return;
        }
        if (part.entries.size() == 1)
          mismatch = "internal: the child given this pair ran " + part.entries.front().subject + " / " +
                     part.entries.front().property;
      } catch (const ReportError&) {
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    finished(out.pair, crashed_entry(plan, common, out.pair, out, mismatch, seconds));
  });
  worker_pairs.join();
  nlohmann::json served = servers.shut_down();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  for (auto& sv : served) {
    const auto r = redone.find(sv.value("device", std::string()));
    sv["redone"] = r == redone.end() ? 0 : r->second.calls;
    if (r != redone.end()) sv["redone_first"] = r->second.first;
  }
  if (!o.quiet)
    for (const auto& sv : served)
      std::fprintf(stderr, "device server (%s): %lld calls, %.1f s holding the device of %.1f s wall%s\n",
                   sv.value("device", std::string()).c_str(), (long long)sv.value("calls", int64_t(-1)),
                   sv.value("device_seconds", -1.0), wall,
                   sv.value("redone", int64_t(0)) == 0
                       ? ""
                       : ("; " + std::to_string(sv.value("redone", int64_t(0))) +
                          " failed there and were redone by their child, first: " +
                          sv.value("redone_first", std::string()))
                             .c_str());
  fs::remove_all(scratch, scratch_ec);
  Report& report = plan.report;
  report.parallel = {{"jobs", pool.jobs},
                     {"wall_seconds", wall},
                     {"devices", nlohmann::json::array()},
                     {"device_servers", served}};
  for (const auto& [dev, use] : device_use)
    report.parallel["devices"].push_back(
        {{"device", dev}, {"pairs", use.first}, {"busy_seconds", use.second}});
  for (size_t i = 0; i < pairs.size(); ++i)
    if (results[i]) report.entries.push_back(std::move(*results[i]));
  report.interrupted = cancel->load();
}

}  // namespace attncheck::cli
