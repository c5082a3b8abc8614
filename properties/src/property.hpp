// The property interface. A property is one object in one file under props/: its PropertyInfo
// (name, description, Background sections, ops, suite), which subjects it applies to beyond
// having one of its ops, the generator of its cases, its check and its replay. The file registers
// the object once with AC_REGISTER_PROPERTY; the runner (properties.cpp) knows only this interface.
// The rules several properties share (rule_accuracy, rule_empty, rule_overflow, rule_lse) are in
// rules.cpp; every budget they compare against is in budgets.cpp.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/generators.hpp"
#include "internal.hpp"

namespace attncheck::detail {

// Outcome of one check of one case.
struct Outcome {
  bool ok = true;
  bool crashed = false;
  std::string failure_class, message;
  std::vector<Elem> worst;  // failing elements, worst first (up to 5)
  // The element the message quotes (fail_at), which report.json, check's line and replay then give
  // with the same numbers; none when the message quotes no element.
  std::optional<Elem> quoted;
  // The case the message and the quoted element speak of where a check ran one built from the drawn
  // case (declared_variants' items): the failure's words, row kind and signature read it. None: the
  // drawn case. The corpus keeps the drawn case, from which the check builds this one again.
  std::shared_ptr<const Case> judged;
  const Case& judged_or(const Case& drawn) const { return judged ? *judged : drawn; }
  std::string digest;  // the output bits, for the determinism re-run
  double drift = 0;
  Spread spread;                          // run_to_run on a subject declared nondeterministic
  std::vector<DriftCounts> drift_counts;  // split_order_drift, per split count
};

// What a check needs besides the case: the subject, its conventions and budget, the write-ahead
// file, and the statistics of the cases counted so far.
struct Ctx {
  Subject& subject;
  const RunConfig& cfg;
  Conventions cv;
  Budget budget;
  std::string write_ahead_path;
  std::string property;
  std::vector<OutputStats> stats;
  StatSamples samples;
  bool counting = true;
};

class Property {
 public:
  explicit Property(PropertyInfo info) : info_(std::move(info)) {}
  virtual ~Property() = default;
  const PropertyInfo& info() const { return info_; }

  // What the subject must declare beyond one of info().ops; `op` is the op the property runs on it.
  virtual bool applies_to(const Subject&, uint32_t /*op*/) const { return true; }
  // Draws the input of one case of `op` into c.input; called inside the case generator, so each
  // `*gen` here is one RapidCheck draw (shrinkable). The default is the op's everything-generator.
  virtual void draw_input(Case& c, const gen::Domain&, uint32_t op) const;
  // Split-KV cases draw num_splits and fold order at random unless the check sweeps them itself.
  virtual bool draws_split_options() const { return true; }
  // False where a smaller case cannot show the failure (streamed_kv: a case that fits in L2): the
  // first failing case is then the counterexample, unshrunk.
  virtual bool shrinks() const { return true; }
  // The seconds a failure may spend shrinking, from its discovery (the run's shrink_seconds unless
  // the property bounds it further).
  virtual double shrink_seconds(const RunConfig& cfg) const { return cfg.shrink_seconds; }
  // Runs the subject on the case (calling before_launch before each subject call) and judges it.
  virtual Outcome check(Ctx&, const Case&) const = 0;
  // A replay that passes this property's check is also held to the accuracy budget: true for the
  // claims that check one rule (a sentinel, a convention) and would otherwise pass a wrong answer.
  virtual bool replay_adds_accuracy() const { return false; }
  // Why a case read from a file is none this property can judge (one line), or "": checked before
  // a replay runs anything, so an inconsistent file is an input error, never a failure of a subject.
  virtual std::string case_problem(const Case&) const { return ""; }

 private:
  PropertyInfo info_;
};

// `info` with PropertyInfo::budget_use set: for the properties whose verdict applies the budget to
// the LSE only, or to no output.
inline PropertyInfo with_budget_use(PropertyInfo info, PropertyInfo::BudgetUse use) {
  info.budget_use = use;
  return info;
}

// The registry. `position` orders `attncheck list`, the suites and the reports' entries.
struct PropertyRegistration {
  PropertyRegistration(int position, std::unique_ptr<Property>);
};
#define AC_REGISTER_PROPERTY(position, Type)                                              \
  static const ::attncheck::detail::PropertyRegistration ac_registration_##Type(position, \
                                                                                std::make_unique<Type>())

const Property* find_property_object(const std::string& name);  // nullptr if unknown

// Helpers for checks.
// Before every subject call: the write-ahead file holds the case (unless `write` is false: the
// case is already there, as for a second launch on the same case) and the run's hook sees it.
void before_launch(Ctx&, const Case&, bool write = true);
std::string digest_bits(const Bits& out, const std::vector<float>& lse);
// How far apart two values of one format are: the count of representable values between them
// (0 for equal bits, and for +0 against -0), +inf when either is NaN.
double ulps_apart(ac_dtype, uint32_t a, uint32_t b);
// How two launches' outputs on input `a` first differ bitwise: "differ at O[token=..,head=..,d=..]:
// first <bits>, <second_name> <bits>" (O before LSE) or "returned outputs of different sizes"; ""
// when every bit agrees.
std::string first_difference(const AttentionInput& a, const AttentionOutput& first,
                             const AttentionOutput& second, const char* second_name = "second");
// Two launches' outputs compared element by element (O and LSE) into a Spread.
Spread spread_of(ac_dtype, const AttentionOutput& first, const AttentionOutput& second);
// The largest |first - second| / allowed over the judged elements of J_first, the judgement of
// `first` (rows the judgement skips, and non-finite exact values, are left out).
double budget_spread(const AttentionInput& a, const Judgement& J_first, const AttentionOutput& first,
                     const AttentionOutput& second);
// Calls f(e, idx, col) for each element of an attention judgement J of input `a` whose verdict
// is measured: exact value finite, row not skipped. For an O element idx is its index in the output
// and col its column; for an LSE element idx is its row and col is -1.
template <class F>
void for_each_measured(const AttentionInput& a, const Judgement& J, F f) {
  int64_t prev_row = -1, col = 0;
  for (const Elem& e : J.elems) {
    if (e.row != prev_row) {
      prev_row = e.row;
      col = 0;
    }
    const int64_t c = e.out == Out::O ? col++ : -1;
    if (!e.exact_finite || J.row_skipped(e.row)) continue;
    f(e, c < 0 ? size_t(e.row) : size_t(e.row * a.dv() + c), c);
  }
}
void keep_worst(Outcome&, const Elem&);
std::string elem_line(const Elem&);
void fail(Outcome&, const std::string& failure_class, const std::string& message);
// keep_worst, then fail with `prefix` and the element's line; the first failure's element becomes
// the outcome's quoted one.
void fail_at(Outcome&, const std::string& failure_class, const std::string& prefix, const Elem&);
// A failure whose quoted element is a flushed zero or lies near fp32's subnormal range gains one
// clause naming the declaration that would cover it (ftz_arithmetic, or flushes_subnormals for a
// zero output of a subnormal exact value), unless the subject declares it already.
void note_flushed(Outcome&, const Conventions&);
// A merge failure whose quoted O element lies on a row of two empty states, one of which holds a
// non-zero O, gains one clause naming empty_states_zero_o (a guard that copies or averages those O
// is right only when producers write zeros there), unless the subject declares it already.
void note_empty_state_o(Outcome&, const Case&, const Conventions&);
// to_worst with the element's error / budget and absolute allowance, for the quoted element and
// replay's list.
WorstElement worst_element(const Elem&);
void record_stats(Ctx&, const Judgement&);  // only while counting (before the first failure)
// Runs the subject once on the case, sets o.digest, judges the output and records its stats.
Judgement run_once(Ctx&, const Case&, Outcome& o);

// Rules over a judgement, shared by several properties (rules.cpp).
// Every element within budget; finite_only: only "no NaN or Inf where the exact value is finite".
void rule_accuracy(Outcome&, const Judgement&, bool finite_only);
// One launch judged by rule_accuracy: the whole check of accuracy, fp8_output and
// no_spurious_nonfinite (finite_only), which differ in their cases.
Outcome check_accuracy(Ctx&, const Case&, bool finite_only);
// Empty rows: O = 0 exactly and the declared LSE sentinel.
void rule_empty(Outcome&, const Judgement&, const Conventions&);
// Non-finite output exactly on the rows a declared naive exp overflows.
void rule_overflow(Outcome&, const Judgement&, const Conventions&);
// LSE in the declared base and layout; a failure is classified as base or layout confusion when
// the other reading matches.
void rule_lse(Outcome&, const Judgement&, const Conventions&);

}  // namespace attncheck::detail
