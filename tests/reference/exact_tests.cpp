// Exact logsumexp, softmax, the online state, merge laws, precision handling, and the
// `round` / `exact` / self-check answers.
//
// Expected values: hand derivations (the eight-logit worked example), double arithmetic where it is
// accurate enough for the claim tested (exp thresholds, the fp64 recurrence to 1e-12), and
// algebraic laws checked in exact arithmetic up to the working precision's rounding (2^-190
// relative for 200 bits).
#include <rapidcheck.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <thread>

#include "../support/rc_check.hpp"
#include "attncheck/reference/reference.hpp"

using namespace attncheck::ref;

namespace {

Real tolerance() { return ldexp(Real(1), -static_cast<int>(precision_bits()) + 10); }

bool close_rel(const Real& a, const Real& b, const Real& scale) { return abs(a - b) <= tolerance() * scale; }

bool same_state(const ExactState& a, const ExactState& b) {
  if (isinf(a.lse) || isinf(b.lse)) {
    if (a.lse != b.lse) return false;
  } else if (!close_rel(a.lse, b.lse, 1 + abs(b.lse))) {
    return false;
  }
  for (size_t c = 0; c < a.o.size(); ++c)
    if (!close_rel(a.o[c], b.o[c], 1 + abs(b.o[c]))) return false;
  return true;
}

// RapidCheck with an explicit, small budget whatever RC_PARAMS says.
template <class Testable>
void check_property(const std::string& what, Testable&& t, int max_success = 60) {
  attncheck::test::check_property_under(what, std::forward<Testable>(t), {max_success, 50, 20240501});
}

// A state with d = 4, LSE in [-60, 60] in steps of 1/8 (or empty), O in [-8, 8] in steps of 1/16.
rc::Gen<ExactState> gen_state(bool allow_empty) {
  return rc::gen::exec([allow_empty] {
    ExactState s;
    for (int c = 0; c < 4; ++c) s.o.emplace_back(*rc::gen::inRange(-128, 129) / 16.0);
    const int kind = allow_empty ? *rc::gen::inRange(0, 10) : 9;
    if (kind == 0)
      s.lse = parse_real("-inf");
    else if (kind == 1)
      s.lse = parse_real("inf");  // FA2's empty sentinel
    else
      s.lse = Real(*rc::gen::inRange(-480, 481) / 8.0);
    return s;
  });
}

// Box–Muller over mt19937_64: deterministic on every platform (std::normal_distribution is not).
struct Normal {
  std::mt19937_64 rng;
  bool have = false;
  double spare = 0;
  explicit Normal(uint64_t seed) : rng(seed) {}
  double uniform() { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1p-53; }
  double operator()() {
    if (have) {
      have = false;
      return spare;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform())), t = 2.0 * M_PI * uniform();
    spare = r * std::sin(t);
    have = true;
    return r * std::cos(t);
  }
};

}  // namespace

TEST_CASE("fp16 exp thresholds", "[exact][thresholds]") {
  // The fp16 values 11.0859375 and 11.09375 are neighbours; e^x = 65247.1 and 65758.9 (double exp is
  // accurate to 1e-16 relative, far from the thresholds), against the overflow threshold 65520.
  CHECK(std::exp(11.0859375) < 65520.0);
  CHECK(std::exp(11.09375) > 65520.0);
  const Real e1 = exp(parse_real("11.0859375")), e2 = exp(parse_real("11.09375"));
  CHECK(round_to_format(Format::fp16, e1) == round_to_format(Format::fp16, 65248.0));  // finite: 65248
  CHECK(decode(Format::fp16, round_to_format(Format::fp16, e1)) == 65248.0);
  CHECK(round_to_format(Format::fp16, e2) == 0x7c00);
  // Underflow: e^x rounds to zero exactly below ln 2^-25 = -17.32867951399863 (25 ln 2).
  const double ln_half_min = -25.0 * std::log(2.0);
  CHECK(round_to_format(Format::fp16, exp(Real(ln_half_min - 1e-9))) == 0x0000);
  CHECK(round_to_format(Format::fp16, exp(Real(ln_half_min + 1e-9))) == 0x0001);
  CHECK(round_to_format(Format::fp16, exp(parse_real("-17.33"))) == 0x0000);
  CHECK(round_to_format(Format::fp16, exp(parse_real("-17.32"))) == 0x0001);
  // fp32: exp overflows above 88.7228 (ln of the fp32 overflow threshold (2 - 2^-24) 2^127).
  CHECK(round_to_format(Format::fp32, exp(parse_real("88.7228"))) < 0x7f800000);  // ln threshold = 88.722839
  CHECK(round_to_format(Format::fp32, exp(parse_real("88.7229"))) == 0x7f800000);
  CHECK(round_to_format(Format::fp32, exp(Real(100))) == 0x7f800000);
}

TEST_CASE("logsumexp and softmax: values and special inputs", "[exact]") {
  const Real ninf = parse_real("-inf"), pinf = parse_real("inf"), nan = parse_real("nan");
  CHECK(to_decimal(logsumexp({Real(0), Real(0)}), 36) == "0.693147180559945309417232121458176568");  // ln 2
  CHECK(close_rel(logsumexp({Real(0), Real(0)}, LseBase::two), Real(1), Real(1)));                   // log2 2
  CHECK(close_rel(logsumexp({Real(1000), Real(1000)}), 1000 + log(Real(2)), Real(1000)));  // no overflow
  const Real e = logsumexp({});
  CHECK((isinf(e) && e < 0));
  const Real e2 = logsumexp({ninf, ninf});
  CHECK((isinf(e2) && e2 < 0));
  CHECK((isinf(logsumexp({Real(1), pinf})) && logsumexp({Real(1), pinf}) > 0));
  CHECK(isnan(logsumexp({Real(1), nan, pinf})));
  CHECK(close_rel(logsumexp({Real(3), ninf}), Real(3), Real(3)));

  const auto y = softmax({Real(0), log(Real(3))});  // weights 1 : 3
  CHECK(close_rel(y[0], Real(0.25), Real(1)));
  CHECK(close_rel(y[1], Real(0.75), Real(1)));
  CHECK(softmax({}).empty());
  for (const auto& v : softmax({ninf, ninf})) CHECK(v == 0);
  const auto yi = softmax({pinf, Real(5), pinf});
  CHECK((yi[0] == 0.5 && yi[1] == 0 && yi[2] == 0.5));
  for (const auto& v : softmax({Real(1), nan})) CHECK(isnan(v));
}

TEST_CASE("the eight-logit worked example: 8 logits, 4 blocks of 2, max jumps 3 -> 8 in block 3",
          "[exact][seed]") {
  // Hand-chosen logits consistent with the seed: block maxima 3, 2, 8, 6, so m = 3, 3, 8, 8 and
  // alpha^(3) = e^(3-8) = e^-5 = 0.0067379 (the accumulated state is divided by 148.4).
  const std::vector<std::vector<double>> blocks = {{1, 3}, {2, 0}, {8, 5}, {4, 6}};
  const std::vector<std::vector<double>> values = {{1, 0},  {0, 1}, {1, 1}, {-1, 2},
                                                   {2, -1}, {0, 0}, {3, 3}, {1, -2}};
  OnlineState st = online_state_init(2);
  CHECK((isinf(st.m) && st.m < 0 && st.l == 0 && st.o[0] == 0));
  std::vector<Real> m_after;
  std::vector<Real> l_after;
  size_t k = 0;
  for (const auto& b : blocks) {
    std::vector<Real> x;
    std::vector<std::vector<Real>> v;
    for (double xi : b) {
      x.emplace_back(xi);
      v.push_back({Real(values[k][0]), Real(values[k][1])});
      ++k;
    }
    online_state_update(st, x, v);
    m_after.push_back(st.m);
    l_after.push_back(st.l);
  }
  CHECK(m_after == std::vector<Real>{Real(3), Real(3), Real(8), Real(8)});
  // After block 2: l = e^-2 + 1 + e^-1 + e^-3 (relative to m = 3); block 3 rescales it by e^-5.
  const double l2 = std::exp(-2.0) + 1 + std::exp(-1.0) + std::exp(-3.0);
  CHECK(std::abs(static_cast<double>(l_after[1]) - l2) <= 1e-15 * l2);
  const double l3 = l2 * std::exp(-5.0) + 1 + std::exp(-3.0);
  CHECK(std::abs(static_cast<double>(l_after[2]) - l3) <= 1e-15 * l3);
  // Direct computation, written out: m = 8, l = sum e^(x - 8), O~ = sum e^(x - 8) v.
  const std::vector<double> all = {1, 3, 2, 0, 8, 5, 4, 6};
  Real l_direct = 0, o0 = 0, o1 = 0;
  for (size_t j = 0; j < all.size(); ++j) {
    const Real p = exp(Real(all[j]) - 8);
    l_direct += p;
    o0 += p * values[j][0];
    o1 += p * values[j][1];
  }
  CHECK(st.m == 8);
  CHECK(close_rel(st.l, l_direct, l_direct));
  CHECK(close_rel(st.o[0], o0, abs(o0)));
  CHECK(close_rel(st.o[1], o1, abs(o1)));
  // By hand: e^-7 + e^-5 + e^-6 + e^-8 + 1 + e^-3 + e^-4 + e^-2 = 1.2139020343 (10 digits).
  CHECK(std::abs(static_cast<double>(st.l) - 1.2139020343) < 1e-9);
}

TEST_CASE("online state: the base-case guard keeps empty blocks NaN-free", "[exact][seed]") {
  const Real ninf = parse_real("-inf");
  OnlineState st = online_state_init(1);
  online_state_update(st, {ninf, ninf}, {{Real(1)}, {Real(2)}});  // a fully masked block first
  CHECK((isinf(st.m) && st.m < 0 && st.l == 0 && st.o[0] == 0));
  online_state_update(st, {Real(0)}, {{Real(5)}});
  CHECK((st.m == 0 && st.l == 1 && st.o[0] == 5));
  online_state_update(st, {ninf}, {{parse_real("nan")}});  // weight zero: its value never matters
  CHECK((st.l == 1 && st.o[0] == 5));
  CHECK_THROWS_AS(online_state_update(st, {Real(0)}, {}), ReferenceError);
}

TEST_CASE("the numerical check: fp64 online recurrence vs the exact reference", "[exact][seed]") {
  // 8192 logits with sigma 3, an outlier of 40 at index 4000, values of dimension 128, blocks of 64.
  constexpr int N = 8192, D = 128, BC = 64;
  Normal normal(0);
  std::vector<double> x(N);
  for (auto& xi : x) xi = 3.0 * normal();
  x[4000] = 40.0;
  std::vector<double> v(static_cast<size_t>(N) * D);
  for (auto& vi : v) vi = normal();

  // The recurrence as a numpy script would run it, in double.
  double m = -INFINITY, l = 0;
  std::vector<double> o(D, 0.0);
  for (int j = 0; j < N; j += BC) {
    double m_new = m;
    for (int i = j; i < j + BC; ++i) m_new = std::max(m_new, x[i]);
    const double a = std::isfinite(m) ? std::exp(m - m_new) : 0.0;  // the base-case guard
    double psum = 0;
    std::vector<double> pv(D, 0.0);
    for (int i = j; i < j + BC; ++i) {
      const double p = std::exp(x[i] - m_new);
      psum += p;
      for (int c = 0; c < D; ++c) pv[c] += p * v[static_cast<size_t>(i) * D + c];
    }
    l = a * l + psum;
    for (int c = 0; c < D; ++c) o[c] = a * o[c] + pv[c];
    m = m_new;
  }

  // Exact: softmax at working precision, then the weighted sum.
  std::vector<Real> xr(x.begin(), x.end());
  const std::vector<Real> y = softmax(xr);
  int bad = 0;
  for (int c = 0; c < D; ++c) {
    Real ref = 0;
    for (int j = 0; j < N; ++j) ref += y[j] * v[static_cast<size_t>(j) * D + c];
    const double online = o[c] / l, exact = static_cast<double>(ref);
    // numpy's assert_allclose(rtol=1e-12, atol=1e-12), as in the seed.
    if (!(std::abs(online - exact) <= 1e-12 + 1e-12 * std::abs(exact))) ++bad;
  }
  CHECK(bad == 0);
  // And the LSE, relative.
  const double lse_online = m + std::log(l);
  CHECK(std::abs(lse_online - static_cast<double>(logsumexp(xr))) <= 1e-12 * std::abs(lse_online));
}

TEST_CASE("merge: identity, FA2 sentinel, both empty, NaN, +inf as mass", "[exact][merge]") {
  const Real ninf = parse_real("-inf"), pinf = parse_real("inf");
  const ExactState a{{Real(1), Real(-2.5)}, Real(0.75)};
  const ExactState id{{Real(0), Real(0)}, ninf};
  const ExactState fa2{{Real(7), Real(7)}, pinf};  // O is ignored: the range was empty
  CHECK(same_state(exact_merge({a, id}), a));
  CHECK(same_state(exact_merge({id, a}), a));
  CHECK(same_state(exact_merge({fa2, a}), a));
  CHECK(same_state(exact_merge({a}), a));
  const ExactState both = exact_merge({id, fa2});
  CHECK((both.o[0] == 0 && both.o[1] == 0 && isinf(both.lse) && both.lse < 0));
  const ExactState both_neg = exact_merge({id, id});
  CHECK((both_neg.o[0] == 0 && isinf(both_neg.lse) && both_neg.lse < 0));
  const ExactState as_mass = exact_merge({fa2, a}, LseBase::e, /*plus_inf_is_empty=*/false);
  CHECK((isinf(as_mass.lse) && as_mass.lse > 0 && isnan(as_mass.o[0])));
  const ExactState with_nan = exact_merge({a, ExactState{{Real(0), Real(0)}, parse_real("nan")}});
  CHECK((isnan(with_nan.lse) && isnan(with_nan.o[0])));
  // Two equal-mass states average; LSE gains ln 2.
  const ExactState b{{Real(3), Real(0.5)}, Real(0.75)};
  const ExactState ab = exact_merge({a, b});
  CHECK(close_rel(ab.o[0], Real(2), Real(2)));
  CHECK(close_rel(ab.o[1], Real(-1), Real(1)));
  CHECK(close_rel(ab.lse, Real(0.75) + log(Real(2)), Real(1)));
  // Base two: the same merge with LSEs divided by ln 2.
  const ExactState a2{a.o, a.lse / log(Real(2))}, b2{b.o, Real(2.75) / log(Real(2))};
  const ExactState ab2 = exact_merge({a2, b2}, LseBase::two),
                   abe = exact_merge({a, ExactState{b.o, Real(2.75)}});
  CHECK(close_rel(ab2.lse * log(Real(2)), abe.lse, Real(4)));
  CHECK(close_rel(ab2.o[0], abe.o[0], Real(4)));
  CHECK_THROWS_AS(exact_merge({}), ReferenceError);
  CHECK_THROWS_AS(exact_merge({a, ExactState{{Real(1)}, Real(0)}}), ReferenceError);
}

TEST_CASE("merge laws hold in exact arithmetic (RapidCheck)", "[exact][merge]") {
  const ExactState id{std::vector<Real>(4, Real(0)), parse_real("-inf")};
  check_property("(0, -inf) is the identity", [&] {
    const ExactState a = *gen_state(false);
    RC_ASSERT(same_state(exact_merge({a, id}), a));
  });
  check_property("merge is commutative", [] {
    const ExactState a = *gen_state(true), b = *gen_state(true);
    RC_ASSERT(same_state(exact_merge({a, b}), exact_merge({b, a})));
  });
  check_property("merge is associative, and equals the n-ary merge", [] {
    const ExactState a = *gen_state(true), b = *gen_state(true), c = *gen_state(true);
    const ExactState left = exact_merge({exact_merge({a, b}), c});
    const ExactState right = exact_merge({a, exact_merge({b, c})});
    RC_ASSERT(same_state(left, right));
    RC_ASSERT(same_state(left, exact_merge({a, b, c})));
  });
}

TEST_CASE("precision: default 200 bits, selectable, too little refused, holds on other threads",
          "[precision]") {
  CHECK(precision_bits() == 200);
  CHECK(precision_bits_effective() >= 200);
  CHECK(mpfr_get_prec(logsumexp({Real(1), Real(2)}).backend().data()) >= 200);
  CHECK_THROWS_WITH(set_precision_bits(32), Catch::Contains("too little precision"));
  CHECK(precision_bits() == 200);
  set_precision_bits(300);
  std::vector<long> seen(2, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&seen, i] {
      const Real r = logsumexp({Real(i), Real(1)});
      seen[i] = mpfr_get_prec(r.backend().data());
    });
  for (auto& t : threads) t.join();
  CHECK(seen[0] >= 300);
  CHECK(seen[1] >= 300);
  // More precision gives the same value to the old precision.
  const Real hi = logsumexp({Real(0.5), Real(-3)});
  set_precision_bits(200);
  const Real lo = logsumexp({Real(0.5), Real(-3)});
  CHECK(close_rel(hi, lo, Real(1)));
}

TEST_CASE("ask_round / ask_exact / self_check answer as documented", "[ask]") {
  const std::string r = ask_round(Format::fp16, "0x1.00200000001p0");
  CHECK_THAT(r, Catch::Contains("0x1.004p+0") && Catch::Contains("0x3c01"));
  CHECK_THAT(ask_round(Format::fp16, "65520"), Catch::Contains("inf") && Catch::Contains("0x7c00"));
  CHECK_THAT(ask_round(Format::fp32, "0x1p-149"), Catch::Contains("0x00000001"));
  const std::string lse = ask_exact("lse", "0,0", LseBase::e);
  CHECK_THAT(lse, Catch::Contains("0.693147180559945309417232121458176568") && Catch::Contains("fp16") &&
                      Catch::Contains("bf16") && Catch::Contains("fp32"));
  // ln 2 rounded to fp32 is 0x3f317218.
  CHECK_THAT(lse, Catch::Contains("0x3f317218"));
  const std::string sm = ask_exact("softmax", "0,-inf,0", LseBase::e);
  CHECK_THAT(sm, Catch::Contains("[1] exact 0") && Catch::Contains("[2] exact 0.5"));
  CHECK_THROWS_AS(ask_exact("max", "1,2", LseBase::e), ReferenceError);
  CHECK_THROWS_AS(ask_exact("lse", "1,x", LseBase::e), ReferenceError);
  CHECK_THROWS_AS(ask_round(Format::fp16, "twelve"), ReferenceError);
  std::string report;
  REQUIRE_NOTHROW(report = self_check());
  CHECK_THAT(report, Catch::Contains("checks passed"));
}
