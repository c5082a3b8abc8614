#include "common.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "attncheck/atomic_file.hpp"
#include "attncheck/backend.hpp"
#include "attncheck/json_fields.hpp"
#include "attncheck/plugin.hpp"
#include "common/registry.h"
#include "options.hpp"

namespace attncheck::cli {

namespace fs = std::filesystem;

std::string one_line(const std::string& text) {
  return json_fields::printable(text, json_fields::kMaxMessageChars);
}

void add_common_options(CLI::App* sub, Common& common) {
  sub->add_option("--backend", common.backend, "auto (GPU if present, else host twins) | cuda | host");
  sub->add_option("--plugin", common.plugins,
                  "shared library exporting the attncheck plugin ABI (repeatable)");
  sub->add_option("--worker", common.worker_commands,
                  "\"CMD ARGS\": a worker process serving subjects (WORKER_PROTOCOL.md; repeatable)")
      ->allow_extra_args(false);
  sub->add_flag("--isolate", common.isolate,
                "host each --plugin in a worker process (a crash is exit 3, not a dead harness)");
  sub->add_option("--call-timeout", common.call_timeout_s,
                  "seconds a worker may take per call before it is killed and restarted (default 60)");
}

void add_memory_option(CLI::App* sub, Common& common) {
  sub->add_option("--max-memory", common.max_memory_gib,
                  "GiB an input's estimated peak memory may reach; past it the run is refused before any "
                  "work (default 4, or half the machine's memory where that is more)")
      ->check(finite_range(0.0625, 1048576.0));
  sub->add_flag("--estimate-memory", common.estimate_memory,
                "print the input's estimated peak memory in bytes and stop before any work");
}

void refuse_past_memory_limit(const std::string& what, double estimate_bytes, const Common& common) {
  if (estimate_bytes > common.max_memory_gib * 1024.0 * 1024.0 * 1024.0)
    throw UsageError(memory_refusal(what, estimate_bytes, common.max_memory_gib));
}

bool memory_estimate_ends_command(const std::string& what, double estimate_bytes, const Common& common) {
  refuse_past_memory_limit(what, estimate_bytes, common);
  if (common.estimate_memory) std::printf("estimated peak memory: %.0f bytes\n", estimate_bytes);
  return common.estimate_memory;
}

namespace {

// A CUDA subject of a C-ABI plugin needs a device that attncheck itself can stage tensors to, in
// process or under --isolate alike; without one it is skipped with a note, not run into a crash.
// A --worker command manages its own device, so its subjects are never skipped here.
void add_plugin_subject(SubjectSet& set, std::unique_ptr<Subject> s, bool cuda_usable) {
  if (s->backend() == "cuda" && !cuda_usable) {
    set.notes.push_back("plugin subject " + s->name() +
                        " is a CUDA subject and no CUDA device is usable: skipped");
    return;
  }
  set.all.push_back(std::move(s));
}

// origin: the plugin path an --isolate worker hosts, empty for a --worker command.
void load_worker(SubjectSet& set, const std::string& command, const std::string& origin, bool cuda_usable,
                 double call_timeout_s) {
  worker::WorkerOptions wo;
  wo.call_timeout_s = call_timeout_s;
  wo.origin = origin;
  try {
    for (auto& s : worker::load_worker_subjects(command, wo)) {
      if (origin.empty())
        set.all.push_back(std::move(s));
      else
        add_plugin_subject(set, std::move(s), cuda_usable);
    }
  } catch (const worker::HandshakeError& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

SubjectSet load_subject_set(const Common& common) {
  SubjectSet set;
  Backend requested;
  try {
    requested = parse_backend(common.backend);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  try {
    set.backend = resolve_backend(requested).backend;
    set.all = load_builtin_subjects(requested, &set.backend_note);
    if (common.mutants) {
      // The subjects `attncheck mutants` ran, so that the reproduce command it records replays.
      std::vector<ac_subject> raw;
      kern::append_mutant_subjects(raw, set.backend == Backend::cuda);
      for (auto& s : adapt_subjects(raw, "builtin-mutant")) set.all.push_back(std::move(s));
    }
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
  set.first_plugin = set.all.size();
  const bool cuda_usable = set.backend == Backend::cuda || cuda_device_available();
  if (!(common.call_timeout_s > 0)) throw UsageError("--call-timeout must be positive");
  for (const auto& path : common.plugins) {
    if (!fs::exists(path)) throw UsageError("plugin " + path + ": no such file");
    if (common.isolate) {
      load_worker(set, worker::isolate_command(fs::absolute(path).string()), path, cuda_usable,
                  common.call_timeout_s);
      continue;
    }
    LoadedPlugin p;
    try {
      p = load_plugin(path);
    } catch (const PluginError& e) {
      throw UsageError(e.what());
    }
    for (auto& s : p.subjects) add_plugin_subject(set, std::move(s), cuda_usable);
  }
  for (const auto& command : common.worker_commands)
    load_worker(set, command, "", cuda_usable, common.call_timeout_s);
  const std::string dup = first_duplicate_name(set.all);
  if (!dup.empty())
    throw UsageError("subject name '" + dup + "' declared twice (built-in, plugin or worker)");
  return set;
}

std::vector<Subject*> pick_subjects(SubjectSet& set, const std::vector<std::string>& names,
                                    bool plugins_given, bool skip_unknown) {
  std::vector<Subject*> out;
  if (names.empty()) {
    // With plugins and no --subject, test the plugins' subjects: that is what the user brought.
    const size_t from = plugins_given ? set.first_plugin : 0;
    for (size_t i = from; i < set.all.size(); ++i) out.push_back(set.all[i].get());
    return out;
  }
  for (const auto& n : names) {
    // A subject named twice would run each of its pairs twice and count each twice.
    if (std::count(names.begin(), names.end(), n) > 1) throw UsageError("--subject: '" + n + "' named twice");
    Subject* found = nullptr;
    for (auto& s : set.all)
      if (s->name() == n) found = s.get();
    if (!found && skip_unknown) continue;
    if (!found) {
      std::string known;
      for (auto& s : set.all) known += (known.empty() ? "" : ", ") + s->name();
      throw UsageError("unknown subject '" + n + "' (known: " + known + ")");
    }
    out.push_back(found);
  }
  return out;
}

bool in_suite(const PropertyInfo& p, const std::string& suite) {
  if (suite == "full") return true;
  if (suite == "gate") return p.in_gate;
  return suite == "long" && p.in_gate && p.in_long && (p.ops & kLongSuiteOps);
}

std::vector<const PropertyInfo*> pick_properties(const std::vector<std::string>& names,
                                                 const std::string& suite) {
  std::vector<const PropertyInfo*> out;
  if (!names.empty()) {
    for (const auto& n : names) {
      if (std::count(names.begin(), names.end(), n) > 1)
        throw UsageError("--property: '" + n + "' named twice");
      const PropertyInfo* p = find_property(n);
      if (!p) {
        std::string known;
        for (const auto& q : all_properties()) known += (known.empty() ? "" : ", ") + q.name;
        throw UsageError("unknown property '" + n + "' (known: " + known + ")");
      }
      out.push_back(p);
    }
    return out;
  }
  if (suite != "gate" && suite != "full" && suite != "long")
    throw UsageError("unknown suite '" + suite + "' (gate, full or long)");
  for (const auto& p : all_properties())
    if (in_suite(p, suite)) out.push_back(&p);
  return out;
}

namespace {

// Temporaries of killed writers in dir, removed and named on stderr.
void remove_temporaries(const std::string& dir, bool quiet) {
  for (const auto& t : remove_stale_temporaries(dir))
    if (!quiet)
      std::fprintf(stderr, "removed %s/%s, left by an attncheck run that was killed\n", dir.c_str(),
                   t.c_str());
}

}  // namespace

void lock_dir(const std::string& dir, const std::string& what) {
  // One lock per directory and process: a second flock by this process on another descriptor
  // would wait on itself (--corpus-dir equal to --report-dir).
  static std::set<fs::path> held;
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(fs::path(dir), ec);
  if (!held.insert(ec ? fs::path(dir) : canonical).second) return;
  const std::string path = (fs::path(dir) / kLockFileName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    throw UsageError(what + " " + dir + ": cannot open " + kLockFileName + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {0};
    const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    std::string holder = n > 0 ? std::string(pid, size_t(n)) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    throw UsageError(what + " " + dir + " is in use by another attncheck run" +
                     (holder.empty() ? std::string() : " (pid " + one_line(holder) + ")") +
                     "; wait for it to end or choose another directory");
  }
  // The holder's pid, only for the message above: the lock is the flock, not the file's text.
  const std::string me = std::to_string(::getpid()) + "\n";
  const bool noted = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, me.data(), me.size(), 0) > 0;
  (void)noted;
  // fd stays open (close-on-exec, so no child holds it) until this process ends.
}

bool path_within(const std::string& path, const std::string& dir) {
  std::error_code ec1, ec2;
  const fs::path p = fs::weakly_canonical(path, ec1), d = fs::weakly_canonical(dir, ec2);
  if (ec1 || ec2) return false;
  const fs::path rel = p.lexically_relative(d);
  return !rel.empty() && *rel.begin() != "..";
}

void prepare_report_dir(const std::string& dir, bool quiet) {
  try {
    ensure_writable_dir(dir);
  } catch (const ReportError& e) {
    throw UsageError(e.what());
  }
  lock_dir(dir, "report directory");
  for (const char* name : {"report.json", "report.md", "report.html", "junit.xml", "manifest.json"}) {
    std::error_code ec;
    const fs::path p = fs::path(dir) / name;
    if (fs::exists(fs::symlink_status(p, ec)) && !fs::is_regular_file(p, ec))
      throw UsageError("report directory " + dir + ": " + name + " exists and is not a regular file");
  }
  remove_temporaries(dir, quiet);
  for (const auto& p : check_report_set(dir))
    if (!quiet)
      std::fprintf(stderr, "note: the previous report in %s was incomplete (%s); this run replaces it\n",
                   dir.c_str(), p.c_str());
}

void prepare_corpus_dir(const std::string& dir, bool quiet) {
  try {
    ensure_writable_dir(dir, "corpus directory");
  } catch (const ReportError& e) {
    throw UsageError(e.what());
  }
  lock_dir(dir, "corpus directory");
  remove_temporaries(dir, quiet);
  std::vector<UnreadableWriteAhead> unreadable;
  const auto kept = keep_write_ahead_cases(dir, "the case running when an earlier run died (crash or kill)",
                                           "", "", &unreadable);
  if (quiet) return;
  for (const auto& k : kept)
    std::fprintf(stderr, "an earlier run died while running %s: its case is kept as %s\n", k.subject.c_str(),
                 k.path.c_str());
  for (const auto& u : unreadable)
    std::fprintf(stderr, "note: %s is not a readable case (%s); left in place\n", u.name.c_str(),
                 u.why.c_str());
}

RunConfig run_config(const RunOptions& o) {
  RunConfig cfg;
  cfg.seed = o.seed;
  cfg.num_cases = o.cases;
  cfg.corpus_dir = o.corpus_dir;
  cfg.max_keys = o.max_keys;
  cfg.max_batch = o.max_batch;
  cfg.dtypes = o.dtypes;
  if (o.long_suite) {
    cfg.head_sizes = {128};
    cfg.layer_tokens = std::min(o.max_keys, kLongSuiteTokens);
  }
  cfg.shrink = !o.no_shrink;
  cfg.shrink_seconds = o.shrink_time;
  cfg.max_failures = o.max_failures;
  return cfg;
}

ReproduceContext reproduce_context(const Common& common, const Subject& s, const std::string& backend) {
  ReproduceContext ctx;
  ctx.program = common.invoked_as;
  ctx.backend = backend;
  if (const std::string worker = worker::worker_command_of(s); !worker.empty()) {
    for (const char* name : {"PYTHONPATH", "PYTHONHOME"})
      if (const char* value = std::getenv(name); value && *value)
        ctx.env += std::string(name) + "=" + worker::shell_word(value) + " ";
    ctx.source_flags = " --worker " + worker::shell_word(worker);
  } else {
    for (const auto& p : common.plugins) ctx.source_flags += " --plugin " + worker::shell_word(p);
    if (common.isolate) ctx.source_flags += " --isolate";
    // A replay that loaded the mutant kernels names them again, or its own command cannot find them.
    if (common.mutants) ctx.source_flags += " --mutants";
  }
  return ctx;
}

std::vector<TilingEntry> tiling_entries(const Subject& s, const std::vector<TilingRow>& rows) {
  std::map<std::string, TilingEntry> by_dtype;
  for (const auto& row : rows) {
    auto& t = by_dtype[row.stats.dtype];
    t.subject = s.name();
    t.backend = s.backend();
    t.dtype = row.stats.dtype;
    t.rows.push_back(row);
  }
  std::vector<TilingEntry> out;
  for (auto& [d, t] : by_dtype) out.push_back(std::move(t));
  return out;
}

std::string shape_set_of(const RunConfig& cfg) {
  std::string s = "max_size=" + std::to_string(cfg.max_size) + ",max_keys=" + std::to_string(cfg.max_keys);
  if (cfg.max_batch > 0) s += ",max_batch=" + std::to_string(cfg.max_batch);
  for (size_t i = 0; i < cfg.dtypes.size(); ++i)
    s += (i ? "+" : ",dtypes=") + std::string(dtype_name(cfg.dtypes[i]));
  for (size_t i = 0; i < cfg.head_sizes.size(); ++i)
    s += (i ? "+" : ",head_sizes=") + std::to_string(cfg.head_sizes[i]);
  if (cfg.layer_tokens > 0) s += ",layer_tokens=" + std::to_string(cfg.layer_tokens);
  return s;
}

int worst_exit(const Report& r) {
  const std::string v = r.verdict();
  if (v == "crashed") return kExitCrashed;
  if (v == "fail" || v == "partial") return kExitFailed;
  if (v == "interrupted") return kExitInterrupted;
  return kExitOk;
}

}  // namespace attncheck::cli
