// `attncheck tiling`: the ulp error of one attention subject per tiling, split count and fold order.
#include <cstdio>
#include <memory>

#include "attncheck/memory.hpp"
#include "common.hpp"
#include "options.hpp"
#include "plot.hpp"

namespace attncheck::cli {
namespace {

struct TilingOptions {
  std::string subject, report_dir;
  RunOptions run;  // --seed, --cases (20 inputs per tiling by default, set below)
  bool no_plots = false;
};

int run_tiling(const TilingOptions& o, const Common& common) {
  SubjectSet set = load_subject_set(common);
  Subject* s = pick_subjects(set, {o.subject}, false).front();
  if (!(s->has_op(AC_OP_ATTENTION) || s->has_op(AC_OP_SPLITKV)))
    throw UsageError("subject '" + o.subject +
                     "' has no attention: tiling needs a fused-attention or split-KV subject");
  const RunConfig cfg = run_config(o.run);
  if (memory_estimate_ends_command("tiling --subject " + o.subject, tiling_peak_bytes(*s, cfg), common))
    return kExitOk;
  if (!o.report_dir.empty()) prepare_report_dir(o.report_dir, false);
  const auto rows = tiling_report(*s, cfg);
  if (s->caps().num_tilings <= 0)
    std::printf("%s declares no tilings: one row per split configuration, Br and Bc shown as -\n",
                o.subject.c_str());
  std::printf("%-6s %-6s %-7s %-6s %-5s %-4s %10s %10s %10s %10s\n", "Br", "Bc", "splits", "fold", "dtype",
              "out", "max ulp", "p99 ulp", "mean ulp", "nonfinite");
  for (const auto& r : rows)
    std::printf("%-6s %-6s %-7d %-6s %-5s %-4s %10.3g %10.3g %10.3g %10lld\n",
                r.br > 0 ? std::to_string(r.br).c_str() : "-", r.bc > 0 ? std::to_string(r.bc).c_str() : "-",
                r.num_splits, r.fold.empty() ? "-" : r.fold.c_str(), r.stats.dtype.c_str(),
                r.stats.output.c_str(), r.stats.max_ulp, r.stats.p99_ulp, r.stats.mean_ulp,
                (long long)r.stats.nonfinite);
  if (o.report_dir.empty()) return kExitOk;
  Report rep;
  rep.timestamp = utc_timestamp();
  rep.command = "attncheck tiling --subject " + o.subject;
  rep.git_describe = kGitDescribe;
  rep.backend = backend_name(set.backend);
  rep.device = set.backend == Backend::cuda ? cuda_device_name() : "host";
  rep.seed = o.run.seed;
  rep.num_cases = o.run.cases;
  rep.suite = "tiling";
  rep.shape_set = shape_set_of(cfg);
  rep.histogram_edges = ulp_histogram_edges();
  rep.tilings = tiling_entries(*s, rows);
  write_report_dir(o.report_dir, rep);
  if (!o.no_plots) render_plots(o.report_dir, false);
  std::printf("report in %s/\n", o.report_dir.c_str());
  return kExitOk;
}

}  // namespace

Command add_tiling_command(CLI::App& app, Common& common) {
  auto o = std::make_shared<TilingOptions>();
  o->run.cases = 20;
  Command c;
  c.app = app.add_subcommand("tiling",
                             "ulp error of one attention subject per tiling, split count and fold order");
  add_common_options(c.app, common);
  add_memory_option(c.app, common);
  c.app->add_option("--subject", o->subject, "fused-attention or split-KV subject")
      ->required()
      ->check(non_empty());
  c.app->add_option("--seed", o->run.seed, "seed (default 1)")->check(decimal_u64());
  c.app->add_option("--cases", o->run.cases, "inputs per tiling (default 20)")
      ->check(CLI::Range(1, Limits::kMaxTilingCases));
  c.app->add_option("--report-dir", o->report_dir, "also write a report directory with heatmaps")
      ->check(non_empty());
  c.app->add_flag("--no-plots", o->no_plots, "do not render plots");
  c.run = [o, &common] { return run_tiling(*o, common); };
  return c;
}

}  // namespace attncheck::cli
