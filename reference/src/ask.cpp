// Answers for `attncheck round`, `attncheck exact` and the self-check.
#include "attncheck/reference/ask.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "attncheck/reference/ulp.hpp"
#include "precision_internal.hpp"

namespace attncheck::ref {
namespace {

std::string bits_hex(Format f, uint32_t bits) {
  char buf[32];
  if (spec(f).storage_bits == 16)
    std::snprintf(buf, sizeof buf, "0x%04x", bits);
  else
    std::snprintf(buf, sizeof buf, "0x%08x", bits);
  return buf;
}

std::string exact_decimal(double x) {
  if (!std::isfinite(x)) return to_hexfloat(x);
  // A format value has at most 150 significant decimal digits (fp32's minimum subnormal): print
  // enough to be exact, then strip trailing zeros.
  detail::Mp m(64);
  mpfr_set_d(m, x, MPFR_RNDN);
  char* out = nullptr;
  mpfr_asprintf(&out, "%.160Rg", static_cast<mpfr_srcptr>(m));
  std::string r = out ? out : "";
  if (out) mpfr_free_str(out);
  return r;
}

// One line: "fp16 0x1.004p+0 bits 0x3c01 (1.0009765625)".
std::string rounded_line(Format f, const Real& x) {
  const uint32_t b = round_to_format(f, x);
  std::ostringstream os;
  os << spec(f).name << " " << to_hexfloat(f, b) << "  bits " << bits_hex(f, b)
     << "  (= " << exact_decimal(decode(f, b)) << ")";
  return os.str();
}

std::vector<Real> parse_csv(const std::string& csv) {
  std::vector<Real> xs;
  std::string item;
  std::istringstream is(csv);
  while (std::getline(is, item, ',')) xs.push_back(parse_real(item));
  if (xs.empty()) throw ReferenceError("no logits given (expected a comma-separated list, e.g. 1,2.5,-inf)");
  return xs;
}

const Format kAll[] = {Format::fp16, Format::bf16, Format::fp32};

// One line per overflow mode: "e4m3fn saturate   0x7e  (= 448)".
std::string fp8_lines(Fp8Format f, const Real& x) {
  std::ostringstream os;
  for (Fp8Overflow o : {Fp8Overflow::saturate, Fp8Overflow::nonfinite}) {
    const uint8_t code = encode_fp8(f, x, o);
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", code);
    os << fp8_spec(f).name << (o == Fp8Overflow::saturate ? " saturate   " : " nonfinite  ") << hex
       << "  (= " << exact_decimal(decode_fp8(f, code)) << ")\n";
  }
  return os.str();
}

}  // namespace

std::string ask_round(const std::string& to, const std::string& value) {
  if (is_fp8_format_name(to)) {
    const Real x = parse_real(value);
    return "value " + to_decimal(x, 40) + "\n" + fp8_lines(parse_fp8_format(to), x);
  }
  Format f;
  try {
    f = parse_format(to);
  } catch (const ReferenceError&) {
    throw ReferenceError("unknown format '" + to + "': expected fp16, bf16, fp32, e4m3fn, e5m2 or e4m3fnuz");
  }
  return ask_round(f, value);
}

std::string ask_round(Format to, const std::string& value) {
  const Real x = parse_real(value);
  std::ostringstream os;
  os << "value " << to_decimal(x, 40) << "\n" << rounded_line(to, x) << "\n";
  return os.str();
}

std::string ask_exact(const std::string& what, const std::string& logits_csv, LseBase base) {
  const std::vector<Real> x = parse_csv(logits_csv);
  std::ostringstream os;
  if (what == "lse") {
    const Real lse = logsumexp(x, base);
    os << "lse (" << (base == LseBase::two ? "base 2" : "natural log") << ") of " << x.size()
       << " logits, at " << precision_bits() << " bits\n";
    os << "exact " << to_decimal(lse, 36) << "\n";
    for (Format f : kAll) os << "  " << rounded_line(f, lse) << "\n";
  } else if (what == "softmax") {
    const std::vector<Real> y = softmax(x);
    os << "softmax of " << x.size() << " logits, at " << precision_bits() << " bits\n";
    for (size_t i = 0; i < y.size(); ++i) {
      os << "[" << i << "] exact " << to_decimal(y[i], 36) << "\n";
      for (Format f : kAll) os << "    " << rounded_line(f, y[i]) << "\n";
    }
  } else {
    throw ReferenceError("unknown quantity '" + what + "': expected lse or softmax");
  }
  return os.str();
}

std::string self_check() {
  std::ostringstream report;
  int checks = 0;
  auto expect_bits = [&](Format f, const std::string& value, uint32_t want, const std::string& why) {
    const uint32_t got = round_to_format(f, parse_real(value));
    if (got != want)
      throw ReferenceError("self-check failed: " + std::string(spec(f).name) + " rounding of " + value +
                           " gave " + bits_hex(f, got) + ", expected " + bits_hex(f, want) + " (" + why +
                           ")");
    report << "ok  " << spec(f).name << " round(" << value << ") = " << to_hexfloat(f, want) << " ["
           << bits_hex(f, want) << "]: " << why << "\n";
    ++checks;
  };
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) throw ReferenceError("self-check failed: " + what);
    report << "ok  " << what << "\n";
    ++checks;
  };

  report << "attncheck reference self-check (working precision " << precision_bits() << " bits)\n";
  // Rounding traps: values that double-round through float.
  expect_bits(Format::fp16, "0x1.00200000001p0", 0x3c01,
              "1+2^-11+2^-40 rounds up; through float it would tie down to 1");
  expect_bits(Format::fp16, "0x1.000001p-25", 0x0001,
              "just above half the minimum subnormal; through float it ties to 0");
  expect_bits(Format::fp16, "0x1p-25", 0x0000, "exactly half the minimum subnormal ties to even (zero)");
  expect_bits(Format::fp16, "65519.99", 0x7bff, "below the overflow threshold 65520: largest finite 65504");
  expect_bits(Format::fp16, "65520", 0x7c00,
              "the overflow threshold max + ulp/2 ties away from 65504 (odd) to infinity");
  expect_bits(Format::fp16, "-0", 0x8000, "signed zero kept");
  expect_bits(Format::bf16, "0x1.01p0", 0x3f80, "1 + 2^-8 is a tie, to even (1)");
  expect_bits(Format::bf16, "0x1.03p0", 0x3f82, "1 + 3*2^-8 is a tie, to even (1 + 2^-6)");
  expect_bits(Format::bf16, "0x1.fep127", 0x7f7f, "largest finite bf16");
  expect_bits(Format::bf16, "0x1.ffp127", 0x7f80, "bf16 overflow threshold rounds to infinity");
  expect_bits(Format::fp32, "0x1p-149", 0x00000001, "fp32 minimum subnormal");
  expect_bits(Format::fp32, "0x1p-150", 0x00000000, "half the fp32 minimum subnormal ties to zero");
  expect_bits(Format::fp32, "0x1.0000000001p-150", 0x00000001, "just above half the minimum subnormal");
  expect_bits(Format::fp32, "0x1.fffffe8p127", 0x7f7fffff, "below the fp32 overflow threshold");
  expect_bits(Format::fp32, "0x1.ffffffp127", 0x7f800000, "the fp32 overflow threshold rounds to infinity");

  // fp16 exp thresholds: e^11.0859375 = 65247.1 is finite, e^11.09375 = 65758.9 is not;
  // e^x rounds to zero below ln 2^-25.
  {
    const Real e1 = exp(parse_real("11.0859375")), e2 = exp(parse_real("11.09375"));
    expect(round_to_format(Format::fp16, e1) == 0x7bf7, "fp16 exp(11.0859375) = 65248 (finite, 0x7bf7)");
    expect(round_to_format(Format::fp16, e2) == 0x7c00, "fp16 exp(11.09375) = inf");
    const Real ln_min_half = log(parse_real("0x1p-25"));
    const Real nudge = parse_real("1e-30");
    expect(round_to_format(Format::fp16, Real(exp(ln_min_half - nudge))) == 0x0000,
           "fp16 exp(ln 2^-25 - 1e-30) rounds to zero");
    expect(round_to_format(Format::fp16, Real(exp(ln_min_half + nudge))) == 0x0001,
           "fp16 exp(ln 2^-25 + 1e-30) rounds to the minimum subnormal 2^-24");
  }

  // The eight-logit worked example: eight logits in four blocks of two; the maximum jumps from 3 to 8 in
  // block 3 (alpha = e^-5). The online state must equal the direct sums.
  {
    const std::vector<std::vector<double>> blocks = {{1, 3}, {2, 0}, {8, 5}, {4, 6}};
    OnlineState st = online_state_init(1);
    std::vector<Real> all;
    Real m_before_3;
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (b == 2) m_before_3 = st.m;
      std::vector<Real> x;
      std::vector<std::vector<Real>> v;
      for (double xi : blocks[b]) {
        x.emplace_back(xi);
        v.push_back({Real(xi)});  // value = logit, so O~ is checked too
        all.emplace_back(xi);
      }
      online_state_update(st, x, v);
    }
    Real l_direct = 0, o_direct = 0;
    for (const auto& xi : all) {
      l_direct += exp(xi - 8);
      o_direct += exp(xi - 8) * xi;
    }
    const Real tol = ldexp(Real(1), -static_cast<int>(precision_bits()) + 8);
    expect(m_before_3 == 3 && st.m == 8,
           "seed example: running max 3 before block 3, 8 after (alpha = e^-5)");
    expect(abs(st.l - l_direct) <= tol * l_direct && abs(st.o[0] - o_direct) <= tol * abs(o_direct),
           "seed example: online l = " + to_decimal(st.l, 20) + " and O~ equal the direct sums");
    expect(abs(logsumexp(all) - (8 + log(l_direct))) <= tol * 10, "seed example: logsumexp = 8 + log l");
  }

  // Merge laws on a small state: identity (0, -inf), the FA2 +inf sentinel, both empty.
  {
    ExactState a{{Real(1), Real(-2)}, Real("0.75")};
    ExactState id{{Real(0), Real(0)}, Real(-INFINITY)};
    ExactState fa2{{Real(0), Real(0)}, Real(INFINITY)};
    const ExactState r1 = exact_merge({a, id}), r2 = exact_merge({fa2, a});
    expect(r1.o[0] == 1 && r1.o[1] == -2 && r1.lse == a.lse, "merge: (0, -inf) is the identity");
    expect(r2.o[0] == 1 && r2.o[1] == -2 && r2.lse == a.lse,
           "merge: +inf LSE is read as FA2's empty sentinel");
    const ExactState r3 = exact_merge({id, fa2});
    expect(r3.o[0] == 0 && r3.o[1] == 0 && isinf(r3.lse) && r3.lse < 0,
           "merge: both empty gives O = 0, LSE = -inf (no NaN)");
  }
  report << checks << " checks passed\n";
  return report.str();
}

}  // namespace attncheck::ref
