// `attncheck mutants`: the mutation self-test, the command that drives it. The broken kernels
// themselves are not here: they are kernels/mutants/ (mutants.h, the table of mutant kernels this
// command reads), built into the kernel library like any kernel; this file only runs the gate
// against them and reports which it caught.
//
// Runs the default gate (the properties of
// the `gate` suite, default number of cases) against every deliberately broken kernel of
// kernels/mutants/ and against the correct kernels they derive from, and prints one table:
// mutant, killed or survived, the property that killed it first, cases and seconds until that
// property's first failure, and the size of the shrunk counterexample. Exit 0 when every mutant is
// killed and every correct kernel passes; 1 otherwise; 2 on a usage error.
//
// --oracle also runs the peer suites' acceptance rules (properties/include/attncheck/
// peer_oracles.hpp: vllm, flashattn, pytorch) against the same subjects and prints the kill-count
// comparison. Host twins by default; --backend cuda runs the CUDA mutants, including the missing
// barrier (12). Mutant 13 needs a tensor past 2^31 elements and is left to its dedicated GPU test
// (tests/mutants, mutants_large_gpu): the table says so and it counts as neither.
// Writes <report-dir>/mutants.md (the table, markdown), mutants.json and corpus/ (the shrunk
// counterexamples, replayable with `attncheck replay`).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "attncheck/abi_subject.hpp"
#include "attncheck/atomic_file.hpp"
#include "attncheck/peer_oracles.hpp"
#include "attncheck/properties.hpp"
#include "attncheck/pythons.hpp"
#include "attncheck/report.hpp"
#include "command.hpp"
#include "common.hpp"
#include "common/registry.h"
#include "mutants/mutants.h"
#include "options.hpp"

namespace attncheck::cli {

namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxSeeds = 8;  // --seeds

struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string backend = "host", report_dir = "attncheck-mutants";
  std::vector<std::string> oracles = {"attncheck"}, only;
  // --seed, --cases, --max-keys, --no-shrink, --shrink-time: check's defaults. A mutant is killed
  // by its first failure: no search for further ones.
  RunOptions run = [] {
    RunOptions r;
    r.max_failures = 1;
    return r;
  }();
  int peer_cases = 100;
  // --seeds: the gate once per seed (the first one's counterexample and reproduce command are the
  // table's), for the margins; empty: --seed alone.
  std::vector<std::string> seed_list;
  bool quiet = false, no_correct = false, first_kill = false;
  // --gate-property: only this gate property (one property's kills); also how a run after a device fault
  // gives each later CUDA property a process of its own (Isolation).
  std::string gate_property;
  // How a failure's case is replayed: `replay --mutants` loads these subjects again.
  ReproduceContext reproduce;
};

// What a kill must show at every seed: the first failure within kMarginCases cases of its
// property, kMarginBudgets accuracy budgets or more past the allowance (or a broken contract,
// which no budget covers). A kill at 1.1 budgets after 80 cases is one generator change away from
// a survivor; the margin says how far from the edge each class of bug is caught.
constexpr int kMarginCases = 20;
constexpr double kMarginBudgets = 3;

// One subject's outcome under the attncheck gate.
struct GateOutcome {
  bool ran = false;     // false: not runnable here (mutant 13)
  bool failed = false;  // any property failed or crashed
  // The failing property that meets the margin (above) with the fewest cases to its first failure,
  // else the one with the fewest cases.
  std::string killer;
  std::string failure_class, message, reproduce;
  int cases = -1;
  double seconds_to_failure = -1, seconds_total = 0;
  double budgets = -1;  // the killer's first failing case: PropertyResult::first_failure_budgets
  CaseSize size;
  bool has_size = false;
  std::vector<std::string> all_killers;
  bool device_fault = false;  // a property crashed the device: later GPU runs in this process are void
  std::string note;
};

bool margin_met(const GateOutcome& g) {
  return g.failed && g.cases > 0 && g.cases <= kMarginCases && g.budgets >= kMarginBudgets;
}

struct Row {
  int number = 0;  // 0 for a correct kernel
  std::string name, bug, expected, correct_twin;
  Subject* subject = nullptr;     // null: not registered on this backend
  GateOutcome gate;               // the first seed's
  std::vector<GateOutcome> more;  // the further seeds' of --seeds, in order
  bool killed_everywhere() const {
    bool all = gate.failed;
    for (const GateOutcome& g : more) all = all && g.failed;
    return all;
  }
  bool failed_anywhere() const {
    bool any = gate.failed;
    for (const GateOutcome& g : more) any = any || g.failed;
    return any;
  }
  std::map<std::string, PeerResult> peers;
};

// A device fault (a trap, an illegal address) leaves this process's CUDA context unusable: a later
// property would "crash" at its first case on the lost context, which is no kill of its own. From
// the first fault on, each later CUDA (mutant, seed, property) runs in a child process of its own
// (this binary, `mutants --gate-property`), its table read back from the child's mutants.json; the
// child's report directory, corpus included, is kept under REPORT_DIR/isolated/.
struct Isolation {
  bool lost = false;       // this process's CUDA context faulted
  std::string faulted_by;  // "subject / property"
};

// -1: none; +inf: "contract" (mutants.json's first_failure_budgets).
double budgets_from_json(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return std::numeric_limits<double>::infinity();
  return -1;
}

PropertyResult run_isolated(const std::string& subject, const std::string& property, const Options& o,
                            const Isolation& iso) {
  const std::string dir =
      o.report_dir + "/isolated/" + subject + "-seed" + std::to_string(o.run.seed) + "-" + property;
  std::vector<std::string> args = {"/proc/self/exe",  "mutants",
                                   "--backend",       "cuda",
                                   "--mutant",        subject,
                                   "--seed",          std::to_string(o.run.seed),
                                   "--cases",         std::to_string(o.run.cases),
                                   "--max-keys",      std::to_string(o.run.max_keys),
                                   "--gate-property", property,
                                   "--no-correct",    "--quiet",
                                   "--report-dir",    dir};
  if (o.run.no_shrink)
    args.push_back("--no-shrink");
  else
    args.insert(args.end(), {"--shrink-time", std::to_string(o.run.shrink_time)});
  PropertyResult r;
  r.status = PropertyResult::Status::crashed;
  r.failure_class = "internal";
  const auto t0 = std::chrono::steady_clock::now();
  const CapturedRun c = run_captured(args);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!o.quiet)
    std::fprintf(stderr, "  %-34s %-22s in a process of its own (the device faulted under %s)\n",
                 subject.c_str(), property.c_str(), iso.faulted_by.c_str());
  nlohmann::json rows;
  try {
    std::ifstream in(dir + "/mutants.json");
    rows = nlohmann::json::parse(in);
  } catch (const std::exception&) {
    r.message = "its process of its own exited " + std::to_string(c.status) + " without mutants.json";
    return r;
  }
  for (const auto& row : rows) {
    if (row.value("subject", std::string()) != subject || !row.contains("gate")) continue;
    const nlohmann::json& g = row["gate"];
    if (!g.value("failed", false)) {
      r.cases_run = o.run.cases;  // the gate's count: mutants.json keeps none for a pass
      r.status = PropertyResult::Status::passed;
      r.failure_class.clear();
      return r;
    }
    r.failure_class = g.value("failure_class", std::string());
    // A crash class has no shrunk case; anything else is a failed property.
    const bool crash = r.failure_class == "device_fault" || r.failure_class == "internal" ||
                       r.failure_class == "transport_failed";
    r.status = crash ? PropertyResult::Status::crashed : PropertyResult::Status::failed;
    r.message = g.value("message", std::string());
    r.reproduce_command = g.value("reproduce", std::string());
    r.cases_to_first_failure = g.value("cases_to_first_failure", -1);
    r.cases_run = std::max(1, r.cases_to_first_failure);
    r.first_failure_budgets = budgets_from_json(g.value("first_failure_budgets", nlohmann::json()));
    r.seconds_to_first_failure = g.value("seconds_to_first_failure", -1.0);
    if (g.contains("counterexample")) {
      const nlohmann::json& x = g["counterexample"];
      r.counterexample_size = {x.value("tokens", int64_t{0}), x.value("keys", int64_t{0}),
                               x.value("heads", int64_t{0}), x.value("head_size", int64_t{0})};
    }
    return r;
  }
  r.message = "its process of its own wrote no row for " + subject;
  return r;
}

GateOutcome run_gate(Subject& s, const Options& o, bool is_mutant, Isolation& iso) {
  GateOutcome g;
  g.ran = true;
  int best_cases = 0;
  bool best_met = false;
  for (const PropertyInfo& p : all_properties()) {
    if (!p.in_gate || !property_applies(p, s)) continue;
    if (!o.gate_property.empty() && p.name != o.gate_property) continue;
    // A correct kernel has no child of its own (`mutants --mutant` names mutants only).
    if (iso.lost && s.backend() == "cuda" && !is_mutant) continue;
    PropertyResult r;
    if (iso.lost && s.backend() == "cuda") {
      r = run_isolated(s.name(), p.name, o, iso);
    } else {
      RunOptions run = o.run;
      run.corpus_dir = o.report_dir + "/corpus";
      RunConfig cfg = run_config(run);
      cfg.reproduce = o.reproduce;
      r = run_property(p.name, s, cfg);
    }
    g.seconds_total += r.seconds;
    const bool fail =
        r.status == PropertyResult::Status::failed || r.status == PropertyResult::Status::crashed;
    if (!o.quiet)
      std::fprintf(stderr, "  %-34s %-22s %-8s %4d cases %7.2f s%s%s\n", s.name().c_str(), p.name.c_str(),
                   status_name(r.status), r.cases_run, r.seconds, fail ? "  " : "",
                   fail ? r.message.c_str() : "");
    if (!fail) continue;
    if (r.status == PropertyResult::Status::crashed && r.failure_class == "device_fault") {
      g.device_fault = true;
      if (s.backend() == "cuda" && !iso.lost) {
        iso.lost = true;
        iso.faulted_by = s.name() + " / " + p.name;
      }
    }
    g.failed = true;
    g.all_killers.push_back(p.name);
    const int c = r.cases_to_first_failure > 0 ? r.cases_to_first_failure : r.cases_run;
    // The killer: a property whose kill meets the margin, else any; the fewest cases among those.
    const bool met = c <= kMarginCases && r.first_failure_budgets >= kMarginBudgets;
    if (g.killer.empty() || std::pair(!met, c) < std::pair(!best_met, best_cases)) {
      best_cases = c;
      best_met = met;
      g.killer = p.name;
      g.failure_class = r.failure_class;
      g.message = r.message;
      g.reproduce = r.reproduce_command;
      g.cases = c;
      g.budgets = r.first_failure_budgets;
      g.seconds_to_failure = r.seconds_to_first_failure >= 0 ? r.seconds_to_first_failure : r.seconds;
      g.size = r.counterexample_size;
      g.has_size = r.status == PropertyResult::Status::failed;
    }
    if (is_mutant && o.first_kill) break;
  }
  return g;
}

std::string size_text(const GateOutcome& g) {
  if (!g.has_size) return "-";
  std::ostringstream s;
  s << g.size.tokens << " tok, " << g.size.keys << " keys, " << g.size.heads << " heads, d "
    << g.size.head_size;
  return s.str();
}

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// A kill's margin: its error in budgets ("contract" where no budget applies), "-" without a kill.
std::string budgets_text(const GateOutcome& g) {
  if (!g.failed || g.budgets < 0) return "-";
  if (!std::isfinite(g.budgets)) return "contract";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", g.budgets);
  return buf;
}

// One column over the seeds of --seeds: "a / b / c".
template <class F>
std::string per_seed(const Row& r, F cell) {
  std::string s = cell(r.gate);
  for (const GateOutcome& g : r.more) s += " / " + cell(g);
  return s;
}

// The markdown table (stdout and mutants.md).
std::string render(const std::vector<Row>& rows, const Options& o, const std::vector<uint64_t>& seeds,
                   const std::vector<std::string>& peers, bool gate_ran, const std::string& backend_note) {
  std::ostringstream md;
  std::string seed_text;
  for (const uint64_t x : seeds) seed_text += (seed_text.empty() ? "" : " / ") + std::to_string(x);
  md << "# attncheck mutants\n\n"
     << backend_note << "; seed" << (seeds.size() > 1 ? "s " : " ") << seed_text
     << "; gate cases per property " << o.run.cases << "; peer cases " << o.peer_cases << "; "
     << utc_timestamp() << "\n\n";
  if (gate_ran) {
    md << "| # | subject | verdict | killed by | cases | budgets | margin | seconds | "
       << (o.run.no_shrink ? "first failing case (unshrunk)" : "shrunk counterexample")
       << " | expected | also failed |\n"
       << "|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const Row& r : rows) {
      const GateOutcome& g = r.gate;
      std::string verdict;
      if (!r.subject)
        verdict = "not on this backend";
      else if (!g.ran)
        verdict = "GPU test";
      else if (r.number > 0)
        verdict = r.killed_everywhere() ? "killed" : "**SURVIVED**";
      else
        verdict = r.failed_anywhere() ? "**FAILED**" : "passed";
      // The margin: met at every seed, or which part of it was not.
      std::string margin = "-";
      if (r.number > 0 && r.subject && g.ran) {
        bool met = margin_met(g);
        for (const GateOutcome& x : r.more) met = met && margin_met(x);
        margin = met ? "met" : "**under**";
      }
      std::string also;
      for (const auto& k : g.all_killers)
        if (k != g.killer) also += (also.empty() ? "" : ", ") + k;
      md << "| " << (r.number ? std::to_string(r.number) : "-") << " | " << r.name << " | " << verdict
         << " | " << (g.killer.empty() ? (g.ran ? "-" : g.note) : g.killer + " (" + g.failure_class + ")")
         << " | "
         << per_seed(r, [](const GateOutcome& x) { return x.cases > 0 ? std::to_string(x.cases) : "-"; })
         << " | " << per_seed(r, budgets_text) << " | " << margin << " | "
         << (g.seconds_to_failure >= 0 ? fixed(g.seconds_to_failure, 3) : "-") << " | " << size_text(g)
         << " | " << (r.number ? r.expected : "-") << " | " << (also.empty() ? "-" : also) << " |\n";
    }
    md << "\nmargin: at every seed, the first failure within " << kMarginCases
       << " cases of its property and at least " << kMarginBudgets
       << " accuracy budgets past the allowance (\"contract\": a non-finite output, an empty row, changed "
          "bits or a "
          "convention, which no budget covers).\n\n";
  }
  if (!peers.empty()) {
    md << "| # | subject |" << (gate_ran ? " attncheck |" : "");
    for (const auto& p : peers) md << " " << p << " |";
    md << "\n|---|---|" << (gate_ran ? "---|" : "");
    for (size_t i = 0; i < peers.size(); ++i) md << "---|";
    md << "\n";
    for (const Row& r : rows) {
      if (!r.subject) continue;
      md << "| " << (r.number ? std::to_string(r.number) : "-") << " | " << r.name << " |";
      auto mark = [&](bool ran, bool fail) -> std::string {
        if (!ran) return " n/a |";
        if (r.number > 0) return fail ? " killed |" : " survived |";
        return fail ? " **false alarm** |" : " passed |";
      };
      if (gate_ran) md << mark(r.gate.ran, r.number > 0 ? r.killed_everywhere() : r.failed_anywhere());
      for (const auto& p : peers) {
        auto it = r.peers.find(p);
        const bool ran = it != r.peers.end() && it->second.applicable;
        md << mark(ran, ran && it->second.killed);
      }
      md << "\n";
    }
    // Kill counts.
    md << "\n| oracle | mutants killed | correct kernels passed |\n|---|---|---|\n";
    auto count = [&](auto killed_of, auto ran_of) {
      int killed = 0, mutants = 0, passed = 0, correct = 0;
      for (const Row& r : rows) {
        if (!r.subject || !ran_of(r)) continue;
        if (r.number > 0) {
          ++mutants;
          killed += killed_of(r);
        } else {
          ++correct;
          passed += !killed_of(r);
        }
      }
      return std::to_string(killed) + " of " + std::to_string(mutants) + " | " + std::to_string(passed) +
             " of " + std::to_string(correct);
    };
    if (gate_ran)
      md << "| attncheck gate | "
         << count([](const Row& r) { return r.number > 0 ? r.killed_everywhere() : r.failed_anywhere(); },
                  [](const Row& r) { return r.gate.ran; })
         << " |\n";
    for (const auto& p : peers)
      md << "| " << p << " | "
         << count([&](const Row& r) { return r.peers.at(p).killed; },
                  [&](const Row& r) { return r.peers.count(p) && r.peers.at(p).applicable; })
         << " |\n";
  }
  return md.str();
}

// A kill's margin in mutants.json: budgets, "contract", or null without a kill.
nlohmann::json budgets_json(const GateOutcome& g) {
  if (!g.failed || g.budgets < 0) return nullptr;
  return std::isfinite(g.budgets) ? nlohmann::json(g.budgets) : nlohmann::json("contract");
}

nlohmann::json to_json(const std::vector<Row>& rows, const std::vector<uint64_t>& seeds) {
  nlohmann::json j = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json e;
    e["number"] = r.number;
    e["subject"] = r.name;
    e["mutant"] = r.number > 0;
    e["registered"] = r.subject != nullptr;
    if (r.number > 0) {
      e["bug"] = r.bug;
      e["expected_killer"] = r.expected;
      e["correct_subject"] = r.correct_twin;
    }
    const GateOutcome& g = r.gate;
    e["gate"] = {{"ran", g.ran},
                 {"failed", g.failed},
                 {"killer", g.killer},
                 {"failure_class", g.failure_class},
                 {"cases_to_first_failure", g.cases},
                 {"first_failure_budgets", budgets_json(g)},
                 {"margin_met", margin_met(g)},
                 {"seconds_to_first_failure", g.seconds_to_failure},
                 {"seconds", g.seconds_total},
                 {"counterexample",
                  {{"tokens", g.size.tokens},
                   {"keys", g.size.keys},
                   {"heads", g.size.heads},
                   {"head_size", g.size.head_size}}},
                 {"all_failed", g.all_killers},
                 {"message", g.message},
                 {"reproduce", g.reproduce},
                 {"note", g.note}};
    for (const auto& [name, p] : r.peers)
      e["peers"][name] = {{"applicable", p.applicable},
                          {"killed", p.killed},
                          {"cases_run", p.cases_run},
                          {"cases_to_first_failure", p.cases_to_first_failure},
                          {"seconds_to_first_failure", p.seconds_to_first_failure},
                          {"message", p.message}};
    // Every seed's kill (the first is "gate"'s), for the margins.
    for (size_t i = 0; i < seeds.size() && i <= r.more.size() && r.gate.ran; ++i) {
      const GateOutcome& x = i == 0 ? r.gate : r.more[i - 1];
      e["seeds"].push_back({{"seed", seeds[i]},
                            {"failed", x.failed},
                            {"killer", x.killer},
                            {"cases_to_first_failure", x.cases},
                            {"first_failure_budgets", budgets_json(x)},
                            {"margin_met", margin_met(x)}});
    }
    j.push_back(e);
  }
  return j;
}

int run(Options o, const Common& common) {
  // 1. Validate everything first.
  Backend backend;
  try {
    backend = parse_backend(o.backend);
  } catch (const std::invalid_argument& e) {
    throw Usage(e.what());
  }
  BackendResolution res;
  try {
    res = resolve_backend(backend);
  } catch (const std::runtime_error& e) {  // --backend cuda without CUDA or without a GPU
    throw Usage(e.what());
  }
  const bool cuda = res.backend == Backend::cuda;
  o.reproduce.program = common.invoked_as;
  o.reproduce.backend = backend_name(res.backend);
  o.reproduce.source_flags = " --mutants";
  bool gate = false;
  std::vector<std::string> peers;
  for (const auto& name : split_csv(o.oracles)) {
    if (name == "all") {
      gate = true;
      for (PeerOracle p : all_peer_oracles()) peers.push_back(peer_oracle_name(p));
    } else if (name == "attncheck") {
      gate = true;
    } else if (parse_peer_oracle(name)) {
      peers.push_back(name);
    } else {
      throw Usage("unknown oracle '" + name + "' (attncheck, vllm, flashattn, pytorch, all)");
    }
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  if (o.run.cases < 1 || o.peer_cases < 1) throw Usage("--cases and --peer-cases must be at least 1");
  std::vector<uint64_t> seeds;
  for (const auto& text : split_csv(o.seed_list)) {
    const auto v = json_fields::parse_decimal_u64(text);
    if (!v) throw Usage("--seeds: '" + text + "' is not a decimal integer in [0, 2^64 - 1]");
    seeds.push_back(*v);
  }
  if (seeds.size() > kMaxSeeds)
    throw Usage("--seeds: at most " + std::to_string(kMaxSeeds) + " seeds (got " +
                std::to_string(seeds.size()) + ")");
  if (seeds.empty()) seeds.push_back(o.run.seed);
  o.run.seed = seeds.front();
  const std::vector<std::string> only = split_csv(o.only);
  for (const auto& n : only)
    if (!kern::find_mutant(n)) throw Usage("unknown mutant '" + n + "' (see attncheck mutants --list)");
  try {
    ensure_writable_dir(o.report_dir);
    ensure_writable_dir(o.report_dir + "/corpus", "corpus directory");
  } catch (const ReportError& e) {
    throw Usage(e.what());
  }
  lock_dir(o.report_dir, "report directory");
  lock_dir(o.report_dir + "/corpus", "corpus directory");

  // 2. Subjects: the mutants of this backend and the correct kernels they derive from.
  std::vector<ac_subject> raw;
  kern::append_mutant_subjects(raw, cuda);
  auto mutant_subjects = adapt_subjects(raw, "builtin-mutant");
  std::string note;
  auto builtins = load_builtin_subjects(res.backend, &note);
  auto find = [](auto& list, const std::string& name) -> Subject* {
    for (auto& s : list)
      if (s->name() == name) return s.get();
    return nullptr;
  };
  std::vector<Row> rows;
  std::set<std::string> twins;
  for (const kern::MutantInfo& m : kern::mutant_table()) {
    if (!only.empty() && std::find(only.begin(), only.end(), m.name) == only.end()) continue;
    Row r;
    r.number = m.number;
    r.name = m.name;
    r.bug = m.bug;
    r.expected = m.expected_killer;
    r.correct_twin = m.correct_subject;
    r.subject = find(mutant_subjects, m.name);
    if (m.number == 13) r.gate.note = "needs a tensor past 2^31 elements: ctest -R mutants_large_gpu";
    rows.push_back(r);
    twins.insert(m.correct_subject);
  }
  if (!o.no_correct)
    for (const auto& t : twins) {
      Row r;
      r.name = t;
      r.subject = find(builtins, t);
      rows.push_back(r);
    }

  // 3. Run.
  if (!o.quiet) std::fprintf(stderr, "%s\n", note.c_str());
  // A device fault leaves this process's CUDA context unusable (Isolation): later CUDA properties
  // each run in a process of their own. Mutants expected to fault the device run last, after every
  // other row (correct twins included), so that the others run in this process. A correct kernel
  // after a fault (there is no child for it) is not run, never counted.
  std::stable_partition(rows.begin(), rows.end(),
                        [](const Row& r) { return r.expected.find("device fault") == std::string::npos; });
  Isolation iso;
  for (Row& r : rows) {
    if (!r.subject) continue;
    if (iso.lost && r.number == 0 && r.subject->backend() == "cuda") {
      r.gate.note = "not run: the device faulted under " + iso.faulted_by;
      if (!o.quiet) std::fprintf(stderr, "  %-34s %s\n", r.name.c_str(), r.gate.note.c_str());
      continue;
    }
    if (gate && r.number != 13)
      for (size_t i = 0; i < seeds.size(); ++i) {
        Options at = o;
        at.run.seed = seeds[i];
        GateOutcome g = run_gate(*r.subject, at, r.number > 0, iso);
        if (i == 0)
          r.gate = std::move(g);
        else
          r.more.push_back(std::move(g));
      }
    for (const auto& p : peers) {
      const PeerResult pr = run_peer_oracle(*parse_peer_oracle(p), *r.subject, o.run.seed, o.peer_cases);
      if (!o.quiet)
        std::fprintf(stderr, "  %-34s %-22s %s (%d cases)%s%s\n", r.name.c_str(), ("oracle " + p).c_str(),
                     !pr.applicable ? "n/a"
                     : pr.killed    ? "failed"
                                    : "passed",
                     pr.cases_run, pr.killed ? "  " : "", pr.killed ? pr.message.c_str() : "");
      r.peers[p] = pr;
    }
  }

  // 4. Report.
  const std::string md = render(rows, o, seeds, peers, gate, note);
  std::printf("%s", md.c_str());
  try {
    write_file_atomic(o.report_dir + "/mutants.md", md);
    write_file_atomic(o.report_dir + "/mutants.json", to_json(rows, seeds).dump(2) + "\n");
  } catch (const AtomicWriteError& e) {
    std::fprintf(stderr, "attncheck mutants: %s\n", e.what());
    return kExitUsage;
  }
  int survived = 0, correct_failed = 0;
  if (gate)
    for (const Row& r : rows) {
      if (!r.subject || !r.gate.ran) continue;
      if (r.number > 0)
        survived += !r.killed_everywhere();
      else
        correct_failed += r.failed_anywhere();
    }
  std::printf("\nattncheck mutants: %d survived, %d correct kernels failed; table in %s/mutants.md\n",
              survived, correct_failed, o.report_dir.c_str());
  return survived || correct_failed ? kExitFailed : kExitOk;
}

}  // namespace

Command add_mutants_command(CLI::App& app, Common& common) {
  auto o = std::make_shared<Options>();
  auto list = std::make_shared<bool>(false);
  Command c;
  c.app = app.add_subcommand("mutants",
                             "mutation self-test: the default gate against every deliberately broken kernel");
  c.app->add_option("--backend", o->backend,
                    "host (default: the host twins) | cuda (GPU mutants too) | auto");
  c.app
      ->add_option("--oracle", o->oracles,
                   "attncheck (default) | vllm | flashattn | pytorch | all (repeatable or comma-separated)")
      ->check(names_something());
  c.app->add_option("--mutant", o->only, "only these mutants (names, repeatable or comma-separated)")
      ->check(names_something());
  auto* seed = c.app->add_option("--seed", o->run.seed, "seed (default 1)")->check(decimal_u64());
  c.app
      ->add_option(
          "--seeds", o->seed_list,
          "the gate at each of these seeds (comma-separated, at most 8): the table's cases and budgets "
          "per seed, and whether the margin holds at every one")
      ->check(names_something())
      ->excludes(seed);
  c.app->add_option("--cases", o->run.cases, "gate cases per (subject, property) (default 100, the gate's)")
      ->check(CLI::Range(1, Limits::kMaxCases));
  c.app->add_option("--peer-cases", o->peer_cases, "cases per (subject, peer oracle) (default 100)")
      ->check(CLI::Range(1, Limits::kMaxCases));
  c.app->add_option("--max-keys", o->run.max_keys, "longest key row generated (default 64, the gate's)")
      ->check(CLI::Range(1, Limits::kMaxKeys));
  c.app->add_option("--report-dir", o->report_dir, "where mutants.md, mutants.json and corpus/ go")
      ->check(non_empty());
  c.app->add_flag("--no-correct", o->no_correct, "skip the correct kernels");
  c.app->add_flag("--first-kill", o->first_kill, "stop a mutant's gate at its first failing property");
  c.app->add_flag("--no-shrink", o->run.no_shrink, "report the first failing case unshrunk (faster: CI)");
  c.app
      ->add_option("--shrink-time", o->run.shrink_time,
                   "seconds each failure may spend shrinking (default 20)")
      ->check(finite_range(0.0, double(Limits::kMaxShrinkSeconds)));
  c.app->add_option("--gate-property", o->gate_property,
                    "only this gate property (also how a device-faulted run gives each its own process)");
  c.app->add_flag("--list", *list, "list the mutants and exit");
  c.app->add_flag("--quiet", o->quiet, "print only the table");
  c.run = [o, list, &common]() -> int {
    if (*list) {
      for (const kern::MutantInfo& m : kern::mutant_table())
        std::printf("%2d  %-34s %s\n    correct: %s; expected killer: %s%s\n", m.number, m.name, m.bug,
                    m.correct_subject, m.expected_killer, m.gpu_only ? "; GPU only" : "");
      return kExitOk;
    }
    try {
      return run(*o, common);
    } catch (const Usage& e) {
      std::fprintf(stderr, "attncheck mutants: %s\n", e.what());
      return kExitUsage;
    }
  };
  return c;
}

}  // namespace attncheck::cli
