// check's plan: every input validated before any work, the (subject, property) pairs, and the
// shard's share of them.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <thread>

#include "attncheck/backend.hpp"
#include "attncheck/baseline.hpp"
#include "attncheck/json_fields.hpp"
#include "attncheck/memory.hpp"
#include "check.hpp"
#include "options.hpp"
#include "pair_pool.hpp"

namespace attncheck::cli {
namespace {

// "I/N", shard index 0-based: 0/4 .. 3/4. Digits only: " 1/3" or "+1/3" is a typo, not shard 1.
std::pair<int, int> parse_shard(const std::string& s) {
  const auto slash = s.find('/');
  std::optional<uint64_t> i, n;
  if (slash != std::string::npos) {
    i = json_fields::parse_decimal_u64(std::string_view(s).substr(0, slash));
    n = json_fields::parse_decimal_u64(std::string_view(s).substr(slash + 1));
  }
  if (!i || !n || *n < 1 || *n > uint64_t(Limits::kMaxShards) || *i >= *n)
    throw UsageError("--shard " + s + ": expected I/N with 0 <= I < N <= " +
                     std::to_string(Limits::kMaxShards) + " (shards are numbered from 0)");
  return {int(*i), int(*n)};
}

std::vector<ac_dtype> parse_dtypes(const std::vector<std::string>& names) {
  std::vector<ac_dtype> dtypes;
  for (const auto& d : split_csv(names)) {
    const auto t = dtype_from(d);
    if (!t) throw UsageError("unknown dtype '" + d + "' (known: " + dtype_names() + ")");
    if (std::find(dtypes.begin(), dtypes.end(), *t) == dtypes.end()) dtypes.push_back(*t);
  }
  return dtypes;
}

// Shards split the plan, not the cases: shard I of N keeps the pairs whose (subject, property)
// hash to I, each with exactly the cases of the unsharded run. So the merge of the N shard reports
// is the unsharded run's report, and a pair's shard does not move when other subjects or
// properties come and go.
void keep_shard(CheckPlan& plan) {
  if (plan.shard_count <= 1) return;
  size_t kept = 0;
  for (size_t i = 0; i < plan.pairs.size(); ++i) {
    const auto& [subject, property] = plan.pairs[i];
    if (pair_shard(subject->name(), property->name, plan.shard_count) != plan.shard_index) continue;
    plan.pairs[kept] = plan.pairs[i];
    plan.position[kept] = plan.position[i];
    ++kept;
  }
  plan.pairs.resize(kept);
  plan.position.resize(kept);
}

}  // namespace

// The run's peak: the parent, and the plan.jobs pairs with the largest peaks at once, each in its
// own process (a --worker pair on a thread of the parent counts as one of them); the tiling rows
// after them, in the parent alone. Without --jobs, fewer pairs run at once where every core's
// would pass --max-memory; past it with one pair (or with the --jobs given) the run is refused
// before any directory is touched. True when --estimate-memory asked for the estimate alone.
bool plan_memory(CheckPlan& plan, const CheckOptions& o, const Common& common) {
  std::vector<double> pairs;
  for (const auto& [s, p] : plan.pairs) pairs.push_back(check_pair_peak_bytes(*s, *p, plan.base_cfg));
  std::sort(pairs.rbegin(), pairs.rend());
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const double limit = common.max_memory_gib * 1024.0 * 1024.0 * 1024.0;
  double tiling = 0;
  if (o.tiling || o.suite == "full")
    for (Subject* s : plan.subjects)
      if (s->has_op(AC_OP_ATTENTION) || s->has_op(AC_OP_SPLITKV))
        tiling = std::max(tiling, tiling_peak_bytes(*s, plan.base_cfg));
  auto peak_with = [&](int jobs) {
    const size_t at_once = std::min(pairs.size(), size_t(jobs));
    return std::max(tiling, std::accumulate(pairs.begin(), pairs.begin() + std::ptrdiff_t(at_once),
                                            process_base_bytes()));
  };
  plan.jobs = o.jobs > 0 ? o.jobs : cores;
  if (o.jobs == 0)
    while (plan.jobs > 1 && peak_with(plan.jobs) > limit) --plan.jobs;
  if (memory_estimate_ends_command("check", peak_with(plan.jobs), common)) return true;
  if (o.jobs == 0 && plan.jobs < cores && size_t(plan.jobs) < pairs.size() && !o.quiet)
    std::fprintf(stderr, "note: %d pairs at once (of %d cores): more would pass --max-memory %.2f GiB\n",
                 plan.jobs, cores, common.max_memory_gib);
  return false;
}

namespace {

// --devices: "all" (every visible GPU on the cuda backend; no pinning on the host backend) or a
// list of device indices. On the host backend a list is accepted and only labels the children:
// that is how a run across several GPUs is exercised where there is none.
std::vector<std::string> parse_devices(const std::string& text, bool cuda) {
  std::vector<std::string> out;
  if (text == "all") {
    if (cuda)
      for (int i = 0; i < cuda_device_count(); ++i) out.push_back(std::to_string(i));
    return out;
  }
  const int count = cuda ? cuda_device_count() : 1024;
  for (const auto& d : split_csv({text})) {
    const auto v = json_fields::parse_decimal_u64(d);
    if (!v || *v >= uint64_t(count))
      throw UsageError("--devices " + text + ": '" + d + "' is not a device index" +
                       (cuda ? " (0.." + std::to_string(count - 1) + " visible)" : ""));
    if (std::find(out.begin(), out.end(), d) != out.end())
      throw UsageError("--devices " + text + ": '" + d + "' named twice");
    out.push_back(d);
  }
  if (out.empty()) throw UsageError("--devices: give all or a list of device indices");
  return out;
}

// A directory path that cannot become a directory (a file, or a file above it): refused before
// either directory is touched, so that a bad --corpus-dir leaves no report directory behind.
void refuse_non_directory(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = dir;  // its nearest existing ancestor, or itself
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  if (!p.empty() && fs::exists(p, ec) && !fs::is_directory(p, ec))
    throw UsageError(what + " " + dir + " cannot be created: " + p.string() + " is not a directory");
}

}  // namespace

CheckPlan make_check_plan(const CheckOptions& o, Common& common, const std::atomic<bool>* cancel) {
  CheckPlan plan;
  // A child runs one pair of its parent's run. The subjects of --worker commands run in the parent,
  // which starts each such worker once for the whole run (a Python worker's start can take
  // seconds); a child starts none of them, and its plan is the parent's plan without their pairs.
  // Plugins, isolated or not, run in the children: attncheck-isolate starts in milliseconds.
  plan.child = child_pair_from_env();
  const bool child = plan.child.has_value();
  const bool plugins_given = !common.plugins.empty() || !common.worker_commands.empty();
  if (child) common.worker_commands.clear();
  plan.set = load_subject_set(common);
  // A child's built-in subjects make their calls in the parent's device server, when there is one.
  if (const char* sock = std::getenv(worker::kDeviceServerEnv); child && sock && *sock)
    plan.set.all = worker::served_subjects(std::move(plan.set.all), sock, common.call_timeout_s / 2,
                                           [](const Subject& s) { return s.origin() == "builtin"; });
  plan.subjects = pick_subjects(plan.set, split_csv(o.subjects), plugins_given, /*skip_unknown=*/child);
  const auto properties = pick_properties(split_csv(o.properties), o.suite);
  std::tie(plan.shard_index, plan.shard_count) = parse_shard(o.shard);
  if (o.run.cases < 1) throw UsageError("--cases must be at least 1");
  RunOptions run = o.run;
  run.dtypes = parse_dtypes(o.dtypes);
  plan.devices = parse_devices(o.devices, plan.set.backend == Backend::cuda);
  if (!o.baseline.empty()) {
    // A failing run would replace it and pass as its own baseline the next time.
    if (!o.report_dir.empty() && path_within(o.baseline, o.report_dir))
      throw UsageError("--baseline " + o.baseline + " lies in --report-dir " + o.report_dir +
                       ", which this run replaces: keep the baseline outside it");
    try {
      plan.baseline = read_report_file(o.baseline);
    } catch (const ReportError& e) {
      throw UsageError(std::string("baseline: ") + e.what());
    }
    if (const std::string why = baseline_coverage_problem(*plan.baseline, plan.shard_index, plan.shard_count);
        !why.empty())
      throw UsageError("baseline " + o.baseline + ": " + why);
  }
  for (Subject* s : plan.subjects)
    for (const auto* p : properties)
      if (property_applies(*p, *s) && (o.suite != "long" || (s->caps().ops & kLongSuiteOps)) &&
          (run.dtypes.empty() ||
           std::any_of(run.dtypes.begin(), run.dtypes.end(), [&](ac_dtype d) { return s->has_dtype(d); })))
        plan.pairs.emplace_back(s, p);
  if (plan.pairs.empty() && !run.dtypes.empty()) {
    // When the dtype filter is what left nothing, say so: the properties do apply.
    std::string wanted, have;
    for (ac_dtype d : run.dtypes) wanted += (wanted.empty() ? "" : ",") + std::string(dtype_name(d));
    for (Subject* s : plan.subjects) {
      const bool applies = std::any_of(properties.begin(), properties.end(), [&](const PropertyInfo* p) {
        return property_applies(*p, *s) && (o.suite != "long" || (s->caps().ops & kLongSuiteOps));
      });
      if (!applies) continue;
      std::string dtypes;
      for (ac_dtype d : {AC_DTYPE_F32, AC_DTYPE_F16, AC_DTYPE_BF16})
        if (s->has_dtype(d)) dtypes += (dtypes.empty() ? "" : " ") + std::string(dtype_name(d));
      have += (have.empty() ? "" : "; ") + s->name() + ": " + dtypes;
    }
    if (!have.empty())
      throw UsageError("--dtype " + wanted + ": none of the chosen subjects has that dtype (" + have + ")");
  }
  if (plan.pairs.empty()) throw UsageError("none of the chosen properties applies to the chosen subjects");
  if (const char* m = std::getenv(worker::kDeviceServerModeEnv);
      m && *m && std::string(m) != "on" && std::string(m) != "off")
    throw UsageError(std::string(worker::kDeviceServerModeEnv) + "=" + m + ": expected on or off");
  plan.corpus_dir = o.corpus_dir.empty() ? o.report_dir + "/corpus" : o.corpus_dir;
  if (plan.subjects.empty()) throw UsageError("no subject to check");

  Report& report = plan.report;
  report.git_describe = kGitDescribe;
  report.timestamp = utc_timestamp();
  report.command = common.command_line;
  report.backend = backend_name(plan.set.backend);
  report.device = plan.set.backend == Backend::cuda ? cuda_device_name() : "host";
  report.seed = o.run.seed;
  report.num_cases = o.run.cases;
  report.shard_index = plan.shard_index;
  report.shard_count = plan.shard_count;
  report.suite = o.properties.empty() ? o.suite : "custom";
  report.histogram_edges = ulp_histogram_edges();

  run.corpus_dir = plan.corpus_dir;
  run.long_suite = o.suite == "long";
  plan.base_cfg = run_config(run);
  plan.base_cfg.cancel = cancel;
  report.shape_set = shape_set_of(plan.base_cfg);

  plan.position.resize(plan.pairs.size());
  for (size_t i = 0; i < plan.pairs.size(); ++i) plan.position[i] = int64_t(i);
  keep_shard(plan);
  if (!child) {
    plan.estimate_only = plan_memory(plan, o, common);
    // The parent prepares the directories for its children.
    if (!plan.estimate_only) {
      refuse_non_directory(o.report_dir, "report directory");
      refuse_non_directory(plan.corpus_dir, "corpus directory");
      prepare_report_dir(o.report_dir, o.quiet);
      prepare_corpus_dir(plan.corpus_dir, o.quiet);
    }
  }
  return plan;
}

}  // namespace attncheck::cli
