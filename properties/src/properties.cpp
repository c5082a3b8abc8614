// The property registry and the runner, generic over the Property interface (property.hpp).
//
// run_property drives a property with RapidCheck (rc_adapter.hpp) so that the seed, the
// counterexample and RapidCheck's reproduce string stay in our hands:
//   - the first failure is re-run on the same case; differing output bits are reported as
//     "nondeterministic" (RapidCheck's shrinking needs a deterministic property);
//   - RapidCheck then shrinks; the last failing evaluation is the minimal case (its shrinker accepts
//     each failing candidate and stops when none fails), which is written to the corpus atomically;
//   - after a crash (device fault) the remaining evaluations pass without launching, so the crash
//     case itself is kept rather than shrunk on a dead device;
//   - cases are counted only before the first failure, so stats describe the random stream.
// The cases of (seed, property, subject) come from case_seed (seed.hpp) and nothing else.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>

#include "attncheck/case_context.hpp"
#include "attncheck/names.hpp"
#include "attncheck/seed.hpp"
#include "property.hpp"
#include "rc_adapter.hpp"
#include "shrink.hpp"
#include "split_options.hpp"

namespace attncheck {

using namespace detail;

const std::vector<double>& ulp_histogram_edges() {
  static const std::vector<double> edges = [] {
    std::vector<double> e{0, 0.5};
    for (int i = 0; i <= 20; ++i) e.push_back(std::ldexp(1.0, i));
    e.push_back(std::numeric_limits<double>::infinity());
    return e;
  }();
  return edges;
}

void add_drift(std::vector<DriftCounts>& into, const std::vector<DriftCounts>& from) {
  for (const DriftCounts& d : from) {
    auto it = std::find_if(into.begin(), into.end(),
                           [&](const DriftCounts& x) { return x.num_splits == d.num_splits; });
    if (it == into.end()) {
      into.insert(std::upper_bound(
                      into.begin(), into.end(), d,
                      [](const DriftCounts& a, const DriftCounts& b) { return a.num_splits < b.num_splits; }),
                  d);
      continue;
    }
    it->fold_outputs += d.fold_outputs;
    it->fold_differ += d.fold_differ;
    it->fold_max_ulp = std::max(it->fold_max_ulp, d.fold_max_ulp);
    it->splits_outputs += d.splits_outputs;
    it->splits_differ += d.splits_differ;
    it->splits_max_ulp = std::max(it->splits_max_ulp, d.splits_max_ulp);
  }
}

std::string batch_dimensions_phrase(uint32_t mask) {
  std::string s;
  for (int d = 0; d < kBatchDimensions; ++d)
    if (mask & (1u << d)) s += (s.empty() ? "" : ", ") + std::string(kBatchDimensionNames[size_t(d)]);
  return s.empty() ? "none isolated" : s;
}

DriftCounts drift_total(const std::vector<DriftCounts>& by_splits) {
  std::vector<DriftCounts> all{DriftCounts{}};
  for (DriftCounts d : by_splits) {
    d.num_splits = 0;
    add_drift(all, {d});
  }
  return all.front();
}

namespace detail {
namespace {

struct Registered {
  int position;
  std::unique_ptr<Property> property;
};
// Filled during static initialisation, by each property file's AC_REGISTER_PROPERTY; a function
// static, so it exists before the first registration whatever the order of the files.
std::vector<Registered>& registrations() {
  static std::vector<Registered> r;
  return r;
}

// The registered properties in `position` order, frozen at the first lookup (after static
// initialisation: lookups happen from main or from tests, never from a static initialiser).
const std::vector<const Property*>& registry() {
  static const std::vector<const Property*> props = [] {
    std::vector<Registered>& r = registrations();
    std::sort(r.begin(), r.end(),
              [](const Registered& a, const Registered& b) { return a.position < b.position; });
    std::vector<const Property*> out;
    for (const Registered& x : r) out.push_back(x.property.get());
    return out;
  }();
  return props;
}

}  // namespace

PropertyRegistration::PropertyRegistration(int position, std::unique_ptr<Property> p) {
  for (const Registered& x : registrations())
    if (x.position == position || x.property->info().name == p->info().name) {
      std::fprintf(stderr, "attncheck: property %s registered twice (or at the position of %s)\n",
                   p->info().name.c_str(), x.property->info().name.c_str());
      std::abort();
    }
  registrations().push_back({position, std::move(p)});
}

const Property* find_property_object(const std::string& name) {
  for (const Property* p : registry())
    if (p->info().name == name) return p;
  return nullptr;
}

void Property::draw_input(Case& c, const gen::Domain& dom, uint32_t op) const {
  if (op == AC_OP_MERGE)
    c.input = *gen::merge_input(dom);
  else if (op == AC_OP_SOFTMAX)
    c.input = *gen::softmax_input(dom);
  else if (op == AC_OP_QUANTIZE)
    c.input = *gen::quantize_input(dom);
  else
    c.input = *gen::attention_input(dom);
}

// The generators' domain for one subject under a run's limits: its dtypes and head sizes narrowed
// to the run's, the batch bound where the run sets one, and the long suite's layer over at most
// kHostLayerTokens tokens for a host subject.
gen::Domain run_domain(const Subject& s, const RunConfig& cfg) {
  gen::Domain d = gen::domain_for(s, cfg.max_keys, cfg.dtypes);
  if (!cfg.head_sizes.empty())
    std::erase_if(d.head_sizes, [&](int32_t h) {
      return std::find(cfg.head_sizes.begin(), cfg.head_sizes.end(), h) == cfg.head_sizes.end();
    });
  d.streamed_kv_bytes = cfg.streamed_kv_bytes;
  if (cfg.max_batch > 0) d.max_batch = cfg.max_batch;
  if (cfg.layer_tokens > 0)
    d.layer_tokens =
        s.caps().memory == AC_MEMORY_CUDA ? cfg.layer_tokens : std::min(cfg.layer_tokens, kHostLayerTokens);
  return d;
}

}  // namespace detail

const std::vector<PropertyInfo>& all_properties() {
  static const std::vector<PropertyInfo> infos = [] {
    std::vector<PropertyInfo> out;
    for (const Property* p : registry()) out.push_back(p->info());
    return out;
  }();
  return infos;
}

const PropertyInfo* find_property(const std::string& name) {
  for (const auto& p : all_properties())
    if (p.name == name) return &p;
  return nullptr;
}

namespace {

// The run's subject with the seconds of its calls added to `to` (TimeSplit::subject).
class TimedSubject final : public Subject {
 public:
  TimedSubject(Subject& s, double& to) : s_(s), to_(to) {}
  const std::string& name() const override { return s_.name(); }
  const std::string& description() const override { return s_.description(); }
  const ac_caps& caps() const override { return s_.caps(); }
  std::string backend() const override { return s_.backend(); }
  std::string origin() const override { return s_.origin(); }
  MergeOutput merge(const MergeInput& in) override {
    const AddSeconds timed(to_);
    return s_.merge(in);
  }
  SoftmaxOutput softmax(const SoftmaxInput& in) override {
    const AddSeconds timed(to_);
    return s_.softmax(in);
  }
  AttentionOutput attention(const AttentionInput& in, const AttentionOptions& opt) override {
    const AddSeconds timed(to_);
    return s_.attention(in, opt);
  }
  QuantizeOutput quantize(const QuantizeInput& in) override {
    const AddSeconds timed(to_);
    return s_.quantize(in);
  }

 private:
  Subject& s_;
  double& to_;
};

// The op a property exercises on this subject (first match in a fixed order).
uint32_t op_for(const PropertyInfo& p, const Subject& s) {
  for (uint32_t op : {AC_OP_MERGE, AC_OP_SOFTMAX, AC_OP_SPLITKV, AC_OP_ATTENTION, AC_OP_QUANTIZE})
    if ((p.ops & op) && s.has_op(op)) return op;
  return 0;
}

bool applies(const Property& p, const Subject& s) {
  const uint32_t op = op_for(p.info(), s);
  return op != 0 && p.applies_to(s, op);
}

Case make_case(const Ctx& ctx, uint32_t op) {
  Case c;
  c.op = op_name(op);
  c.subject = ctx.subject.name();
  c.property = ctx.property;
  c.lse_base = ctx.subject.caps().lse_base;
  c.empty_lse_sign = ctx.cv.empty_sign;
  c.seed = ctx.cfg.seed;
  return c;
}

// The case generator of a property for one subject: the property draws the input; the runner
// draws the options every attention case has (tiling; split count and fold order for split-KV).
rc::Gen<Case> case_gen(const Ctx& ctx, const gen::Domain& dom, const Property& prop, uint32_t op) {
  const Case base = make_case(ctx, op);
  const ac_caps caps = ctx.subject.caps();
  return rc::gen::exec([dom, &prop, base, op, caps] {
    const AddSeconds timed(thread_time_split().generate);
    Case c = base;
    prop.draw_input(c, dom, op);
    if (op == AC_OP_ATTENTION || op == AC_OP_SPLITKV) {
      if (caps.num_tilings > 1) c.options.tiling = *rc::gen::inRange(0, caps.num_tilings);
      if (op == AC_OP_SPLITKV && prop.draws_split_options()) {
        c.options.num_splits =
            draw_num_splits(caps, split_counts(caps), [](int n) { return *rc::gen::inRange(0, n); });
        const std::vector<ac_fold> folds = folds_in(caps.fold_orders);
        if (!folds.empty()) c.options.fold_order = *rc::gen::elementOf(folds);
      }
    }
    return c;
  });
}

}  // namespace

bool property_applies(const PropertyInfo& info, const Subject& s) {
  const Property* p = find_property_object(info.name);
  return p && applies(*p, s);
}

namespace {

ac_dtype case_dtype(const Case& c) {
  return std::visit([](const auto& in) { return in.dtype; }, c.input);
}

// The reasons a subject gave for its refusals, most common first with their counts, and the
// declaration that would have kept such cases from it when a reason names one.
std::string refusal_summary(const std::map<std::string, int>& counts) {
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& [why, n] : counts) by_count.push_back({n, why});
  std::stable_sort(by_count.begin(), by_count.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string s;
  for (size_t i = 0; i < by_count.size() && i < 3; ++i)
    s += (i ? "; " : "") + std::to_string(by_count[i].first) + "x \"" + by_count[i].second + "\"";
  if (by_count.size() > 3) s += "; " + std::to_string(by_count.size() - 3) + " more reasons";
  std::string top = by_count.empty() ? "" : by_count.front().second;
  std::transform(top.begin(), top.end(), top.begin(),
                 [](unsigned char ch) { return char(std::tolower(ch)); });
  const char* hint =
      top.find("key") != std::string::npos &&
              (top.find("zero") != std::string::npos || top.find("no key") != std::string::npos ||
               top.find("empty") != std::string::npos)
          ? "refuses_zero_keys (AC_CAP_REFUSES_ZERO_KEYS)"
      : top.find("head size") != std::string::npos || top.find("head_size") != std::string::npos
          ? "the head sizes it serves (head_sizes, or head_size_min / head_size_max)"
      : top.find("dtype") != std::string::npos  ? "only the dtypes it serves (dtypes)"
      : top.find("tiling") != std::string::npos ? "only the tilings it serves (tilings)"
      : top.find("split") != std::string::npos  ? "the split counts it serves (max_splits)"
      : top.find("mask") != std::string::npos || top.find("causal") != std::string::npos
          ? "only the features it serves (features)"
          : "";
  if (*hint) s += "; if it refuses such inputs by design, declare " + std::string(hint);
  return s;
}

// "N cases skipped, refused by the subject: ..." (refusal_summary's reasons and counts).
std::string skipped_phrase(int refused, const std::map<std::string, int>& counts) {
  return std::to_string(refused) + (refused == 1 ? " case" : " cases") +
         " skipped, refused by the subject: " + refusal_summary(counts);
}

// A row kind as signatures name it: "any row" when the failure quotes no element.
std::string named_kind(const std::string& kind) { return kind.empty() ? "any row" : kind; }

// Two failures are one defect when their class and row kind agree: a defect shows in every dtype
// and often in both O and LSE, and those are parts of its signature, not further defects.
std::string defect_key(const std::string& failure_class, const std::string& kind) {
  return failure_class + ", " + named_kind(kind);
}

// The signature (properties.hpp): the defect's class and row kind, with the quoted output and the
// case's dtype.
std::string failure_signature(const std::string& failure_class, const std::string& kind, const Case& c,
                              const WorstElement& quoted) {
  const std::string out = quoted.where.empty() ? "-" : quoted.where.substr(0, quoted.where.find('['));
  return failure_class + ", " + out + ", " + named_kind(kind) + ", " + dtype_name(case_dtype(c));
}

// One search of a property over a subject (run_property's rounds). Round 0 is the run every
// earlier attncheck made; a later round draws its own stream (case_seed with "#ROUND" after the
// property's name), takes a failure whose defect_key is in `known` for a pass, and judges no row
// of a kind in `avoid` (the avoidable row kinds of the defects found; ExcusedRows).
PropertyResult run_round(const std::string& name, Subject& subject, const RunConfig& cfg, int round,
                         const std::vector<std::string>& known, const std::vector<std::string>& avoid) {
  const Property* prop = find_property_object(name);
  if (!prop) throw std::invalid_argument("unknown property \"" + name + "\"");
  PropertyResult res;
  res.property = name;
  res.subject = subject.name();
  res.seed = cfg.seed;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  if (!applies(*prop, subject)) {
    res.status = PropertyResult::Status::not_applicable;
    res.message = "subject has no operation this property checks";
    return res;
  }
  const uint32_t op = op_for(prop->info(), subject);
  const gen::Domain dom = run_domain(subject, cfg);
  if (dom.dtypes.empty() || dom.head_sizes.empty()) {
    res.status = PropertyResult::Status::not_applicable;
    res.message = "subject has none of the run's dtypes or head sizes";
    return res;
  }
  thread_judge_counts() = JudgeCounts{};
  thread_time_split() = TimeSplit{};
  TimedSubject timed(subject, thread_time_split().subject);
  Ctx ctx{timed, cfg, conventions_of(subject), default_budget(op, AC_DTYPE_F32), "", name, {}, {}, true};
  if (!cfg.corpus_dir.empty() && (cfg.write_ahead || subject.caps().memory == AC_MEMORY_CUDA))
    ctx.write_ahead_path = write_ahead_path(cfg.corpus_dir, subject.name(), name);
  const rc::Gen<Case> gen = case_gen(ctx, dom, *prop, op);
  const int max_cases = prop->info().max_cases;
  const int shared = int(std::ceil(cfg.num_cases * prop->info().case_share));
  const int num_cases = std::max(1, max_cases > 0 ? std::min(shared, max_cases) : shared);

  std::optional<Case> last_failing;
  Outcome last_outcome;
  bool crashed = false, cancelled = false;
  int supported = 0;
  // The subject's own refusals (AC_ERR_UNSUPPORTED, a worker's "unsupported"), apart from the
  // reference's: a subject that refuses every case it declared it serves never passes.
  int refused = 0;
  std::string last_refusal;
  std::map<std::string, int> refusal_counts;  // per reason (the subject's words)
  std::optional<Case> refused_sample;         // the first case refused, kept when all are

  // A shrink candidate that returns without failing is rejected; once the time bound has passed
  // (or on cancel) every candidate returns at once, so RapidCheck ends with the smallest failing
  // case found so far: last_failing, which the reproduce string also leads to.
  auto shrink_over = [&] {
    if (ctx.counting) return false;
    if (!res.shrink_cut && elapsed() - res.seconds_to_first_failure > prop->shrink_seconds(cfg))
      res.shrink_cut = true;
    return res.shrink_cut;
  };
  // One check of one case. nullopt: the subject or the reference refused the case (`why` says
  // so), which is a discard, not a verdict. A crash sets `crashed`: nothing more runs after it.
  auto evaluate = [&](const Case& c, std::string& why) -> std::optional<Outcome> {
    Outcome o;
    try {
      o = prop->check(ctx, c);
      note_flushed(o, ctx.cv);
      note_empty_state_o(o, c, ctx.cv);
    } catch (const SubjectError& e) {
      if (e.kind == SubjectError::Kind::interrupted) {
        cancelled = true;
        if (!ctx.counting) res.shrink_cut = true;
        why = e.what();
        return std::nullopt;
      }
      if (e.kind == SubjectError::Kind::unsupported) {
        why = std::string("unsupported: ") + e.what();
        ++refused;
        last_refusal = e.what();
        ++refusal_counts[last_refusal];
        if (!refused_sample) refused_sample = c;
        return std::nullopt;
      }
      crashed = true;
      o.ok = false;
      o.crashed = true;
      o.failure_class = e.failure_class();
      o.message = e.what();
    } catch (const ref::ReferenceError& e) {
      why = std::string("reference refused the case: ") + e.what();
      return std::nullopt;
    } catch (const std::exception& e) {
      // Anything else a subject or a check throws is a crash of this case, kept with its case;
      // left to RapidCheck it would be a failure with no case, which must never read as a pass.
      crashed = true;
      o.ok = false;
      o.crashed = true;
      o.failure_class = "internal";
      o.message = std::string("the check raised an exception: ") + e.what();
    }
    // A failure already reported (an earlier round's signature) is not what this round looks for.
    if (!o.ok && !o.crashed && !known.empty()) {
      const std::string key =
          defect_key(o.failure_class, o.quoted ? row_kind(o.judged_or(c), o.quoted->row) : "");
      if (std::find(known.begin(), known.end(), key) != known.end()) o.ok = true;
    }
    return o;
  };
  auto property = [&]() {
    if (crashed || cancelled) return;  // nothing more runs on a faulted device
    if (cfg.cancel && cfg.cancel->load()) {
      cancelled = true;
      if (!ctx.counting) res.shrink_cut = true;
      return;
    }
    if (shrink_over()) return;
    Case c = *gen;
    std::string why;
    const std::optional<Outcome> checked = evaluate(c, why);
    if (!checked) RC_DISCARD(why);
    Outcome o = *checked;
    if (ctx.counting) {
      res.max_drift_ulp = std::max(res.max_drift_ulp, o.drift);
      res.spread.add(o.spread);
      add_drift(res.drift_by_splits, o.drift_counts);
      ++res.cases_run;
      ++supported;
      if (cfg.progress) cfg.progress(res.cases_run, num_cases);
    }
    if (o.ok) return;
    if (ctx.counting) {
      // The first failure: time it, then check it reproduces bit for bit.
      res.cases_to_first_failure = res.cases_run;
      res.seconds_to_first_failure = elapsed();
      res.first_failure_budgets =
          (o.failure_class == "accuracy" || o.failure_class == "split") && !o.worst.empty()
              ? o.worst.front().ratio
              : INFINITY;
      ctx.counting = false;
      // A subject declared nondeterministic may differ on a re-run; its failure keeps its class.
      if (!o.crashed && !ctx.cv.nondeterministic) {
        try {
          Outcome again = prop->check(ctx, c);
          if (again.digest != o.digest) {
            o.failure_class = "nondeterministic";
            o.message = "the subject gave different output bits on the same input; " + o.message;
          }
        } catch (const SubjectError&) {
        }
      }
    }
    last_failing = c;
    last_outcome = o;
    RC_FAIL(o.failure_class + ": " + o.message);
  };

  // A later round judges no row of the kinds it steers away from (the avoidable kinds of the
  // defects found): a case holding such rows is judged on its others. Leaving those cases out
  // instead hid every defect that shows only beside such rows.
  const ExcusedRows excused(avoid);
  RapidCheckRun run;
  run.seed = case_seed(cfg.seed, round == 0 ? name : name + "#" + std::to_string(round), subject.name());
  run.max_success = num_cases;
  run.max_size = std::min(100, std::max(0, cfg.max_size));
  // Attention and split-KV cases are shrunk by their structure (shrink.hpp), after RapidCheck has
  // found the first failure: RapidCheck's own walk over their per-element picks takes minutes.
  const bool structural_shrink = op == AC_OP_ATTENTION || op == AC_OP_SPLITKV;
  run.shrink = cfg.shrink && prop->shrinks() && !structural_shrink;
  run.id = name + "/" + subject.name();
  const RapidCheckResult result = check_with_rapidcheck(property, run);
  if (structural_shrink && cfg.shrink && prop->shrinks() && result.kind == RapidCheckResult::Kind::failed &&
      last_failing && !last_outcome.crashed && !cancelled) {
    ShrinkHooks hooks;
    hooks.candidates = [&](const AttentionInput& a) {
      return attention_shrinks(a, dom.head_sizes, dom.zero_keys, dom.page_sizes, dom.head_pairs);
    };
    hooks.check = [&](const Case& c) {
      std::string why;
      return evaluate(c, why);
    };
    hooks.stop = [&] {
      if (cfg.cancel && cfg.cancel->load()) res.shrink_cut = true;
      return crashed || res.shrink_cut || shrink_over();
    };
    ShrinkResult shrunk = shrink_greedily(*last_failing, last_outcome, hooks);
    last_failing = std::move(shrunk.best);
    last_outcome = std::move(shrunk.outcome);
    res.shrink_cut = res.shrink_cut || shrunk.cut;
  }

  res.seconds = elapsed();
  if (res.seconds_to_first_failure >= 0) res.shrink_seconds = res.seconds - res.seconds_to_first_failure;
  const JudgeCounts counts = thread_judge_counts();
  res.rows_judged = counts.rows;
  res.rows_escalated = counts.rows_escalated;
  res.rows_uncertified = counts.rows_uncertified;
  res.time_split = thread_time_split();
  finish_stats(ctx.stats, ctx.samples);
  res.stats = ctx.stats;
  if (!ctx.write_ahead_path.empty()) {
    std::error_code ec;
    std::filesystem::remove(ctx.write_ahead_path, ec);  // a normal return: no crash to keep
  }
  if (result.kind == RapidCheckResult::Kind::failed && last_failing) {
    res.status = last_outcome.crashed ? PropertyResult::Status::crashed : PropertyResult::Status::failed;
    res.failures = 1;
    res.failure_class = last_outcome.failure_class;
    res.message = last_outcome.message;
    res.rc_reproduce = result.reproduce;
    Case& c = *last_failing;
    c.rc_reproduce = res.rc_reproduce;
    c.excused_rows = avoid;
    if (res.shrink_cut)
      res.message += " (shrinking cut after " + std::to_string(int(res.shrink_seconds)) +
                     " s: the smallest failing case found so far)";
    c.note = res.failure_class + ": " + res.message;
    if (c.note.size() > 400) c.note.resize(400);
    const Case& judged = last_outcome.judged_or(c);
    res.context = case_context(judged, &subject.caps(), last_outcome.quoted ? last_outcome.quoted->row : -1);
    if (last_outcome.quoted) res.quoted = worst_element(*last_outcome.quoted);
    if (last_outcome.quoted) res.row_kind = row_kind(judged, res.quoted.row);
    res.signature = failure_signature(res.failure_class, res.row_kind, judged, res.quoted);
    res.counterexample_size = case_size(c);
    res.counterexample_summary = describe_size(res.counterexample_size);
    std::string file;
    if (!cfg.corpus_dir.empty()) {
      try {
        file = write_case_atomic(cfg.corpus_dir, c);
        res.corpus_files.push_back(file);
      } catch (const CaseError& e) {
        res.message += " (could not write the corpus file: " + std::string(e.what()) + ")";
      }
    }
    res.reproduce_command =
        file.empty() ? check_command(cfg.reproduce, subject.name(), name, cfg.seed, stream_flags(cfg))
                     : replay_command(cfg.reproduce, file, subject.name());
  } else if (result.kind == RapidCheckResult::Kind::failed || result.kind == RapidCheckResult::Kind::error) {
    // A failure that left no case behind (something outside the check threw): never a pass.
    res.status = PropertyResult::Status::crashed;
    res.failures = 1;
    res.failure_class = "internal";
    res.message = "the property stopped without a judged case: " + result.description;
  } else if (result.kind == RapidCheckResult::Kind::gave_up && !supported && refused > 0 && !cancelled) {
    // Every case was drawn from the subject's own declaration (ops, dtypes, head sizes, tilings)
    // and it refused each one: what it declares is not what it serves, and nothing was judged.
    // Not applicable would let such a subject pass a gate; it is a failure of the subject (exit 1,
    // "a property failed"), not a crash (it answered every call) nor an input error.
    res.status = PropertyResult::Status::failed;
    res.failures = 1;
    res.failure_class = "refused_every_case";
    res.message = "the subject refused all " + std::to_string(refused) +
                  " cases drawn from its declared capabilities: " + refusal_summary(refusal_counts);
    if (refused_sample && !cfg.corpus_dir.empty()) {
      Case& c = *refused_sample;
      c.note = "refused_every_case: a sample of the refused cases; " + last_refusal;
      if (c.note.size() > 400) c.note.resize(400);
      res.context = case_context(c, &subject.caps());
      try {
        const std::string file = write_case_atomic(cfg.corpus_dir, c);
        res.corpus_files.push_back(file);
        res.reproduce_command = replay_command(cfg.reproduce, file, subject.name());
      } catch (const CaseError&) {
      }
    }
  } else if (result.kind == RapidCheckResult::Kind::gave_up && !supported && !cancelled && avoid.empty()) {
    // The property applies and its domain is not empty, yet no drawn case could be judged (the
    // reference refused each one, or the generator discarded each): a pair that judged nothing
    // never reads as a pass, nor as not applicable, which a gate skips (exit 1).
    res.status = PropertyResult::Status::failed;
    res.failures = 1;
    res.failure_class = "judged_no_case";
    res.message = "no drawn case could be judged: " + result.description;
  } else if (result.kind == RapidCheckResult::Kind::gave_up && !supported) {
    res.status = PropertyResult::Status::not_applicable;
    res.message = result.description;
  } else if (res.cases_run == 0) {
    // passed needs a judged case; a run cancelled before its first case is interrupted.
    res.status = cancelled ? PropertyResult::Status::interrupted : PropertyResult::Status::crashed;
    if (!cancelled) res.failure_class = "internal";
    res.message = cancelled ? "cancelled before any case ran" : "no case ran";
  } else {
    res.status = PropertyResult::Status::passed;
    if (result.kind == RapidCheckResult::Kind::gave_up) res.message = result.description;
    if (cancelled) res.message = "cancelled after " + std::to_string(res.cases_run) + " cases";
    // Cases the subject refused (a batch past what it can take, a shape it does not serve) were
    // skipped, not judged: a pass says how many and why.
    if (refused > 0)
      res.message += (res.message.empty() ? "" : "; ") + skipped_phrase(refused, refusal_counts);
  }
  return res;
}

}  // namespace

PropertyResult run_property(const std::string& name, Subject& subject, const RunConfig& cfg) {
  PropertyResult res = run_round(name, subject, cfg, 0, {}, {});
  // Only a judged failure goes on: after a crash nothing more runs (a faulted device, a dead
  // worker), and an interrupted run stops.
  std::vector<std::string> known, avoid;
  if (res.status != PropertyResult::Status::failed || res.signature.empty()) return res;
  known.push_back(defect_key(res.failure_class, res.row_kind));
  auto steer = [&](const std::string& kind) {
    if (row_kind_avoidable(kind) && std::find(avoid.begin(), avoid.end(), kind) == avoid.end())
      avoid.push_back(kind);
  };
  steer(res.row_kind);
  for (int round = 1; round < cfg.max_failures && !(cfg.cancel && cfg.cancel->load()); ++round) {
    PropertyResult more = run_round(name, subject, cfg, round, known, avoid);
    res.seconds += more.seconds;
    if (more.status != PropertyResult::Status::failed || more.signature.empty()) break;
    DistinctFailure f;
    f.signature = more.signature;
    f.failure_class = more.failure_class;
    f.message = more.message;
    f.context = more.context;
    f.counterexample_summary = more.counterexample_summary;
    f.quoted = more.quoted;
    f.corpus_file = more.corpus_files.empty() ? "" : more.corpus_files.front();
    f.reproduce_command = more.reproduce_command;
    f.cases_to_failure = more.cases_to_first_failure;
    if (!f.corpus_file.empty()) res.corpus_files.push_back(f.corpus_file);
    res.other_failures.push_back(std::move(f));
    ++res.failures;
    known.push_back(defect_key(more.failure_class, more.row_kind));
    steer(more.row_kind);
  }
  return res;
}

std::string stream_flags(const RunConfig& cfg) {
  std::string f = " --cases " + std::to_string(cfg.num_cases);
  if (cfg.max_keys != RunConfig{}.max_keys) f += " --max-keys " + std::to_string(cfg.max_keys);
  for (size_t i = 0; i < cfg.dtypes.size(); ++i)
    f += (i ? "," : " --dtype ") + std::string(dtype_name(cfg.dtypes[i]));
  if (cfg.layer_tokens > 0) f += " --suite long";
  return f;
}

std::string replay_problem(const Case& c) {
  if (c.property.empty()) return "";
  const Property* prop = find_property_object(c.property);
  if (!prop) return "property \"" + c.property + "\" is none of attncheck's (attncheck list names them)";
  const std::string why = prop->case_problem(c);
  return why.empty() ? "" : "property " + c.property + ": " + why;
}

namespace {
// Whether a case's call has no output row at all (no query, token or softmax element): such a
// call is legal and is made (a subject must return from it without writing), but a pass then
// compared nothing, and the verdict says so.
bool writes_nothing(const Case& c) {
  if (const auto* m = std::get_if<MergeInput>(&c.input)) return int64_t(m->num_tokens) * m->num_heads == 0;
  if (const auto* x = std::get_if<SoftmaxInput>(&c.input)) return int64_t(x->rows) * x->cols == 0;
  if (const auto* q = std::get_if<QuantizeInput>(&c.input)) return int64_t(q->num_tokens) * q->num_heads == 0;
  const auto& a = std::get<AttentionInput>(c.input);
  return total_q(a) * a.num_heads == 0;
}
}  // namespace

ReplayResult replay_case(const Case& c, Subject& subject, const std::string& file_path,
                         const ReproduceContext& reproduce) {
  // A case a later round found is judged as that round judged it (Case::excused_rows).
  const ExcusedRows excused(c.excused_rows);
  ReplayResult r;
  r.reproduce_command =
      replay_command(reproduce, file_path.empty() ? std::string("FILE") : file_path, subject.name());
  uint32_t op = op_from_name(c.op);
  if (op == AC_OP_ATTENTION && !subject.has_op(op) && subject.has_op(AC_OP_SPLITKV)) op = AC_OP_SPLITKV;
  if (op == AC_OP_SPLITKV && !subject.has_op(op) && subject.has_op(AC_OP_ATTENTION)) op = AC_OP_ATTENTION;
  auto not_applicable = [&](const std::string& why, const char* verdict = "not applicable: ") {
    r.applicable = false;
    r.passed = true;
    r.verdict = verdict + why;
    return r;
  };
  if (!subject.has_op(op))
    return not_applicable("subject " + subject.name() + " has no " + c.op + " operation");
  ac_dtype dtype;
  int32_t head_size = 0, head_size_v = 0;
  if (const auto* m = std::get_if<MergeInput>(&c.input)) {
    dtype = m->dtype, head_size = m->head_size;
    if (const std::string why = undeclared_fp8_output(*m, subject.caps()); !why.empty())
      return not_applicable("subject " + why);
  } else if (const auto* x = std::get_if<SoftmaxInput>(&c.input)) {
    dtype = x->dtype;
  } else if (const auto* q = std::get_if<QuantizeInput>(&c.input)) {
    dtype = q->dtype, head_size = q->head_size;
    if (const std::string why = undeclared_fp8_output(*q, subject.caps()); !why.empty())
      return not_applicable("subject " + why);
  } else {
    const auto& a = std::get<AttentionInput>(c.input);
    dtype = a.dtype, head_size = a.head_size, head_size_v = a.head_size_v;
  }
  if (!subject.has_dtype(dtype))
    return not_applicable(std::string("subject lacks dtype ") + dtype_name(dtype));
  if (op != AC_OP_SOFTMAX && head_size > 0 && !subject.supports_head_sizes(head_size, head_size_v))
    return not_applicable("subject does not support head size " + std::to_string(head_size) +
                          (head_size_v > 0 && head_size_v != head_size
                               ? " with V head size " + std::to_string(head_size_v)
                               : ""));
  // check never gives a subject declaring AC_CAP_EMPTY_STATES_ZERO_O an empty state with a non-zero
  // O; a case written for a subject without the declaration lies outside this one's contract.
  if (const auto* m = std::get_if<MergeInput>(&c.input);
      m && (subject.caps().flags & AC_CAP_EMPTY_STATES_ZERO_O)) {
    if (const int64_t row = gen::first_empty_state_with_o(*m); row >= 0)
      return not_applicable("token " + std::to_string(row / std::max(1, m->num_heads)) + ", head " +
                            std::to_string(row % std::max(1, m->num_heads)) +
                            " holds an empty state whose O is not zero, and subject " + subject.name() +
                            " declares " + flag_name(AC_CAP_EMPTY_STATES_ZERO_O) +
                            " (AC_CAP_EMPTY_STATES_ZERO_O): it relies on O = 0 there");
  }
  // The case's property judges it where it applies; accuracy otherwise.
  // A quantiser's one rule is quantize_exact's.
  const Property* accuracy = find_property_object(op == AC_OP_QUANTIZE ? "quantize_exact" : "accuracy");
  const Property* prop = find_property_object(c.property);
  if (!prop || !applies(*prop, subject) || !(prop->info().ops & op)) prop = accuracy;
  std::string judged_by = prop->info().name;
  RunConfig cfg;
  Ctx ctx{subject, cfg, conventions_of(subject), default_budget(op, dtype), "", judged_by, {}, {}, true};
  Case run = c;
  if (op == AC_OP_ATTENTION) run.options.num_splits = 1;
  // A case written for a subject with more tilings runs this one's first, and the verdict says so:
  // a pass must not read as a pass of the tiling the file names.
  std::string ran_note;
  if (const int n = std::max(1, subject.caps().num_tilings); run.options.tiling >= n) {
    ran_note = "; ran tiling 0: the case's tiling " + std::to_string(run.options.tiling) + " is past the " +
               std::to_string(n) + " of subject " + subject.name();
    run.options.tiling = 0;
  }
  if (writes_nothing(run)) ran_note += "; the call has no output row: it returned, and nothing was compared";
  try {
    Outcome o = prop->check(ctx, run);
    if (o.ok && prop->replay_adds_accuracy()) {
      ctx.property = accuracy->info().name;
      o = accuracy->check(ctx, run);
      judged_by += "+" + accuracy->info().name;
    }
    note_flushed(o, ctx.cv);
    note_empty_state_o(o, run, ctx.cv);
    r.passed = o.ok;
    r.crashed = o.crashed;
    r.context = case_context(o.judged_or(run), &subject.caps(), o.quoted ? o.quoted->row : -1);
    if (o.quoted) r.worst_elements.push_back(worst_element(*o.quoted));
    for (const Elem& e : o.worst)
      if (!o.quoted || e.where != o.quoted->where) r.worst_elements.push_back(worst_element(e));
    if (!o.ok) r.failure_class = o.failure_class, r.message = o.message + ran_note;
    r.verdict = o.ok ? "pass (" + judged_by + ran_note + ")" : "FAIL " + o.failure_class + ": " + r.message;
  } catch (const SubjectError& e) {
    if (e.kind == SubjectError::Kind::unsupported) return not_applicable(e.what(), "refused: ");
    r.passed = false;
    r.crashed = true;
    r.verdict = std::string("CRASH ") + e.failure_class() + ": " + e.what();
  } catch (const ref::ReferenceError& e) {
    r.passed = false;
    r.verdict = std::string("invalid case: ") + e.what();
  }
  return r;
}

std::vector<TilingRow> tiling_report(Subject& subject, const RunConfig& cfg) {
  std::vector<TilingRow> rows;
  const ac_caps& caps = subject.caps();
  const bool split = subject.has_op(AC_OP_SPLITKV);
  if (!subject.has_op(AC_OP_ATTENTION) && !split) return rows;
  const gen::Domain dom = run_domain(subject, cfg);
  const rc::Gen<AttentionInput> g = gen::attention_input(dom);
  std::vector<AttentionInput> inputs;
  // The tiling report draws its own stream: case_seed with "tiling" in the property's place.
  const rc::Random base(case_seed(cfg.seed, "tiling", subject.name()));
  rc::Random random = base;
  for (int i = 0; i < std::max(1, cfg.num_cases); ++i) {
    rc::Random here = random.split();
    inputs.push_back(g(here, std::min(100, i * 100 / std::max(1, cfg.num_cases))).value());
  }
  struct Config {
    int tiling, splits;
    ac_fold fold;
  };
  std::vector<Config> configs;
  for (int t = 0; t < std::max(1, caps.num_tilings); ++t) {
    if (!split) {
      configs.push_back({t, 1, AC_FOLD_LEFT});
      continue;
    }
    for (int n : split_counts(caps))
      for (ac_fold f : tried_folds(caps)) configs.push_back({t, n, f});
  }
  const Conventions cv = conventions_of(subject);
  // Inputs outside, configurations inside: each input's reference side is computed once and freed
  // before the next input's. Each configuration's statistics gather the inputs in order.
  std::vector<std::vector<OutputStats>> stats(configs.size());
  std::vector<StatSamples> samples(configs.size());
  for (const AttentionInput& a : inputs) {
    if (cfg.cancel && cfg.cancel->load()) return rows;  // an interrupted report is not a report
    std::optional<PreparedAttention> prepared;
    for (size_t k = 0; k < configs.size(); ++k) {
      const Config& cf = configs[k];
      try {
        const AttentionOutput out = subject.attention(a, AttentionOptions{cf.tiling, cf.splits, cf.fold});
        if (!prepared) prepared.emplace(a, cv, default_budget(AC_OP_ATTENTION, a.dtype));
        accumulate_stats(stats[k], prepared->judge(out), samples[k]);
      } catch (const SubjectError& e) {
        if (e.kind != SubjectError::Kind::unsupported) throw;
      }
    }
  }
  for (size_t k = 0; k < configs.size(); ++k) {
    const Config& cf = configs[k];
    finish_stats(stats[k], samples[k]);
    for (const OutputStats& s : stats[k]) {
      TilingRow row;
      if (caps.tilings && cf.tiling < caps.num_tilings) {
        row.br = caps.tilings[cf.tiling].br;
        row.bc = caps.tilings[cf.tiling].bc;
      }
      row.num_splits = cf.splits;
      row.fold = split ? fold_name(cf.fold) : "";
      row.stats = s;
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace attncheck
