// The fast judgement of attention (judge_attention.cpp: the certified fp64 reference, escalating to MPFR)
// against the exact one (every row through MPFR): same verdicts element by element, same rows, same
// rule outcomes (failure classes, messages, worst elements), over generated cases of every kind and
// outputs built to sit on the budget's edge, off by a few ulps, non-finite, or exact. Then whole
// property runs, shrinking included, under both paths.
#include <rapidcheck.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <sstream>

#include "attncheck/generators.hpp"
#include "attncheck/properties.hpp"
#include "fakes.hpp"
#include "property.hpp"

using namespace attncheck;
using namespace attncheck::detail;

namespace {

// The exact output, rounded once: every kind of output is made from it.
struct Exact {
  std::vector<double> o;    // layout of O
  std::vector<double> lse;  // [rows], in the declared base; -inf for empty rows
};
Exact exact_of(const AttentionInput& a, ref::LseBase base) {
  const ref::AttentionProblem p = problem_of(a);
  Exact x;
  for (const ref::ExactRow& r : ref::exact_attention(p, base)) {
    for (const Real& v : r.o) x.o.push_back(v.convert_to<double>());
    x.lse.push_back(r.empty ? -INFINITY : r.lse.convert_to<double>());
  }
  return x;
}

// The stored value `steps` representable values away from the rounding of x (toward +inf for
// steps > 0): finite bit patterns are ordered by magnitude within a sign.
uint32_t step_bits(ac_dtype d, double x, int steps) {
  const ref::Format f = fakes::fmt(d);
  const uint32_t sign = d == AC_DTYPE_F32 ? 0x80000000u : 0x8000u;
  uint32_t b = ref::round_to_format(f, x);
  for (int i = 0; i < std::abs(steps); ++i) {
    const double v = ref::decode(f, b);
    const bool up = steps > 0;
    if (!std::isfinite(v)) break;
    if (v == 0)
      b = up ? 1u : (sign | 1u);  // the smallest subnormal
    else if ((v > 0) == up)
      ++b;  // away from zero
    else
      --b;
  }
  return b;
}

enum class Kind { exact, ulps, edge, nonfinite, mixed };

// An output of one kind for `a`: edge puts each element at the representable value nearest to the
// exact value plus or minus its allowance (from an exact judgement of the exact output), and the
// values on either side of it.
AttentionOutput make_output(const AttentionInput& a, const Conventions& cv, const Exact& x, Kind kind,
                            uint64_t seed) {
  const int64_t rows = int64_t(x.lse.size()), D = a.head_size;
  AttentionOutput out;
  out.out.resize(x.o.size());
  out.lse.resize(size_t(rows));
  for (size_t i = 0; i < x.o.size(); ++i) out.out[i] = round_bits(a.dtype, x.o[i]);
  for (int64_t r = 0; r < rows; ++r)
    out.lse[size_t(r)] =
        std::isinf(x.lse[size_t(r)]) ? (cv.empty_sign > 0 ? INFINITY : -INFINITY) : float(x.lse[size_t(r)]);
  if (kind == Kind::exact) return out;
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  Judgement J;
  if (kind == Kind::edge || kind == Kind::mixed) J = judge_attention(a, out, cv, Budget{}, JudgePath::exact);
  size_t ei = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < D; ++c, ++ei) {
      const size_t i = size_t(r * D + c);
      const uint64_t pick = next() % 8;
      Kind k = kind == Kind::mixed ? Kind(1 + pick % 3) : kind;
      if (k == Kind::ulps) {
        out.out[i] = step_bits(a.dtype, x.o[i], int(next() % 13) - 6);
      } else if (k == Kind::edge) {
        const Elem& e = J.elems[ei];
        const double side = next() % 2 ? 1.0 : -1.0;
        if (std::isfinite(e.allowed) && std::isfinite(x.o[i]))
          out.out[i] = step_bits(a.dtype, x.o[i] + side * e.allowed, int(next() % 3) - 1);
      } else if (k == Kind::nonfinite && pick == 0) {
        out.out[i] = round_bits(a.dtype, next() % 2 ? NAN : (next() % 2 ? INFINITY : -INFINITY));
      }
    }
    if (cv.has_lse) {
      const double l = x.lse[size_t(r)];
      if (std::isfinite(l)) {
        const uint64_t pick = next() % 6;
        float y = float(l);
        if (pick == 1 || pick == 2) {
          // The LSE allowance's edge (the judgement's last element of the row).
          const Elem& e = J.elems.empty() ? Elem{} : J.elems[ei];
          const double target = l + (pick == 1 ? 1 : -1) * e.allowed;
          y = float(target);
          if (next() % 2) y = std::nextafter(y, pick == 1 ? INFINITY : -INFINITY);
        } else if (pick == 3) {
          y = std::nextafter(std::nextafter(y, INFINITY), INFINITY);
        } else if (pick == 4 && kind == Kind::nonfinite) {
          y = NAN;
        } else if (pick == 5 && kind == Kind::mixed) {
          y = float(cv.base == ref::LseBase::e ? l / std::log(2.0) : l * std::log(2.0));  // the other base
        }
        out.lse[size_t(r)] = y;
      }
      if (kind == Kind::edge || kind == Kind::mixed) ++ei;
    }
  }
  return out;
}

// Everything a rule or a report reads, compared; `why` names the first difference.
bool same_judgement(const Judgement& f, const Judgement& x, std::string& why) {
  std::ostringstream w;
  w.precision(17);
  if (f.elems.size() != x.elems.size() || f.rows.size() != x.rows.size()) {
    why = "sizes differ";
    return false;
  }
  for (size_t r = 0; r < f.rows.size(); ++r) {
    const RowInfo &a = f.rows[r], &b = x.rows[r];
    if (a.empty != b.empty || a.hazard != b.hazard || a.underflow != b.underflow ||
        a.ambiguous != b.ambiguous || a.visible != b.visible) {
      w << "row " << r << " flags differ";
      why = w.str();
      return false;
    }
  }
  const auto& edges = ulp_histogram_edges();
  auto bin = [&](double u) {
    size_t k = 0;
    while (k + 2 < edges.size() && u >= edges[k + 1]) ++k;
    return k;
  };
  for (size_t i = 0; i < f.elems.size(); ++i) {
    const Elem &a = f.elems[i], &b = x.elems[i];
    auto differ = [&](const char* what) {
      w << a.where << ": " << what << " (fast " << a.within << " allowed " << a.allowed << " ["
        << a.allowed_lo << ", " << a.allowed_hi << "] ulp " << a.ulp << "; exact " << b.within << " allowed "
        << b.allowed << " ulp " << b.ulp << ")";
      why = w.str();
      return false;
    };
    if (a.where != b.where || a.row != b.row || a.out != b.out || a.dtype != b.dtype)
      return differ("identity");
    if (a.within != b.within) return differ("within");
    if (a.exact_finite != b.exact_finite || a.out_finite != b.out_finite) return differ("finiteness");
    if (a.out_bits != b.out_bits) return differ("output bits");
    if (!(a.allowed_lo <= b.allowed && b.allowed <= a.allowed_hi)) return differ("allowance interval");
    if (std::isinf(a.ulp) != std::isinf(b.ulp)) return differ("ulp class");
    if (std::isfinite(b.ulp) && (std::fabs(a.ulp - b.ulp) > 0x1p-17 * (1 + 1e-9) || bin(a.ulp) != bin(b.ulp)))
      return differ("ulp");
    if (std::isfinite(b.cancel) && std::fabs(a.cancel - b.cancel) > 0x1p-17 * (1 + 1e-9))
      return differ("cancel");
    if (a.binade_known &&
        ref::ulp_at(fakes::fmt(a.dtype), a.exact) != ref::ulp_at(fakes::fmt(b.dtype), b.exact) &&
        b.exact_finite)
      return differ("binade");
    if (!a.fast) {  // escalated: the exact path's element itself
      auto same = [](double p, double q) { return p == q || (std::isnan(p) && std::isnan(q)); };
      auto same_real = [](const Real& p, const Real& q) { return p == q || (isnan(p) && isnan(q)); };
      if (!same(a.allowed, b.allowed) || !same(a.ratio, b.ratio) || !same(a.ulp, b.ulp) ||
          !same(a.cancel, b.cancel) || a.inputs != b.inputs || !same_real(a.exact, b.exact))
        return differ("escalated element not identical");
    } else if (!a.within && !f.row_skipped(a.row)) {
      return differ("a fast element that fails");
    } else if (a.out_finite && b.out_finite &&
               !(a.ratio >= b.ratio && (a.out != Out::O || a.cancel_unit <= b.cancel_unit))) {
      return differ("fast ratio below the exact one, or its ulp_F(S) above");  // judge_attention.cpp, step 8
    }
  }
  return true;
}

std::string outcome_text(const Outcome& o) {
  std::string s = std::string(o.ok ? "ok" : "FAIL ") + o.failure_class + " | " + o.message;
  for (const Elem& e : o.worst)
    s += " | " + e.where + " " + to_worst(e).exact + " " + to_worst(e).rounded_exact;
  return s;
}

// The rules every attention property applies, on a judgement.
std::vector<std::string> rule_outcomes(const Judgement& J, const Conventions& cv) {
  std::vector<std::string> r;
  for (int k = 0; k < 5; ++k) {
    Outcome o;
    if (k == 0) rule_accuracy(o, J, false);
    if (k == 1) rule_accuracy(o, J, true);
    if (k == 2) rule_empty(o, J, cv);
    if (k == 3) rule_overflow(o, J, cv);
    if (k == 4) rule_lse(o, J, cv);
    r.push_back(outcome_text(o));
  }
  return r;
}

struct Totals {
  int64_t rows = 0, escalated = 0, fast_elems = 0, failing_elems = 0, cases = 0;
};

void compare_case(const AttentionInput& a, const Conventions& cv, Kind kind, uint64_t seed, Totals& tot) {
  const Exact x = exact_of(a, cv.base);
  const AttentionOutput out = make_output(a, cv, x, kind, seed);
  const Judgement F = judge_attention(a, out, cv, Budget{}, JudgePath::fast);
  const Judgement X = judge_attention(a, out, cv, Budget{}, JudgePath::exact);
  std::string why;
  RC_ASSERT(same_judgement(F, X, why) || (RC_LOG() << why << "\n", false));
  RC_ASSERT(rule_outcomes(F, cv) == rule_outcomes(X, cv));
  tot.rows += F.counts.rows;
  tot.escalated += F.counts.rows_escalated;
  ++tot.cases;
  for (const Elem& e : F.elems) {
    tot.fast_elems += e.fast;
    tot.failing_elems += !e.within;
  }
}

Conventions conventions(int variant) {
  Conventions cv;
  cv.base = variant & 1 ? ref::LseBase::two : ref::LseBase::e;
  cv.empty_sign = variant & 2 ? 1 : -1;
  cv.naive_exp = (variant & 4) != 0;
  cv.scores_rounded = (variant & 8) != 0;
  cv.has_lse = (variant & 16) == 0;
  return cv;
}

gen::Domain domain() {
  gen::Domain d;
  d.dtypes = {AC_DTYPE_F16, AC_DTYPE_BF16, AC_DTYPE_F32};
  d.head_sizes = {1, 2, 3, 8, 16, 64};
  d.features = AC_FEAT_CAUSAL | AC_FEAT_MASK | AC_FEAT_VARLEN | AC_FEAT_GQA;
  d.max_keys = 48;
  d.max_tokens = 6;
  d.max_heads = 4;
  return d;
}

}  // namespace

TEST_CASE("the fast judgement of attention equals the exact one, element by element and rule by rule") {
  const gen::Domain dom = domain();
  Totals tot;
  bool ok = true;
  for (int round = 0; round < 4 && ok; ++round)
    ok = rc::check("fast == exact judgement", [&] {
      const int which = *rc::gen::inRange(0, 4);
      const AttentionInput a = which == 0   ? *gen::attention_input(dom)
                               : which == 1 ? *gen::attention_empty_rows_input(dom)
                               : which == 2 ? *gen::attention_overflow_band_input(dom)
                                            : *gen::attention_split_input(dom);
      const Conventions cv = conventions(*rc::gen::inRange(0, 32));
      const Kind kind = Kind(*rc::gen::inRange(0, 5));
      compare_case(a, cv, kind, *rc::gen::arbitrary<uint64_t>(), tot);
    });
  REQUIRE(ok);
  WARN("generated cases " << tot.cases << ": rows " << tot.rows << " escalated " << tot.escalated
                          << " fast elements " << tot.fast_elems << " failing elements "
                          << tot.failing_elems);
  // Both paths were exercised: most rows judged fast, and failures (all escalated) seen.
  CHECK(tot.fast_elems > 0);
  CHECK(tot.escalated > 0);
  CHECK(tot.failing_elems > 0);
  CHECK(tot.escalated < tot.rows);
}

TEST_CASE("the comparison catches a judgement that differs") {
  // A fast judgement with one verdict flipped must not compare equal: the test above can fail.
  const gen::Domain dom = domain();
  AttentionInput a = gen::attention_split_input(dom)(rc::Random(7), 30).value();
  a.dtype = AC_DTYPE_F32;
  const Conventions cv = conventions(0);
  const Exact x = exact_of(a, cv.base);
  const AttentionOutput out = make_output(a, cv, x, Kind::exact, 1);
  const Judgement X = judge_attention(a, out, cv, Budget{}, JudgePath::exact);
  Judgement F = judge_attention(a, out, cv, Budget{}, JudgePath::fast);
  std::string why;
  REQUIRE(same_judgement(F, X, why));
  REQUIRE(!F.elems.empty());
  F.elems.front().within = !F.elems.front().within;
  CHECK_FALSE(same_judgement(F, X, why));
}

TEST_CASE("hand-built hard rows: exact powers of two, near ties, subnormal outputs, huge logits, one key") {
  Totals tot;
  for (int variant = 0; variant < 32; ++variant) {
    const Conventions cv = conventions(variant);
    for (ac_dtype d : {AC_DTYPE_F16, AC_DTYPE_BF16, AC_DTYPE_F32}) {
      const ref::Format f = fakes::fmt(d);
      for (int shape = 0; shape < 6; ++shape) {
        AttentionInput a;
        a.dtype = d;
        a.num_heads = 2;
        a.num_kv_heads = 1;
        a.head_size = 4;
        a.seqlens_q = {3};
        a.seqlens_k = {shape == 5 ? 1 : 8};
        a.causal = shape == 3;
        a.softmax_scale = shape == 4 ? 3e4f : 0.5f;
        const int64_t nq = 3 * 2 * 4, nk = int64_t(a.seqlens_k[0]) * 4;
        for (int64_t i = 0; i < nq; ++i)
          a.q.push_back(ref::round_to_format(f, shape == 4 ? 1.0 + i % 3 : 0.25 * (i % 5)));
        for (int64_t i = 0; i < nk; ++i) a.k.push_back(ref::round_to_format(f, (i % 7) * 0.125 - 0.375));
        for (int64_t i = 0; i < nk; ++i) {
          double v = 0.25;                                  // constant: O exactly 2^-2
          if (shape == 1) v = i % 2 ? 1.0 + 0x1p-11 : 1.0;  // near fp16 ties
          if (shape == 2) v = std::ldexp(1.0 + (i % 3), d == AC_DTYPE_F16 ? -22 : -140);  // subnormal O
          if (shape >= 3) v = (i % 5) - 2.0;                                              // cancelling
          a.v.push_back(ref::round_to_format(f, v));
        }
        const Exact x = exact_of(a, cv.base);
        for (int kind = 0; kind < 5; ++kind) {
          const AttentionOutput out =
              make_output(a, cv, x, Kind(kind), uint64_t(variant * 100 + shape * 10 + kind));
          const Judgement F = judge_attention(a, out, cv, Budget{}, JudgePath::fast);
          const Judgement X = judge_attention(a, out, cv, Budget{}, JudgePath::exact);
          std::string why;
          INFO("variant " << variant << " dtype " << int(d) << " shape " << shape << " kind " << kind);
          REQUIRE(same_judgement(F, X, why));
          REQUIRE(rule_outcomes(F, cv) == rule_outcomes(X, cv));
          tot.rows += F.counts.rows;
          tot.escalated += F.counts.rows_escalated;
        }
      }
    }
  }
  INFO("rows " << tot.rows << " escalated " << tot.escalated);
  CHECK(tot.escalated < tot.rows);
}

// AC_FEAT_FLUSHED_EXP's allowance (budgets.cpp): bf16, one query, two keys of d = 64 (scale 1/8).
// Key 0: logit 0, V = 0. Key 1: logit -720 / 8 = -90 (natural), weight e^-90 = 8.2e-40, below
// 2^-126 = 1.2e-38 but a bf16 value, and V = 2^126 = 8.5e37 in every column. Exact O = 0.070
// (e^-90 2^126 / (1 + e^-90)), carried by that weight alone; a flushed exp2 drops it and writes 0.
// The zero is within budget when the subject declares the flushed exp2, under both judgement
// paths, and over budget when it does not (the rest of the allowance is about 1e-3).
TEST_CASE("a declared flushed exp2 may drop a weight below 2^-126, and only then", "[judge][flushed_exp]") {
  AttentionInput a;
  a.dtype = AC_DTYPE_BF16;
  a.head_size = 64;
  a.seqlens_q = {1};
  a.seqlens_k = {2};
  a.softmax_scale = 0.125f;
  a.q.assign(64, fakes::enc(a.dtype, 0.0));
  a.k.assign(128, fakes::enc(a.dtype, 0.0));
  a.v.assign(128, fakes::enc(a.dtype, 0.0));
  a.q[0] = fakes::enc(a.dtype, 1.0);
  a.k[64] = fakes::enc(a.dtype, -720.0);
  for (int c = 64; c < 128; ++c) a.v[size_t(c)] = fakes::enc(a.dtype, 0x1p126);
  const Exact x = exact_of(a, ref::LseBase::e);
  REQUIRE(x.o[0] > 0.06);
  REQUIRE(x.o[0] < 0.08);
  AttentionOutput flushed;
  flushed.out.assign(64, fakes::enc(a.dtype, 0.0));
  flushed.lse = {0.0f};  // ln(1 + 8.2e-40) rounds to 0
  for (const bool declared : {false, true}) {
    Conventions cv;
    cv.has_lse = true;
    cv.flushed_exp = declared;
    const Judgement F = judge_attention(a, flushed, cv, Budget{}, JudgePath::fast);
    const Judgement X = judge_attention(a, flushed, cv, Budget{}, JudgePath::exact);
    std::string why;
    INFO("declared " << declared << ": " << why);
    CHECK(same_judgement(F, X, why));
    const bool all_within =
        std::all_of(X.elems.begin(), X.elems.end(), [](const Elem& e) { return e.within; });
    CHECK(all_within == declared);
  }
}

// AC_CAP_FTZ_ARITHMETIC's allowance (budgets.cpp): bf16, one query of zeros, two keys of d = 64
// (scores 0 and 0, weights 1/2 each, LSE ln 2). Column 0 of V: 2^-125 and -2^-127, a bf16
// subnormal. Exact O[0] = (2^-125 - 2^-127) / 2 = 3 2^-128. An FTZ kernel reads the subnormal as 0:
// O[0] = 2^-125 / 2 = 2^-126, a normal number 2^-128 away. The rest of the allowance is 4 ulp_bf16(S)
// = 4 2^-133 = 2^-131 (S = 5 2^-128 lies in [2^-126, 2^-125)) plus fp32 terms near 2^-24 S: the
// error is 8 times over it, and a zero is no output here for the flush rule to accept. The FTZ term
// is 2^-126 (2 N (vmax + 4) + 1) >= 17 2^-126. A second output loses precision on normal numbers
// (V column 1: 1 and 0.5, exact 0.75, written as 0.75 + 6 2^-8, 6 bf16 ulps): over budget with or
// without the declaration, which adds below 2^-120 there.
TEST_CASE("declared FTZ arithmetic allows flushed subnormal inputs, and nothing on normal numbers",
          "[judge][ftz]") {
  AttentionInput a;
  a.dtype = AC_DTYPE_BF16;
  a.head_size = 64;
  a.seqlens_q = {1};
  a.seqlens_k = {2};
  a.softmax_scale = 0.125f;
  a.q.assign(64, fakes::enc(a.dtype, 0.0));
  a.k.assign(128, fakes::enc(a.dtype, 1.0));
  a.v.assign(128, fakes::enc(a.dtype, 0.0));
  a.v[0] = fakes::enc(a.dtype, 0x1p-125);
  a.v[64] = fakes::enc(a.dtype, -0x1p-127);
  REQUIRE((a.v[64] & 0x7f80u) == 0);  // a subnormal (exponent field 0), held exactly
  a.v[1] = fakes::enc(a.dtype, 1.0);
  a.v[65] = fakes::enc(a.dtype, 0.5);
  const Exact x = exact_of(a, ref::LseBase::e);
  REQUIRE(x.o[0] == 3 * 0x1p-128);
  REQUIRE(x.o[1] == 0.75);
  AttentionOutput ftz;
  ftz.out.assign(64, fakes::enc(a.dtype, 0.0));
  ftz.out[0] = fakes::enc(a.dtype, 0x1p-126);
  ftz.out[1] = fakes::enc(a.dtype, 0.75 + 6 * 0x1p-8);
  ftz.lse = {float(std::log(2.0))};
  for (const bool declared : {false, true}) {
    Conventions cv;
    cv.has_lse = true;
    cv.ftz_arithmetic = declared;
    const Judgement F = judge_attention(a, ftz, cv, Budget{}, JudgePath::fast);
    const Judgement X = judge_attention(a, ftz, cv, Budget{}, JudgePath::exact);
    std::string why;
    INFO("declared " << declared << ": " << why);
    CHECK(same_judgement(F, X, why));
    for (const Elem& e : X.elems) {
      INFO(e.where << " allowed " << e.allowed << " ratio " << e.ratio);
      if (e.where == "O[token=0,head=0,d=0]") {
        CHECK(e.within == declared);
        if (!declared) CHECK(e.allowed < 0x1p-130);  // the rest of the allowance, 2^-131 and a little
        if (declared) CHECK(e.allowed >= 17 * 0x1p-126);
      } else if (e.where == "O[token=0,head=0,d=1]") {
        CHECK_FALSE(e.within);  // 6 ulps on a normal number: no declaration covers it
      } else {
        CHECK(e.within);
      }
    }
  }
}

// note_flushed (rules.cpp): the clause a failure gains when its quoted element is a flushed zero or
// lies near fp32's subnormal range, naming the declaration that would cover it.
TEST_CASE("a failure at a flushed or near-subnormal element names the declaration", "[ftz]") {
  auto note = [](ac_dtype d, double exact, double out, const Conventions& cv) {
    Outcome o;
    fail(o, "accuracy", "over budget");
    Elem e;
    e.dtype = d;
    e.where = "O[token=0,head=0,d=0]";
    e.exact = Real(exact);
    e.out_value = out;
    o.quoted = e;
    note_flushed(o, cv);
    return o.message;
  };
  const Conventions none;
  Conventions ftz;
  ftz.ftz_arithmetic = true;
  ftz.flushes_subnormals = true;
  const std::string ftz_clause = "declare ftz_arithmetic (AC_CAP_FTZ_ARITHMETIC)";
  // fp32 zero for an exact subnormal, and a normal output 2^-126 near a value of 3 2^-128.
  CHECK(note(AC_DTYPE_F32, 1e-39, 0.0, none) ==
        "over budget; O[token=0,head=0,d=0] is a flushed zero: if the kernel flushes subnormals by design, " +
            ftz_clause);
  CHECK(note(AC_DTYPE_BF16, 3 * 0x1p-128, 0x1p-126, none).find(ftz_clause) != std::string::npos);
  // Declared already: the declaration does not cover it, and nothing is suggested.
  CHECK(note(AC_DTYPE_F32, 1e-39, 0.0, ftz) == "over budget");
  // A nonzero fp32 subnormal output: the kernel does not flush (textbook at --seed 2 wrote one).
  CHECK(note(AC_DTYPE_F32, -2.1019476964872256e-44, -0x1.4p-146, none) == "over budget");
  // fp16: a zero for an exact fp16 subnormal (2^-20) is a flushed output; near 2^-14 is no fp32 flush.
  CHECK(
      note(AC_DTYPE_F16, 0x1p-20, 0.0, none).find("declare flushes_subnormals (AC_CAP_FLUSHES_SUBNORMALS)") !=
      std::string::npos);
  CHECK(note(AC_DTYPE_F16, 0x1p-13, 0x1.2p-13, none) == "over budget");
  // Normal numbers far from 2^-126: nothing.
  CHECK(note(AC_DTYPE_BF16, 0.75, 0.7734375, none) == "over budget");
}

namespace {
PropertyResult run_with(JudgePath path, const std::string& prop, Subject& s) {
  set_default_judge_path(path);
  RunConfig cfg;
  cfg.seed = 777;
  cfg.num_cases = 30;
  cfg.max_keys = 24;
  PropertyResult r = run_property(prop, s, cfg);
  set_default_judge_path(JudgePath::fast);
  return r;
}
}  // namespace

TEST_CASE("whole property runs give the same results under the fast and the exact judgement") {
  using fakes::Bug;
  using fakes::Fake;
  struct Pair {
    std::string prop;
    Bug bug;
    int base, sign;
    uint32_t ops, features;
    uint32_t flags = 0;  // ac_caps.flags (declared contracts)
  };
  const uint32_t attn = AC_OP_ATTENTION, split = AC_OP_ATTENTION | AC_OP_SPLITKV;
  const uint32_t all = AC_FEAT_CAUSAL | AC_FEAT_MASK | AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE;
  const std::vector<Pair> pairs = {
      {"accuracy", Bug::none, 0, -1, attn, all},
      {"accuracy", Bug::attention_off_by_one_o, 0, -1, attn, all},
      {"no_spurious_nonfinite", Bug::attention_finite_mask, 0, -1, attn, all},
      {"empty_row_contract", Bug::attention_wrong_sentinel, 0, -1, attn, all},
      {"lse_convention", Bug::none, 2, -1, attn, all},
      {"lse_convention", Bug::attention_lse_base2, 0, -1, attn, all},
      {"lse_convention", Bug::attention_lse_layout, 0, -1, attn, all},
      {"split_equals_whole", Bug::none, 0, -1, split, all},
      {"split_equals_whole", Bug::attention_off_by_one_o, 0, 1, split, all},
      {"split_order_drift", Bug::none, 0, -1, split, all},
      {"split_order_drift", Bug::attention_nondeterministic, 0, -1, split, all},
      {"fp16_overflow", Bug::none, 0, -1, attn, all | AC_FEAT_NAIVE_EXP},
      // Declared flushes: zeros only the flush rule accepts, which split_equals_whole's fast path
      // sends to the exact check (its allowance widens there).
      {"accuracy", Bug::attention_flushes_outputs, 0, -1, attn, all, AC_CAP_FLUSHES_SUBNORMALS},
      {"split_equals_whole", Bug::attention_flushes_outputs, 0, -1, split, all, AC_CAP_FLUSHES_SUBNORMALS},
  };
  int64_t flushed = 0;
  int64_t fast_rows = 0, escalated = 0;
  for (const Pair& p : pairs) {
    Fake fast_subject("fake", p.ops, p.bug, p.base, p.sign, p.features);
    Fake exact_subject("fake", p.ops, p.bug, p.base, p.sign, p.features);
    fast_subject.set_flags(p.flags);
    exact_subject.set_flags(p.flags);
    const PropertyResult f = run_with(JudgePath::fast, p.prop, fast_subject);
    const PropertyResult x = run_with(JudgePath::exact, p.prop, exact_subject);
    flushed += fast_subject.flushed;
    INFO(p.prop << " bug " << int(p.bug) << ": fast " << status_name(f.status) << " " << f.failure_class
                << " " << f.message << " / exact " << status_name(x.status) << " " << x.failure_class << " "
                << x.message);
    CHECK(f.status == x.status);
    CHECK(f.failure_class == x.failure_class);
    CHECK(f.message == x.message);
    CHECK(f.cases_run == x.cases_run);
    CHECK(f.counterexample_summary == x.counterexample_summary);
    CHECK(f.max_drift_ulp == x.max_drift_ulp);
    // Bits are bits; a fast difference in ulp_F(S) may be counted in the smaller unit (step 8).
    REQUIRE(f.drift_by_splits.size() == x.drift_by_splits.size());
    for (size_t i = 0; i < f.drift_by_splits.size(); ++i) {
      const DriftCounts &df = f.drift_by_splits[i], &dx = x.drift_by_splits[i];
      CHECK(df.fold_differ == dx.fold_differ);
      CHECK(df.splits_differ == dx.splits_differ);
      CHECK(df.fold_outputs == dx.fold_outputs);
      CHECK(df.splits_outputs == dx.splits_outputs);
      CHECK(df.fold_max_ulp >= dx.fold_max_ulp);
      CHECK(df.fold_max_ulp <= 2 * dx.fold_max_ulp);
      CHECK(df.splits_max_ulp >= dx.splits_max_ulp);
      CHECK(df.splits_max_ulp <= 2 * dx.splits_max_ulp);
    }
    REQUIRE(f.stats.size() == x.stats.size());
    for (size_t i = 0; i < f.stats.size(); ++i) {
      CHECK(f.stats[i].count == x.stats[i].count);
      CHECK(f.stats[i].nonfinite == x.stats[i].nonfinite);
      CHECK(f.stats[i].histogram == x.stats[i].histogram);
      CHECK(std::fabs(f.stats[i].max_ulp - x.stats[i].max_ulp) <= 0x1p-17);
      CHECK(std::fabs(f.stats[i].p99_ulp - x.stats[i].p99_ulp) <= 0x1p-17);
      // Each fast ratio bounds the exact one from above, so every order statistic does too.
      CHECK(f.stats[i].p50_ratio >= x.stats[i].p50_ratio);
      CHECK(f.stats[i].p99_ratio >= x.stats[i].p99_ratio);
      CHECK(f.stats[i].max_ratio >= x.stats[i].max_ratio);
      CHECK(f.stats[i].max_ratio <= 2 * x.stats[i].max_ratio + 1e-9);
    }
    fast_rows += f.rows_judged - f.rows_escalated;
    escalated += f.rows_escalated;
  }
  INFO("fast rows " << fast_rows << " escalated " << escalated);
  CHECK(fast_rows > 0);
  CHECK(flushed > 0);  // the flushing pairs met outputs to flush
}

// ulps_apart counts representable values between two bit patterns: the hand-derived distances of
// neighbours, of the two zeros, across zero, at the top of the finite range and against NaN.
TEST_CASE("ulps_apart: representable values between two outputs") {
  CHECK(ulps_apart(AC_DTYPE_F32, 0x3f800000u, 0x3f800000u) == 0);    // equal bits
  CHECK(ulps_apart(AC_DTYPE_F32, 0x3f800000u, 0x3f800001u) == 1);    // 1 and 1 + 2^-23
  CHECK(ulps_apart(AC_DTYPE_F32, 0x3f7fffffu, 0x3f800001u) == 2);    // across the binade edge at 1
  CHECK(ulps_apart(AC_DTYPE_F32, 0x00000000u, 0x80000000u) == 0);    // +0 and -0
  CHECK(ulps_apart(AC_DTYPE_F32, 0x00000001u, 0x80000001u) == 2);    // +-2^-149 across zero
  CHECK(ulps_apart(AC_DTYPE_F16, 0x7bffu, 0x7c00u) == 1);            // 65504 and +inf
  CHECK(ulps_apart(AC_DTYPE_BF16, 0x3f80u, 0xbf80u) == 2 * 0x3f80);  // 1 and -1
  CHECK(std::isinf(ulps_apart(AC_DTYPE_F16, 0x7e00u, 0x3c00u)));     // NaN against 1
}

TEST_CASE("spread_of counts differing O and LSE elements and their largest distance") {
  AttentionOutput a, b;
  a.out = {0x3c00u, 0x3c00u, 0x4000u};  // fp16 1, 1, 2
  b.out = {0x3c00u, 0x3c03u, 0x4000u};  // the second 3 values up
  a.lse = {1.0f, 2.0f};
  b.lse = {1.0f, std::nextafter(2.0f, 3.0f)};
  const Spread s = spread_of(AC_DTYPE_F16, a, b);
  CHECK(s.compared == 5);
  CHECK(s.differing == 2);
  CHECK(s.max_ulps == 3);
}

TEST_CASE("first_difference names the O element at V's head size") {
  // 2 tokens x 2 heads x 3 columns (QK head size 5, V's 3): element 10 is token 1, head 1, d 1.
  AttentionInput a;
  a.dtype = AC_DTYPE_F16;
  a.num_heads = 2;
  a.head_size = 5;
  a.head_size_v = 3;
  AttentionOutput x, y;
  x.out.assign(12, 0x3c00u);
  y.out = x.out;
  y.out[10] = 0x4000u;
  CHECK(first_difference(a, x, y).rfind("differ at O[token=1,head=1,d=1]", 0) == 0);
}

// Sampled judging of layer-sized inputs: every row up to kJudgeEveryRowUpTo rows; above it the
// first and last query row of every head plus at most kSampledRows more, sorted and distinct.
TEST_CASE("sampled_rows: all rows of small inputs, a fixed sample of layer-sized ones") {
  CHECK(sampled_rows(128, 32).empty());  // 4096 rows: every one judged
  const auto s = sampled_rows(512, 32);  // 16384 rows
  REQUIRE_FALSE(s.empty());
  CHECK(s.size() <= size_t(2 * 32 + kSampledRows));
  CHECK(std::is_sorted(s.begin(), s.end()));
  CHECK(std::adjacent_find(s.begin(), s.end()) == s.end());
  for (int64_t h = 0; h < 32; ++h) {
    CHECK(std::binary_search(s.begin(), s.end(), h));
    CHECK(std::binary_search(s.begin(), s.end(), 511 * 32 + h));
  }
  CHECK(s.back() < 512 * 32);
  CHECK(sampled_rows(512, 32) == s);  // a function of the shape: a replay judges the same rows
}

namespace {
// float bits of x, and the absolute rounding of the fp32 product x y in units of 2^-149 (x y is
// exact in double: 24 + 24 significant bits).
uint32_t f32_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
double product_rounding(float x, float y) {
  return std::fabs(double(x * y) - double(x) * double(y)) * 0x1p149;
}
bool all_within(const Judgement& J) {
  return std::all_of(J.elems.begin(), J.elems.end(), [](const Elem& e) { return e.within; });
}
}  // namespace

// budgets.cpp gradual_underflow_o_allowance. fp32, d = 1, one query (q = 1) over 64 keys: key 0 of
// score 0 and v = 0, keys 1..63 of score s near -6.9 and v near 2^-126. An fp32 kernel (p = e^s,
// O~ = sum fl(p v), l = sum p, O = O~ / l) forms 63 equal products near 2^-136, each rounded to a
// multiple of 2^-149: v is picked so that each rounds by at least 0.4 2^-149, 25 2^-149 in all,
// which l ~ 1.06 leaves above 23. O is subnormal (about 4.8e5 2^-149): its ulp is 2^-149, and the
// rest of the budget is 4 ulps plus 2^-24 (N + d + 8) S, about 2 more: without the term the output
// fails by over 2.5x; the term allows 5 64 2^-150 = 160 2^-149.
TEST_CASE("fp32 gradual underflow: a kernel's subnormal products are within budget", "[judge][underflow]") {
  AttentionInput a;
  a.dtype = AC_DTYPE_F32;
  a.head_size = 1;
  a.seqlens_q = {1};
  a.seqlens_k = {64};
  a.q = {f32_bits(1.0f)};
  const float s = -6.9f, p = std::exp(s);
  float v = 0x1p-126f;
  while (product_rounding(p, v) < 0.4) v = std::nextafter(v, 1.0f);
  REQUIRE(v < 0x1.01p-126f);
  a.k.assign(64, f32_bits(s));
  a.v.assign(64, f32_bits(v));
  a.k[0] = a.v[0] = f32_bits(0.0f);
  float acc = 0, l = 1;
  for (int j = 1; j < 64; ++j) {
    acc += p * v;
    l += p;
  }
  AttentionOutput out;
  out.out = {f32_bits(acc / l)};
  out.lse = {float(std::log(double(l)))};
  const double exact = 63 * double(p) * double(v) / (1 + 63 * double(p));
  CHECK(std::fabs(double(acc / l) - exact) * 0x1p149 > 23);
  Conventions cv;
  cv.has_lse = true;
  const Judgement F = judge_attention(a, out, cv, Budget{}, JudgePath::fast);
  const Judgement X = judge_attention(a, out, cv, Budget{}, JudgePath::exact);
  std::string why;
  CHECK(same_judgement(F, X, why));
  INFO(why);
  CHECK(all_within(X));
  AttentionRow r;
  r.keys = 64;
  CHECK(gradual_underflow_o_allowance(r) == 160 * 0x1p-149);
}

// The same term in the units a kernel sums: V in e5m2 codes with v_descale 2^10 applied to O once
// (FlashAttention-3). q = 1 over 64 keys: key 0 of K code 0 (score 0) and V code 0, keys 1..63 of
// K code 0xc1 = -2.5 times k_descale near 34 (score near -85, p = e^-85 ~ 2^-122.6, normal) and V
// code 0x01 = 2^-16 (e5m2's smallest subnormal). Each product p 2^-16 lies near 2^-138.6, where
// fp32 keeps 11 bits: rounded to a multiple of 2^-149 in code units, by at least 0.3 (k_descale
// picked so), 19 2^-149 in all, which the descale multiplies into 1.9e4 2^-149. O ~ 2^-122.6 is
// normal: 4 ulps are 32 2^-149, the 2^-24 terms about 400, and 5 N 2^-150 unscaled 160: the error
// is 30 times that; times v_descale the term allows 160 2^10 2^-149.
TEST_CASE("fp32 gradual underflow in code units counts times V's descale", "[judge][underflow][fp8]") {
  AttentionInput a;
  a.dtype = AC_DTYPE_F32;
  a.kv_dtype = AC_DTYPE_E5M2;
  a.head_size = 1;
  a.seqlens_q = {1};
  a.seqlens_k = {64};
  a.q = {f32_bits(1.0f)};
  a.k.assign(64, 0xc1);  // -2.5: sign, exponent 16 (bias 15), mantissa 01
  a.v.assign(64, 0x01);  // 2^-16
  a.k[0] = a.v[0] = 0x00;
  a.v_descale = {1024.0f};
  float kd = 34.0f, p = 0;
  for (;; kd = std::nextafter(kd, 100.0f)) {
    p = std::exp(-2.5f * kd);  // the kernel's score and weight, in fp32
    if (product_rounding(p, 0x1p-16f) >= 0.3) break;
  }
  REQUIRE(kd < 34.01f);
  REQUIRE(p > 0x1p-126f);
  a.k_descale = {kd};
  REQUIRE(attention_variant_problem(a).empty());
  float acc = 0, l = 1;
  for (int j = 1; j < 64; ++j) {
    acc += p * 0x1p-16f;
    l += p;
  }
  AttentionOutput out;
  out.out = {f32_bits(acc / l * 1024.0f)};
  out.lse = {float(std::log1p(63 * double(p)))};
  Conventions cv;
  cv.has_lse = true;
  const Judgement X = judge_attention(a, out, cv, Budget{}, JudgePath::exact);
  CHECK(all_within(X));
  AttentionRow r;
  r.keys = 64;
  r.fp8_kv = true;
  r.v_descale = 1024;
  CHECK(gradual_underflow_o_allowance(r) == 160 * 1024 * 0x1p-149);
  r.p_e4m3 = true;
  r.p_scale = 0.25;  // P's codes over p_scale: 1 / p_scale = 4 more
  CHECK(gradual_underflow_o_allowance(r) == 4 * 160 * 1024 * 0x1p-149);
}
