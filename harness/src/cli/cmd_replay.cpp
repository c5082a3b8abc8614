// `attncheck replay`: saved cases (files, or directories of them) re-run against a subject.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "attncheck/case.hpp"
#include "attncheck/report.hpp"
#include "common.hpp"
#include "options.hpp"

namespace attncheck::cli {
namespace {

namespace fs = std::filesystem;

struct ReplayOptions {
  std::vector<std::string> inputs;
  std::string subject;
};

// A chunked-prefill scenario (corpus/prefill/) sits beside cases but is run by `prefill`.
std::string scenario_note(const std::string& path) {
  return path + ": a chunked-prefill scenario, not a case: run it with attncheck prefill --scenario " + path;
}

int run_replay(const ReplayOptions& o, const Common& common) {
  // Named files must parse (exit 2 otherwise); files met inside a directory are skipped with a note.
  struct Item {
    std::string path;
    Case c;
  };
  std::vector<Item> items;
  std::vector<std::string> skipped, scenarios;
  // Reading a file holds its text, its parse and its tensors: a file within the size bound but too
  // large for the memory limit is refused before it is read (one past the bound, by read_case_file).
  double reading = 0;  // the largest file's reading peak
  auto read_checked = [&](const std::string& path) {
    std::error_code size_ec;
    const auto bytes = fs::file_size(path, size_ec);
    if (!size_ec && bytes <= kMaxCaseFileBytes) {
      reading = std::max(reading, case_read_peak_bytes(bytes));
      refuse_past_memory_limit("replay: reading " + path, case_read_peak_bytes(bytes), common);
    }
    Case c = read_case_file(path);
    if (const std::string why = replay_problem(c); !why.empty()) throw CaseError(path + ": " + why);
    return c;
  };
  for (const auto& in : o.inputs) {
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
          items.push_back({f, read_checked(f)});
        } catch (const CaseError& e) {
          if (is_prefill_scenario_file(f))
            scenarios.push_back(f);
          else
            skipped.push_back(e.what());
        }
      }
    } else {
      if (!fs::exists(in, ec)) throw UsageError("replay: " + in + ": no such file or directory");
      try {
        items.push_back({in, read_checked(in)});
      } catch (const CaseError& e) {
        if (is_prefill_scenario_file(in)) throw UsageError("replay: " + scenario_note(in));
        throw UsageError(e.what());
      }
    }
  }
  // Nothing to replay is an input error, never a pass.
  if (items.empty())
    throw UsageError(
        "replay: no readable case file in " + o.inputs.front() + (o.inputs.size() > 1 ? " ..." : "") +
        (scenarios.empty()
             ? ""
             : " (" + std::to_string(scenarios.size()) +
                   " chunked-prefill scenarios: run each with attncheck prefill --scenario FILE)") +
        (skipped.empty()
             ? ""
             : " (" + std::to_string(skipped.size()) + " malformed, first: " + skipped.front() + ")"));
  // Every case stays decoded until the last has run; the costliest replay comes on top of them.
  double resident = 0, costliest = 0;
  std::string costliest_path;
  for (const auto& it : items) {
    resident += case_resident_bytes(it.c);
    if (const double b = case_replay_bytes(it.c); b >= costliest) costliest = b, costliest_path = it.path;
  }
  if (memory_estimate_ends_command("replay: " + costliest_path,
                                   std::max(reading, process_base_bytes() + resident + costliest), common))
    return kExitOk;
  SubjectSet set = load_subject_set(common);
  auto find = [&](const std::string& n) -> Subject* {
    for (auto& s : set.all)
      if (s->name() == n) return s.get();
    return nullptr;
  };
  if (!o.subject.empty() && !find(o.subject)) throw UsageError("unknown subject '" + o.subject + "'");
  for (const auto& it : items) {
    const std::string n = o.subject.empty() ? it.c.subject : o.subject;
    if (!find(n))
      throw UsageError(it.path + ": names subject '" + n + "', which is not loaded (use --subject)");
  }
  for (const auto& s : skipped) std::printf("skipped (malformed): %s\n", s.c_str());
  for (const auto& s : scenarios) std::printf("skipped: %s\n", scenario_note(s).c_str());
  int failed = 0, crashed = 0, judged = 0;
  std::string first_unjudged;
  for (const auto& it : items) {
    Subject* s = find(o.subject.empty() ? it.c.subject : o.subject);
    ReplayResult r;
    worker::set_call_context(*s, it.c.property, it.path);
    try {
      r = replay_case(it.c, *s, it.path, reproduce_context(common, *s, backend_name(set.backend)));
    } catch (const SubjectError& e) {
      std::printf("%s: %s: CRASHED %s\n", it.path.c_str(), s->name().c_str(), e.what());
      ++crashed;
      continue;
    }
    if (!r.applicable) {
      // A case the subject refused or cannot take judged nothing: never a pass.
      std::printf("%s: %s: nothing judged, %s\n", it.path.c_str(), s->name().c_str(), r.verdict.c_str());
      if (first_unjudged.empty()) first_unjudged = r.verdict;
      continue;
    }
    ++judged;
    if (!r.failure_class.empty())
      std::printf("%s: %s: FAIL %s: %s\n", it.path.c_str(), s->name().c_str(), r.failure_class.c_str(),
                  failure_line(r.context, r.message).c_str());
    else
      std::printf("%s: %s: %s\n", it.path.c_str(), s->name().c_str(), r.verdict.c_str());
    if (r.crashed) ++crashed;
    if (!r.passed) {
      if (!r.crashed) ++failed;
      for (const auto& w : r.worst_elements) std::printf("  %s\n", element_line(w).c_str());
      if (it.c.seed)
        std::printf("  seed %llu%s%s\n", (unsigned long long)it.c.seed,
                    it.c.rc_reproduce.empty() ? "" : "  rapidcheck reproduce ", it.c.rc_reproduce.c_str());
    }
    if (!r.reproduce_command.empty() && !r.passed)
      std::printf("  reproduce: %s\n", r.reproduce_command.c_str());
  }
  if (crashed) return kExitCrashed;
  if (judged == 0 && failed == 0) {
    if (items.size() > 1)
      std::printf("nothing judged: none of the %zu cases could be judged (first: %s)\n", items.size(),
                  first_unjudged.c_str());
    return kExitFailed;
  }
  return failed ? kExitFailed : kExitOk;
}

}  // namespace

Command add_replay_command(CLI::App& app, Common& common) {
  auto o = std::make_shared<ReplayOptions>();
  Command c;
  c.app = app.add_subcommand("replay", "re-run saved cases (files or directories) against a subject");
  add_common_options(c.app, common);
  add_memory_option(c.app, common);
  c.app->add_option("files", o->inputs, "case files or directories")->required();
  c.app->add_flag("--mutants", common.mutants,
                  "also load the deliberately broken kernels of attncheck mutants (its reproduce commands)");
  c.app->add_option("--subject", o->subject, "subject to replay against (default: the case's own)")
      ->check(non_empty());
  c.run = [o, &common] { return run_replay(*o, common); };
  return c;
}

}  // namespace attncheck::cli
