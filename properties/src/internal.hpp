// Shared internals of properties/: bit conversions, a subject's declared conventions, and the
// element-by-element judgement of an output against the exact reference (measuring an element:
// measure.cpp; the judges: judge_attention.cpp, judge_merge.cpp, judge_softmax.cpp; statistics:
// stats.cpp). Every property is a rule over a Judgement; replay prints its worst elements.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attncheck/budgets.hpp"
#include "attncheck/generators.hpp"
#include "attncheck/properties.hpp"
#include "attncheck/reference/exact.hpp"
#include "attncheck/reference/format.hpp"
#include "attncheck/reference/fp8.hpp"
#include "attncheck/reference/ulp.hpp"

namespace attncheck::detail {

using ref::Real;

ref::Format fmt(ac_dtype);
double decode(ac_dtype, uint32_t bits);  // fp32, fp16, bf16 and the FP8 KV formats, exactly
ref::Fp8Format fp8_format(ac_dtype);     // AC_DTYPE_E4M3: e4m3fn; E5M2: e5m2; E4M3FNUZ: e4m3fnuz
// Element i of K or V (t is a.k or a.v; row_width its head size; rows a.kv_row_sequences()) as the
// kernel was given it: the stored value times its descale (exact in double: at most 24 bits times
// a float's 24).
double kv_value(const AttentionInput& a, const std::vector<int32_t>& rows, const Bits& t, int64_t row_width,
                size_t i);
uint32_t round_bits(ac_dtype, double x);  // correct single rounding
bool finite_bits(ac_dtype, uint32_t bits);
std::string hexfloat(ac_dtype, uint32_t bits);
std::string hexfloat(double);
// ln of the smallest value whose rounding to the format is +inf (fp16: ln 65520 = 11.0901).
double overflow_log_threshold(ac_dtype);
// ln of the smallest normal of the format (fp16: ln 2^-14 = -9.70).
double min_normal_log(ac_dtype);

struct Conventions {
  ref::LseBase base = ref::LseBase::e;
  int empty_sign = -1;
  bool naive_exp = false;
  bool scores_rounded = false;  // AC_FEAT_SCORES_IN_INPUT_TYPE: S stored in the input format
  bool flushed_exp = false;     // AC_FEAT_FLUSHED_EXP: attention weights below 2^-126 may be 0
  bool p_e4m3 = false;          // AC_FP8_P_E4M3: an FP8 call's P held in e4m3fn (budgets.cpp)
  bool truncated_sums = false;  // AC_FP8_TRUNCATED_SUMS: e4m3 products on the tensor cores (budgets.cpp)
  bool saturate = false;        // AC_FP8_SATURATE: a quantiser's, an FP8 merge's or FP8 O's casts saturate
  bool has_lse = false;         // attention: writes LSE (AC_FEAT_LSE); merge always has one
  ac_lse_layout layout = AC_LSE_TOKENS_HEADS;
  // Contract bits of ac_caps.flags (version 2).
  bool empty_lse_undefined = false;  // an empty row's LSE is not judged
  bool flushes_subnormals = false;   // a zero may stand for an exact subnormal (budgets.cpp)
  bool refuses_zero_keys = false;    // never called with a sequence of 0 keys
  bool nondeterministic = false;     // launches may differ in bits (AC_CAP_NONDETERMINISTIC)
  bool ftz_arithmetic = false;       // FTZ / DAZ fp32 arithmetic (AC_CAP_FTZ_ARITHMETIC, budgets.cpp)
  bool batch_invariant = false;      // a sequence's bits do not depend on its batch (AC_CAP_BATCH_INVARIANT)
  bool empty_states_zero_o = false;  // a merge's empty states hold O = 0 (AC_CAP_EMPTY_STATES_ZERO_O)
};
Conventions conventions_of(const Subject&);

enum class Out { O, LSE, Y };
const char* out_name(Out);

struct Elem {
  Out out = Out::O;
  ac_dtype dtype = AC_DTYPE_F32;  // format the output is stored in (LSE: fp32)
  int64_t row = 0;                // token * heads + head (softmax: row)
  std::string where, inputs;
  bool exact_finite = true;
  Real exact;        // in the subject's declared base for LSE
  Real exact_other;  // LSE only: the exact value in the other base
  double out_value = 0;
  uint32_t out_bits = 0;
  bool out_finite = true;
  double ulp = 0;     // plain ulp error (inf for nonfinite classes)
  double cancel = 0;  // cancellation-aware error
  // The unit of `cancel` (ulp_F(S) for O and Y; the scaled fp32 ulp for LSE); 0 for a non-finite
  // output. A fast element whose S may lie on either side of a power of two, with an error near zero
  // in both units, holds the smaller one, so a difference measured in it is never understated.
  double cancel_unit = 0;
  double ratio = 0;    // |error| / allowed (<= 1 passes)
  double allowed = 0;  // the budget in absolute terms
  bool within = true;  // meets the budget (or the expected non-finite value)
  // The exact path's allowance lies in [allowed_lo, allowed_hi]: equal to `allowed` when the element
  // was judged exactly; an interval when it was judged by the fast path (judge_attention.cpp), whose
  // allowance depends on an LSE it knows only to within its bound. `allowed` is then allowed_lo.
  double allowed_lo = 0, allowed_hi = 0;
  // Judged by the certified fast path: `exact` holds its fp64 approximation and `inputs` is empty
  // (such an element is within budget, and only failing elements are printed).
  bool fast = false;
  // ulp_F(exact) is known: always for the exact path; for a fast element unless the interval holds
  // a power of two (the error is then near zero in either binade's ulp, and `ulp` is right).
  bool binade_known = true;
  // An FP8 output (measure_fp8): the code of `exact` under the subject's overflow declaration
  // (saturating or not), what a report prints as the exact value rounded; -1 for other outputs.
  int32_t fp8_rounded = -1;
};

// The measuring the judges share (measure.cpp).
inline double to_d(const Real& x) { return x.convert_to<double>(); }
// Fills the measured fields of an element whose stored output is `bits` in `d`: its error against
// e.exact in ulps of the format, in ulps of `scale_ulp_of` (cancel), and against `allowed`.
void measure_bits(Elem& e, ac_dtype d, uint32_t bits, double scale_ulp_of, double allowed);
// The same for an FP8 output `code` of format d (a quantiser's, a merge's) whose value before the
// cast may be anywhere in [lo, hi] (NaN for a NaN), the cast's overflow as `ov`: within when the
// code's value lies between those of the codes of lo and of hi (the rounding is monotone, so those
// are every code a value of the interval rounds to; a NaN end's side open), or both are NaN; ulp the
// codes between it and the nearer end's. Returns the codes of lo and of hi.
std::pair<uint32_t, uint32_t> measure_fp8(Elem& e, ac_dtype d, uint32_t code, double lo, double hi,
                                          ref::Fp8Overflow ov);
// An FP8 output (a merge's, an attention's AC_FP8_OUT) whose fp32 value before the division by
// `scale` lies in iv (budgets.cpp fp8_output_interval, or the caller's tighter one): e.exact becomes
// the exact value over the scale, measure_fp8 judges `code` (NaN allows NaN alone), and e.inputs
// gains the scale and the codes allowed.
void measure_fp8_output(Elem& e, ac_dtype d, uint32_t code, Fp8Interval iv, double scale,
                        ref::Fp8Overflow ov);
// "0x39 (0x1.2p+0)": an FP8 code and its value.
std::string fp8_code_text(ac_dtype d, uint32_t code);
// The same for an LSE output `y` (fp32), its cancel unit the fp32 ulp scaled to max(1, |exact|).
void measure_lse(Elem& e, float y, double allowed);
// "O[token=t,head=h,d=c]"; without ",d=" when c < 0 (an LSE).
std::string where_th(const char* what, int64_t t, int64_t h, int64_t c);
// One O element of an attention or merge row, before it is measured.
Elem o_elem(int64_t row, int64_t t, int64_t h, int64_t c, const Real& exact);

struct RowInfo {
  bool empty = false;      // no visible key / all -inf / both merge states empty
  bool sink = false;       // attention with a sink: an empty row's LSE is the sink, judged in budget
  bool hazard = false;     // naive-exp overflow predicted: exact exp rounds to +inf
  bool underflow = false;  // naive-exp: the largest term is subnormal or zero in the format
  bool ambiguous = false;  // a term sits within rounding of the overflow threshold
  int64_t visible = 0;
};

// How the rows of an attention judgement were computed (judge_attention).
struct JudgeCounts {
  int64_t rows = 0;              // rows judged
  int64_t rows_escalated = 0;    // rows judged by the exact (MPFR) path, the uncertified included
  int64_t rows_uncertified = 0;  // of which the fast path did not apply at all (NaN/inf inputs, ...)
  JudgeCounts& operator+=(const JudgeCounts& o) {
    rows += o.rows;
    rows_escalated += o.rows_escalated;
    rows_uncertified += o.rows_uncertified;
    return *this;
  }
};

// The maxima an FP8 call asked for (AttentionInput::want_amax, AC_FP8_AMAX): the intervals the exact
// path allows the subject's largest weight of P and largest |O| (judge_row_exact, budgets.cpp
// amax_weight_log_allowance and amax_o_allowance), the exact maxima and the rows holding them.
// complete: every row of the input was judged (a sampled judgement bounds nothing).
// p_unjudged / o_unjudged: a row's exact LSE, or an element of the exact O, is not a number (a NaN
// code in the cache): that maximum is not judged.
struct AmaxBounds {
  bool asked = false, complete = false, p_unjudged = false, o_unjudged = false;
  double p_lo = 0, p_hi = 0, p_exact = 0, o_lo = 0, o_hi = 0, o_exact = 0;
  int64_t p_row = -1, o_row = -1;
  std::vector<float> got;  // the subject's two values (AttentionOutput::amax)
};

struct Judgement {
  std::vector<Elem> elems;
  std::vector<RowInfo> rows;
  int64_t num_rows = 0, num_heads = 1;
  JudgeCounts counts;
  AmaxBounds amax;
  bool row_skipped(int64_t r) const { return rows[r].hazard || rows[r].underflow || rows[r].ambiguous; }
};

// The declared contracts applied to a finished judgement: the empty rows' LSE elements of a subject
// whose empty LSE is undefined pass unjudged, and a flushing subject's zeros pass where
// flushed_zero_allowed says so. Every judge_* ends with it.
void apply_declared_contracts(Judgement&, const Conventions&);

// Which reference judges attention rows. `fast`: the certified fp64 path (reference/fast.hpp), each
// row escalated to the exact path unless every verdict of the row is certain (the argument is at
// judge_attention.cpp); the Judgement's verdicts are identical to `exact`'s. `exact`:
// every row through exact_attention_row (MPFR), as a comparison. The process default is `fast`,
// or `exact` when the environment variable ATTNCHECK_JUDGE is "exact".
enum class JudgePath { fast, exact };
JudgePath default_judge_path();
void set_default_judge_path(JudgePath);
// Counts of every attention row judged on this thread (judge_attention and split_equals_whole's
// rows of the whole), for a property run's report; reset by the runner.
JudgeCounts& thread_judge_counts();
// The row kinds (case_context.hpp) a later round of a search leaves unjudged on this thread while
// an ExcusedRows lives: the avoidable kinds of the defects it has already reported (run_round).
// Every attention and merge judgement drops the elements of rows of those kinds, so a case holding
// such rows is still judged on its others: a defect that shows only beside them (a sequence after
// one of no keys, whose queries are empty rows) is found, where leaving such cases out would hide it.
class ExcusedRows {
 public:
  explicit ExcusedRows(std::vector<std::string> kinds);
  ~ExcusedRows();
  ExcusedRows(const ExcusedRows&) = delete;
  ExcusedRows& operator=(const ExcusedRows&) = delete;

 private:
  std::vector<std::string> before_;
};
void drop_excused_rows(Judgement&, const AttentionInput&);
void drop_excused_rows(Judgement&, const MergeInput&);
// Where this thread's property run spends its seconds (PropertyResult::time_split); reset by the
// runner. AddSeconds adds the lifetime of a scope to one of its fields.
TimeSplit& thread_time_split();
class AddSeconds {
 public:
  explicit AddSeconds(double& to) : to_(to), start_(std::chrono::steady_clock::now()) {}
  AddSeconds(const AddSeconds&) = delete;
  AddSeconds& operator=(const AddSeconds&) = delete;
  ~AddSeconds() { to_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  double& to_;
  std::chrono::steady_clock::time_point start_;
};

Judgement judge_attention(const AttentionInput&, const AttentionOutput&, const Conventions&, const Budget&,
                          JudgePath path = default_judge_path());
// judge_attention for several outputs of one input: the reference side (rows, bases, fast and exact
// rows) is computed once, each judge() only measures the output. `a` must outlive it.
class PreparedAttention {
 public:
  PreparedAttention(const AttentionInput& a, const Conventions&, const Budget&);
  ~PreparedAttention();
  PreparedAttention(const PreparedAttention&) = delete;
  PreparedAttention& operator=(const PreparedAttention&) = delete;
  Judgement judge(const AttentionOutput&, JudgePath = default_judge_path()) const;
  // The exact path's judgement of the given rows (token * heads + head) alone: their elements, every
  // row's flags; the exact rows computed here are kept for the next judgement.
  Judgement judge_exact_rows(const AttentionOutput&, const std::vector<int64_t>& rows) const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};
// The generators' domain for one subject under a run's limits (properties.cpp).
gen::Domain run_domain(const Subject&, const RunConfig&);
// Judgements split_order_drift holds at once (the first configuration's and the latest distinct
// outputs'); the memory model (memory.cpp) counts them.
constexpr int kHeldJudgements = 3;
// The rows (token * heads + head) judge_attention judges of an input with T query tokens and H
// heads: empty for every row, which is the case up to kJudgeEveryRowUpTo rows. Above it (the long
// suite's layer: 8192 x 32 = 262,144 rows of up to 8192 keys, hours for any reference) a sample, a
// function of T and H alone so that a replay judges the same rows: the first and the last query row
// of every head, and kSampledRows more spread by splitmix64; sorted, without repeats.
constexpr int64_t kJudgeEveryRowUpTo = 4096, kSampledRows = 512;
std::vector<int64_t> sampled_rows(int64_t T, int64_t H);
Judgement judge_merge(const MergeInput&, const MergeOutput&, const Conventions&, const Budget&);
Judgement judge_softmax(const SoftmaxInput&, const SoftmaxOutput&, const Conventions&, const Budget&);
// A quantiser's codes, element by element, against the codes plugin_abi.h's AC_OP_QUANTIZE
// contract allows (judge_quantize.cpp): each element's `within` says whether its code is one of
// them, `inputs` names x, the scale and the codes allowed, and its row is (token, head).
Judgement judge_quantize(const QuantizeInput&, const QuantizeOutput&, const Conventions&);
// The failure class of a quantiser's element outside the contract: "nan_hidden" (x is NaN, the code
// is not), "overflow" (|x / scale| past the format's largest value, or infinite: what the saturation
// declaration governs) or "rounding".
const char* quantize_failure_class(const QuantizeInput&, const Elem&);

// Visible keys of query `token` (global index) per the attention conventions: [seq key begin, end)
// and the visibility of each key of its sequence.
struct RowKeys {
  int64_t seq = 0, key_begin = 0, num_keys = 0;
  std::vector<uint8_t> visible;  // num_keys entries
};
RowKeys row_keys(const AttentionInput&, int64_t token);
// The reference's view of an attention input (the same tensors, the format named).
ref::AttentionProblem problem_of(const AttentionInput&);
int64_t total_q(const AttentionInput&);
int64_t total_k(const AttentionInput&);

// The samples of one statistic, for its quantiles: every sample up to kExactSamples of them; past
// that, bins of 1/32 octave (the exponent and the top five bits of the significand) from 2^-64 to
// 2^64, holding each bin's count and largest sample, so that a run's memory does not grow with its
// cases. quantile(q) is the order statistic at ceil(q n) - 1 while exact, then the largest sample
// of the bin that holds it: never below it and, between 2^-64 and 2^64, at most 1/32 (3.2%)
// above, so at most (1 - q) n samples lie above either (the bound report merge's quantile of a
// union rests on).
class QuantileSketch {
 public:
  static constexpr size_t kExactSamples = size_t(1) << 14;
  static constexpr int kBinsPerOctave = 32, kOctaves = 64;
  // Zero, below 2^-64, the 2 kOctaves octaves, at or above 2^64, +inf (and NaN).
  static constexpr size_t kBins = 2 * kOctaves * kBinsPerOctave + 4;
  void add(double x);
  double quantile(double q);
  // The bytes the sketch holds at most (memory.cpp).
  static double peak_bytes();

 private:
  std::vector<double> exact_;
  std::vector<std::pair<int64_t, double>> bins_;  // per bin (count, largest sample); empty while exact
  int64_t n_ = 0;
  void bin(double x);
};
// Statistics over judged elements (skipping rows a naive-exp hazard makes unpredictable). The
// samples of each OutputStats entry (same index) are kept until finish_stats takes the quantiles.
struct StatSamples {
  std::vector<QuantileSketch> ulp, cancel, ratio;
};
void accumulate_stats(std::vector<OutputStats>&, const Judgement&, StatSamples&);
void finish_stats(std::vector<OutputStats>&, StatSamples&);

// ulp_at(F, x) (ulp.hpp) of the output format for a finite x >= 0, in double.
double ulp_of(ac_dtype, double x);

WorstElement to_worst(const Elem&);

}  // namespace attncheck::detail
