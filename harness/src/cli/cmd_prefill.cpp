// `attncheck prefill`: a chunked-prefill scenario replayed through prefix/suffix attention and merge.
#include <cstdio>
#include <memory>

#include "attncheck/json_fields.hpp"
#include "common.hpp"
#include "options.hpp"

namespace attncheck::cli {
namespace {

struct PrefillOptions {
  std::string scenario, attention, merge = "merge";
  int chunk = 0;  // 0: the scenario's
};

int run_prefill(const PrefillOptions& o, const Common& common) {
  std::string text;
  nlohmann::json j;
  try {
    text = json_fields::read_text_file<PrefillScenarioError>(o.scenario, kMaxScenarioFileBytes, "scenario");
    j = json_fields::parse_strict<PrefillScenarioError>(text, "scenario " + o.scenario);
    if (o.chunk > 0) {
      j["chunk_size"] = o.chunk;
      text = j.dump();
    }
    if (memory_estimate_ends_command("scenario " + o.scenario, prefill_peak_bytes(text), common))
      return kExitOk;
  } catch (const PrefillScenarioError& e) {
    throw UsageError(e.what());
  }
  SubjectSet set = load_subject_set(common);
  auto find = [&](const std::string& n) -> Subject& {
    for (auto& s : set.all)
      if (s->name() == n) return *s;
    throw UsageError("unknown subject '" + n + "'");
  };
  // The attention subject must take the scenario's head size and dtype: when none is named, the
  // first that can is used; a named one that cannot is refused with the list of those that can.
  const int head_size = j.is_object() && j.contains("head_size") && j["head_size"].is_number_integer()
                            ? j["head_size"].get<int>()
                            : 0;
  const auto dtype = dtype_from(j.is_object() && j.contains("dtype") && j["dtype"].is_string()
                                    ? j["dtype"].get<std::string>()
                                    : "fp16");
  auto can_run = [&](const Subject& s) {
    return s.has_op(AC_OP_ATTENTION) && (s.caps().features & AC_FEAT_LSE) &&
           s.supports_head_size(head_size) && dtype && s.has_dtype(*dtype);
  };
  std::string able;
  for (auto& s : set.all)
    if (can_run(*s)) able += (able.empty() ? "" : ", ") + s->name();
  std::string attention = o.attention;
  if (attention.empty()) {
    for (auto& s : set.all)
      if (can_run(*s) && (attention.empty() || s->name() == "fused")) attention = s->name();
    if (attention.empty())
      throw UsageError("scenario " + o.scenario +
                       ": no loaded attention subject with an LSE takes head size " +
                       std::to_string(head_size) + " (name one with --attention)");
  }
  Subject& a = find(attention);
  if (head_size > 0 && !can_run(a)) {
    // The first thing it lacks, in can_run's order.
    const std::string lacks = !a.has_op(AC_OP_ATTENTION)           ? "has no attention operation"
                              : !(a.caps().features & AC_FEAT_LSE) ? "writes no LSE"
                              : !dtype || !a.has_dtype(*dtype)
                                  ? "does not take the scenario's dtype"
                                  : "cannot take head size " + std::to_string(head_size);
    throw UsageError("scenario " + o.scenario + ": attention subject '" + attention + "' " + lacks +
                     (able.empty() ? std::string(" (no loaded subject can run it)")
                                   : " (subjects that can: " + able + ")"));
  }
  Subject& m = find(o.merge);
  PrefillReport r;
  try {
    r = run_prefill_text(text, a, m);
  } catch (const PrefillScenarioError& e) {
    throw UsageError("scenario " + o.scenario + ": " + e.what());
  }
  std::printf("attention subject %s, merge subject %s\n%s\n", attention.c_str(), o.merge.c_str(),
              r.summary.c_str());
  for (const auto& f : r.findings)
    std::printf("  %s at request %d, chunk %d, token %d, head %d, stage %s%s%s\n", f.value.c_str(), f.request,
                f.chunk, f.token, f.head, f.stage.c_str(), f.detail.empty() ? "" : ": ", f.detail.c_str());
  return r.ok ? kExitOk : kExitFailed;
}

}  // namespace

Command add_prefill_command(CLI::App& app, Common& common) {
  auto o = std::make_shared<PrefillOptions>();
  Command c;
  c.app = app.add_subcommand("prefill",
                             "replay a chunked-prefill scenario through prefix/suffix attention and merge");
  add_common_options(c.app, common);
  add_memory_option(c.app, common);
  c.app->add_option("--scenario", o->scenario, "scenario JSON (corpus/prefill/*.json)")->required();
  c.app
      ->add_option("--attention", o->attention,
                   "attention subject (default: fused, or the first that takes the scenario)")
      ->check(non_empty());
  c.app->add_option("--merge", o->merge, "merge subject (default merge)");
  c.app->add_option("--chunk", o->chunk, "chunk size (overrides the scenario's)")
      ->check(CLI::Range(1, Limits::kMaxChunk));
  c.run = [o, &common] { return run_prefill(*o, common); };
  return c;
}

}  // namespace attncheck::cli
