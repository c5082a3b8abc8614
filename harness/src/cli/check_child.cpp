// check's child runner: one (subject, property) pair in this process.
#include <unistd.h>

#include <cmath>

#include "attncheck/atomic_file.hpp"
#include "check.hpp"
#include "options.hpp"

namespace attncheck::cli {

ReportEntry run_pair_here(const CheckPlan& plan, const Common& common, size_t i,
                          const std::function<void(int)>& on_case) {
  const auto& [subject, property] = plan.pairs[i];
  RunConfig cfg = plan.base_cfg;
  cfg.reproduce = reproduce_context(common, *subject, plan.report.backend);
  cfg.progress = [&](int done, int) { on_case(done); };
  // A plugin is foreign code that may kill the process on the host too: write each case
  // before calling it, as for CUDA subjects (the properties always do for those).
  cfg.write_ahead = subject->origin() != "builtin";
  const auto worker_hook = worker::call_context_hook(*subject, plan.shard_index);
  cfg.before_launch = worker_hook;
  // A worker subject enforces --call-timeout itself (and restarts its worker); an in-process
  // subject is timed here: the alarm is armed before each call and disarmed when its case is
  // judged, and SIGALRM's default action ends this child, which the parent reports as hung.
  if (plan.child && !worker::is_worker_subject(*subject)) {
    cfg.before_launch = [&, worker_hook](const Case& c) {
      if (worker_hook) worker_hook(c);
      ::alarm(unsigned(std::ceil(common.call_timeout_s)));
    };
    cfg.progress = [&](int done, int) {
      ::alarm(0);
      on_case(done);
    };
  }
  const PropertyResult r = run_property(property->name, *subject, cfg);
  ReportEntry e = entry_from_result(r, *subject, plan.shard_index);
  e.shards = {plan.shard_index};
  if (cfg.cancel && cfg.cancel->load() && e.status == "passed") e.status = "interrupted";
  return e;
}

int run_child(const CheckPlan& plan, const Common& common) {
  if (plan.child->first >= plan.pairs.size()) throw UsageError("internal: child pair index out of range");
  Report part = plan.report;
  part.entries.push_back(run_pair_here(plan, common, plan.child->first, [](int) {}));
  // The parent adds these to its device server's line: a redo hides nothing from the report.
  if (const auto redone = worker::served_redone(); redone.calls)
    part.parallel = {{"served_redone", redone.calls}, {"served_redone_first", redone.first}};
  write_file_atomic(plan.child->second,
                    report_to_json(part).dump(1, ' ', false, nlohmann::json::error_handler_t::replace));
  return kExitOk;
}

}  // namespace attncheck::cli
