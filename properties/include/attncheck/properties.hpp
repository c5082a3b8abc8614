// Properties: named claims of the Background chapter, checked against a Subject with RapidCheck
// generators (generators.hpp) and the exact reference (reference/). Each property is one object,
// registered once from its own file under properties/src/props/ (all_properties lists them), and
// runs against every subject that has its operation. A failure is re-run to rule out
// non-determinism, shrunk by RapidCheck to a minimal case, written atomically into the corpus, and
// reported with the run's seed, RapidCheck's reproduce string and a one-line `attncheck replay`
// command.
//
// Error measures (both reported, see budgets.cpp for the formulas and their derivation):
//   ulp         |y - exact| / ulp_F(exact): the plain ulp error of the output format F.
//   cancel_ulp  |y - exact| / ulp_F(S) with S = sum_j p_j |v_j| (attention), w_a|O_a| + w_b|O_b|
//               (merge), |exact| (softmax): error relative to the scale the output is computed at,
//               so sign-cancelling outputs near zero are judged fairly. LSE: |y - exact| measured in
//               fp32 ulps of max(1, |exact|).
// The verdict uses the cancellation-aware bound (budget_ulp * ulp_F(S) plus a conditioning term
// for fp32 score and exponent rounding); `ulp` is reported, never gated.
//
// Write-ahead: before every subject call of a cuda subject (or when RunConfig::write_ahead), the
// case is written atomically to <corpus_dir>/inflight-<subject>-<property>-0.json and
// cfg.before_launch is called; the file is removed when the run returns normally, so a file left
// behind is the reproducer of a crash.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attncheck/case.hpp"
#include "attncheck/names.hpp"
#include "attncheck/reproduce.hpp"
#include "attncheck/subject.hpp"

namespace attncheck {

struct PropertyInfo {
  std::string name;          // "accuracy", "merge_sentinels", ...
  std::string description;   // one sentence
  std::string seed_section;  // the Background section it checks
  uint32_t ops = 0;          // AC_OP_* bits: runs against subjects having any of them
  bool in_gate = true;       // part of the default `gate` suite (else `full` only)
  // A pair's expected time relative to a one-launch-per-case property (several launches per case
  // cost more): `check --jobs` starts the costliest pairs first, so no long pair starts last.
  double relative_cost = 1;
  int max_cases = 0;  // > 0: at most this many cases per subject, whatever the run's --cases
  // Part of `--suite long` when in the gate and taking attention or split-KV subjects. False where
  // the cases do not grow with the suite (streamed_kv: its one case is the gate's), so the long
  // suite would repeat the gate's pair, on its time.
  bool in_long = true;
  // Which outputs the verdict holds to the error budget, so that reports print the err/budget a
  // property applied and no other: every output (accuracy and the claims built on it), the LSE only
  // (lse_convention), or none (claims about non-finite values, sentinels and overflow rows, whose
  // statistics are measured on the way but never judged against the budget).
  enum class BudgetUse { every_output, lse_only, none };
  BudgetUse budget_use = BudgetUse::every_output;
  // The share of the run's --cases this property runs (rounded up, at least one): below 1 where
  // one case already holds many (batch_invariance: a batch of up to 140 sequences and its victims).
  double case_share = 1;
};
const std::vector<PropertyInfo>& all_properties();
const PropertyInfo* find_property(const std::string& name);  // nullptr if unknown
// True when the property runs against this subject (it has one of the property's ops and, for
// properties that need them, LSE output / naive-exp declaration / split-KV capabilities).
bool property_applies(const PropertyInfo&, const Subject&);

// The most seconds a shrink of batch_invariance takes (RunConfig::batch_shrink_seconds).
constexpr double kBatchShrinkSeconds = 10;

struct RunConfig {
  uint64_t seed = 1;       // the run's seed; each (property, subject) stream is case_seed of it
  int num_cases = 100;     // RapidCheck max_success per (property, subject)
  std::string corpus_dir;  // where shrunk failures go ("" = do not write)
  bool shrink = true;
  // Seconds a failure may spend shrinking, from its discovery; past it (or on cancel) the smallest
  // failing case found so far is the counterexample and the result says the shrink was cut.
  double shrink_seconds = 20;
  // batch_invariance's shrinks stop at the lower of this and shrink_seconds: each of its candidates
  // launches a batch, its victims alone and the probes of the dimension that changed them.
  double batch_shrink_seconds = kBatchShrinkSeconds;
  int max_size = 100;               // RapidCheck size cap (<= 100); shapes scale from it
  int max_keys = 64;                // longest key row generated; raise for long rows (8192 and beyond)
  int max_batch = 0;                // batch_invariance: most sequences a batch holds (0: the backend's
                                    // default, gen::kMaxBatchHost or gen::kMaxBatchDevice)
  bool write_ahead = false;         // write-ahead for host subjects too (always on for cuda subjects)
  std::vector<ac_dtype> dtypes;     // empty: every dtype the subject has
  std::vector<int32_t> head_sizes;  // empty: every head size the generators offer the subject
  // The long suite: one attention case in four is the Llama-3-8B layer (32 query heads over 8 KV heads,
  // d = 128) over this many tokens, judged on sampled rows (sampled_rows in judge_attention.cpp); host
  // subjects get at most kHostLayerTokens of them (a host twin takes minutes for 8192). 0: none.
  int layer_tokens = 0;
  // streamed_kv's K and V bytes per case: past every GPU's L2, so that the loads lag the math.
  int64_t streamed_kv_bytes = int64_t(256) << 20;
  std::function<void(int done, int total)> progress;  // called after each case
  const std::atomic<bool>* cancel = nullptr;          // set: stop after the current case
  std::function<void(const Case&)> before_launch;     // called before each subject call
  ReproduceContext reproduce;  // how a failure's reproduce command is started (reproduce.hpp)
  // Distinct failures kept per (subject, property): after the first, the search goes on, ignoring
  // failures of a defect already found and steering the generators away from its row kind.
  int max_failures = 3;
};
constexpr int kMaxFailuresLimit = 16;  // --max-failures' range is 1..kMaxFailuresLimit

struct OutputStats {
  std::string dtype;                              // "fp16" | "bf16" | "fp32"
  std::string output;                             // "O" | "LSE" | "Y" (softmax)
  int64_t count = 0;                              // elements measured (finite exact value)
  int64_t nonfinite = 0;                          // NaN/Inf outputs where the exact value is finite
  double max_ulp = 0, p99_ulp = 0, mean_ulp = 0;  // plain ulp error
  double max_cancel_ulp = 0, p99_cancel_ulp = 0;  // cancellation-aware error (LSE: scaled fp32 ulps)
  // The verdict's quantity: error / allowed budget (an element passes when it is at most 1), over
  // the finite outputs (count - nonfinite). Quantiles are the order statistic at ceil(q n) - 1.
  double p50_ratio = 0, p99_ratio = 0, max_ratio = 0;
  // Counts of plain ulp errors per bin; bin i holds [edge(i), edge(i+1)), see ulp_histogram_edges.
  std::vector<int64_t> histogram;
};
// 0, 0.5, 1, 2, 4, ..., 2^20, +inf (23 edges, 22 bins). Shards merge histograms by adding.
const std::vector<double>& ulp_histogram_edges();

// Run-to-run spread of a subject declared nondeterministic by design: of `compared` outputs (O
// and LSE elements over every pair of launches on the same input) `differing` had other bits, at
// most `max_ulps` apart (representable values between them, +inf for a NaN against a number; near
// zero, where a cancelling output crosses binades, this is large for a small difference) and at
// most `max_budget` accuracy budgets apart (|first - second| / allowed, the verdict's own scale:
// two launches within budget are at most 2 apart).
//
// batch_invariance also probes which scheduling dimension changed a victim's bits (batch_invariance.cpp
// says how): `probed` cases were probed, `triggered[d]` of them changed under dimension d's probe
// (kBatchDimensionNames[d]; a case may count under several) and `none_isolated` under none (only the
// whole batch changed the bits).
enum BatchDimension { kBatchSize, kNeighbourLengths, kPosition, kDecodePrefillMix, kBatchDimensions };
// The dimensions' names, in BatchDimension order: messages, reports and report.json's keys.
inline constexpr std::array<const char*, kBatchDimensions> kBatchDimensionNames = {
    "batch size", "neighbour lengths", "position", "decode/prefill mix"};
// "batch size, position": the names of the dimensions whose bit (1 << d) is set in `mask`, or
// "none isolated" for none.
std::string batch_dimensions_phrase(uint32_t mask);
struct Spread {
  int64_t compared = 0, differing = 0;
  double max_ulps = 0, max_budget = 0;
  int64_t probed = 0, none_isolated = 0;
  std::array<int64_t, kBatchDimensions> triggered{};
  void add(const Spread& o) {
    compared += o.compared;
    differing += o.differing;
    max_ulps = std::max(max_ulps, o.max_ulps);
    max_budget = std::max(max_budget, o.max_budget);
    probed += o.probed;
    none_isolated += o.none_isolated;
    for (size_t d = 0; d < triggered.size(); ++d) triggered[d] += o.triggered[d];
  }
};

// split_order_drift's comparison of output bits at one split count, summed over the cases run. The
// units are O outputs (not in a row a naive-exp hazard makes unpredictable, exact value finite):
// fold_* compares the fold orders at this split count (counted when the subject has two or more),
// splits_* compares each fold order here with the same fold order at num_splits = 1 (counted from
// num_splits = 2). *_differ: outputs whose bits differ in some such pair. *_max_ulp: the largest
// |a - b| of such a pair in the unit of cancel_ulp, ulp_F(S) (S = sum_j p_j |v_j|, the scale the
// output is computed at), so an output that cancels to near zero is not measured in the tiny ulps
// of its own value; +inf when one of the pair is not finite. An output the judge's fast path
// cannot place in one binade of S counts in the smaller unit (never understated).
struct DriftCounts {
  int num_splits = 0;  // 0 in drift_total's sum over every split count
  int64_t fold_outputs = 0, fold_differ = 0;
  double fold_max_ulp = 0;
  int64_t splits_outputs = 0, splits_differ = 0;
  double splits_max_ulp = 0;
  double fold_differ_fraction() const {
    return fold_outputs ? double(fold_differ) / double(fold_outputs) : 0;
  }
  double splits_differ_fraction() const {
    return splits_outputs ? double(splits_differ) / double(splits_outputs) : 0;
  }
};
// Adds `from` into `into` by num_splits (counts add, maxima take the max), kept in num_splits order:
// how cases accumulate in a run and shards in `report merge`.
void add_drift(std::vector<DriftCounts>& into, const std::vector<DriftCounts>& from);
// Every split count together (num_splits 0).
DriftCounts drift_total(const std::vector<DriftCounts>&);

// Where a property run's seconds went, shrinking included: drawing cases, the subject's calls
// (staging, launch and read-back), judging outputs against the reference, and writing write-ahead
// cases. The rest is rules and bookkeeping.
struct TimeSplit {
  double generate = 0, subject = 0, judge = 0, write_ahead = 0;
  // Of judge: the seconds in the exact (MPFR) path's attention rows that the fast path escalated,
  // their reference computed or reused, and measured (empty rows, always exact, are left out).
  double judge_exact = 0;
  TimeSplit& operator+=(const TimeSplit& o) {
    generate += o.generate;
    subject += o.subject;
    judge += o.judge;
    write_ahead += o.write_ahead;
    judge_exact += o.judge_exact;
    return *this;
  }
};

// One output element of a failing case, as a failure line, report.json and replay quote it.
struct WorstElement {
  std::string where;          // "O[token=0,head=1,d=3]", "LSE[token=0,head=1]", "Y[row=0,col=2]"
  std::string input_bits;     // the inputs that matter, as hexfloats (a logit, an LSE pair, ...)
  std::string exact;          // exact value, 36 significant digits
  std::string rounded_exact;  // exact rounded once to the output format, hexfloat
  std::string output_bits;    // the subject's output: 0x.... and hexfloat
  double ulp = 0;             // plain ulp error
  double cancel_ulp = 0;      // cancellation-aware error
  double ratio = 0;           // |error| / allowed: the verdict's quantity (<= 1 passes)
  double allowed = 0;         // the budget in absolute terms
  int64_t row = -1;           // token * heads + head (softmax: the row); -1 unknown
};

// A failure's signature: "CLASS, OUT, ROW KIND, DTYPE", for example "accuracy, O, empty row, fp16"
// (OUT is O, LSE or Y, or "-" when the message quotes no element; ROW KIND is case_context's
// row_kind of the quoted row, "any row" when none). Two failures are distinct defects when their
// class or row kind differ: one defect shows in every dtype it touches and often in O and LSE alike.

// A failure after the first one of a (subject, property), of another defect.
struct DistinctFailure {
  std::string signature, failure_class, message, context, counterexample_summary;
  WorstElement quoted;
  std::string corpus_file;        // "" when none was written
  std::string reproduce_command;  // replay_command of corpus_file, or check_command
  int cases_to_failure = -1;      // cases its own search ran before it
};

struct PropertyResult {
  // interrupted: cancelled (Ctrl-C) before any case ran; passed needs at least one case run.
  using Status = RunStatus;
  std::string property, subject;
  Status status = Status::passed;
  // failed: "accuracy" | "nonfinite" | "overflow" | "empty_row" | "sentinel" | "lse_base" |
  // "lse_layout" | "drift" | "nondeterministic" | "split"; crashed: "device_fault" | "transport_failed"
  // (a worker died, hung or broke the protocol) | "internal".
  std::string failure_class;
  int cases_run = 0, failures = 0;
  std::vector<OutputStats> stats;
  std::vector<std::string> corpus_files;
  std::string message;                 // one line; the worst element of the shrunk case
  std::string context;                 // case_context of the shrunk case (its shape and flags)
  WorstElement quoted;                 // the element the message quotes (where "": none)
  std::string counterexample_summary;  // describe_size of the shrunk case, plus its note
  CaseSize counterexample_size;
  uint64_t seed = 0;              // the run's seed
  std::string rc_reproduce;       // RapidCheck reproduce string ("" when passed)
  std::string reproduce_command;  // replay_command or, without a corpus file, check_command
  double seconds = 0;
  int cases_to_first_failure = -1;  // 1-based count of cases run when the first failure appeared
  double seconds_to_first_failure = -1;
  // The first failing case's margin: its worst element's error in accuracy budgets (|error| /
  // allowed) when it failed on accuracy or split_equals_whole's merge; +inf when it broke a contract that has
  // no budget (a non-finite output, an empty row, changed bits, a convention); -1 while nothing failed.
  double first_failure_budgets = -1;
  double shrink_seconds = 0;  // from the first failure to the end of shrinking
  bool shrink_cut =
      false;  // shrinking stopped at its time bound (shrink_seconds, batch_shrink_seconds) or on cancel
  double max_drift_ulp = 0;  // split_order_drift: largest pairwise drift, ulps of the exact value
  // split_order_drift: the output bits that differ, per split count.
  std::vector<DriftCounts> drift_by_splits;
  Spread spread;  // run_to_run on a subject declared nondeterministic (else empty)
  // Attention rows judged during the run (shrinking included): rows_judged in all, rows_escalated of
  // them judged by the exact MPFR path instead of the certified fast one (undecided, failing or
  // uncertified rows; every non-empty row under ATTNCHECK_JUDGE=exact), rows_uncertified of those
  // the fast path did not apply to (NaN/inf inputs, logits beyond 2^32).
  int64_t rows_judged = 0, rows_escalated = 0, rows_uncertified = 0;
  TimeSplit time_split;
  std::string signature;                        // the failure's signature (above; failed only)
  std::string row_kind;                         // row_kind of the quoted element's row ("" when none)
  std::vector<DistinctFailure> other_failures;  // up to max_failures - 1, in the order found
};

// Runs one property against one subject. Never throws for subject failures: a SubjectError of kind
// unsupported skips the case, device_fault / internal give Status::crashed (the write-ahead file
// then holds the case). Throws std::invalid_argument for an unknown property name.
PropertyResult run_property(const std::string& name, Subject& subject, const RunConfig& cfg);
// The check flags that shape a run's case stream besides --seed (--cases, and
// --max-keys and --dtype where they are not the defaults): a pasted reproduce command needs them.
std::string stream_flags(const RunConfig&);
constexpr int kHostLayerTokens = 512;

// Replay: re-run one case against a subject, judged by the property the case names (accuracy and
// no_spurious_nonfinite when it names none or one that does not apply to the subject).
struct ReplayResult {
  bool passed = false;
  bool applicable = true;  // false: the subject lacks the op/dtype/head size, or refused the case
  bool crashed = false;    // the subject raised, crashed, hung or exited (not passed either)
  std::string verdict;     // one line: "pass", "FAIL accuracy: ...", "not applicable: ...", "refused: ..."
  std::string failure_class, message;        // of a judged failure: the verdict's two parts
  std::vector<WorstElement> worst_elements;  // up to 5: the one the verdict quotes, then worst first
  std::string context;                       // case_context of the case (its shape and flags)
  std::string reproduce_command;             // attncheck replay FILE --subject NAME
};
ReplayResult replay_case(const Case&, Subject&, const std::string& file_path = "",
                         const ReproduceContext& reproduce = {});
// Why replay_case cannot judge a case as its file names it, known before any subject runs: a
// property attncheck does not have (a misspelt one would otherwise be judged by accuracy alone), or
// a case its property cannot judge (fp8_amax's without input.amax). "" when it can; a case without a
// property is accuracy's.
std::string replay_problem(const Case&);

// Tiling and split report: the same inputs through every tiling of an attention subject and, for
// split-KV subjects, every num_splits in 1..max_splits and every declared fold order.
struct TilingRow {
  int br = 0, bc = 0, num_splits = 1;
  std::string fold;  // "left" | "right" | "tree" | "" (not split-KV)
  OutputStats stats;
};
std::vector<TilingRow> tiling_report(Subject&, const RunConfig&);

// Chunked prefill reproduction. A scenario (corpus/prefill/*.json, format
// in corpus/README.md) lists requests (cached prefix length, prefix hit or miss, new tokens) and a
// chunk size; each chunk of each request runs prefix attention (non-causal over the cached prefix,
// zero keys on a miss), suffix attention (causal over the chunk's own tokens and the earlier
// chunks), and the merge of the two.
struct PrefillFinding {
  int request = -1, chunk = -1, token = -1, head = -1;  // token: index within the request
  std::string stage;                                    // "prefix" | "suffix" | "merge"
  std::string value;                                    // "nan", "inf", ...
  std::string detail;                                   // the inputs of that element (LSE pair for a merge)
};
struct PrefillReport {
  bool ok = true;  // no non-finite value anywhere
  int requests = 0, chunks = 0, rows_checked = 0;
  std::vector<PrefillFinding> findings;  // the first non-finite value, then one per stage/request
  std::string summary;                   // one line
};
struct PrefillScenarioError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The largest scenario file read (a scenario is a reproduction: a few hundred bytes).
constexpr size_t kMaxScenarioFileBytes = size_t(16) << 20;
// Parses and validates a scenario's text (format, fields, stated bounds) without running it:
// PrefillScenarioError with one line on anything run_prefill_text would refuse.
void validate_prefill_scenario(const std::string& scenario_json);
// Whether the file at path is a valid scenario: what `replay` tells apart from a malformed case.
bool is_prefill_scenario_file(const std::string& path);
// The scenario's estimated peak memory in bytes (memory.hpp's model), from its shapes alone;
// PrefillScenarioError as validate_prefill_scenario.
double prefill_peak_bytes(const std::string& scenario_json);
PrefillReport run_prefill(const std::string& scenario_json_path, Subject& attention, Subject& merge);
PrefillReport run_prefill_text(const std::string& scenario_json, Subject& attention, Subject& merge);

}  // namespace attncheck
