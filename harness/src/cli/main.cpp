// attncheck: the command line. Runs the properties (properties/) over subjects (built-in kernels
// of kernels/ and users' plugins), judged against the exact reference (reference/), and writes a
// report directory (report.json, report.md, junit.xml, plots). Every input problem (unknown
// subject or property, missing or incompatible plugin, unreadable baseline, unwritable report
// directory) is found before any work is done and exits 2 with one line naming it.
//
// Exit codes: 0 all hold; 1 a property failed (or the baseline gate found a regression);
// 2 usage or input error; 3 a subject crashed or faulted the device (its case is in the corpus);
// 130 interrupted by Ctrl-C with nothing failed so far (the report holds what completed).
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attncheck/abi_subject.hpp"
#include "attncheck/atomic_file.hpp"
#include "attncheck/baseline.hpp"
#include "attncheck/case.hpp"
#include "attncheck/hash.hpp"
#include "attncheck/json_fields.hpp"
#include "attncheck/plugin.hpp"
#include "attncheck/properties.hpp"
#include "attncheck/reference/ask.hpp"
#include "attncheck/reference/format.hpp"
#include "attncheck/reference/precision.hpp"
#include "attncheck/report.hpp"
#include "bench.hpp"
#include "mutants.hpp"
#include "options.hpp"
#include "pair_pool.hpp"
#include "plot.hpp"
#include "process.hpp"
#include "serve.hpp"
#include "worker_subject.hpp"

#ifndef ATTNCHECK_GIT_DESCRIBE
#define ATTNCHECK_GIT_DESCRIBE ""
#endif

namespace ac = attncheck;
namespace fs = std::filesystem;

namespace {

using ac::cli::kExitCrashed, ac::cli::kExitFailed, ac::cli::kExitInterrupted, ac::cli::kExitOk,
    ac::cli::kExitUsage;

// An input problem: one line, exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Messages name paths and values from the user's files: shown with control characters escaped,
// so an error is always one line.
std::string one_line(const std::string& text) {
  return ac::json_fields::printable(text, ac::json_fields::kMaxMessageChars);
}

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) {
  g_interrupted.store(true);
  // A second Ctrl-C kills at once.
  ::signal(SIGINT, SIG_DFL);
}
// A child of check --jobs gets Ctrl-C twice: from the terminal (its process group) and forwarded
// by its parent. Both ask it to stop after its case; a second Ctrl-C kills the parent, and the
// kernel then kills the child (PR_SET_PDEATHSIG).
extern "C" void on_sigint_child(int) { g_interrupted.store(true); }

std::string ops_string(uint32_t ops) {
  std::string s;
  for (uint32_t bit : {AC_OP_MERGE, AC_OP_SOFTMAX, AC_OP_ATTENTION, AC_OP_SPLITKV})
    if (ops & bit) s += (s.empty() ? "" : ",") + std::string(ac::op_name(bit));
  return s;
}

std::string caps_string(const ac::Subject& s) {
  const ac_caps& c = s.caps();
  std::ostringstream o;
  o << ops_string(c.ops) << "; dtypes";
  for (ac_dtype d : {AC_DTYPE_F32, AC_DTYPE_F16, AC_DTYPE_BF16})
    if (s.has_dtype(d)) o << " " << ac::dtype_name(d);
  // Head sizes and LSE conventions mean nothing to a softmax-only subject.
  const bool has_lse =
      (c.ops & AC_OP_MERGE) || ((c.ops & (AC_OP_ATTENTION | AC_OP_SPLITKV)) && (c.features & AC_FEAT_LSE));
  if (c.ops != AC_OP_SOFTMAX) {
    o << "; d ";
    if (c.head_sizes) {
      for (int32_t i = 0; i < c.num_head_sizes; ++i) o << (i ? "," : "") << c.head_sizes[i];
    } else {
      o << c.head_size_min << ".." << c.head_size_max;
    }
  }
  if (has_lse)
    o << "; LSE base " << (c.lse_base == 2 ? "2" : "e") << " "
      << (c.lse_layout == AC_LSE_HEADS_TOKENS ? "[heads,tokens]" : "[tokens,heads]");
  if (c.ops != AC_OP_SOFTMAX)
    o << "; empty row LSE "
      << ((c.flags & AC_CAP_EMPTY_LSE_UNDEFINED) ? "undefined"
          : c.empty_lse_sign > 0                 ? "+inf"
                                                 : "-inf");
  if (c.flags & AC_CAP_REFUSES_ZERO_KEYS) o << "; refuses zero keys";
  if (c.flags & AC_CAP_FLUSHES_SUBNORMALS) o << "; flushes subnormals";
  if (c.flags & AC_CAP_NONDETERMINISTIC) o << "; nondeterministic by design";
  if (c.ops & (AC_OP_ATTENTION | AC_OP_SPLITKV)) {
    o << "; tilings";
    if (c.num_tilings <= 0) o << " none declared";
    for (int32_t i = 0; i < c.num_tilings; ++i) o << " " << c.tilings[i].br << "x" << c.tilings[i].bc;
    if (c.features & AC_FEAT_CAUSAL) o << "; causal";
    if (c.features & AC_FEAT_MASK) o << "; mask";
    if (c.features & AC_FEAT_VARLEN) o << "; varlen";
    if (c.features & AC_FEAT_GQA) o << "; gqa";
    if (c.features & AC_FEAT_NAIVE_EXP) o << "; naive-exp (declared hazard)";
    if (c.features & AC_FEAT_FLUSHED_EXP) o << "; flushed exp2 (weights below 2^-126 dropped)";
  }
  if (c.ops & AC_OP_SPLITKV) {
    o << "; splits 1.." << c.max_splits << " folds";
    if (c.fold_orders & AC_FOLD_BIT(AC_FOLD_LEFT)) o << " left";
    if (c.fold_orders & AC_FOLD_BIT(AC_FOLD_RIGHT)) o << " right";
    if (c.fold_orders & AC_FOLD_BIT(AC_FOLD_TREE)) o << " tree";
  }
  return o.str();
}

// Built-ins of the chosen backend plus every plugin's subjects, names unique.
struct SubjectSet {
  std::vector<std::unique_ptr<ac::Subject>> all;
  std::string backend_note;
  ac::Backend backend = ac::Backend::host;
  std::vector<std::string> notes;  // plugin subjects skipped, etc.
  size_t first_plugin = 0;         // all[first_plugin..] came from plugins
};

// Worker subjects (--worker, --isolate, --call-timeout), shared by every command that loads subjects.
struct WorkerFlags {
  std::vector<std::string> commands;
  bool isolate = false;
  double call_timeout_s = ac::worker::kDefaultCallTimeoutS;
};
WorkerFlags g_worker_flags;

// A CUDA subject of a C-ABI plugin needs a device that attncheck itself can stage tensors to, in
// process or under --isolate alike; without one it is skipped with a note, not run into a crash.
// A --worker command manages its own device, so its subjects are never skipped here.
void add_plugin_subject(SubjectSet& set, std::unique_ptr<ac::Subject> s, bool cuda_usable) {
  if (s->backend() == "cuda" && !cuda_usable) {
    set.notes.push_back("plugin subject " + s->name() +
                        " is a CUDA subject and no CUDA device is usable: skipped");
    return;
  }
  set.all.push_back(std::move(s));
}

// origin: the plugin path an --isolate worker hosts, empty for a --worker command.
void load_worker(SubjectSet& set, const std::string& command, const std::string& origin, bool cuda_usable) {
  ac::worker::WorkerOptions wo;
  wo.call_timeout_s = g_worker_flags.call_timeout_s;
  wo.origin = origin;
  try {
    for (auto& s : ac::worker::load_worker_subjects(command, wo)) {
      if (origin.empty())
        set.all.push_back(std::move(s));
      else
        add_plugin_subject(set, std::move(s), cuda_usable);
    }
  } catch (const ac::worker::HandshakeError& e) {
    throw UsageError(e.what());
  }
}

SubjectSet load_subject_set(const std::string& backend_name, const std::vector<std::string>& plugins) {
  SubjectSet set;
  ac::Backend requested;
  try {
    requested = ac::parse_backend(backend_name);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  try {
    set.backend = ac::resolve_backend(requested).backend;
    set.all = ac::load_builtin_subjects(requested, &set.backend_note);
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
  set.first_plugin = set.all.size();
  const bool cuda_usable = set.backend == ac::Backend::cuda || ac::cuda_device_available();
  if (!(g_worker_flags.call_timeout_s > 0)) throw UsageError("--call-timeout must be positive");
  for (const auto& path : plugins) {
    if (!fs::exists(path)) throw UsageError("plugin " + path + ": no such file");
    if (g_worker_flags.isolate) {
      load_worker(set, ac::worker::isolate_command(fs::absolute(path).string()), path, cuda_usable);
      continue;
    }
    ac::LoadedPlugin p;
    try {
      p = ac::load_plugin(path);
    } catch (const ac::PluginError& e) {
      throw UsageError(e.what());
    }
    for (auto& s : p.subjects) add_plugin_subject(set, std::move(s), cuda_usable);
  }
  for (const auto& command : g_worker_flags.commands) load_worker(set, command, "", cuda_usable);
  const std::string dup = ac::first_duplicate_name(set.all);
  if (!dup.empty())
    throw UsageError("subject name '" + dup + "' declared twice (built-in, plugin or worker)");
  return set;
}

// skip_unknown: names not in the set are left out (a child of check, which loads no worker).
std::vector<ac::Subject*> pick_subjects(SubjectSet& set, const std::vector<std::string>& names,
                                        bool plugins_given, bool skip_unknown = false) {
  std::vector<ac::Subject*> out;
  if (names.empty()) {
    // With plugins and no --subject, test the plugins' subjects: that is what the user brought.
    const size_t from = plugins_given ? set.first_plugin : 0;
    for (size_t i = from; i < set.all.size(); ++i) out.push_back(set.all[i].get());
    return out;
  }
  for (const auto& n : names) {
    ac::Subject* found = nullptr;
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

// --suite long: realistic attention rows. The gate's properties that take attention or split-KV
// subjects, on those subjects only, with keys up to kLongSuiteTokens, d = 128, fp16 and bf16, and
// one attention case in four the seed's layer (32 / 8 heads) over kLongSuiteTokens tokens, judged
// on sampled rows (RunConfig::layer_tokens).
constexpr int kLongSuiteTokens = 8192, kLongSuiteCases = 10;
constexpr uint32_t kLongSuiteOps = AC_OP_ATTENTION | AC_OP_SPLITKV;

// Whether a property belongs to a suite (gate, full or long): the one rule pick_properties and
// `list` share.
bool in_suite(const ac::PropertyInfo& p, const std::string& suite) {
  if (suite == "full") return true;
  if (suite == "gate") return p.in_gate;
  return suite == "long" && p.in_gate && p.in_long && (p.ops & kLongSuiteOps);
}

std::vector<const ac::PropertyInfo*> pick_properties(const std::vector<std::string>& names,
                                                     const std::string& suite) {
  std::vector<const ac::PropertyInfo*> out;
  if (!names.empty()) {
    for (const auto& n : names) {
      const ac::PropertyInfo* p = ac::find_property(n);
      if (!p) {
        std::string known;
        for (const auto& q : ac::all_properties()) known += (known.empty() ? "" : ", ") + q.name;
        throw UsageError("unknown property '" + n + "' (known: " + known + ")");
      }
      out.push_back(p);
    }
    return out;
  }
  if (suite != "gate" && suite != "full" && suite != "long")
    throw UsageError("unknown suite '" + suite + "' (gate, full or long)");
  for (const auto& p : ac::all_properties())
    if (in_suite(p, suite)) out.push_back(&p);
  return out;
}

// "I/N", shard index 0-based: 0/4 .. 3/4. Digits only: " 1/3" or "+1/3" is a typo, not shard 1.
std::pair<int, int> parse_shard(const std::string& s) {
  const auto slash = s.find('/');
  std::optional<uint64_t> i, n;
  if (slash != std::string::npos) {
    i = ac::json_fields::parse_decimal_u64(std::string_view(s).substr(0, slash));
    n = ac::json_fields::parse_decimal_u64(std::string_view(s).substr(slash + 1));
  }
  if (!i || !n || *n < 1 || *n > uint64_t(ac::cli::Limits::kMaxShards) || *i >= *n)
    throw UsageError("--shard " + s + ": expected I/N with 0 <= I < N <= " +
                     std::to_string(ac::cli::Limits::kMaxShards) + " (shards are numbered from 0)");
  return {int(*i), int(*n)};
}

// A report directory, made ready before any work: writable, no report file shadowed by a
// directory, temporaries of killed writers removed, and a set left mixed by a killed run named.
void prepare_report_dir(const std::string& dir, bool quiet) {
  try {
    ac::ensure_writable_dir(dir);
  } catch (const ac::ReportError& e) {
    throw UsageError(e.what());
  }
  for (const char* name : {"report.json", "report.md", "junit.xml", "manifest.json"}) {
    std::error_code ec;
    const fs::path p = fs::path(dir) / name;
    if (fs::exists(fs::symlink_status(p, ec)) && !fs::is_regular_file(p, ec))
      throw UsageError("report directory " + dir + ": " + name + " exists and is not a regular file");
  }
  for (const auto& t : ac::remove_stale_temporaries(dir))
    if (!quiet)
      std::fprintf(stderr, "removed %s/%s, left by an attncheck run that was killed\n", dir.c_str(),
                   t.c_str());
  for (const auto& p : ac::check_report_set(dir))
    if (!quiet)
      std::fprintf(stderr, "note: the previous report in %s was incomplete (%s); this run replaces it\n",
                   dir.c_str(), p.c_str());
}

// A corpus directory, made ready before any work. A write-ahead file ("inflight-*") is the case
// a subject was running when an earlier run died: it is kept as an ordinary corpus case (its name
// then says what it holds) and reported, never silently overwritten.
void prepare_corpus_dir(const std::string& dir, bool quiet) {
  try {
    ac::ensure_writable_dir(dir, "corpus directory");
  } catch (const ac::ReportError& e) {
    throw UsageError(e.what());
  }
  for (const auto& t : ac::remove_stale_temporaries(dir))
    if (!quiet)
      std::fprintf(stderr, "removed %s/%s, left by an attncheck run that was killed\n", dir.c_str(),
                   t.c_str());
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("inflight-", 0) != 0 || it->path().extension() != ".json") continue;
    try {
      ac::Case c = ac::read_case_file(it->path().string());
      c.note = "the case running when an earlier run died (crash or kill); " + c.note;
      const std::string kept = ac::write_case_atomic(dir, c);
      fs::remove(it->path(), ec);
      if (!quiet)
        std::fprintf(stderr, "an earlier run died while running %s: its case is kept as %s\n",
                     c.subject.c_str(), kept.c_str());
    } catch (const ac::CaseError& e) {
      // A write-ahead file is written atomically, so this is a foreign file: leave it alone.
      if (!quiet)
        std::fprintf(stderr, "note: %s is not a readable case (%s); left in place\n", name.c_str(), e.what());
    }
  }
}

// How this attncheck was started (argv[0], quoted for the shell): a path when it was given as one,
// so that a printed command runs the same binary when pasted in the same directory; "attncheck"
// when the shell found it on PATH.
std::string g_invoked_as = "attncheck";

// The reproduce command of a result or replay, as it must be pasted: `command` (attncheck replay
// FILE --subject NAME, or check) with what it needs besides the case. That is where the subject
// comes from (its worker, or this run's plugins, isolated or not) and the backend, and for a
// worker the environment it was started with that a fresh shell lacks: a worker inherits
// attncheck's environment, and a Python worker finds its modules, the SDK among them, through
// PYTHONPATH (PYTHONHOME where set). check and replay print the same.
std::string reproduce_line(const std::string& command, const ac::Subject& s,
                           const std::vector<std::string>& plugins, const std::string& backend) {
  std::string env, flags;
  const std::string program = "attncheck ";
  const std::string run =
      command.rfind(program, 0) == 0 ? g_invoked_as + " " + command.substr(program.size()) : command;
  if (const std::string worker = ac::worker::worker_command_of(s); !worker.empty()) {
    for (const char* name : {"PYTHONPATH", "PYTHONHOME"})
      if (const char* value = std::getenv(name); value && *value)
        env += std::string(name) + "=" + ac::worker::shell_word(value) + " ";
    flags = " --worker " + ac::worker::shell_word(worker);
  } else {
    for (const auto& p : plugins) flags += " --plugin " + ac::worker::shell_word(p);
    if (g_worker_flags.isolate) flags += " --isolate";
  }
  return env + run + flags + " --backend " + backend;
}

std::string shape_set_of(const ac::RunConfig& cfg) {
  std::string s = "max_size=" + std::to_string(cfg.max_size) + ",max_keys=" + std::to_string(cfg.max_keys);
  for (size_t i = 0; i < cfg.dtypes.size(); ++i)
    s += (i ? "+" : ",dtypes=") + std::string(ac::dtype_name(cfg.dtypes[i]));
  for (size_t i = 0; i < cfg.head_sizes.size(); ++i)
    s += (i ? "+" : ",head_sizes=") + std::to_string(cfg.head_sizes[i]);
  if (cfg.layer_tokens > 0) s += ",layer_tokens=" + std::to_string(cfg.layer_tokens);
  return s;
}

std::string joined_command(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}

// Progress: a rewritten line on a terminal; nothing between results otherwise (CI=true, pipes).
class Progress {
 public:
  Progress(bool quiet, int64_t total_cases) : total_(total_cases), start_(clock::now()) {
    const char* ci = std::getenv("CI");
    tty_ = !quiet && isatty(STDERR_FILENO) && !(ci && std::string(ci) == "true");
  }
  bool tty() const { return tty_; }
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

using ac::render_plots;  // plot.cpp

int worst_exit(const ac::Report& r) {
  const std::string v = r.verdict();
  if (v == "crashed") return kExitCrashed;
  if (v == "fail") return kExitFailed;
  if (v == "interrupted") return kExitInterrupted;
  return kExitOk;
}

// ---- check ----------------------------------------------------------------------------------
struct CheckOptions {
  std::vector<std::string> subjects, plugins, properties, dtypes;
  std::string backend = "auto", suite = "gate", report_dir = "attncheck-report", corpus_dir, baseline,
              shard = "0/1";
  uint64_t seed = 1;
  int cases = 100;
  int max_keys = 64;
  bool quiet = false, no_plots = false, tiling = false, no_shrink = false;
  double shrink_time = ac::RunConfig{}.shrink_seconds;  // seconds per failure
  int jobs = 0;                                         // 0: every core
  std::string devices = "all";
};

// --devices: "all" (every visible GPU on the cuda backend; no pinning on the host backend) or a
// list of device indices. On the host backend a list is accepted and only labels the children:
// that is how a run across several GPUs is exercised where there is none.
std::vector<std::string> parse_devices(const std::string& text, bool cuda) {
  std::vector<std::string> out;
  if (text == "all") {
    if (cuda)
      for (int i = 0; i < ac::cuda_device_count(); ++i) out.push_back(std::to_string(i));
    return out;
  }
  const int count = cuda ? ac::cuda_device_count() : 1024;
  for (const auto& d : ac::cli::split_csv({text})) {
    const auto v = ac::json_fields::parse_decimal_u64(d);
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

// The write-ahead case a dead child left for (subject, property), kept as a corpus case.
std::string keep_write_ahead_case(const std::string& corpus_dir, const std::string& subject,
                                  const std::string& property) {
  std::error_code ec;
  for (fs::directory_iterator it(corpus_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("inflight-", 0) != 0 || it->path().extension() != ".json") continue;
    try {
      ac::Case c = ac::read_case_file(it->path().string());
      if (c.subject != subject || c.property != property) continue;
      c.note = "the case running when the subject's process died; " + c.note;
      const std::string kept = ac::write_case_atomic(corpus_dir, c);
      fs::remove(it->path(), ec);
      return kept;
    } catch (const ac::CaseError&) {
    }
  }
  return "";
}

std::string describe_death(const ac::cli::ChildOutcome& o, double call_timeout) {
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
  const size_t room = ac::json_fields::kMaxMessageChars > lead.size() + 40
                          ? ac::json_fields::kMaxMessageChars - lead.size()
                          : 40;
  return lead + ac::json_fields::printable_tail(tail, room);
}

int run_check(const CheckOptions& o, const std::string& command, char** argv_) {
  // A child runs one pair of its parent's run. The subjects of --worker commands run in the parent,
  // which starts each such worker once for the whole run (a Python worker's start can take
  // seconds); a child starts none of them, and its plan is the parent's plan without their pairs.
  // Plugins, isolated or not, run in the children: attncheck-isolate starts in milliseconds.
  const auto child = ac::cli::child_pair_from_env();
  const bool plugins_given = !o.plugins.empty() || !g_worker_flags.commands.empty();
  if (child) g_worker_flags.commands.clear();
  // 1. Everything the run needs, validated before any work.
  SubjectSet set = load_subject_set(o.backend, o.plugins);
  // A child's built-in subjects make their calls in the parent's device server, when there is one.
  if (const char* sock = std::getenv(ac::worker::kDeviceServerEnv); child && sock && *sock)
    set.all = ac::worker::served_subjects(std::move(set.all), sock, g_worker_flags.call_timeout_s / 2,
                                          [](const ac::Subject& s) { return s.origin() == "builtin"; });
  const std::vector<ac::Subject*> subjects =
      pick_subjects(set, attncheck::cli::split_csv(o.subjects), plugins_given, /*skip_unknown=*/bool(child));
  const auto properties = pick_properties(attncheck::cli::split_csv(o.properties), o.suite);
  const auto [shard_index, shard_count] = parse_shard(o.shard);
  if (o.cases < 1) throw UsageError("--cases must be at least 1");
  std::vector<ac_dtype> dtypes;
  for (const auto& d : attncheck::cli::split_csv(o.dtypes)) {
    const auto t = ac::dtype_from(d);
    if (!t) throw UsageError("unknown dtype '" + d + "' (known: " + ac::dtype_names() + ")");
    if (std::find(dtypes.begin(), dtypes.end(), *t) == dtypes.end()) dtypes.push_back(*t);
  }
  ac::Report baseline;
  const bool has_baseline = !o.baseline.empty();
  if (has_baseline) {
    try {
      baseline = ac::read_report_file(o.baseline);
    } catch (const ac::ReportError& e) {
      throw UsageError(std::string("baseline: ") + e.what());
    }
  }
  std::vector<std::pair<ac::Subject*, const ac::PropertyInfo*>> plan;
  for (ac::Subject* s : subjects)
    for (const auto* p : properties)
      if (ac::property_applies(*p, *s) && (o.suite != "long" || (s->caps().ops & kLongSuiteOps)) &&
          (dtypes.empty() ||
           std::any_of(dtypes.begin(), dtypes.end(), [&](ac_dtype d) { return s->has_dtype(d); })))
        plan.emplace_back(s, p);
  if (plan.empty()) throw UsageError("none of the chosen properties applies to the chosen subjects");
  if (const char* m = std::getenv(ac::worker::kDeviceServerModeEnv);
      m && *m && std::string(m) != "on" && std::string(m) != "off")
    throw UsageError(std::string(ac::worker::kDeviceServerModeEnv) + "=" + m + ": expected on or off");
  const std::string corpus_dir = o.corpus_dir.empty() ? o.report_dir + "/corpus" : o.corpus_dir;
  // The parent prepared the directories for its children.
  if (!child) {
    prepare_report_dir(o.report_dir, o.quiet);
    prepare_corpus_dir(corpus_dir, o.quiet);
  }
  if (subjects.empty()) throw UsageError("no subject to check");

  // 2. Run.
  if (!o.quiet && !child) {
    std::fprintf(stderr, "%s\n", set.backend_note.c_str());
    for (const auto& n : set.notes) std::fprintf(stderr, "%s\n", n.c_str());
  }
  ::signal(SIGINT, child ? on_sigint_child : on_sigint);
  ac::Report report;
  report.git_describe = ATTNCHECK_GIT_DESCRIBE;
  report.timestamp = ac::utc_timestamp();
  report.command = command;
  report.backend = ac::backend_name(set.backend);
  report.device = set.backend == ac::Backend::cuda ? ac::cuda_device_name() : "host";
  report.seed = o.seed;
  report.num_cases = o.cases;
  report.shard_index = shard_index;
  report.shard_count = shard_count;
  report.suite = o.properties.empty() ? o.suite : "custom";
  report.histogram_edges = ac::ulp_histogram_edges();

  ac::RunConfig base_cfg;
  base_cfg.seed = o.seed;
  base_cfg.num_cases = o.cases;
  // Shards split the plan, not the cases: shard I of N runs the pairs whose (subject, property) hash
  // to I, each with exactly the cases of the single run (the stream of shard 0 of 1). So the merge
  // of the N shard reports is the single run's report, and a pair's shard does not move when other
  // subjects or properties come and go.
  base_cfg.corpus_dir = corpus_dir;
  base_cfg.max_keys = o.max_keys;
  base_cfg.dtypes = dtypes;
  if (o.suite == "long") {
    base_cfg.head_sizes = {128};
    base_cfg.layer_tokens = std::min(o.max_keys, kLongSuiteTokens);
  }
  base_cfg.shrink = !o.no_shrink;
  base_cfg.shrink_seconds = o.shrink_time;
  base_cfg.cancel = &g_interrupted;
  report.shape_set = shape_set_of(base_cfg);

  // Each pair's position in the unsharded plan, kept in its result: `report merge` orders the
  // shards' results by it, which is the single run's order.
  std::vector<int64_t> plan_position(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) plan_position[i] = int64_t(i);
  if (shard_count > 1) {
    size_t kept = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
      const auto& [subject, property] = plan[i];
      const uint64_t h = ac::hash::fnv1a64(property->name, ac::hash::fnv1a64(subject->name() + '\0'));
      if (int(h % uint64_t(shard_count)) != shard_index) continue;
      plan[kept] = plan[i];
      plan_position[kept] = plan_position[i];
      ++kept;
    }
    plan.resize(kept);
    plan_position.resize(kept);
    if (plan.empty() && !child) {
      ac::write_report_dir(o.report_dir, report);
      std::printf(
          "attncheck: shard %d/%d holds none of the %s (subject, property) pairs; empty report in %s/\n",
          shard_index, shard_count, "chosen", o.report_dir.c_str());
      return kExitOk;
    }
  }

  // One pair in this process: what a child runs, and the whole run of a single pair.
  auto run_pair = [&](size_t i, const std::function<void(int)>& on_case) {
    const auto& [subject, property] = plan[i];
    ac::RunConfig cfg = base_cfg;
    cfg.progress = [&](int done, int) { on_case(done); };
    // A plugin is foreign code that may kill the process on the host too: write each case
    // before calling it, as for CUDA subjects (the properties always do for those).
    cfg.write_ahead = subject->origin() != "builtin";
    const auto worker_hook = ac::worker::call_context_hook(*subject, shard_index);
    cfg.before_launch = worker_hook;
    // A worker subject enforces --call-timeout itself (and restarts its worker); an in-process
    // subject is timed here: the alarm is armed before each call and disarmed when its case is
    // judged, and SIGALRM's default action ends this child, which the parent reports as hung.
    if (child && !ac::worker::is_worker_subject(*subject)) {
      cfg.before_launch = [&, worker_hook](const ac::Case& c) {
        if (worker_hook) worker_hook(c);
        ::alarm(unsigned(std::ceil(g_worker_flags.call_timeout_s)));
      };
      cfg.progress = [&](int done, int) {
        ::alarm(0);
        on_case(done);
      };
    }
    const ac::PropertyResult r = ac::run_property(property->name, *subject, cfg);
    ac::ReportEntry e = ac::entry_from_result(r, *subject, shard_index);
    e.shards = {shard_index};
    if (g_interrupted.load() && e.status == "passed") e.status = "interrupted";
    return e;
  };
  if (child) {
    if (child->first >= plan.size()) throw UsageError("internal: child pair index out of range");
    ac::Report part = report;
    part.entries.push_back(run_pair(child->first, [](int) {}));
    ac::write_file_atomic(child->second, ac::report_to_json(part).dump(
                                             1, ' ', false, nlohmann::json::error_handler_t::replace));
    return kExitOk;
  }

  Progress progress(o.quiet, int64_t(plan.size()) * o.cases);
  std::vector<std::optional<ac::ReportEntry>> results(plan.size());
  int64_t done_pairs = 0;
  std::mutex finished_mutex;  // the worker pairs' thread and the child pool both finish pairs
  auto finished = [&](size_t i, ac::ReportEntry e) {
    const std::lock_guard<std::mutex> lock(finished_mutex);
    const auto& [subject, property] = plan[i];
    ++done_pairs;
    e.plan_index = plan_position[i];
    // The reproduce command must work when pasted (every entry, from a child or not, passes here once).
    if (!e.reproduce_command.empty())
      e.reproduce_command = reproduce_line(e.reproduce_command, *subject, o.plugins, report.backend);
    progress.clear();
    if (!o.quiet)
      std::fprintf(stderr, "[%lld/%zu] %s / %s: %s (%lld cases, %.2f s)%s%s\n", (long long)done_pairs,
                   plan.size(), subject->name().c_str(), property->name.c_str(), e.status.c_str(),
                   (long long)e.cases_run, e.seconds, e.status == "passed" ? "" : "  ",
                   e.status == "passed" ? "" : e.message.c_str());
    progress.update(done_pairs * o.cases, 0, "");
    results[i] = std::move(e);
  };
  const std::string scratch = o.report_dir + "/.tmp-pairs-" + std::to_string(::getpid()) + "-0";
  std::error_code scratch_ec;
  fs::create_directories(scratch, scratch_ec);
  if (scratch_ec) throw UsageError("cannot create " + scratch + ": " + scratch_ec.message());
  ac::cli::PoolOptions pool;
  pool.devices = parse_devices(o.devices, set.backend == ac::Backend::cuda);
  pool.jobs = o.jobs > 0 ? o.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  pool.scratch_dir = scratch;
  pool.cancel = &g_interrupted;
  const auto t_start = std::chrono::steady_clock::now();
  std::map<std::string, std::pair<int, double>> device_use;  // device -> (pairs, busy seconds)
  // Pairs of --worker subjects run here, one after another on one thread (RapidCheck's state is
  // per process, and this is the only thread of this process that uses it), each worker started
  // once for the run and isolated by its own process; the other pairs run in children meanwhile.
  std::vector<size_t> in_children, here;
  for (size_t i = 0; i < plan.size(); ++i)
    (ac::worker::worker_command_of(*plan[i].first).empty() ? in_children : here).push_back(i);
  // The children's plan is in_children; they start costliest first (stable, so in plan order among
  // equals): a long pair started last would hold the run's end alone. Results are reported in plan
  // order whatever the start order.
  std::vector<size_t> start_order(in_children.size());
  for (size_t k = 0; k < start_order.size(); ++k) start_order[k] = k;
  std::stable_sort(start_order.begin(), start_order.end(), [&](size_t a, size_t b) {
    return plan[in_children[a]].second->relative_cost > plan[in_children[b]].second->relative_cost;
  });
  // One device server per device for the children's built-in subjects (serve.hpp): on the cuda
  // backend unless ATTNCHECK_DEVICE_SERVER=off, and on the host backend too with =on. A server
  // that does not start leaves its children to make their calls themselves.
  std::vector<std::pair<std::string, std::unique_ptr<ac::worker::WorkerProcess>>> servers;  // by device
  {
    const char* mode_env = std::getenv(ac::worker::kDeviceServerModeEnv);
    const std::string mode = mode_env ? mode_env : "";
    const bool builtin_pairs = std::any_of(in_children.begin(), in_children.end(),
                                           [&](size_t i) { return plan[i].first->origin() == "builtin"; });
    const bool serve = builtin_pairs && pool.jobs > 1 && in_children.size() > 1 && mode != "off" &&
                       (set.backend == ac::Backend::cuda || mode == "on");
    std::vector<std::string> devices = pool.devices;
    if (devices.empty()) devices.push_back("");
    for (size_t k = 0; serve && k < devices.size(); ++k) {
      const std::string sock = (fs::temp_directory_path() / ("attncheck-" + std::to_string(::getpid()) + "-" +
                                                             std::to_string(k) + ".sock"))
                                   .string();
      // Its stderr goes to a file in the scratch directory: nobody reads a pipe from it during the
      // run, and a full pipe would block the server.
      auto server = std::make_unique<ac::worker::WorkerProcess>(ac::worker::device_server_command(
          sock, ac::backend_name(set.backend), devices[k], g_worker_flags.call_timeout_s / 2,
          scratch + "/device-server-" + std::to_string(k) + ".log"));
      std::string why = "its handshake was refused";
      try {
        if (server->call({{"op", "hello"}}, ac::worker::kMinHandshakeTimeoutS).value("status", "") == "ok") {
          pool.device_servers[devices[k]] = sock;
          servers.emplace_back(devices[k], std::move(server));
          continue;
        }
      } catch (const ac::worker::TransportError& e) {
        why = e.what();
      }
      if (!o.quiet)
        std::fprintf(stderr,
                     "note: no device server for device '%s' (%s); its children make their own calls\n",
                     devices[k].c_str(), one_line(why).c_str());
    }
  }
  std::thread worker_pairs([&] {
    for (size_t i : here) {
      if (g_interrupted.load()) break;
      finished(i, run_pair(i, [](int) {}));
    }
  });
  ac::cli::run_pairs_in_children(argv_, start_order, pool, [&](const ac::cli::ChildOutcome& child_out) {
    ac::cli::ChildOutcome out = child_out;
    out.pair = in_children[child_out.pair];
    const auto& [subject, property] = plan[out.pair];
    auto& use = device_use[out.device.empty() ? "inherited" : out.device];
    ++use.first;
    use.second += out.seconds;
    std::string mismatch;
    if (out.result_written) {
      try {
        const ac::Report part = ac::read_report_file(out.result_path);
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
      } catch (const ac::ReportError&) {
      }
    }
    // The child died before reporting (or reported another pair): its pair crashed; the case it
    // was running is in the corpus.
    ac::ReportEntry e;
    e.subject = subject->name();
    e.backend = subject->backend();
    e.origin = subject->origin();
    e.property = property->name;
    e.status = "crashed";
    e.message = mismatch.empty() ? describe_death(out, g_worker_flags.call_timeout_s) : mismatch;
    e.failure_class = !mismatch.empty() ? "internal" : out.signal == SIGALRM ? "hung" : "process_died";
    e.shards = {shard_index};
    e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    const std::string kept = keep_write_ahead_case(corpus_dir, subject->name(), property->name);
    if (!kept.empty()) {
      e.corpus_files.push_back(kept);
      e.reproduce_command = "attncheck replay " + kept + " --subject " + subject->name();
    }
    finished(out.pair, std::move(e));
  });
  worker_pairs.join();
  // Each server's count of the calls it made (its reply to shutdown), for report.json.
  nlohmann::json served = nlohmann::json::array();
  for (auto& [device, server] : servers) {
    const nlohmann::json bye = server->shutdown();
    served.push_back({{"device", device.empty() ? "inherited" : device},
                      {"calls", bye.is_object() ? bye.value("served_calls", int64_t(-1)) : int64_t(-1)}});
  }
  for (const auto& [device, sock] : pool.device_servers) fs::remove(sock, scratch_ec);
  fs::remove_all(scratch, scratch_ec);
  report.parallel = {
      {"jobs", pool.jobs},
      {"wall_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count()},
      {"devices", nlohmann::json::array()},
      {"device_servers", served}};
  for (const auto& [dev, use] : device_use)
    report.parallel["devices"].push_back(
        {{"device", dev}, {"pairs", use.first}, {"busy_seconds", use.second}});
  for (size_t i = 0; i < plan.size(); ++i)
    if (results[i]) report.entries.push_back(std::move(*results[i]));
  report.interrupted = g_interrupted.load();

  // Tiling rows (full suite or --tiling): every tiling, split count and fold order.
  if ((o.tiling || o.suite == "full") && !report.interrupted) {
    for (ac::Subject* s : subjects) {
      if (!(s->has_op(AC_OP_ATTENTION) || s->has_op(AC_OP_SPLITKV))) continue;
      ac::RunConfig cfg = base_cfg;
      std::map<std::string, ac::TilingEntry> by_dtype;
      for (auto& row : ac::tiling_report(*s, cfg)) {
        auto& t = by_dtype[row.stats.dtype];
        t.subject = s->name();
        t.backend = s->backend();
        t.dtype = row.stats.dtype;
        t.rows.push_back(row);
      }
      for (auto& [d, t] : by_dtype) report.tilings.push_back(std::move(t));
    }
  }

  // 3. Gate and report.
  if (has_baseline) {
    ac::BaselineComparison c = ac::compare_to_baseline(report, baseline);
    c.path = o.baseline;
    report.baseline = c.to_json();
    if (!o.quiet || !c.ok()) {
      for (const auto& g : c.regressions) std::fprintf(stderr, "REGRESSION %s\n", g.c_str());
      if (!o.quiet)
        for (const auto& s : c.skipped) std::fprintf(stderr, "baseline skipped: %s\n", s.c_str());
    }
  }
  ac::write_report_dir(o.report_dir, report);
  if (!o.no_plots) render_plots(o.report_dir, o.quiet);
  int passed = 0;
  for (const auto& e : report.entries) passed += e.status == "passed";
  std::printf(
      "attncheck: %s: %d of %zu subject x property results passed%s; report in %s/ (report.md, junit.xml, "
      "report.json)\n",
      report.verdict().c_str(), passed, report.entries.size(), report.interrupted ? " (interrupted)" : "",
      o.report_dir.c_str());
  return worst_exit(report);
}

// ---- replay ---------------------------------------------------------------------------------
int run_replay(const std::vector<std::string>& inputs, const std::string& subject_name,
               const std::string& backend, const std::vector<std::string>& plugins) {
  // Named files must parse (exit 2 otherwise); files met inside a directory are skipped with a note.
  struct Item {
    std::string path;
    ac::Case c;
  };
  std::vector<Item> items;
  std::vector<std::string> skipped;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      // Every directory is listed before any case runs: an unreadable one is an input error.
      std::vector<std::string> files;
      fs::recursive_directory_iterator it(in, ec), end;
      for (; !ec && it != end; it.increment(ec))
        if (it->is_regular_file(ec) && it->path().extension() == ".json" &&
            it->path().filename().string().rfind(".tmp-", 0) != 0)
          files.push_back(it->path().string());
      if (ec) throw UsageError("replay: cannot list " + in + ": " + ec.message());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        try {
          items.push_back({f, ac::read_case_file(f)});
        } catch (const ac::CaseError& e) {
          skipped.push_back(e.what());
        }
      }
    } else {
      if (!fs::exists(in, ec)) throw UsageError("replay: " + in + ": no such file or directory");
      try {
        items.push_back({in, ac::read_case_file(in)});
      } catch (const ac::CaseError& e) {
        throw UsageError(e.what());
      }
    }
  }
  // Nothing to replay is an input error, never a pass.
  if (items.empty())
    throw UsageError(
        "replay: no readable case file in " + inputs.front() + (inputs.size() > 1 ? " ..." : "") +
        (skipped.empty()
             ? ""
             : " (" + std::to_string(skipped.size()) + " malformed, first: " + skipped.front() + ")"));
  SubjectSet set = load_subject_set(backend, plugins);
  auto find = [&](const std::string& n) -> ac::Subject* {
    for (auto& s : set.all)
      if (s->name() == n) return s.get();
    return nullptr;
  };
  if (!subject_name.empty() && !find(subject_name))
    throw UsageError("unknown subject '" + subject_name + "'");
  for (const auto& it : items) {
    const std::string n = subject_name.empty() ? it.c.subject : subject_name;
    if (!find(n))
      throw UsageError(it.path + ": names subject '" + n + "', which is not loaded (use --subject)");
  }
  for (const auto& s : skipped) std::printf("skipped (malformed): %s\n", s.c_str());
  int failed = 0, crashed = 0;
  for (const auto& it : items) {
    ac::Subject* s = find(subject_name.empty() ? it.c.subject : subject_name);
    ac::ReplayResult r;
    ac::worker::set_call_context(*s, it.c.property, it.path);
    try {
      r = ac::replay_case(it.c, *s, it.path);
    } catch (const ac::SubjectError& e) {
      std::printf("%s: %s: CRASHED %s\n", it.path.c_str(), s->name().c_str(), e.what());
      ++crashed;
      continue;
    }
    std::printf("%s: %s: %s\n", it.path.c_str(), s->name().c_str(), r.verdict.c_str());
    if (r.crashed) ++crashed;
    if (!r.passed && r.applicable) {
      if (!r.crashed) ++failed;
      for (const auto& w : r.worst_elements)
        std::printf("  %s  inputs %s  exact %s  rounded %s  output %s  ulp %.3g (cancellation-aware %.3g)\n",
                    w.where.c_str(), w.input_bits.c_str(), w.exact.c_str(), w.rounded_exact.c_str(),
                    w.output_bits.c_str(), w.ulp, w.cancel_ulp);
      if (it.c.seed)
        std::printf("  seed %llu%s%s\n", (unsigned long long)it.c.seed,
                    it.c.rc_reproduce.empty() ? "" : "  rapidcheck reproduce ", it.c.rc_reproduce.c_str());
    }
    if (!r.reproduce_command.empty() && !r.passed)
      std::printf("  reproduce: %s\n",
                  reproduce_line(r.reproduce_command, *s, plugins, ac::backend_name(set.backend)).c_str());
  }
  if (crashed) return kExitCrashed;
  return failed ? kExitFailed : kExitOk;
}

// ---- prefill --------------------------------------------------------------------------------
int run_prefill_cmd(const std::string& scenario, std::string attention, const std::string& merge, int chunk,
                    const std::string& backend, const std::vector<std::string>& plugins) {
  std::string text;
  nlohmann::json j;
  try {
    text = ac::json_fields::read_text_file<ac::PrefillScenarioError>(scenario, size_t(16) << 20, "scenario");
    j = ac::json_fields::parse_strict<ac::PrefillScenarioError>(text, "scenario " + scenario);
    if (chunk > 0) {
      j["chunk_size"] = chunk;
      text = j.dump();
    }
  } catch (const ac::PrefillScenarioError& e) {
    throw UsageError(e.what());
  }
  SubjectSet set = load_subject_set(backend, plugins);
  auto find = [&](const std::string& n) -> ac::Subject& {
    for (auto& s : set.all)
      if (s->name() == n) return *s;
    throw UsageError("unknown subject '" + n + "'");
  };
  // The attention subject must take the scenario's head size and dtype: when none is named, the
  // first that can is used; a named one that cannot is refused with the list of those that can.
  const int head_size = j.is_object() && j.contains("head_size") && j["head_size"].is_number_integer()
                            ? j["head_size"].get<int>()
                            : 0;
  const auto dtype = ac::dtype_from(j.is_object() && j.contains("dtype") && j["dtype"].is_string()
                                        ? j["dtype"].get<std::string>()
                                        : "fp16");
  auto can_run = [&](const ac::Subject& s) {
    return s.has_op(AC_OP_ATTENTION) && (s.caps().features & AC_FEAT_LSE) &&
           s.supports_head_size(head_size) && dtype && s.has_dtype(*dtype);
  };
  std::string able;
  for (auto& s : set.all)
    if (can_run(*s)) able += (able.empty() ? "" : ", ") + s->name();
  if (attention.empty()) {
    for (auto& s : set.all)
      if (can_run(*s) && (attention.empty() || s->name() == "fused")) attention = s->name();
    if (attention.empty())
      throw UsageError("scenario " + scenario + ": no loaded attention subject with an LSE takes head size " +
                       std::to_string(head_size) + " (name one with --attention)");
  }
  ac::Subject& a = find(attention);
  if (head_size > 0 && !can_run(a))
    throw UsageError(
        "scenario " + scenario + ": attention subject '" + attention + "' cannot take head size " +
        std::to_string(head_size) + " with an LSE" +
        (able.empty() ? std::string(" (no loaded subject can)") : " (subjects that can: " + able + ")"));
  ac::Subject& m = find(merge);
  ac::PrefillReport r;
  try {
    r = ac::run_prefill_text(text, a, m);
  } catch (const ac::PrefillScenarioError& e) {
    throw UsageError("scenario " + scenario + ": " + e.what());
  }
  std::printf("attention subject %s, merge subject %s\n%s\n", attention.c_str(), merge.c_str(),
              r.summary.c_str());
  for (const auto& f : r.findings)
    std::printf("  %s at request %d, chunk %d, token %d, head %d, stage %s%s%s\n", f.value.c_str(), f.request,
                f.chunk, f.token, f.head, f.stage.c_str(), f.detail.empty() ? "" : ": ", f.detail.c_str());
  return r.ok ? kExitOk : kExitFailed;
}

// ---- tiling ---------------------------------------------------------------------------------
int run_tiling(const std::string& name, const std::string& backend, const std::vector<std::string>& plugins,
               uint64_t seed, int cases, const std::string& report_dir, bool no_plots) {
  SubjectSet set = load_subject_set(backend, plugins);
  ac::Subject* s = pick_subjects(set, {name}, false).front();
  if (!(s->has_op(AC_OP_ATTENTION) || s->has_op(AC_OP_SPLITKV)))
    throw UsageError("subject '" + name +
                     "' has no attention: tiling needs a fused-attention or split-KV subject");
  if (!report_dir.empty()) prepare_report_dir(report_dir, false);
  ac::RunConfig cfg;
  cfg.seed = seed;
  cfg.num_cases = cases;
  const auto rows = ac::tiling_report(*s, cfg);
  if (s->caps().num_tilings <= 0)
    std::printf("%s declares no tilings: one row per split configuration, Br and Bc shown as -\n",
                name.c_str());
  std::printf("%-6s %-6s %-7s %-6s %-5s %-4s %10s %10s %10s %10s\n", "Br", "Bc", "splits", "fold", "dtype",
              "out", "max ulp", "p99 ulp", "mean ulp", "nonfinite");
  for (const auto& r : rows)
    std::printf("%-6s %-6s %-7d %-6s %-5s %-4s %10.3g %10.3g %10.3g %10lld\n",
                r.br > 0 ? std::to_string(r.br).c_str() : "-", r.bc > 0 ? std::to_string(r.bc).c_str() : "-",
                r.num_splits, r.fold.empty() ? "-" : r.fold.c_str(), r.stats.dtype.c_str(),
                r.stats.output.c_str(), r.stats.max_ulp, r.stats.p99_ulp, r.stats.mean_ulp,
                (long long)r.stats.nonfinite);
  if (!report_dir.empty()) {
    ac::Report rep;
    rep.timestamp = ac::utc_timestamp();
    rep.command = "attncheck tiling --subject " + name;
    rep.git_describe = ATTNCHECK_GIT_DESCRIBE;
    rep.backend = ac::backend_name(set.backend);
    rep.device = set.backend == ac::Backend::cuda ? ac::cuda_device_name() : "host";
    rep.seed = seed;
    rep.num_cases = cases;
    rep.suite = "tiling";
    rep.shape_set = shape_set_of(cfg);
    rep.histogram_edges = ac::ulp_histogram_edges();
    std::map<std::string, ac::TilingEntry> by_dtype;
    for (const auto& r : rows) {
      auto& t = by_dtype[r.stats.dtype];
      t.subject = s->name();
      t.backend = s->backend();
      t.dtype = r.stats.dtype;
      t.rows.push_back(r);
    }
    for (auto& [d, t] : by_dtype) rep.tilings.push_back(std::move(t));
    ac::write_report_dir(report_dir, rep);
    if (!no_plots) render_plots(report_dir, false);
    std::printf("report in %s/\n", report_dir.c_str());
  }
  return kExitOk;
}

// ---- list -----------------------------------------------------------------------------------
int run_list(const std::string& backend, const std::vector<std::string>& plugins) {
  SubjectSet set = load_subject_set(backend, plugins);
  std::printf("%s\n", set.backend_note.c_str());
  for (const auto& n : set.notes) std::printf("%s\n", n.c_str());
  std::printf("\nsubjects:\n");
  for (const auto& s : set.all) {
    std::printf("  %-22s %-4s %-8s %s\n", s->name().c_str(), s->backend().c_str(),
                s->origin() == "builtin"                     ? "builtin"
                : !ac::worker::worker_command_of(*s).empty() ? "worker"
                                                             : "plugin",
                s->description().c_str());
    std::printf("  %-22s %s\n", "", caps_string(*s).c_str());
    if (s->origin() != "builtin") std::printf("  %-22s from %s\n", "", s->origin().c_str());
  }
  std::printf(
      "\nproperties (gate = in the default suite, long = also in --suite long, full = in full only):\n");
  for (const auto& p : ac::all_properties()) {
    const std::string suites = in_suite(p, "long") ? "gate,long" : in_suite(p, "gate") ? "gate" : "full";
    std::printf("  %-24s %-9s %-9s %s  [%s]\n", p.name.c_str(), suites.c_str(), ops_string(p.ops).c_str(),
                p.description.c_str(), p.seed_section.c_str());
  }
  return kExitOk;
}

// ---- report merge ---------------------------------------------------------------------------
int run_report_merge(const std::vector<std::string>& dirs, const std::string& out, bool no_plots) {
  std::vector<ac::Report> parts;
  for (const auto& d : dirs) {
    const std::string path = fs::is_directory(d) ? d + "/report.json" : d;
    try {
      parts.push_back(ac::read_report_file(path));
    } catch (const ac::ReportError& e) {
      throw UsageError(e.what());
    }
  }
  prepare_report_dir(out, false);
  ac::Report merged;
  try {
    merged = ac::merge_reports(parts);
  } catch (const ac::ReportError& e) {
    throw UsageError(e.what());
  }
  ac::write_report_dir(out, merged);
  if (!no_plots) render_plots(out, false);
  std::printf("attncheck: %s: %zu shard reports merged (shards", merged.verdict().c_str(), parts.size());
  for (int s : merged.shards_merged) std::printf(" %d", s);
  std::printf(" of %d); report in %s/\n", merged.shard_count, out.c_str());
  if (int(merged.shards_merged.size()) != merged.shard_count)
    std::printf("note: %d of %d shards present\n", int(merged.shards_merged.size()), merged.shard_count);
  return worst_exit(merged);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 0 && std::strchr(argv[0], '/') != nullptr) g_invoked_as = ac::worker::shell_word(argv[0]);
  // The device server of a `check --jobs N` run (serve.hpp), started by its parent.
  if (argc == 5 && std::string(argv[1]) == "--device-server") {
    std::FILE* proto = ac::worker::private_stdout();
    if (!proto) return 2;
    std::vector<std::unique_ptr<ac::Subject>> builtins;
    std::string error;
    try {
      std::string note;
      builtins = ac::load_builtin_subjects(ac::parse_backend(argv[3]), &note);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const int rc = ac::worker::run_device_server(argv[2], builtins, error,
                                                 std::string("attncheck --device-server ") + argv[3],
                                                 std::atof(argv[4]), proto);
    std::fflush(nullptr);
    std::_Exit(rc);  // a connection may be inside a call: no static destructor under it
  }
  CLI::App app{"attncheck: checks attention kernels against exact (arbitrary-precision) answers"};
  app.require_subcommand(1);
  const std::string git_describe = ATTNCHECK_GIT_DESCRIBE;
  app.set_version_flag("--version", std::string("attncheck ") + ac::kToolVersion +
                                        (git_describe.empty() ? "" : " (" + git_describe + ")"));
  const std::string command = joined_command(argc, argv);

  std::string backend = "auto";
  std::vector<std::string> plugins;
  auto add_common = [&](CLI::App* sub) {
    sub->add_option("--backend", backend, "auto (GPU if present, else host twins) | cuda | host");
    sub->add_option("--plugin", plugins, "shared library exporting the attncheck plugin ABI (repeatable)");
    sub->add_option("--worker", g_worker_flags.commands,
                    "\"CMD ARGS\": a worker process serving subjects (WORKER_PROTOCOL.md; repeatable)")
        ->allow_extra_args(false);
    sub->add_flag("--isolate", g_worker_flags.isolate,
                  "host each --plugin in a worker process (a crash is exit 3, not a dead harness)");
    sub->add_option("--call-timeout", g_worker_flags.call_timeout_s,
                    "seconds a worker may take per call before it is killed and restarted (default 60)");
  };

  auto* list = app.add_subcommand("list", "subjects (built-in and plugin) with capabilities; properties");
  add_common(list);

  CheckOptions co;
  auto* check = app.add_subcommand("check", "run properties over subjects and write a report directory");
  add_common(check);
  check
      ->add_option(
          "--subject", co.subjects,
          "subject names (repeatable or comma-separated; default: all, or the plugins' when --plugin)")
      ->check(ac::cli::names_something());
  check
      ->add_option("--property", co.properties,
                   "property names (repeatable or comma-separated; overrides --suite)")
      ->check(ac::cli::names_something());
  check->add_option(
      "--suite", co.suite,
      "gate (default, fast) | full | long (attention subjects: keys to 8192, d 128, fp16/bf16, the "
      "seed's layer on sampled rows; 10 cases)");
  check->add_option("--seed", co.seed, "seed of the case stream (default 1)")->check(ac::cli::decimal_u64());
  check->add_option("--cases", co.cases, "cases per (subject, property) (default 100)")
      ->check(CLI::Range(1, ac::cli::Limits::kMaxCases));
  check->add_option("--max-keys", co.max_keys, "longest key row generated (default 64)")
      ->check(CLI::Range(1, ac::cli::Limits::kMaxKeys));
  check
      ->add_option("--dtype", co.dtypes,
                   "only these dtypes (fp32, fp16, bf16; repeatable or comma-separated; default: every "
                   "dtype a subject has)")
      ->check(ac::cli::names_something());
  check->add_option("--report-dir", co.report_dir, "report directory (default attncheck-report)")
      ->check(ac::cli::non_empty());
  check
      ->add_option("--corpus-dir", co.corpus_dir,
                   "where shrunk failures are written (default REPORT_DIR/corpus)")
      ->check(ac::cli::non_empty());
  check->add_option("--baseline", co.baseline, "baseline report.json: fail on regressions against it");
  check->add_option("--shard", co.shard, "I/N: run shard I (0-based) of N disjoint case streams");
  check->add_flag("--no-shrink", co.no_shrink, "keep each failure's first failing case, unshrunk");
  check
      ->add_option(
          "--shrink-time", co.shrink_time,
          "seconds each failure may spend shrinking (default 20); then the smallest case so far is kept")
      ->check(CLI::Range(0.0, double(attncheck::cli::Limits::kMaxShrinkSeconds)));
  check->add_flag("--tiling", co.tiling,
                  "also run every tiling / split count of attention subjects (always with --suite full)");
  check
      ->add_option("--jobs", co.jobs,
                   "(subject, property) pairs run at once, each in its own process (default: every core)")
      ->check(CLI::Range(1, 1024));
  check->add_option(
      "--devices", co.devices,
      "all (default: every visible GPU) or device indices 0,1,...: children run round-robin on them");
  check->add_flag("--quiet", co.quiet, "print only the final line and regressions");
  check->add_flag("--no-plots", co.no_plots, "do not render plots");

  std::vector<std::string> replay_files;
  std::string replay_subject;
  auto* replay = app.add_subcommand("replay", "re-run saved cases (files or directories) against a subject");
  add_common(replay);
  replay->add_option("files", replay_files, "case files or directories")->required();
  replay->add_option("--subject", replay_subject, "subject to replay against (default: the case's own)")
      ->check(ac::cli::non_empty());

  std::string scenario, prefill_attention, prefill_merge = "merge";
  int chunk = 0;
  auto* prefill = app.add_subcommand(
      "prefill", "replay a chunked-prefill scenario through prefix/suffix attention and merge");
  add_common(prefill);
  prefill->add_option("--scenario", scenario, "scenario JSON (corpus/prefill/*.json)")->required();
  prefill
      ->add_option("--attention", prefill_attention,
                   "attention subject (default: fused, or the first that takes the scenario)")
      ->check(ac::cli::non_empty());
  prefill->add_option("--merge", prefill_merge, "merge subject (default merge)");
  prefill->add_option("--chunk", chunk, "chunk size (overrides the scenario's)")
      ->check(CLI::Range(1, ac::cli::Limits::kMaxChunk));

  std::string tiling_subject, tiling_dir;
  uint64_t tiling_seed = 1;
  int tiling_cases = 20;
  bool tiling_no_plots = false;
  auto* tiling = app.add_subcommand(
      "tiling", "ulp error of one attention subject per tiling, split count and fold order");
  add_common(tiling);
  tiling->add_option("--subject", tiling_subject, "fused-attention or split-KV subject")
      ->required()
      ->check(ac::cli::non_empty());
  tiling->add_option("--seed", tiling_seed, "seed (default 1)")->check(ac::cli::decimal_u64());
  tiling->add_option("--cases", tiling_cases, "inputs per tiling (default 20)")
      ->check(CLI::Range(1, ac::cli::Limits::kMaxTilingCases));
  tiling->add_option("--report-dir", tiling_dir, "also write a report directory with heatmaps")
      ->check(ac::cli::non_empty());
  tiling->add_flag("--no-plots", tiling_no_plots, "do not render plots");

  std::string round_to, round_value;
  auto* round =
      app.add_subcommand("round", "correctly rounded value of VALUE (decimal or hexfloat) in a format");
  round->add_option("--to", round_to, "fp16 | bf16 | fp32")->required();
  round->add_option("value", round_value, "decimal or hexfloat")->required();

  std::string exact_what, exact_logits;
  int exact_base = 0;
  auto* exact =
      app.add_subcommand("exact", "exact lse or softmax of logits, with their rounded fp16/bf16/fp32 values");
  exact->add_option("what", exact_what, "lse | softmax")
      ->required()
      ->check(CLI::IsMember({"lse", "softmax"}));
  exact->add_option("--logits", exact_logits, "x1,x2,...")->required();
  exact->add_option("--base", exact_base, "LSE base: e (default) or 2")->check(CLI::IsMember({0, 2}));

  auto* report = app.add_subcommand("report", "report directories");
  report->require_subcommand(1);
  std::vector<std::string> merge_dirs;
  std::string merge_out;
  bool merge_no_plots = false;
  auto* rmerge = report->add_subcommand("merge", "combine shard report directories into one");
  rmerge->add_option("dirs", merge_dirs, "shard report directories")->required();
  rmerge->add_option("--out", merge_out, "output directory")->required()->check(ac::cli::non_empty());
  rmerge->add_flag("--no-plots", merge_no_plots, "do not render plots");

  auto* selfcheck = app.add_subcommand("selfcheck", "the exact reference checks itself against known values");
  const auto mutants = ac::cli::add_mutants_command(app);  // mutants.cpp
  const auto plot = ac::cli::add_plot_command(app);        // plot.cpp
  const auto bench = ac::cli::add_bench_command(app);      // bench.cpp

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
    std::fprintf(stderr, "attncheck: %s (see attncheck --help)\n", what.c_str());
    return kExitUsage;
  }

  try {
    if (list->parsed()) return run_list(backend, plugins);
    if (check->parsed()) {
      co.backend = backend;
      co.plugins = plugins;
      if (co.suite == "long") {
        // The long suite's defaults; an explicit option still wins.
        if (!check->count("--max-keys")) co.max_keys = kLongSuiteTokens;
        if (!check->count("--cases")) co.cases = kLongSuiteCases;
        if (co.dtypes.empty()) co.dtypes = {"fp16", "bf16"};
      }
      return run_check(co, command, argv);
    }
    if (replay->parsed()) return run_replay(replay_files, replay_subject, backend, plugins);
    if (prefill->parsed())
      return run_prefill_cmd(scenario, prefill_attention, prefill_merge, chunk, backend, plugins);
    if (tiling->parsed())
      return run_tiling(tiling_subject, backend, plugins, tiling_seed, tiling_cases, tiling_dir,
                        tiling_no_plots);
    if (round->parsed()) {
      std::printf("%s\n",
                  attncheck::ref::ask_round(attncheck::ref::parse_format(round_to), round_value).c_str());
      return kExitOk;
    }
    if (exact->parsed()) {
      std::printf("%s\n", attncheck::ref::ask_exact(
                              exact_what, exact_logits,
                              exact_base == 2 ? attncheck::ref::LseBase::two : attncheck::ref::LseBase::e)
                              .c_str());
      return kExitOk;
    }
    if (rmerge->parsed()) return run_report_merge(merge_dirs, merge_out, merge_no_plots);
    if (mutants.app->parsed()) return mutants.run();
    if (plot.app->parsed()) return plot.run();
    if (bench.app->parsed()) return bench.run();
    if (selfcheck->parsed()) {
      try {
        std::printf("%s\n", attncheck::ref::self_check().c_str());
        return kExitOk;
      } catch (const attncheck::ref::ReferenceError& e) {
        std::fprintf(stderr, "attncheck selfcheck: FAILED: %s\n", e.what());
        return kExitFailed;
      }
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "attncheck: %s\n", one_line(e.what()).c_str());
    return kExitUsage;
  } catch (const attncheck::ref::ReferenceError& e) {
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
