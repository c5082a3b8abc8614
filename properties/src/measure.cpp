// Judging one output against the exact reference, element by element.
//
// For every output element: the exact value (reference/, 200-bit MPFR), the plain ulp error of the
// output format, the cancellation-aware error and whether it meets the budget of budgets.cpp. Rows a
// declared naive-exp hazard makes unpredictable (predicted overflow, an underflowing largest term,
// a term within rounding of the overflow threshold) are flagged so properties can skip or demand
// them. The bound's conditioning terms (fp32 scores, exponent arguments) are evaluated in double:
// they only size the allowance, the error itself is measured exactly.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "internal.hpp"

namespace attncheck::detail {

ref::Format fmt(ac_dtype d) {
  switch (d) {
    case AC_DTYPE_F16:
      return ref::Format::fp16;
    case AC_DTYPE_BF16:
      return ref::Format::bf16;
    default:
      return ref::Format::fp32;
  }
}
double decode(ac_dtype d, uint32_t bits) { return ref::decode(fmt(d), bits); }
uint32_t round_bits(ac_dtype d, double x) { return ref::round_to_format(fmt(d), x); }
bool finite_bits(ac_dtype d, uint32_t bits) { return std::isfinite(decode(d, bits)); }
std::string hexfloat(ac_dtype d, uint32_t bits) { return ref::to_hexfloat(fmt(d), bits); }
std::string hexfloat(double x) { return ref::to_hexfloat(x); }

double overflow_log_threshold(ac_dtype d) {
  // The rounding threshold to +inf: largest finite + half an ulp.
  switch (d) {
    case AC_DTYPE_F16:
      return std::log(65520.0);
    case AC_DTYPE_BF16:
      return std::log((2.0 - std::ldexp(1.0, -8)) * std::ldexp(1.0, 127));
    default:
      return std::log((2.0 - std::ldexp(1.0, -24)) * std::ldexp(1.0, 127));
  }
}
double min_normal_log(ac_dtype d) { return d == AC_DTYPE_F16 ? -14 * std::log(2.0) : -126 * std::log(2.0); }

Conventions conventions_of(const Subject& s) {
  const ac_caps& c = s.caps();
  Conventions v;
  v.base = c.lse_base == 2 ? ref::LseBase::two : ref::LseBase::e;
  v.empty_sign = c.empty_lse_sign > 0 ? 1 : -1;
  v.naive_exp = (c.features & AC_FEAT_NAIVE_EXP) != 0;
  v.scores_rounded = (c.features & AC_FEAT_SCORES_IN_INPUT_TYPE) != 0;
  v.has_lse = (c.features & AC_FEAT_LSE) != 0;
  v.layout = c.lse_layout;
  v.empty_lse_undefined = (c.flags & AC_CAP_EMPTY_LSE_UNDEFINED) != 0;
  v.flushes_subnormals = (c.flags & AC_CAP_FLUSHES_SUBNORMALS) != 0;
  v.refuses_zero_keys = (c.flags & AC_CAP_REFUSES_ZERO_KEYS) != 0;
  return v;
}

void apply_declared_contracts(Judgement& J, const Conventions& cv) {
  if (!cv.empty_lse_undefined && !cv.flushes_subnormals) return;
  for (Elem& e : J.elems) {
    if (e.within) continue;
    if (cv.empty_lse_undefined && e.out == Out::LSE && J.rows[size_t(e.row)].empty) {
      e.within = true;
      e.ratio = 0;
      continue;
    }
    if (cv.flushes_subnormals && e.exact_finite && e.out_value == 0 &&
        flushed_zero_allowed(e.dtype, e.exact.convert_to<double>(), e.allowed, std::signbit(e.out_value))) {
      e.within = true;
      e.ratio = std::min(e.ratio, 1.0);
    }
  }
}

const char* out_name(Out o) {
  switch (o) {
    case Out::O:
      return "O";
    case Out::LSE:
      return "LSE";
    case Out::Y:
      return "Y";
  }
  return "?";
}

namespace {

const double kLn2 = std::log(2.0);

double to_d(const Real& x) { return x.convert_to<double>(); }

std::string fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", u);
  return b;
}

// Fill the measured fields of an element whose stored output is `bits` in `d`.
void measure_bits(Elem& e, ac_dtype d, uint32_t bits, double scale_ulp_of, double allowed) {
  e.dtype = d;
  e.allowed = allowed;
  e.out_bits = bits;
  e.out_value = decode(d, bits);
  e.out_finite = std::isfinite(e.out_value);
  const ref::UlpError u = ref::ulp_error(fmt(d), bits, e.exact);
  e.ulp = u.ulps;
  if (!e.exact_finite || !e.out_finite) {
    e.within = u.cls == ref::ErrorClass::finite;  // the same infinity / both NaN
    e.cancel = e.within ? 0 : std::numeric_limits<double>::infinity();
    e.ratio = e.within ? 0 : std::numeric_limits<double>::infinity();
    return;
  }
  const double err = to_d(abs(Real(e.out_value) - e.exact));
  const double unit = to_d(ref::ulp_at(fmt(d), Real(scale_ulp_of)));
  e.cancel = err / unit;
  e.ratio = allowed > 0 ? err / allowed : (err == 0 ? 0 : std::numeric_limits<double>::infinity());
  e.within = err <= allowed;
}

// LSE outputs are fp32 values; `expected_empty` is the declared sentinel when the row is empty.
void measure_lse(Elem& e, float y, double allowed) {
  e.out = Out::LSE;
  e.dtype = AC_DTYPE_F32;
  e.allowed = allowed;
  std::memcpy(&e.out_bits, &y, 4);
  e.out_value = y;
  e.out_finite = std::isfinite(y);
  const ref::UlpError u = ref::ulp_error_value(ref::Format::fp32, y, e.exact);
  e.ulp = u.ulps;
  if (!e.exact_finite || !e.out_finite) {
    e.within = u.cls == ref::ErrorClass::finite;
    e.cancel = e.ratio = e.within ? 0 : std::numeric_limits<double>::infinity();
    return;
  }
  const double err = to_d(abs(Real(double(y)) - e.exact));
  const double scale = std::max(1.0, std::fabs(to_d(e.exact)));
  e.cancel = err / (0x1p-23 * scale);
  e.ratio = err / allowed;
  e.within = err <= allowed;
}

std::string where_th(const char* what, int64_t t, int64_t h, int64_t c) {
  std::string s = std::string(what) + "[token=" + std::to_string(t) + ",head=" + std::to_string(h);
  if (c >= 0) s += ",d=" + std::to_string(c);
  return s + "]";
}

}  // namespace

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
      for (int64_t j = 0; j < tk; ++j) {
        bool vis = true;
        if (a.causal && j > t + tk - tq) vis = false;
        if (!a.mask.empty() && a.mask[size_t(m0 + t * tk + j)] == 0) vis = false;
        r.visible[size_t(j)] = vis ? 1 : 0;
      }
      return r;
    }
    q0 += tq;
    k0 += tk;
    m0 += tq * tk;
  }
  return r;
}

ref::AttentionProblem problem_of(const AttentionInput& a) {
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
  return p;
}

// One O element of an attention or merge row, before it is measured.
static Elem o_elem(int64_t row, int64_t t, int64_t h, int64_t c, const Real& exact) {
  Elem e;
  e.out = Out::O;
  e.row = row;
  e.where = where_th("O", t, h, c);
  e.exact = exact;
  e.exact_finite = isfinite(e.exact);
  return e;
}

Judgement judge_attention(const AttentionInput& a, const AttentionOutput& out, const Conventions& cv,
                          const Budget& b) {
  const ref::AttentionProblem p = problem_of(a);
  ref::validate(p);
  Judgement J;
  const int64_t T = total_q(a), H = a.num_heads, D = a.head_size, Hkv = a.num_kv_heads;
  J.num_rows = T * H;
  J.num_heads = H;
  J.rows.resize(size_t(T * H));
  const double lse_unit = cv.base == ref::LseBase::two ? 1.0 / kLn2 : 1.0;
  const bool want_lse = cv.has_lse && out.lse.size() == size_t(T * H);
  const double thr = overflow_log_threshold(a.dtype);
  const double under = min_normal_log(a.dtype);
  for (int64_t t = 0; t < T; ++t) {
    const RowKeys rk = row_keys(a, t);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = t * H + h;
      RowInfo& info = J.rows[size_t(row)];
      const ref::ExactRow ex = ref::exact_attention_row(p, t, int32_t(h), cv.base);
      const int64_t kvh = h / (H / Hkv);
      // Scores in double, for the allowance and the hazard prediction.
      std::vector<double> s, A;
      std::vector<int64_t> keys;
      double smax = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < rk.num_keys; ++j) {
        if (!rk.visible[size_t(j)]) continue;
        const int64_t key = rk.key_begin + j;
        double dot = 0, adot = 0;
        for (int64_t c = 0; c < D; ++c) {
          const double qv = decode(a.dtype, a.q[size_t((t * H + h) * D + c)]);
          const double kv = decode(a.dtype, a.k[size_t((key * Hkv + kvh) * D + c)]);
          dot += qv * kv;
          adot += std::fabs(qv * kv);
        }
        s.push_back(double(a.softmax_scale) * dot);
        A.push_back(std::fabs(double(a.softmax_scale)) * adot);
        keys.push_back(key);
        smax = std::max(smax, s.back());
      }
      info.visible = int64_t(keys.size());
      info.empty = ex.empty;
      const double lse_e = ex.empty ? -INFINITY : to_d(ex.lse) / lse_unit;  // natural log
      std::vector<double> pj(keys.size()), cj(keys.size());
      double sum_exp_scaled = 0;  // sum e^(s - smax)
      for (size_t i = 0; i < keys.size(); ++i) {
        pj[i] = std::isfinite(lse_e) ? std::exp(s[i] - lse_e) : 0;
        cj[i] = score_conditioning(a.dtype, double(D), A[i], std::fabs(s[i] - smax), s[i], cv.scores_rounded);
        sum_exp_scaled += std::exp(s[i] - smax);
        if (cv.naive_exp) {
          const double slack_total =
              naive_exp_overflow_slack(a.dtype, double(D), A[i], s[i], cv.scores_rounded);
          if (s[i] > thr + slack_total)
            info.hazard = true;
          else if (s[i] > thr - slack_total)
            info.ambiguous = true;
        }
      }
      if (cv.naive_exp && !keys.empty() && smax < under) info.underflow = true;
      const double N = double(keys.size());
      AttentionRow ar;
      ar.dtype = a.dtype;
      ar.keys = N;
      ar.head_size = double(D);
      ar.max_score = smax;
      ar.sum_exp_scaled = sum_exp_scaled;
      ar.naive_exp = cv.naive_exp;
      // O
      for (int64_t c = 0; c < D; ++c) {
        Elem e = o_elem(row, t, h, c, ex.o[size_t(c)]);
        double S = 0, cond = 0, vmax = 0;
        for (size_t i = 0; i < keys.size(); ++i) {
          const double v = std::fabs(decode(a.dtype, a.v[size_t((keys[i] * Hkv + kvh) * D + c)]));
          S += pj[i] * v;
          cond += pj[i] * v * cj[i];
          vmax = std::max(vmax, v);
        }
        const double allowed =
            attention_o_allowance(b, ar, to_d(ref::ulp_at(fmt(a.dtype), Real(S))), S, cond, vmax);
        measure_bits(e, a.dtype, out.out[size_t(row * D + c)], S, allowed);
        if (e.exact_finite && e.out_finite && S == 0) e.within = e.out_value == 0;
        e.inputs = "visible_keys=" + std::to_string(keys.size()) + " max_score=" + hexfloat(smax) +
                   " scale_S=" + hexfloat(S);
        J.elems.push_back(std::move(e));
      }
      // LSE
      if (want_lse) {
        Elem e;
        e.row = row;
        e.where = where_th("LSE", t, h, -1);
        e.inputs = "visible_keys=" + std::to_string(keys.size()) + " max_score=" + hexfloat(smax);
        if (ex.empty) {
          e.exact = cv.empty_sign > 0 ? Real(INFINITY) : Real(-INFINITY);
          e.exact_other = e.exact;
          e.exact_finite = false;
        } else {
          e.exact = ex.lse;
          e.exact_finite = isfinite(e.exact);
          const Real ln2 = log(Real(2));
          e.exact_other = cv.base == ref::LseBase::two ? Real(ex.lse * ln2) : Real(ex.lse / ln2);
        }
        double cond = 0;
        for (size_t i = 0; i < keys.size(); ++i) cond += pj[i] * cj[i];
        const double scale = std::isfinite(lse_e) ? std::max(1.0, std::fabs(lse_e * lse_unit)) : 1.0;
        measure_lse(e, out.lse[size_t(row)], attention_lse_allowance(b, ar, scale, cond, lse_unit));
        J.elems.push_back(std::move(e));
      }
    }
  }
  apply_declared_contracts(J, cv);
  return J;
}

Judgement judge_merge(const MergeInput& m, const MergeOutput& out, const Conventions& cv, const Budget& b) {
  Judgement J;
  const int64_t T = m.num_tokens, H = m.num_heads, D = m.head_size;
  J.num_rows = T * H;
  J.num_heads = H;
  J.rows.resize(size_t(T * H));
  const bool base2 = cv.base == ref::LseBase::two;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = t * H + h;
      const float la = m.prefix_lse[size_t(row)], lb = m.suffix_lse[size_t(row)];
      ref::ExactState A{{}, Real(double(la))}, B{{}, Real(double(lb))};
      for (int64_t c = 0; c < D; ++c) {
        A.o.push_back(Real(decode(m.dtype, m.prefix_out[size_t(row * D + c)])));
        B.o.push_back(Real(decode(m.dtype, m.suffix_out[size_t(row * D + c)])));
      }
      const ref::ExactState ex = ref::exact_merge({A, B}, cv.base, true);
      // Weights in double, for the allowance.
      const double ea = la == INFINITY ? -INFINITY : la, eb = lb == INFINITY ? -INFINITY : lb;
      // A NaN LSE on either side makes the exact merge NaN (O and LSE): a NaN is propagated, never
      // read as an empty state, since a merge that hid it would hide the bug upstream that made it.
      const bool nan_in = std::isnan(ea) || std::isnan(eb);
      const double M = nan_in ? NAN : std::max(ea, eb);
      RowInfo& info = J.rows[size_t(row)];
      info.empty = !nan_in && !(M > -INFINITY);
      info.visible = (ea > -INFINITY) + (eb > -INFINITY);
      auto w = [&](double l) { return info.empty ? 0.0 : (base2 ? std::exp2(l - M) : std::exp(l - M)); };
      const double wa = w(ea), wb = w(eb), ws = wa + wb;
      const std::string in_lse = "prefix_lse=" + fbits(la) + " (" + hexfloat(double(la)) +
                                 ") suffix_lse=" + fbits(lb) + " (" + hexfloat(double(lb)) + ")";
      for (int64_t c = 0; c < D; ++c) {
        Elem e = o_elem(row, t, h, c, ex.o[size_t(c)]);
        const double oa = to_d(A.o[size_t(c)]), ob = to_d(B.o[size_t(c)]);
        const double S = info.empty || nan_in ? 0 : (wa * std::fabs(oa) + wb * std::fabs(ob)) / ws;
        const double Mabs = std::isfinite(M) ? std::fabs(M) : 0;
        const double tiny = 0x1p-126 * ws;  // a normalised weight below fp32's normal range
        const double sub_weighted = (wa > 0 && wa < tiny ? std::fabs(oa) : 0) + (wb > 0 && wb < tiny ? std::fabs(ob) : 0);
        const double allowed =
            merge_o_allowance(b, to_d(ref::ulp_at(fmt(m.dtype), Real(S))), S, Mabs, sub_weighted);
        measure_bits(e, m.dtype, out.out[size_t(row * D + c)], S, allowed);
        e.inputs = in_lse + " prefix_out=" + hexfloat(m.dtype, m.prefix_out[size_t(row * D + c)]) +
                   " suffix_out=" + hexfloat(m.dtype, m.suffix_out[size_t(row * D + c)]);
        J.elems.push_back(std::move(e));
      }
      if (out.lse.size() == size_t(T * H)) {
        Elem e;
        e.row = row;
        e.where = where_th("LSE", t, h, -1);
        e.inputs = in_lse;
        if (info.empty) {
          e.exact = cv.empty_sign > 0 ? Real(INFINITY) : Real(-INFINITY);
          e.exact_other = e.exact;
          e.exact_finite = false;
        } else {
          e.exact = ex.lse;
          e.exact_finite = isfinite(e.exact);
          // The other base's reading of the same numbers: what a base-confused subject returns.
          const ref::ExactState other =
              ref::exact_merge({A, B}, base2 ? ref::LseBase::e : ref::LseBase::two, true);
          e.exact_other = other.lse;
        }
        const double scale = std::max(1.0, std::isfinite(M) ? std::fabs(M) : 1.0);
        measure_lse(e, out.lse[size_t(row)], merge_lse_allowance(b, scale));
        // An empty merge may also answer with -inf whatever the declared attention sentinel.
        if (info.empty && !e.within && std::isinf(out.lse[size_t(row)]) && out.lse[size_t(row)] < 0)
          e.within = true;
        J.elems.push_back(std::move(e));
      }
    }
  apply_declared_contracts(J, cv);
  return J;
}

Judgement judge_softmax(const SoftmaxInput& s, const SoftmaxOutput& out, const Conventions& cv,
                        const Budget& b) {
  Judgement J;
  J.num_rows = s.rows;
  J.rows.resize(size_t(s.rows));
  const double thr = overflow_log_threshold(s.dtype), under = min_normal_log(s.dtype);
  for (int64_t r = 0; r < s.rows; ++r) {
    RowInfo& info = J.rows[size_t(r)];
    std::vector<Real> x;
    std::vector<double> xd;
    double xmax = -INFINITY;
    for (int64_t c = 0; c < s.cols; ++c) {
      const double v = decode(s.dtype, s.x[size_t(r * s.cols + c)]);
      xd.push_back(v);
      x.push_back(Real(v));
      xmax = std::max(xmax, v);
      if (v > -INFINITY) ++info.visible;
      if (cv.naive_exp && std::isfinite(v)) {
        if (v > thr + softmax_overflow_slack(v))
          info.hazard = true;
        else if (v > thr - softmax_overflow_slack(v))
          info.ambiguous = true;
      }
    }
    info.empty = info.visible == 0;
    if (cv.naive_exp && info.visible && xmax < under) info.underflow = true;
    const std::vector<Real> y = ref::softmax(x);
    double sum_exp = 0;
    for (double v : xd) sum_exp += std::exp(v);
    const double N = double(info.visible);
    for (int64_t c = 0; c < s.cols; ++c) {
      Elem e;
      e.out = Out::Y;
      e.row = r;
      e.where = "Y[row=" + std::to_string(r) + ",col=" + std::to_string(c) + "]";
      e.inputs = "x=" + hexfloat(s.dtype, s.x[size_t(r * s.cols + c)]) + " row_max=" + hexfloat(xmax);
      e.exact = y[size_t(c)];
      e.exact_finite = isfinite(e.exact);
      const double yd = to_d(e.exact);
      const double dist = std::isfinite(xd[size_t(c)]) ? std::fabs(xd[size_t(c)] - xmax) : 0.0;
      const double allowed = softmax_allowance(b, s.dtype, to_d(ref::ulp_at(fmt(s.dtype), e.exact)), N, dist,
                                               std::fabs(yd), cv.naive_exp, sum_exp);
      measure_bits(e, s.dtype, out.y[size_t(r * s.cols + c)], std::fabs(yd), allowed);
      J.elems.push_back(std::move(e));
    }
  }
  apply_declared_contracts(J, cv);
  return J;
}

void accumulate_stats(std::vector<OutputStats>& stats, const Judgement& J,
                      std::vector<std::vector<double>>& ulps, std::vector<std::vector<double>>& cancels) {
  const auto& edges = ulp_histogram_edges();
  for (const Elem& e : J.elems) {
    if (J.row_skipped(e.row) || !e.exact_finite) continue;
    const std::string dt = dtype_name(e.dtype), on = out_name(e.out);
    size_t i = 0;
    for (; i < stats.size(); ++i)
      if (stats[i].dtype == dt && stats[i].output == on) break;
    if (i == stats.size()) {
      OutputStats s;
      s.dtype = dt;
      s.output = on;
      s.histogram.assign(edges.size() - 1, 0);
      stats.push_back(s);
      ulps.emplace_back();
      cancels.emplace_back();
    }
    OutputStats& s = stats[i];
    ++s.count;
    if (!e.out_finite) {
      ++s.nonfinite;
      continue;
    }
    s.max_ulp = std::max(s.max_ulp, e.ulp);
    s.max_cancel_ulp = std::max(s.max_cancel_ulp, e.cancel);
    s.mean_ulp += e.ulp;  // a sum until finish_stats
    ulps[i].push_back(e.ulp);
    cancels[i].push_back(e.cancel);
    size_t bin = 0;
    while (bin + 2 < edges.size() && e.ulp >= edges[bin + 1]) ++bin;
    ++s.histogram[bin];
  }
}

void finish_stats(std::vector<OutputStats>& stats, std::vector<std::vector<double>>& ulps,
                  std::vector<std::vector<double>>& cancels) {
  auto p99 = [](std::vector<double>& v) {
    if (v.empty()) return 0.0;
    const size_t k = std::min(v.size() - 1, size_t(std::ceil(0.99 * double(v.size()))) - 1);
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(k), v.end());
    return v[k];
  };
  for (size_t i = 0; i < stats.size(); ++i) {
    const int64_t finite = stats[i].count - stats[i].nonfinite;
    stats[i].mean_ulp = finite ? stats[i].mean_ulp / double(finite) : 0;
    stats[i].p99_ulp = p99(ulps[i]);
    stats[i].p99_cancel_ulp = p99(cancels[i]);
  }
}

WorstElement to_worst(const Elem& e) {
  WorstElement w;
  w.where = e.where;
  w.input_bits = e.inputs;
  w.exact = ref::to_decimal(e.exact, 36);
  const uint32_t rb = ref::round_to_format(fmt(e.dtype), e.exact);
  w.rounded_exact = hexfloat(e.dtype, rb);
  char b[24];
  std::snprintf(b, sizeof b, e.dtype == AC_DTYPE_F32 ? "0x%08x" : "0x%04x", e.out_bits);
  w.output_bits = std::string(b) + " (" + hexfloat(e.dtype, e.out_bits) + ")";
  w.ulp = e.ulp;
  w.cancel_ulp = e.cancel;
  return w;
}

}  // namespace attncheck::detail
