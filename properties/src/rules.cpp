// The rules several properties share, and the helpers every check uses. A rule reads a Judgement
// (the judge_*.cpp files) and records the first failure in an Outcome; the tolerances it uses are
// in budgets.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "attncheck/names.hpp"
#include "property.hpp"

namespace attncheck::detail {

void before_launch(Ctx& ctx, const Case& c, bool write) {
  if (write && !ctx.write_ahead_path.empty()) {
    const AddSeconds timed(thread_time_split().write_ahead);
    write_case_atomic_to(ctx.write_ahead_path, c);
  }
  if (ctx.cfg.before_launch) ctx.cfg.before_launch(c);
}

std::string digest_bits(const Bits& b, const std::vector<float>& lse) {
  std::string d(reinterpret_cast<const char*>(b.data()), b.size() * 4);
  d.append(reinterpret_cast<const char*>(lse.data()), lse.size() * 4);
  return d;
}

double ulps_apart(ac_dtype d, uint32_t a, uint32_t b) {
  const int w = d == AC_DTYPE_F32 ? 32 : 16;
  const uint32_t sign = 1u << (w - 1), mag = sign - 1;
  if (std::isnan(decode(d, a)) || std::isnan(decode(d, b))) return INFINITY;
  // Sign-magnitude bits as a line of integers: -0 and +0 both at 0, each step one representable
  // value (infinities sit one step past the largest finite value).
  auto line = [&](uint32_t x) { return (x & sign) ? -int64_t(x & mag) : int64_t(x & mag); };
  return double(std::llabs(line(a) - line(b)));
}

Spread spread_of(ac_dtype d, const AttentionOutput& first, const AttentionOutput& second) {
  Spread s;
  for (size_t i = 0; i < first.out.size() && i < second.out.size(); ++i) {
    ++s.compared;
    if (first.out[i] == second.out[i]) continue;
    ++s.differing;
    s.max_ulps = std::max(s.max_ulps, ulps_apart(d, first.out[i], second.out[i]));
  }
  for (size_t i = 0; i < first.lse.size() && i < second.lse.size(); ++i) {
    ++s.compared;
    uint32_t a = 0, b = 0;
    std::memcpy(&a, &first.lse[i], 4);
    std::memcpy(&b, &second.lse[i], 4);
    if (a == b) continue;
    ++s.differing;
    s.max_ulps = std::max(s.max_ulps, ulps_apart(AC_DTYPE_F32, a, b));
  }
  return s;
}

double budget_spread(const AttentionInput& a, const Judgement& J_first, const AttentionOutput& first,
                     const AttentionOutput& second) {
  double worst = 0;
  for_each_measured(a, J_first, [&](const Elem& e, size_t i, int64_t) {
    const bool o = e.out == Out::O;
    const double x = o ? decode(a.dtype, first.out[i]) : double(first.lse[i]);
    const double y = o ? decode(a.dtype, second.out[i]) : double(second.lse[i]);
    if (x == y || (std::isnan(x) && std::isnan(y))) return;
    worst = std::max(worst, e.allowed > 0 ? std::fabs(x - y) / e.allowed : INFINITY);
  });
  return worst;
}

std::string first_difference(const AttentionInput& a, const AttentionOutput& first,
                             const AttentionOutput& second, const char* second_name) {
  const int64_t H = a.num_heads, D = a.dv();  // O's rows are V's head size
  for (size_t i = 0; i < first.out.size() && i < second.out.size(); ++i)
    if (first.out[i] != second.out[i]) {
      const int64_t e = int64_t(i);
      return "differ at O[token=" + std::to_string(e / (H * D)) + ",head=" + std::to_string(e / D % H) +
             ",d=" + std::to_string(e % D) + "]: first " + hexfloat(a.dtype, first.out[i]) + ", " +
             second_name + " " + hexfloat(a.dtype, second.out[i]);
    }
  for (size_t i = 0; i < first.lse.size() && i < second.lse.size(); ++i)
    if (std::memcmp(&first.lse[i], &second.lse[i], sizeof(float)) != 0)
      return "differ at LSE[token=" + std::to_string(int64_t(i) / H) +
             ",head=" + std::to_string(int64_t(i) % H) + "]: first " + hexfloat(double(first.lse[i])) + ", " +
             second_name + " " + hexfloat(double(second.lse[i]));
  if (first.out.size() != second.out.size() || first.lse.size() != second.lse.size())
    return "returned outputs of different sizes";
  return "";
}

void keep_worst(Outcome& o, const Elem& e) {
  o.worst.push_back(e);
  std::sort(o.worst.begin(), o.worst.end(), [](const Elem& a, const Elem& b) { return a.ratio > b.ratio; });
  if (o.worst.size() > 5) o.worst.resize(5);
}

std::string elem_line(const Elem& e) {
  auto g = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", x);
    return std::string(b);
  };
  // cancel-ulp is left out where the element has no cancellation scale (split_equals_whole's
  // merged value, which no single output's sum S belongs to).
  // An FP8 code (a quantiser's, a merge's: measure_fp8): steps between codes; its inputs name the
  // codes allowed.
  if (is_fp8(e.dtype)) {
    char code[8];
    std::snprintf(code, sizeof code, "0x%02x", e.out_bits);
    return e.where + ": exact " + ref::to_decimal(e.exact, 12) + " before the FP8 cast, got " + code + " (" +
           hexfloat(e.dtype, e.out_bits) + "), " + g(e.ulp) + " codes from the nearest allowed one";
  }
  const bool has_cancel = e.cancel_unit > 0 || e.cancel != 0;
  std::string line = e.where + ": exact " + ref::to_decimal(e.exact, 12) + ", got " + hexfloat(e.out_value) +
                     " (ulp " + g(e.ulp) + (has_cancel ? ", cancel-ulp " + g(e.cancel) : "") +
                     ", err/budget " + g(e.ratio) + ")";
  // Over budget by less than an ulp of the output format: the allowance is below the format's
  // resolution there, which the line must say, or "ulp 0" beside a failing ratio reads as a
  // contradiction.
  if (e.ratio > 1 && e.allowed == 0)
    line += "; the allowance is 0: only the exact value passes";
  else if (e.ratio > 1 && e.ulp < 1 && std::isfinite(e.ratio))
    line += "; |error| " + g(std::fabs(e.out_value - e.exact.convert_to<double>())) +
            " exceeds the allowance " + g(e.allowed) + ", below one ulp of the output format";
  return line;
}

// Within 2^10 of fp32's smallest normal, flushed fp32 intermediates (a few hundred terms of up to
// 2^-126 each, budgets.cpp) can decide an element; an FTZ kernel's element there fails on them. A
// nonzero fp32 or bf16 subnormal output shows that the kernel does not flush its results (fp16's
// subnormals are normal fp32 numbers and show nothing): no flush declaration is its cause.
void note_flushed(Outcome& o, const Conventions& cv) {
  if (o.ok || o.crashed || !o.quoted) return;
  const Elem& e = *o.quoted;
  if (!e.exact_finite || !e.out_finite) return;
  const double x = std::fabs(e.exact.convert_to<double>()), y = std::fabs(e.out_value);
  if (e.dtype != AC_DTYPE_F16 && y > 0 && y < 0x1p-126) return;
  std::string declare;
  if (std::max(x, y) < 0x1p-116 && !cv.ftz_arithmetic)
    declare = flag_name(AC_CAP_FTZ_ARITHMETIC) + std::string(" (AC_CAP_FTZ_ARITHMETIC)");
  else if (y == 0 && x < min_normal(e.dtype) && !cv.flushes_subnormals)
    declare = flag_name(AC_CAP_FLUSHES_SUBNORMALS) + std::string(" (AC_CAP_FLUSHES_SUBNORMALS)");
  if (declare.empty()) return;
  o.message += "; " + e.where + (y == 0 ? " is a flushed zero" : " lies near the subnormal range") +
               ": if the kernel flushes subnormals by design, declare " + declare;
}

void note_empty_state_o(Outcome& o, const Case& c, const Conventions& cv) {
  const auto* m = std::get_if<MergeInput>(&c.input);
  if (o.ok || o.crashed || !o.quoted || !m || cv.empty_states_zero_o) return;
  const Elem& e = *o.quoted;
  const size_t r = size_t(e.row), D = size_t(m->head_size);
  if (e.out != Out::O || !e.out_finite || r >= m->prefix_lse.size()) return;
  if (!gen::empty_state_lse(m->prefix_lse[r]) || !gen::empty_state_lse(m->suffix_lse[r])) return;
  bool nonzero = false;
  for (size_t i = r * D; i < (r + 1) * D; ++i)
    nonzero = nonzero || decode(m->dtype, m->prefix_out[i]) != 0 || decode(m->dtype, m->suffix_out[i]) != 0;
  if (!nonzero) return;
  o.message += "; " + e.where +
               " lies on a row of two empty states that hold a non-zero O: if every producer writes O = 0 "
               "for an empty state and the merge relies on it, declare " +
               flag_name(AC_CAP_EMPTY_STATES_ZERO_O) + std::string(" (AC_CAP_EMPTY_STATES_ZERO_O)");
}

void fail_at(Outcome& o, const std::string& cls, const std::string& prefix, const Elem& e) {
  keep_worst(o, e);
  if (!o.ok) return;
  fail(o, cls, prefix + elem_line(e));
  o.quoted = e;
}

WorstElement worst_element(const Elem& e) {
  WorstElement w = to_worst(e);
  w.ratio = e.ratio;
  w.allowed = e.allowed;
  w.row = e.row;
  return w;
}

void fail(Outcome& o, const std::string& cls, const std::string& msg) {
  if (o.ok) {
    o.ok = false;
    o.failure_class = cls;
    o.message = msg;
  }
}

void record_stats(Ctx& ctx, const Judgement& J) {
  if (ctx.counting) accumulate_stats(ctx.stats, J, ctx.samples);
}

Outcome check_accuracy(Ctx& ctx, const Case& c, bool finite_only) {
  Outcome o;
  const Judgement J = run_once(ctx, c, o);
  rule_accuracy(o, J, finite_only);
  return o;
}

Judgement run_once(Ctx& ctx, const Case& c, Outcome& o) {
  Subject& s = ctx.subject;
  Judgement J;
  if (const auto* m = std::get_if<MergeInput>(&c.input)) {
    before_launch(ctx, c);
    const MergeOutput out = s.merge(*m);
    o.digest = digest_bits(out.out, out.lse);
    J = judge_merge(*m, out, ctx.cv, ctx.budget);
  } else if (const auto* x = std::get_if<SoftmaxInput>(&c.input)) {
    before_launch(ctx, c);
    const SoftmaxOutput out = s.softmax(*x);
    o.digest = digest_bits(out.y, {});
    J = judge_softmax(*x, out, ctx.cv, ctx.budget);
  } else if (const auto* q = std::get_if<QuantizeInput>(&c.input)) {
    before_launch(ctx, c);
    const QuantizeOutput out = s.quantize(*q);
    o.digest = digest_bits(out.y, {});
    J = judge_quantize(*q, out, ctx.cv);
  } else {
    const auto& a = std::get<AttentionInput>(c.input);
    before_launch(ctx, c);
    const AttentionOutput out = s.attention(a, c.options);
    o.digest = digest_bits(out.out, out.lse);
    J = judge_attention(a, out, ctx.cv, ctx.budget);
  }
  record_stats(ctx, J);
  return J;
}

void rule_accuracy(Outcome& o, const Judgement& J, bool finite_only) {
  for (const Elem& e : J.elems) {
    if (J.row_skipped(e.row)) continue;
    const RowInfo& r = J.rows[size_t(e.row)];
    // An infinity that is the exact value's rounding in the output format (past its largest
    // finite value) is the correct output: measure_bits judged it within.
    if (e.exact_finite && !e.out_finite && !e.within)
      fail_at(o, "nonfinite", "non-finite output where the exact value is finite: ", e);
    else if (!finite_only && !e.within)
      fail_at(o, r.empty ? "empty_row" : "accuracy", r.empty ? "empty-row contract: " : "over budget: ", e);
  }
}

void rule_empty(Outcome& o, const Judgement& J, const Conventions& cv) {
  for (const Elem& e : J.elems) {
    if (!J.rows[size_t(e.row)].empty) continue;
    if (e.out == Out::LSE && cv.empty_lse_undefined) continue;  // declared undefined: O alone is judged
    bool good;
    if (e.out == Out::LSE && J.rows[size_t(e.row)].sink) {
      good = e.within;  // the sink, within the LSE's budget (AC_VAR_SINKS)
    } else if (e.out == Out::LSE) {
      const double want = cv.empty_sign > 0 ? INFINITY : -INFINITY;
      good = e.out_value == want;
    } else {
      good = e.out_value == 0;  // +0 or -0: "O = 0 exactly"
    }
    if (!good) {
      keep_worst(o, e);
      fail(o, "empty_row",
           "empty row: " + e.where + " is " + hexfloat(e.out_value) +
               (e.out != Out::LSE ? std::string(", want 0")
                : J.rows[size_t(e.row)].sink
                    ? ", want the sink " + hexfloat(to_d(e.exact))
                    : std::string(", declared sentinel ") + (cv.empty_sign > 0 ? "+inf" : "-inf")));
    }
  }
}

void rule_overflow(Outcome& o, const Judgement& J, const Conventions& cv) {
  std::vector<int> row_nonfinite(size_t(J.num_rows), 0);
  for (const Elem& e : J.elems)
    if (e.out != Out::LSE && !e.out_finite) row_nonfinite[size_t(e.row)] = 1;
  for (int64_t r = 0; r < J.num_rows; ++r) {
    const RowInfo& info = J.rows[size_t(r)];
    if (info.ambiguous || info.underflow || info.empty) continue;
    const bool predicted = cv.naive_exp && info.hazard;
    if (predicted && !row_nonfinite[size_t(r)])
      fail(o, "overflow",
           "row " + std::to_string(r) +
               ": the naive exp must overflow here (exact exp rounds to inf) but the output is finite");
    if (!predicted && row_nonfinite[size_t(r)]) {
      for (const Elem& e : J.elems)
        if (e.row == r && !e.out_finite && e.out != Out::LSE) {
          fail_at(o, "overflow", "overflow where none is predicted: ", e);
          break;
        }
    }
  }
}

void rule_lse(Outcome& o, const Judgement& J, const Conventions& cv) {
  // Rows are token * heads + head for merge and attention alike.
  const int64_t heads = J.num_heads, tokens = heads > 0 ? J.num_rows / heads : 0;
  std::vector<const Elem*> lse(size_t(J.num_rows), nullptr);
  for (const Elem& e : J.elems)
    if (e.out == Out::LSE) lse[size_t(e.row)] = &e;
  bool all_within = true, other_base = true, transposed = tokens > 1 && heads > 1;
  for (int64_t r = 0; r < J.num_rows; ++r) {
    const Elem* e = lse[size_t(r)];
    if (!e || J.row_skipped(r)) continue;
    if (!e->within) all_within = false;
    if (e->exact_finite) {
      const double err = abs(Real(e->out_value) - e->exact_other).convert_to<double>();
      if (!(err <= lse_other_base_tolerance(e->allowed, e->out_value))) other_base = false;
    } else if (!e->within) {
      other_base = false;
    }
    // The value this row would hold had the subject written the other layout.
    const int64_t t = r / heads, h = r % heads;
    int64_t src;
    if (cv.layout == AC_LSE_HEADS_TOKENS) {
      const int64_t idx = t * heads + h;  // written [tokens, heads]; read [heads, tokens]
      src = (idx % tokens) * heads + idx / tokens;
    } else {
      const int64_t idx = h * tokens + t;
      src = (idx / heads) * heads + idx % heads;
    }
    if (transposed && lse[size_t(src)]) {
      const Elem* s = lse[size_t(src)];
      const double want = e->exact.convert_to<double>();
      const bool match = e->exact_finite
                             ? std::fabs(s->out_value - want) <= lse_other_layout_tolerance(e->allowed)
                             : s->out_value == want;
      if (!match) transposed = false;
    }
  }
  if (all_within) return;
  for (const Elem* e : lse)
    if (e && !e->within) keep_worst(o, *e);
  if (o.ok) o.quoted = o.worst.front();
  if (other_base)
    fail(o, "lse_base",
         std::string("LSE is in base ") + (cv.base == ref::LseBase::e ? "2" : "e") +
             " but the subject declares base " + (cv.base == ref::LseBase::e ? "e" : "2") + ": " +
             elem_line(o.worst.front()));
  else if (transposed)
    fail(o, "lse_layout",
         std::string("LSE declared ") +
             (cv.layout == AC_LSE_HEADS_TOKENS ? "[heads, tokens]" : "[tokens, heads]") + " but written " +
             (cv.layout == AC_LSE_HEADS_TOKENS ? "[tokens, heads]" : "[heads, tokens]") + ": " +
             elem_line(o.worst.front()));
  else
    fail(o, "accuracy", "LSE over budget: " + elem_line(o.worst.front()));
}

}  // namespace attncheck::detail
