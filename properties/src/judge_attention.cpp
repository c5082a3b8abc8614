// Judging an attention or split-KV output: the geometry of an attention input (its rows' visible
// keys), the exact path (MPFR) and the certified fast path in front of it, the reference side
// prepared once for several outputs of one input, and the rows sampled from very large inputs.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "attncheck/case_context.hpp"
#include "attncheck/hash.hpp"
#include "attncheck/reference/fast.hpp"
#include "internal.hpp"

namespace attncheck::detail {

int64_t total_q(const AttentionInput& a) {
  int64_t n = 0;
  for (int32_t x : a.seqlens_q) n += x;
  return n;
}
int64_t total_k(const AttentionInput& a) {
  int64_t n = 0;
  for (int32_t x : a.seqlens_k) n += x;
  return n;
}

RowKeys row_keys(const AttentionInput& a, int64_t token) {
  RowKeys r;
  int64_t q0 = 0, k0 = 0, m0 = 0;
  for (size_t s = 0; s < a.seqlens_q.size(); ++s) {
    const int64_t tq = a.seqlens_q[s], tk = a.seqlens_k[s];
    if (token < q0 + tq) {
      const int64_t t = token - q0;
      r.seq = int64_t(s);
      r.key_begin = k0;
      r.num_keys = tk;
      r.visible.assign(size_t(tk), 1);
      const auto [first, last] = a.key_range(t, tq, tk);
      for (int64_t j = 0; j < tk; ++j)
        r.visible[size_t(j)] =
            j >= first && j <= last && (a.mask.empty() || a.mask[size_t(m0 + t * tk + j)] != 0) ? 1 : 0;
      return r;
    }
    q0 += tq;
    k0 += tk;
    m0 += tq * tk;
  }
  return r;
}

ref::AttentionProblem problem_of(const AttentionInput& given) {
  // The reference reads contiguous K and V: a paged input is gathered.
  AttentionInput gathered;
  const AttentionInput& a = contiguous_kv(given, gathered);
  ref::AttentionProblem p;
  p.dtype = fmt(a.dtype);
  p.num_heads = a.num_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.head_size = a.head_size;
  p.seqlens_q = a.seqlens_q;
  p.seqlens_k = a.seqlens_k;
  p.causal = a.causal;
  p.mask = a.mask;
  p.softmax_scale = a.softmax_scale;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  if (a.fp8_kv()) {
    // One format for the reference: fp32 holds every fp16, bf16 and FP8 value exactly; the
    // descales are the problem's factors per KV head (or per (sequence, KV head)), applied exactly
    // there.
    p.dtype = ref::Format::fp32;
    for (auto& b : p.q) b = round_bits(AC_DTYPE_F32, decode(a.q_dtype(), b));
    for (auto* t : {&p.k, &p.v})
      for (auto& b : *t) b = round_bits(AC_DTYPE_F32, decode(a.kv_dtype, b));
    const size_t seqs = a.descale_granularity() == 2 ? a.seqlens_q.size() : 1;
    for (size_t s = 0; s < seqs; ++s)
      for (int32_t h = 0; h < a.num_kv_heads; ++h) {
        p.k_scale.push_back(a.descale(a.k_descale, int32_t(s), h));
        p.v_scale.push_back(a.descale(a.v_descale, int32_t(s), h));
        if (a.fp8_q()) p.q_scale.push_back(a.descale(a.q_descale, int32_t(s), h));
      }
  }
  p.head_size_v = a.head_size_v;
  p.softcap = a.softcap;
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  p.sinks = a.sinks;
  return p;
}

// ---- Attention: the exact path, and the certified fast path in front of it ----------------------
//
// judge_attention gives every element the verdict the exact path (exact_attention_row, MPFR) gives
// it, but computes each row first with FastAttentionReference (reference/fast.hpp): fp64 values o
// and lse with bounds B such that the MPFR values lie in [approx - B, approx + B] (FAST.md). A row
// is taken from the fast path only when every verdict of the row follows from these intervals;
// any other row is escalated: judged by the exact path, by the same code as before. Why a row kept
// from the fast path has the exact path's verdicts, where rounding happens in each step:
//
//  1. The allowance depends on the exact LSE. The exact path evaluates lse_e = to_d(LSE) / lse_unit,
//     p_j = exp(s_j - lse_e), S = sum p_j |v_j|, cond = sum p_j |v_j| c_j (LSE: sum p_j c_j), ulp_F(S),
//     max(1, |lse_e lse_unit|), then attention_o/lse_allowance, all in double. Rounding to double and
//     dividing by a positive constant are monotone, so lse_e lies in [x_lo, x_hi]: the same
//     expression evaluated at the doubles just outside [lse - B, lse + B].
//  2. s_j - x rounds monotonically in x. glibc exp errs by at most 4 ulp (2^-50 relative, the
//     assumption of FAST.md) plus 2^-1072 absolute, so the exact path's p_j lies in [p_min, p_max],
//     exp at the two ends widened by a relative 2^-45 and an absolute 2^-1060 (which also covers an
//     exp that is not monotone).
//  3. S and cond are sums of products of nonnegative doubles in a fixed order; every rounded + and *
//     is monotone in its operands, so one function (column_sums, used by both paths: the same code)
//     evaluated at p_min and at p_max brackets the exact path's S and cond.
//  4. ulp_F(S) is a step function (it jumps at each power of two) but nondecreasing in S, and each
//     allowance is a sum of products of nonnegative terms in ulp_F(S), S, cond and max(1, |LSE|)
//     (budgets.cpp; its other terms depend on the scores only). So the exact path's allowance lies
//     in [allowed_lo, allowed_hi], the same functions at the two ends (with ulp_F(S_min) and
//     ulp_F(S_max)): near a power of two the interval widens by the jump, and an error in the gap
//     escalates by step 5. max(1, |x|) is smallest at the point of the interval nearest to zero and
//     largest at an end.
//  5. The exact path's error is to_d(|y - x|), x the MPFR value. Over the interval, |y - x| is at
//     most the larger distance from y to an end, computed in double and moved one double up
//     (err_hi). An element is within budget for certain when err_hi <= allowed_lo (1 - 2^-32): the
//     margin is not needed by the argument above; it absorbs what the argument might have missed
//     (an FMA contracted differently in two places moves an allowance by far less). The exact path
//     sets within = (y == 0) when S == 0: certain when S_max == 0; 0 = S_min < S_max escalates.
//  6. A certified non-empty row has finite exact O and LSE, so a finite output is in the finite
//     class. A non-finite output, an element not certainly within budget (whether or not it
//     fails), a row the fast path did not certify (NaN/inf inputs, huge logits) escalates; empty
//     rows (no key: nothing to compute) take the exact path too. So every failing element, its
//     message and the worst elements come from the exact path. One exception: a non-finite output
//     in a row a naive-exp hazard makes unpredictable (row_skipped: no rule reports its elements
//     or reads their exact values, the statistics skip them) gets the exact path's fields, which
//     are certain there (nonfinite_elem).
//  7. rule_lse reads every row's LSE (the other base, the other layout) once any LSE of a row not
//     skipped fails, so such a judgement is redone entirely by the exact path.
//  8. Reported statistics: a fast element's plain ulp error is known to within half of 2^-16 ulp
//     (fast_ulp_error; else the row escalates), also when the interval holds a power of two (an
//     exact answer at 2^k: the error is then near zero in either binade's ulp, and binade_known is
//     false so that split_order_drift takes the exact value's ulp from the exact path). The row
//     escalates when an ulp error is within the resolution of a histogram edge, so every histogram
//     count is identical; max, mean and p99 agree within 2^-16 ulp. The cancellation-aware error
//     needs ulp_F(S): when S_min and S_max differ in it and the error is not near zero, the exact
//     path's S is computed for every double its LSE may round to (at most 128, else escalate), by
//     its own formula, and all must agree; else cancel_unit holds ulp_F(S_min), never more than the
//     exact path's unit (split_order_drift's differences in it bound the exact path's from above,
//     by at most the factor 2 of one binade). A fast element's error / budget ratio is
//     err_hi / allowed_lo: at least the exact path's to_d(|y - x|) / allowed (division rounds
//     monotonically), so the ratio statistics of a fast judgement bound the exact path's from
//     above; they differ by the width of the allowance interval (near 2 where it spans a jump of
//     ulp_F(S)) and err_hi's margin over the error.
//  9. split_equals_whole reads the parts' allowances: allowed_lo / allowed_hi carry the interval of 4.
namespace {

const double kLn2 = std::log(2.0);

constexpr double kFastUlpResolution = 0x1p-16;  // ulp errors of fast elements: exact to within half this
constexpr double kAllowanceMargin = 1 - 0x1p-32;
constexpr size_t kMaxLseCandidates = 128;  // doubles the exact LSE may round to, tried one by one

JudgePath initial_judge_path() {
  const char* v = std::getenv("ATTNCHECK_JUDGE");
  return v && std::string(v) == "exact" ? JudgePath::exact : JudgePath::fast;
}
std::atomic<JudgePath>& judge_path_setting() {
  static std::atomic<JudgePath> p{initial_judge_path()};
  return p;
}

// S = sum_j p_j |v_j| and cond = sum_j p_j |v_j| c_j of one output column, in one fixed order. The
// exact path and both ends of the fast path's bracket run this one function (step 3), never inlined
// so that no call site is compiled differently.
[[gnu::noinline]] void column_sums(const std::vector<double>& p, const double* vabs,
                                   const std::vector<double>& c, double& S, double& cond) {
  S = 0;
  cond = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    S += p[i] * vabs[i];
    cond += p[i] * vabs[i] * c[i];
  }
}
// sum_j p_j c_j: the LSE's conditioning.
[[gnu::noinline]] double lse_conditioning(const std::vector<double>& p, const std::vector<double>& c) {
  double cond = 0;
  for (size_t i = 0; i < p.size(); ++i) cond += p[i] * c[i];
  return cond;
}

// Whether an ulp error known to within half the resolution could fall in another histogram bin.
// The first edge, 0, is no boundary: no error lies below it.
bool near_histogram_edge(double ulp) {
  const std::vector<double>& edges = ulp_histogram_edges();
  for (size_t i = 1; i < edges.size(); ++i)
    if (std::fabs(ulp - edges[i]) <= kFastUlpResolution) return true;
  return false;
}

// Upper bound of to_d(|y - x|) over x in [approx - bound, approx + bound] (step 5).
double error_upper(double y, double approx, double bound) {
  const double lo = bound == 0 ? approx : std::nextafter(approx - bound, -INFINITY);
  const double hi = bound == 0 ? approx : std::nextafter(approx + bound, INFINITY);
  return std::nextafter(std::max(std::fabs(y - lo), std::fabs(y - hi)), INFINITY);
}

// What one row's allowances need, none of it depending on the exact values: its visible keys,
// scores, conditioning, hazard flags and |v| per column.
struct RowBasis {
  std::vector<double> s, cj;
  std::vector<int64_t> keys;
  // |v| of the visible keys for column c, keys consecutive (vcol): in place in DecodedKV's
  // transposed copy when the visible keys are one run (vabs_shared, stride vstride), else gathered
  // on demand into a caller's scratch vector (a masked row's keys; never stored per row, since a
  // prepared input keeps every judged row's basis).
  const struct DecodedKV* kv = nullptr;
  int64_t kvh = 0;
  const double* vabs_shared = nullptr;
  size_t vstride = 0;
  std::vector<double> vmax;  // [D]
  const double* vcol(int64_t c, std::vector<double>& scratch) const;
  double smax = -std::numeric_limits<double>::infinity();
  AttentionRow ar;
  // The row's sink (AC_VAR_SINKS): its logit and conditioning (budgets.cpp sink_conditioning).
  bool has_sink = false;
  double sink = 0, sink_c = 0;
  // O's and the LSE's conditioning gain the sink's weight p_sink = e^(sink - LSE) (budgets.cpp).
  void add_sink(double lse_e, double S, double& o_cond) const {
    if (has_sink) o_cond += std::exp(sink - lse_e) * sink_c * S;
  }
  double sink_lse_cond(double lse_e) const { return has_sink ? std::exp(sink - lse_e) * sink_c : 0.0; }
};

// K and |V| decoded once per judgement (every fp16, bf16 and fp32 value is a float, and a double):
// every row of a KV head reads all of its visible keys, and decoding and transposing them per row
// was most of a long row's judgement. k: [key][KV head][D] as stored. vabs: |v| transposed to
// [KV head][D][key], so a run of visible keys is one stride of each column; vmax_run: the running
// maximum of vabs from the start of the key's sequence, the largest |v| of a run that starts there
// (every causal or unmasked row's) in one look-up.
struct DecodedKV {
  int64_t keys = 0, D = 0, Hkv = 0;  // D: V's head size (the columns of vabs)
  std::vector<float> k;
  std::vector<double> vabs, vmax_run;
  explicit DecodedKV(const AttentionInput& a)
      : keys(total_k(a)),
        D(a.dv()),
        Hkv(a.num_kv_heads),
        k(a.k.size()),
        vabs(a.v.size()),
        vmax_run(a.v.size()) {
    // An FP8 cache's values times their descales (the allowance's k may round to float).
    const std::vector<int32_t> rows = a.kv_row_sequences();
    for (size_t i = 0; i < a.k.size(); ++i) k[i] = float(kv_value(a, rows, a.k, a.head_size, i));
    for (int64_t key = 0; key < keys; ++key)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t c = 0; c < D; ++c)
          vabs[col(h, c) + size_t(key)] =
              std::fabs(kv_value(a, rows, a.v, D, size_t((key * Hkv + h) * D + c)));
    int64_t seq_begin = 0;
    for (const int32_t len : a.seqlens_k) {
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t c = 0; c < D; ++c) {
          double m = 0;
          for (int64_t key = seq_begin; key < seq_begin + len; ++key)
            vmax_run[col(h, c) + size_t(key)] = m = std::max(m, vabs[col(h, c) + size_t(key)]);
        }
      seq_begin += len;
    }
  }
  size_t col(int64_t h, int64_t c) const { return size_t((h * D + c) * keys); }
};

const double* RowBasis::vcol(int64_t c, std::vector<double>& scratch) const {
  if (vabs_shared) return vabs_shared + size_t(c) * vstride;
  scratch.resize(keys.size());
  const double* col = kv->vabs.data() + kv->col(kvh, c);
  for (size_t i = 0; i < keys.size(); ++i) scratch[i] = col[keys[i]];
  return scratch.data();
}

RowBasis row_basis(const AttentionInput& a, const Conventions& cv, const DecodedKV& kv, const RowKeys& rk,
                   int64_t t, int64_t h, RowInfo& info) {
  RowBasis r;
  const int64_t H = a.num_heads, D = a.head_size, Hkv = a.num_kv_heads, Dv = a.dv();
  const int64_t kvh = h / (H / Hkv);
  const double thr = overflow_log_threshold(a.dtype);
  const double under = min_normal_log(a.dtype);
  // AC_FP8_TRUNCATED_SUMS with Q in FP8: each score's codes in column order, for the bound on their
  // tensor-core sum (budgets.cpp truncated_sum_error), on the format's exponent fields.
  const bool truncated = cv.truncated_sums && a.fp8_q();
  const ref::Fp8Spec* fp8 = truncated ? &ref::fp8_spec(fp8_format(a.kv_dtype)) : nullptr;
  std::vector<double> q(static_cast<size_t>(D)), q_codes(truncated ? size_t(D) : 0), k_codes(q_codes.size());
  // Q's values as the kernel was given them: times its descale where Q is in FP8 (AC_FP8_Q; a code
  // of at most 4 significant bits times a float, exact in double).
  const double q_descale = a.descale(a.q_descale, int32_t(rk.seq), int32_t(kvh));
  for (int64_t c = 0; c < D; ++c) {
    const double code = decode(a.q_dtype(), a.q[size_t((t * H + h) * D + c)]);
    q[size_t(c)] = code * q_descale;
    if (truncated) q_codes[size_t(c)] = code;
  }
  // Scores in double, for the allowance and the hazard prediction.
  std::vector<double> A, T;  // T: the uncapped scores of a capped row
  double kabs_max = 0;       // max_j sum_c |k_jc| (FTZ arithmetic's allowance only)
  std::vector<double> trunc_err;
  const double qk_descale =
      truncated ? std::fabs(q_descale * a.descale(a.k_descale, int32_t(rk.seq), int32_t(kvh))) : 0;
  for (int64_t j = 0; j < rk.num_keys; ++j) {
    if (!rk.visible[size_t(j)]) continue;
    const int64_t key = rk.key_begin + j;
    const float* krow = kv.k.data() + size_t((key * Hkv + kvh) * D);
    double dot = 0, adot = 0, kabs = 0;
    for (int64_t c = 0; c < D; ++c) {
      const double prod = q[size_t(c)] * double(krow[c]);
      if (truncated) k_codes[size_t(c)] = decode(a.k_dtype(), a.k[size_t((key * Hkv + kvh) * D + c)]);
      dot += prod;
      adot += std::fabs(prod);
      if (cv.ftz_arithmetic) kabs += std::fabs(double(krow[c]));
    }
    kabs_max = std::max(kabs_max, kabs);
    const double t_score = double(a.softmax_scale) * dot;
    // A capped score (AC_VAR_SOFTCAP): cap tanh(t / cap); t is kept for its conditioning.
    r.s.push_back(a.softcap > 0 ? double(a.softcap) * std::tanh(t_score / double(a.softcap)) : t_score);
    if (a.softcap > 0) T.push_back(t_score);
    A.push_back(std::fabs(double(a.softmax_scale)) * adot);
    if (truncated)
      trunc_err.push_back(qk_descale * truncated_sum_error(q_codes.data(), k_codes.data(), size_t(D),
                                                           1 - fp8->bias, fp8->mantissa_bits));
    r.keys.push_back(key);
    r.smax = std::max(r.smax, r.s.back());
  }
  info.visible = int64_t(r.keys.size());
  const size_t n = r.keys.size();
  if (!a.sinks.empty()) {
    r.has_sink = info.sink = true;
    r.sink = double(a.sinks[size_t(h)]);
    r.smax = std::max(r.smax, r.sink);  // the max the kernel subtracts includes the sink
    r.sink_c = sink_conditioning(r.sink, std::fabs(r.sink - r.smax));
  }
  r.cj.resize(n);
  double sum_exp_scaled = r.has_sink ? std::exp(r.sink - r.smax) : 0.0;  // sum e^(s - smax)
  for (size_t i = 0; i < n; ++i) {
    r.cj[i] = a.softcap > 0 ? softcap_conditioning(double(D), A[i], T[i], double(a.softcap), r.s[i],
                                                   std::fabs(r.s[i] - r.smax))
                            : score_conditioning(a.dtype, double(D), A[i], std::fabs(r.s[i] - r.smax), r.s[i],
                                                 cv.scores_rounded);
    if (a.fp8_kv()) r.cj[i] += fp8_kv_score_conditioning(A[i]);
    if (a.fp8_q()) r.cj[i] += fp8_q_score_conditioning(A[i]);
    if (truncated)
      r.cj[i] += truncated_sum_score_conditioning(std::fabs(double(a.softmax_scale)), trunc_err[i]);
    sum_exp_scaled += std::exp(r.s[i] - r.smax);
    if (cv.naive_exp) {
      const double slack_total =
          naive_exp_overflow_slack(a.dtype, double(D), A[i], r.s[i], cv.scores_rounded);
      if (r.s[i] > thr + slack_total)
        info.hazard = true;
      else if (r.s[i] > thr - slack_total)
        info.ambiguous = true;
    }
  }
  if (cv.naive_exp && n > 0 && r.smax < under) info.underflow = true;
  r.ar.dtype = a.dtype;
  r.ar.keys = double(n);
  r.ar.head_size = double(D);
  r.ar.max_score = r.smax;
  r.ar.sum_exp_scaled = sum_exp_scaled;
  r.ar.naive_exp = cv.naive_exp;
  r.ar.flushed_exp = cv.flushed_exp;
  r.ar.fp8_kv = a.fp8_kv();
  r.ar.p_e4m3 = a.fp8_kv() && cv.p_e4m3;
  r.ar.p_scale = a.p_scale_or_fixed();
  if (a.fp8_kv()) r.ar.v_descale = std::fabs(double(a.descale(a.v_descale, int32_t(rk.seq), int32_t(kvh))));
  r.ar.truncated_sums = truncated;
  if (truncated)
    r.ar.v_min = std::ldexp(std::fabs(a.descale(a.v_descale, int32_t(rk.seq), int32_t(kvh))), 1 - fp8->bias);
  if (cv.ftz_arithmetic) {
    double qabs = 0;
    for (const double x : q) qabs += std::fabs(x);
    r.ar.ftz = true;
    r.ar.scale_abs = std::fabs(double(a.softmax_scale));
    r.ar.qk_abs = r.ar.scale_abs * (qabs + kabs_max);
  }
  r.vmax.assign(size_t(Dv), 0.0);
  if (n > 0 && r.keys.back() - r.keys.front() + 1 == int64_t(n)) {  // one run of keys
    r.vabs_shared = kv.vabs.data() + kv.col(kvh, 0) + size_t(r.keys.front());
    r.vstride = size_t(kv.keys);
    for (int64_t c = 0; c < Dv; ++c) {
      const size_t at = kv.col(kvh, c);
      if (r.keys.front() == rk.key_begin)
        r.vmax[size_t(c)] = kv.vmax_run[at + size_t(r.keys.back())];
      else
        for (size_t i = 0; i < n; ++i)
          r.vmax[size_t(c)] = std::max(r.vmax[size_t(c)], kv.vabs[at + size_t(r.keys[i])]);
    }
    return r;
  }
  r.kv = &kv;
  r.kvh = kvh;
  for (int64_t c = 0; c < Dv; ++c)
    for (size_t i = 0; i < n; ++i)
      r.vmax[size_t(c)] = std::max(r.vmax[size_t(c)], kv.vabs[kv.col(kvh, c) + size_t(r.keys[i])]);
  return r;
}

std::string o_inputs(const RowBasis& r, double S) {
  return "visible_keys=" + std::to_string(r.keys.size()) + " max_score=" + hexfloat(r.smax) +
         " scale_S=" + hexfloat(S);
}
std::string lse_inputs(const RowBasis& r) {
  return "visible_keys=" + std::to_string(r.keys.size()) + " max_score=" + hexfloat(r.smax);
}

struct RowJob {
  const AttentionInput& a;
  const AttentionOutput& out;
  const Conventions& cv;
  const Budget& b;
  double lse_unit;
  bool want_lse;
  AmaxBounds* amax;  // non-null: the call asked for the maxima (want_amax), accumulated here
};

// The exact path of one row: exact_attention_row and MPFR measurement, appended to `elems`.
void judge_row_exact(const RowJob& job, const ref::ExactRow& ex, const RowBasis& r, int64_t t, int64_t h,
                     RowInfo& info, std::vector<Elem>& elems) {
  const AttentionInput& a = job.a;
  const int64_t H = a.num_heads, D = a.dv(), row = t * H + h;
  info.empty = ex.empty;
  // A row without keys but with a sink has O = 0 and a finite LSE, the sink: judged in budget.
  const bool sentinel = ex.empty && !r.has_sink;
  const double lse_e = sentinel ? -INFINITY : to_d(ex.lse) / job.lse_unit;  // natural log
  const size_t n = r.keys.size();
  std::vector<double> pj(n);
  for (size_t i = 0; i < n; ++i) pj[i] = std::isfinite(lse_e) ? std::exp(r.s[i] - lse_e) : 0;
  std::vector<double> scratch;  // a masked row's |v| column (RowBasis::vcol)
  for (int64_t c = 0; c < D; ++c) {
    Elem e = o_elem(row, t, h, c, ex.o[size_t(c)]);
    const double exact_o = to_d(ex.o[size_t(c)]);  // measure_fp8_output rescales e.exact
    double S = 0, cond = 0;
    column_sums(pj, r.vcol(c, scratch), r.cj, S, cond);
    if (std::isfinite(lse_e)) r.add_sink(lse_e, S, cond);
    // O in FP8 (AC_FP8_OUT): the fp32 output's budget, then the division and the cast
    // (budgets.cpp fp8_output_interval), as a merge's FP8 output is judged.
    const double allowed = attention_o_allowance(
        job.b, r.ar, to_d(ref::ulp_at(fmt(a.fp8_out() ? AC_DTYPE_F32 : a.dtype), Real(S))), S, cond,
        r.vmax[size_t(c)]);
    e.inputs = o_inputs(r, S);
    const uint32_t got = job.out.out[size_t(row * D + c)];
    if (a.fp8_out()) {
      const double scale = double(a.output_scale);
      measure_fp8_output(e, a.out_dtype, got, fp8_output_interval(to_d(e.exact), allowed, scale), scale,
                         job.cv.saturate ? ref::Fp8Overflow::saturate : ref::Fp8Overflow::nonfinite);
    } else {
      measure_bits(e, a.dtype, got, S, allowed);
      if (e.exact_finite && e.out_finite && S == 0) e.within = e.out_value == 0;
    }
    e.allowed_lo = e.allowed_hi = allowed;
    if (job.amax && !std::isfinite(exact_o)) job.amax->o_unjudged = true;
    if (job.amax && std::isfinite(exact_o)) {
      AmaxBounds& m = *job.amax;
      const double x = std::fabs(exact_o);
      const double give = amax_o_allowance(a.dtype, a.fp8_out(), x, allowed) * (1 + 0x1p-50);
      m.o_lo = std::max(m.o_lo, x - give);
      m.o_hi = std::max(m.o_hi, x + give);
      if (x > m.o_exact || m.o_row < 0) m.o_exact = x, m.o_row = row;
    }
    elems.push_back(std::move(e));
  }
  if (job.amax && n > 0 && std::isfinite(lse_e)) {
    // Each key's weight e^(s_j - LSE) in double (off by a few 2^-53, within the margin), its log
    // allowed delta_j either way (budgets.cpp amax_weight_log_allowance); the sink is in the LSE.
    AmaxBounds& m = *job.amax;
    const double cond = lse_conditioning(pj, r.cj) + r.sink_lse_cond(lse_e);
    const double lse_allowed =
        attention_lse_allowance(job.b, r.ar, std::max(1.0, std::fabs(lse_e)), cond, 1.0);
    const bool may_flush = r.ar.flushed_exp || r.ar.ftz;
    for (size_t i = 0; i < n; ++i) {
      const AmaxWeightInterval w =
          amax_weight_interval(pj[i], amax_weight_log_allowance(lse_allowed, r.cj[i]), may_flush);
      m.p_lo = std::max(m.p_lo, w.lo);
      m.p_hi = std::max(m.p_hi, w.hi);
      if (pj[i] > m.p_exact) m.p_exact = pj[i], m.p_row = row;
    }
  } else if (job.amax && n > 0) {
    job.amax->p_unjudged = true;  // a NaN score: the row's weights are not numbers
  }
  if (job.want_lse) {
    Elem e;
    e.row = row;
    e.where = where_th("LSE", t, h, -1);
    e.inputs = lse_inputs(r);
    if (sentinel) {
      e.exact = job.cv.empty_sign > 0 ? Real(INFINITY) : Real(-INFINITY);
      e.exact_other = e.exact;
      e.exact_finite = false;
    } else {
      e.exact = ex.lse;
      e.exact_finite = isfinite(e.exact);
      const Real ln2 = log(Real(2));
      e.exact_other = job.cv.base == ref::LseBase::two ? Real(ex.lse * ln2) : Real(ex.lse / ln2);
    }
    const double cond = lse_conditioning(pj, r.cj) + (std::isfinite(lse_e) ? r.sink_lse_cond(lse_e) : 0.0);
    const double scale = std::isfinite(lse_e) ? std::max(1.0, std::fabs(lse_e * job.lse_unit)) : 1.0;
    measure_lse(e, job.out.lse[size_t(row)], attention_lse_allowance(job.b, r.ar, scale, cond, job.lse_unit));
    e.allowed_lo = e.allowed_hi = e.allowed;
    elems.push_back(std::move(e));
  }
}

// The plain ulp error the exact path reports for a finite output y (ulp_error in ulp.hpp), the
// exact value lying in [approx - bound, approx + bound]: within half the resolution, or nullopt.
// The exact value's binade may be unknown (an output at a power of two, the usual case being an
// exact answer): the error is then near zero in either binade's ulp, and binade_known says so.
struct FastUlp {
  double ulps;
  bool binade_known;
};
std::optional<FastUlp> fast_ulp_error(ref::Format f, double y, double approx, double bound) {
  const ref::FormatSpec& sp = ref::spec(f);
  auto q_of = [&](double x) {
    x = std::fabs(x);
    return x == 0 ? sp.emin - 1 : std::max(std::ilogb(x) + 1 - sp.precision, sp.emin - 1);
  };
  const double lo = bound == 0 ? approx : std::nextafter(approx - bound, -INFINITY);
  const double hi = bound == 0 ? approx : std::nextafter(approx + bound, INFINITY);
  const bool straddles_zero = lo <= 0 && hi >= 0;
  const int q_small = straddles_zero ? sp.emin - 1 : q_of(std::min(std::fabs(lo), std::fabs(hi)));
  const int q_big = q_of(std::max(std::fabs(lo), std::fabs(hi)));
  // |y - x| is within bound of |y - approx|; the double subtraction adds at most diff 2^-52.
  const double diff = std::fabs(y - approx);
  const double err_hi = (diff + bound + diff * 0x1p-52) * (1 + 0x1p-50);
  const double err_lo = std::max(0.0, (diff - bound - diff * 0x1p-52) * (1 - 0x1p-50));
  const double u = std::ldexp(diff, -q_big);
  const double spread = std::max(std::ldexp(err_hi, -q_small) - u, u - std::ldexp(err_lo, -q_big));
  if (!(spread <= kFastUlpResolution / 2)) return std::nullopt;
  return FastUlp{u, q_small == q_big};
}

// A non-finite output where the exact value is finite, in a row a naive-exp hazard makes
// unpredictable (no rule reads its exact value): the exact path's fields, which are certain. The
// exact O is a convex combination of finite values and the exact LSE is at most max s + ln N, both
// far below the overflow threshold, so the class is nonfinite_output: not within, infinite errors.
Elem nonfinite_elem(Elem e, ac_dtype d, uint32_t bits, double y, double allowed_lo, double allowed_hi) {
  e.dtype = d;
  e.out_bits = bits;
  e.out_value = y;
  e.out_finite = false;
  e.ulp = e.cancel = e.ratio = std::numeric_limits<double>::infinity();
  e.within = false;
  e.allowed = e.allowed_lo = allowed_lo;
  e.allowed_hi = allowed_hi;
  e.fast = true;
  e.binade_known = false;  // not decided (and not read: the row is skipped)
  return e;
}

// What steps 2 and 3 compute for one fast row, none of it depending on the output: S and cond of
// every column and the LSE's conditioning, at p_min and at p_max. A prepared input judged against
// several outputs (split_order_drift's configurations, the tiling report's tilings) computes them
// once per row; per output they were most of a long row's judgement.
struct FastSums {
  bool made = false, usable = false;  // usable: every p_max finite
  std::vector<double> s_lo, cond_lo, s_hi, cond_hi;
  double lse_cond_lo = 0, lse_cond_hi = 0;
};

void make_fast_sums(FastSums& sums, const RowBasis& r, double x_lo, double x_hi, int64_t D) {
  sums.made = true;
  const size_t n = r.keys.size();
  // 2: p_min <= p_j <= p_max.
  std::vector<double> pmin(n), pmax(n);
  for (size_t i = 0; i < n; ++i) {
    const double up = std::exp(r.s[i] - x_lo), down = std::exp(r.s[i] - x_hi);
    pmax[i] = (up + 0x1p-1060) * (1 + 0x1p-45);
    const double lo = down * (1 - 0x1p-45);
    pmin[i] = lo < 0x1p-1000 ? 0.0 : lo;
    if (!std::isfinite(pmax[i])) return;
  }
  sums.usable = true;
  // 3: S and cond at both ends.
  sums.s_lo.resize(size_t(D));
  sums.cond_lo.resize(size_t(D));
  sums.s_hi.resize(size_t(D));
  sums.cond_hi.resize(size_t(D));
  std::vector<double> scratch;  // a masked row's |v| column (RowBasis::vcol)
  // The sink's weight e^(sink - x) is largest at x_lo and smallest at x_hi, as every p_j's (the
  // same exp, widened alike), so its terms bracket the exact path's as the keys' do.
  const double sink_hi = r.has_sink ? (std::exp(r.sink - x_lo) + 0x1p-1060) * (1 + 0x1p-45) : 0.0;
  const double sink_lo = r.has_sink ? std::exp(r.sink - x_hi) * (1 - 0x1p-45) : 0.0;
  for (int64_t c = 0; c < D; ++c) {
    const double* vabs = r.vcol(c, scratch);
    column_sums(pmin, vabs, r.cj, sums.s_lo[size_t(c)], sums.cond_lo[size_t(c)]);
    column_sums(pmax, vabs, r.cj, sums.s_hi[size_t(c)], sums.cond_hi[size_t(c)]);
    sums.cond_lo[size_t(c)] += sink_lo * r.sink_c * sums.s_lo[size_t(c)];
    sums.cond_hi[size_t(c)] += sink_hi * r.sink_c * sums.s_hi[size_t(c)];
  }
  sums.lse_cond_lo = lse_conditioning(pmin, r.cj) + sink_lo * r.sink_c;
  sums.lse_cond_hi = lse_conditioning(pmax, r.cj) + sink_hi * r.sink_c;
}

// The fast path of one certified, non-empty row (steps 1-8): appends the row's elements and returns
// true when every verdict is certain, else leaves `elems` unchanged and returns false (escalate).
// `sums` is the row's FastSums, made here on the row's first judgement.
bool judge_row_fast(const RowJob& job, const ref::FastRow& fr, const RowBasis& r, int64_t t, int64_t h,
                    bool skipped, std::vector<Elem>& elems, FastSums& sums) {
  const AttentionInput& a = job.a;
  const int64_t H = a.num_heads, D = a.dv(), row = t * H + h;
  const size_t n = r.keys.size();
  // 1: the exact path's lse_e lies in [x_lo, x_hi].
  if (!std::isfinite(fr.lse) || !(fr.lse_bound >= 0) || !std::isfinite(fr.lse_bound)) return false;
  const double L0 = std::nextafter(fr.lse - fr.lse_bound, -INFINITY);
  const double L1 = std::nextafter(fr.lse + fr.lse_bound, INFINITY);
  const double x_lo = L0 / job.lse_unit, x_hi = L1 / job.lse_unit;
  if (!std::isfinite(x_lo) || !std::isfinite(x_hi)) return false;
  // 2, 3: the row's sums at p_min and p_max (FastSums).
  if (!sums.made) make_fast_sums(sums, r, x_lo, x_hi, D);
  if (!sums.usable) return false;
  // The exact path's weights for every double its LSE may round to: made only when a column's
  // ulp_F(S) is ambiguous (S at a power of two) and the error is not near zero.
  std::vector<std::vector<double>> candidates;
  bool candidates_made = false;
  auto make_candidates = [&] {
    candidates_made = true;
    for (double L = L0; L <= L1; L = std::nextafter(L, INFINITY)) {
      if (candidates.size() == kMaxLseCandidates) {
        candidates.clear();
        return;
      }
      const double x = L / job.lse_unit;
      std::vector<double> p(n);
      for (size_t i = 0; i < n; ++i) p[i] = std::exp(r.s[i] - x);
      candidates.push_back(std::move(p));
    }
  };
  const size_t first = elems.size();
  auto escalate = [&] {
    elems.resize(first);
    return false;
  };
  std::vector<double> scratch;  // a masked row's |v| column (RowBasis::vcol)
  for (int64_t c = 0; c < D; ++c) {
    const uint32_t bits = job.out.out[size_t(row * D + c)];
    const double y = decode(a.dtype, bits);
    if (!std::isfinite(y) && !skipped) return escalate();
    // 3, 4: S, cond and the allowance at both ends.
    const double S_lo = sums.s_lo[size_t(c)], cond_lo = sums.cond_lo[size_t(c)];
    const double S_hi = sums.s_hi[size_t(c)], cond_hi = sums.cond_hi[size_t(c)];
    if (!std::isfinite(S_hi) || !std::isfinite(cond_hi)) return escalate();
    const double ulp_lo = ulp_of(a.dtype, S_lo), ulp_hi = ulp_of(a.dtype, S_hi);
    const double vmax = r.vmax[size_t(c)];
    const double allowed_lo = attention_o_allowance(job.b, r.ar, ulp_lo, S_lo, cond_lo, vmax);
    const double allowed_hi = attention_o_allowance(job.b, r.ar, ulp_hi, S_hi, cond_hi, vmax);
    if (!std::isfinite(allowed_hi)) return escalate();
    const double approx = fr.o[size_t(c)], bound = fr.o_bound[size_t(c)];
    if (!std::isfinite(y)) {
      elems.push_back(
          nonfinite_elem(o_elem(row, t, h, c, Real(approx)), a.dtype, bits, y, allowed_lo, allowed_hi));
      continue;
    }
    // 5: the verdict.
    if (S_hi == 0) {
      if (y != 0) return escalate();
    } else if (S_lo == 0 || !(error_upper(y, approx, bound) <= allowed_lo * kAllowanceMargin)) {
      return escalate();
    }
    // 8: the statistics.
    const std::optional<FastUlp> u = fast_ulp_error(fmt(a.dtype), y, approx, bound);
    if (!u || near_histogram_edge(u->ulps)) return escalate();
    // The cancellation-aware error is in units of ulp_F(S). When S may lie on either side of a
    // power of two, either the error is near zero in both units, or the exact path's S is found
    // among the candidates' (all must agree on the unit).
    double unit = ulp_hi, unit_lo = ulp_lo;
    if (ulp_lo != ulp_hi && !(error_upper(y, approx, bound) / ulp_lo <= kFastUlpResolution / 2)) {
      if (!candidates_made) make_candidates();
      if (candidates.empty()) return escalate();
      const double* vabs = r.vcol(c, scratch);
      for (const std::vector<double>& p : candidates) {
        double S = 0, cond = 0;
        column_sums(p, vabs, r.cj, S, cond);
        if (&p == &candidates.front()) unit = ulp_of(a.dtype, S);
        if (ulp_of(a.dtype, S) != unit) return escalate();
      }
      unit_lo = unit;
    }
    Elem e = o_elem(row, t, h, c, Real(approx));
    e.dtype = a.dtype;
    e.out_bits = bits;
    e.out_value = y;
    e.out_finite = true;
    e.ulp = u->ulps;
    const double err = std::fabs(y - approx);
    e.cancel = err / unit;
    e.cancel_unit = unit_lo;
    e.allowed = e.allowed_lo = allowed_lo;
    e.allowed_hi = allowed_hi;
    e.ratio = allowed_lo > 0 ? error_upper(y, approx, bound) / allowed_lo : 0.0;  // step 8
    e.within = true;
    e.fast = true;
    e.binade_known = u->binade_known;  // no inputs string: only failing elements are printed
    elems.push_back(std::move(e));
  }
  if (job.want_lse) {
    const float yf = job.out.lse[size_t(row)];
    const double y = yf;
    if (!std::isfinite(y) && !skipped) return escalate();
    const double cond_lo = sums.lse_cond_lo, cond_hi = sums.lse_cond_hi;
    auto scale_at = [&](double x) { return std::max(1.0, std::fabs(x * job.lse_unit)); };
    const double sc_a = scale_at(x_lo), sc_b = scale_at(x_hi);
    const double scale_lo = x_lo <= 0 && x_hi >= 0 ? 1.0 : std::min(sc_a, sc_b);
    const double scale_hi = std::max(sc_a, sc_b);
    const double allowed_lo = attention_lse_allowance(job.b, r.ar, scale_lo, cond_lo, job.lse_unit);
    const double allowed_hi = attention_lse_allowance(job.b, r.ar, scale_hi, cond_hi, job.lse_unit);
    if (!std::isfinite(allowed_hi)) return escalate();
    if (!std::isfinite(y)) {
      Elem e;
      e.out = Out::LSE;
      e.row = row;
      e.where = where_th("LSE", t, h, -1);
      e.exact = Real(fr.lse);
      e.exact_finite = true;
      e.exact_other = Real(job.cv.base == ref::LseBase::two ? fr.lse * kLn2 : fr.lse / kLn2);
      uint32_t lse_bits;
      std::memcpy(&lse_bits, &yf, 4);
      elems.push_back(nonfinite_elem(std::move(e), AC_DTYPE_F32, lse_bits, y, allowed_lo, allowed_hi));
      return true;
    }
    if (!(error_upper(y, fr.lse, fr.lse_bound) <= allowed_lo * kAllowanceMargin)) return escalate();
    const std::optional<FastUlp> u = fast_ulp_error(ref::Format::fp32, y, fr.lse, fr.lse_bound);
    if (!u || near_histogram_edge(u->ulps)) return escalate();
    Elem e;
    e.out = Out::LSE;
    e.dtype = AC_DTYPE_F32;
    e.row = row;
    e.where = where_th("LSE", t, h, -1);
    e.exact = Real(fr.lse);
    e.exact_finite = true;
    e.exact_other = Real(job.cv.base == ref::LseBase::two ? fr.lse * kLn2 : fr.lse / kLn2);
    std::memcpy(&e.out_bits, &yf, 4);
    e.out_value = y;
    e.out_finite = true;
    e.ulp = u->ulps;
    const double err = std::fabs(y - fr.lse);
    e.cancel_unit = 0x1p-23 * std::max(1.0, std::fabs(fr.lse));
    e.cancel = err / e.cancel_unit;
    e.allowed = e.allowed_lo = allowed_lo;
    e.allowed_hi = allowed_hi;
    e.ratio = error_upper(y, fr.lse, fr.lse_bound) / allowed_lo;  // step 8
    e.within = true;
    e.fast = true;
    e.binade_known = u->binade_known;
    elems.push_back(std::move(e));
  }
  return true;
}

}  // namespace

// The reference side of judging one input, built before any output is seen: the problem, the rows
// judged, each row's basis (visible keys, scores, conditioning, |v|) and flags, the certified fast
// rows (on the first fast judgement) and the exact rows computed so far. A property that judges
// several outputs of one input (split_order_drift: up to 24; the tiling report: every tiling)
// computes all of it once.
struct PreparedAttention::State {
  // Paged K / V is judged on its gathered, contiguous copy (the reference's and the bases' layout;
  // the output does not depend on where a key was stored). An unpaged input is not copied.
  AttentionInput gathered;
  const AttentionInput& a;
  Conventions cv;
  Budget b;
  ref::AttentionProblem p;
  int64_t T = 0, H = 0;
  std::unique_ptr<DecodedKV> kv;   // the bases point into it
  std::vector<int64_t> rows;       // judged rows (token * H + head), token-major
  std::vector<RowBasis> bases;     // per judged row
  std::vector<RowInfo> infos;      // per row of the input (the flags row_basis sets)
  std::vector<ref::FastRow> fast;  // per judged row, once fast_ready
  std::vector<FastSums> sums;      // per judged row, each made at its row's first fast judgement
  bool fast_ready = false;
  std::map<int64_t, ref::ExactRow> exact;  // per escalated row, computed once

  State(const AttentionInput& in, const Conventions& c, const Budget& bud)
      : a(contiguous_kv(in, gathered)), cv(c), b(bud) {
    p = problem_of(a);
    ref::validate(p);
    T = total_q(a);
    H = a.num_heads;
    kv = std::make_unique<DecodedKV>(a);
    infos.resize(size_t(T * H));
    // The maxima (want_amax) are over every row: such a case is judged whole, whatever its size.
    const std::vector<int64_t> sample = in.want_amax ? std::vector<int64_t>{} : sampled_rows(T, H);
    std::vector<char> judged;  // per row, when sampled
    if (!sample.empty()) {
      judged.assign(size_t(T * H), 0);
      for (int64_t r : sample) judged[size_t(r)] = 1;
    }
    for (int64_t t = 0; t < T; ++t) {
      // A token none of whose rows is sampled costs nothing (row_keys walks its keys).
      if (!judged.empty() &&
          std::none_of(judged.begin() + t * H, judged.begin() + (t + 1) * H, [](char j) { return j; }))
        continue;
      const RowKeys rk = row_keys(a, t);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = t * H + h;
        if (!judged.empty() && !judged[size_t(row)]) continue;
        rows.push_back(row);
        bases.push_back(row_basis(a, cv, *kv, rk, t, h, infos[size_t(row)]));
      }
    }
  }

  void prepare_fast() {
    if (fast_ready) return;
    ref::FastOptions fo;
    fo.threads = 1;  // the runner already runs one (subject, property) per core
    fo.base = cv.base;
    const ref::FastAttentionReference ref_fast(p, fo);
    std::vector<size_t> slot(size_t(T * H), 0);
    for (size_t i = 0; i < rows.size(); ++i) slot[size_t(rows[i])] = i;
    fast.resize(rows.size());
    sums.resize(rows.size());
    std::vector<ref::FastAttentionReference::RowId> ids;
    for (int64_t r : rows) ids.push_back({r / H, int32_t(r % H)});
    ref_fast.for_rows(ids, [&](int64_t token, int32_t head, const ref::FastRow& fr) {
      fast[slot[size_t(token * H + head)]] = fr;
    });
    fast_ready = true;
  }

  const ref::ExactRow& exact_row(int64_t row) {
    auto it = exact.find(row);
    if (it == exact.end())
      it = exact.emplace(row, ref::exact_attention_row(p, row / H, int32_t(row % H), cv.base)).first;
    return it->second;
  }

  // `only` (when given: a flag per row of the input) limits the rows judged; the others have no
  // elements in the judgement.
  Judgement judge_rows(const AttentionOutput& out, bool use_fast, const std::vector<char>* only = nullptr) {
    if (use_fast) prepare_fast();
    Judgement J;
    J.num_rows = T * H;
    J.num_heads = H;
    J.rows = infos;
    const RowJob job{a,
                     out,
                     cv,
                     b,
                     cv.base == ref::LseBase::two ? 1.0 / kLn2 : 1.0,
                     cv.has_lse && out.lse.size() == size_t(T * H),
                     a.want_amax ? &J.amax : nullptr};
    J.amax.asked = a.want_amax;
    J.amax.complete = a.want_amax && !only && rows.size() == size_t(T * H);
    J.amax.got = out.amax;
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t row = rows[i], t = row / H, h = row % H;
      if (only && !(*only)[size_t(row)]) continue;
      ++J.counts.rows;
      RowInfo& info = J.rows[size_t(row)];
      const RowBasis& r = bases[i];
      if (r.keys.empty()) {  // the empty row: nothing to compute, judged exactly
        judge_row_exact(job, exact_row(row), r, t, h, info, J.elems);
        continue;
      }
      if (use_fast) {
        const ref::FastRow& fr = fast[i];
        if (fr.certified && !fr.empty &&
            judge_row_fast(job, fr, r, t, h, J.row_skipped(row), J.elems, sums[i]))
          continue;
        if (!fr.certified) ++J.counts.rows_uncertified;
      }
      ++J.counts.rows_escalated;
      const AddSeconds exact_time(thread_time_split().judge_exact);
      judge_row_exact(job, exact_row(row), r, t, h, info, J.elems);
    }
    apply_declared_contracts(J, cv);
    drop_excused_rows(J, a);
    return J;
  }
};

Judgement PreparedAttention::judge_exact_rows(const AttentionOutput& out,
                                              const std::vector<int64_t>& rows) const {
  const AddSeconds timed(thread_time_split().judge);
  std::vector<char> only(size_t(s_->T * s_->H), 0);
  for (int64_t r : rows) only.at(size_t(r)) = 1;
  Judgement J = s_->judge_rows(out, false, &only);
  thread_judge_counts() += J.counts;
  return J;
}

PreparedAttention::PreparedAttention(const AttentionInput& a, const Conventions& cv, const Budget& b) {
  const AddSeconds timed(thread_time_split().judge);
  s_ = std::make_unique<State>(a, cv, b);
}
PreparedAttention::~PreparedAttention() = default;

Judgement PreparedAttention::judge(const AttentionOutput& out, JudgePath path) const {
  const AddSeconds timed(thread_time_split().judge);
  // FP8 codes and the maxima of P and O: the exact path's intervals (judge_row_exact).
  if (s_->a.fp8_out() || s_->a.want_amax) path = JudgePath::exact;
  Judgement J = s_->judge_rows(out, path == JudgePath::fast);
  if (path == JudgePath::fast) {
    // Step 7: a failing LSE makes rule_lse read every row; redo the judgement exactly.
    bool lse_fails = false, any_fast = false;
    for (const Elem& e : J.elems) {
      lse_fails = lse_fails || (e.out == Out::LSE && !e.within && !J.row_skipped(e.row));
      any_fast = any_fast || e.fast;
    }
    if (lse_fails && any_fast) {
      const int64_t uncertified = J.counts.rows_uncertified;
      J = s_->judge_rows(out, false);  // counts every non-empty row as escalated
      J.counts.rows_uncertified = uncertified;
    }
  }
  thread_judge_counts() += J.counts;
  return J;
}

std::vector<int64_t> sampled_rows(int64_t T, int64_t H) {
  std::vector<int64_t> rows;
  const int64_t n = T * H;
  if (n <= kJudgeEveryRowUpTo) return rows;
  for (int64_t h = 0; h < H; ++h) {
    rows.push_back(h);
    rows.push_back((T - 1) * H + h);
  }
  for (int64_t i = 0; i < kSampledRows; ++i)
    rows.push_back(int64_t(hash::splitmix64(uint64_t(i) ^ (uint64_t(n) << 20)) % uint64_t(n)));
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

JudgePath default_judge_path() { return judge_path_setting().load(); }
void set_default_judge_path(JudgePath p) { judge_path_setting().store(p); }
JudgeCounts& thread_judge_counts() {
  thread_local JudgeCounts counts;
  return counts;
}

namespace {
std::vector<std::string>& thread_excused_kinds() {
  thread_local std::vector<std::string> kinds;
  return kinds;
}
bool excused_kind(const char* kind) {
  const auto& kinds = thread_excused_kinds();
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}
}  // namespace

ExcusedRows::ExcusedRows(std::vector<std::string> kinds) : before_(std::move(kinds)) {
  std::swap(before_, thread_excused_kinds());
}
ExcusedRows::~ExcusedRows() { std::swap(before_, thread_excused_kinds()); }

void drop_excused_rows(Judgement& J, const AttentionInput& a) {
  if (thread_excused_kinds().empty()) return;
  const std::vector<const char*> kinds = attention_row_kinds(a);
  const int64_t H = std::max<int64_t>(1, J.num_heads);
  std::erase_if(J.elems, [&](const Elem& e) {
    const size_t token = size_t(e.row / H);
    return token < kinds.size() && excused_kind(kinds[token]);
  });
}
void drop_excused_rows(Judgement& J, const MergeInput& m) {
  if (thread_excused_kinds().empty()) return;
  const size_t rows = std::min(m.prefix_lse.size(), m.suffix_lse.size());
  std::erase_if(J.elems, [&](const Elem& e) {
    return e.row >= 0 && size_t(e.row) < rows && excused_kind(merge_row_kind(m, size_t(e.row)));
  });
}

Judgement judge_attention(const AttentionInput& a, const AttentionOutput& out, const Conventions& cv,
                          const Budget& b, JudgePath path) {
  return PreparedAttention(a, cv, b).judge(out, path);
}

}  // namespace attncheck::detail
