// Storage formats: exact decode, correct single rounding, parse and print.
//
// Rounding is done with an exact integer algorithm rather than MPFR's exponent-range emulation, so
// it touches no thread-global MPFR state: for finite nonzero x = m 2^e (m in [1/2,1)), the quantum
// of the result is 2^q with q = max(e - p, emin - 1) (the binade's ulp, or the minimum subnormal
// below the normal range). |x| / 2^q is exact (a power-of-two scaling) and is rounded ONCE to an
// integer n, to nearest with ties to even (mpfr_rint, MPFR_RNDN). n 2^q is then the correctly
// rounded magnitude; a carry to 2^p moves to the next binade, a biased exponent at the maximum is
// an overflow to infinity. tests/reference checks this against MPFR's own subnormalize emulation
// and against an exhaustive derivation over every fp16 value and midpoint.
#include "attncheck/reference/format.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "precision_internal.hpp"

namespace attncheck::ref {
namespace {

constexpr FormatSpec kFp16{11, -23, 16, "fp16", 16, 5};
constexpr FormatSpec kBf16{8, -132, 128, "bf16", 16, 8};
constexpr FormatSpec kFp32{24, -148, 128, "fp32", 32, 8};

struct Layout {
  int mant_bits;  // stored significand bits (p - 1)
  int exp_bits;
  int bias;
  uint32_t exp_max;  // all-ones exponent field
  uint32_t sign_bit;
  uint32_t storage_mask;
};

Layout layout(Format f) {
  const FormatSpec& s = spec(f);
  Layout l{};
  l.mant_bits = s.precision - 1;
  l.exp_bits = s.exponent_bits;
  l.bias = (1 << (s.exponent_bits - 1)) - 1;
  l.exp_max = (1u << s.exponent_bits) - 1;
  l.sign_bit = 1u << (s.storage_bits - 1);
  l.storage_mask = s.storage_bits == 32 ? 0xffffffffu : 0xffffu;
  return l;
}

uint32_t canonical_nan(Format f) {
  const Layout l = layout(f);
  return (l.exp_max << l.mant_bits) | (1u << (l.mant_bits - 1));
}

uint32_t encode_rounded(Format f, uint32_t sign, unsigned long n, long q);

uint32_t round_mp(Format f, mpfr_srcptr x) {
  const FormatSpec& s = spec(f);
  const Layout l = layout(f);
  if (mpfr_nan_p(x)) return canonical_nan(f);
  const uint32_t sign = mpfr_signbit(x) ? l.sign_bit : 0u;
  if (mpfr_inf_p(x)) return sign | (l.exp_max << l.mant_bits);
  if (mpfr_zero_p(x)) return sign;

  const long e = mpfr_get_exp(x);
  long q = std::max<long>(e - s.precision, static_cast<long>(s.emin) - 1);
  detail::Mp scaled(mpfr_get_prec(x));
  mpfr_abs(scaled, x, MPFR_RNDN);               // exact: same precision
  mpfr_mul_2si(scaled, scaled, -q, MPFR_RNDN);  // exact: power of two, far inside MPFR's range
  detail::Mp n_mp(64);
  mpfr_rint(n_mp, scaled, MPFR_RNDN);  // the one rounding: to an integer, ties to even
  return encode_rounded(f, sign, mpfr_get_ui(n_mp, MPFR_RNDN), q);  // n <= 2^p: exact
}

// The bits of sign * n * 2^q, where n <= 2^p is |x| / 2^q rounded to an integer and q the quantum's
// exponent of x's binade (at least the subnormals' quantum, emin - 1).
uint32_t encode_rounded(Format f, uint32_t sign, unsigned long n, long q) {
  const FormatSpec& s = spec(f);
  const Layout l = layout(f);
  if (n == 0) return sign;
  if (n == (1ul << s.precision)) {  // carried into the next binade
    n >>= 1;
    ++q;
  }
  if (n < (1ul << l.mant_bits)) return sign | static_cast<uint32_t>(n);  // subnormal (q = emin - 1)
  const long biased = q + l.mant_bits + l.bias;
  if (biased >= static_cast<long>(l.exp_max)) return sign | (l.exp_max << l.mant_bits);  // overflow
  return sign | (static_cast<uint32_t>(biased) << l.mant_bits) |
         static_cast<uint32_t>(n - (1ul << l.mant_bits));
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const FormatSpec& spec(Format f) {
  switch (f) {
    case Format::fp16:
      return kFp16;
    case Format::bf16:
      return kBf16;
    case Format::fp32:
      return kFp32;
  }
  throw ReferenceError("unknown format enumerator");
}

Format parse_format(const std::string& name) {
  const std::string n = lower(trim(name));
  if (n == "fp16") return Format::fp16;
  if (n == "bf16") return Format::bf16;
  if (n == "fp32") return Format::fp32;
  throw ReferenceError("unknown format '" + name + "': expected fp16, bf16 or fp32");
}

namespace {

double decode_by_fields(Format f, uint32_t bits) {
  const Layout l = layout(f);
  bits &= l.storage_mask;
  const bool neg = (bits & l.sign_bit) != 0;
  const uint32_t ef = (bits >> l.mant_bits) & l.exp_max;
  const uint32_t mant = bits & ((1u << l.mant_bits) - 1);
  double v;
  if (ef == l.exp_max) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (ef == 0) {
    v = std::ldexp(static_cast<double>(mant), 1 - l.bias - l.mant_bits);
  } else {
    v = std::ldexp(static_cast<double>(mant | (1u << l.mant_bits)),
                   static_cast<int>(ef) - l.bias - l.mant_bits);
  }
  return neg ? -v : v;
}

// fp16: one table of all 2^16 values (decoding is on the reference's hot path for K/V slices).
const std::vector<double>& fp16_table() {
  static const std::vector<double> table = [] {
    std::vector<double> t(65536);
    for (uint32_t b = 0; b < 65536; ++b) t[b] = decode_by_fields(Format::fp16, b);
    return t;
  }();
  return table;
}

}  // namespace

double decode(Format f, uint32_t bits) {
  switch (f) {
    case Format::fp16:
      return fp16_table()[bits & 0xffffu];
    case Format::bf16:
    case Format::fp32: {
      // bf16 is the top half of an fp32; float -> double is exact (subnormals included).
      const uint32_t b32 = f == Format::bf16 ? (bits & 0xffffu) << 16 : bits;
      float x;
      std::memcpy(&x, &b32, sizeof x);
      return static_cast<double>(x);
    }
  }
  return decode_by_fields(f, bits);
}

bool is_nan_bits(Format f, uint32_t bits) {
  const Layout l = layout(f);
  return ((bits >> l.mant_bits) & l.exp_max) == l.exp_max && (bits & ((1u << l.mant_bits) - 1)) != 0;
}

bool is_inf_bits(Format f, uint32_t bits) {
  const Layout l = layout(f);
  return ((bits >> l.mant_bits) & l.exp_max) == l.exp_max && (bits & ((1u << l.mant_bits) - 1)) == 0;
}

uint32_t round_to_format(Format f, const Real& x) { return round_mp(f, x.backend().data()); }

// round_mp's steps in double, exactly: frexp's exponent is MPFR's, the scaling by a power of two
// is exact (the scaled value stays within [2^(p-1), 2^p) or below it, never past double's range),
// and nearbyint in the default rounding mode is the one rounding, ties to even. No MPFR value per
// call: the generators round tens of millions of values for a long-suite layer.
uint32_t round_to_format(Format f, double x) {
  uint32_t bits = 0;
  if (f == Format::fp16   ? round_normal<Format::fp16>(x, bits)
      : f == Format::bf16 ? round_normal<Format::bf16>(x, bits)
                          : round_normal<Format::fp32>(x, bits))
    return bits;
  const FormatSpec& s = spec(f);
  const Layout l = layout(f);
  if (std::isnan(x)) return canonical_nan(f);
  const uint32_t sign = std::signbit(x) ? l.sign_bit : 0u;
  if (std::isinf(x)) return sign | (l.exp_max << l.mant_bits);
  if (x == 0) return sign;
  int e = 0;
  (void)std::frexp(x, &e);
  const long q = std::max<long>(e - s.precision, static_cast<long>(s.emin) - 1);
  const double n = std::nearbyint(std::ldexp(std::fabs(x), static_cast<int>(-q)));
  return encode_rounded(f, sign, static_cast<unsigned long>(n), q);
}

Real parse_real(const std::string& text) {
  detail::working_prec();
  const std::string s = trim(text);
  const std::string ls = lower(s);
  Real r;
  mpfr_ptr p = r.backend().data();
  if (ls == "inf" || ls == "+inf" || ls == "infinity" || ls == "+infinity") {
    mpfr_set_inf(p, 1);
    return r;
  }
  if (ls == "-inf" || ls == "-infinity") {
    mpfr_set_inf(p, -1);
    return r;
  }
  if (ls == "nan" || ls == "+nan" || ls == "-nan") {
    mpfr_set_nan(p);
    return r;
  }
  if (s.empty()) throw ReferenceError("cannot parse an empty string as a number");
  char* end = nullptr;
  mpfr_strtofr(p, s.c_str(), &end, 0, MPFR_RNDN);
  if (end != s.c_str() + s.size() || end == s.c_str() || mpfr_nan_p(p))
    throw ReferenceError("cannot parse '" + text +
                         "' as a number (decimal, hexfloat 0x1.8p-3, inf, -inf, nan)");
  return r;
}

std::string to_hexfloat(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", x);
  return buf;
}

std::string to_hexfloat(Format f, uint32_t bits) { return to_hexfloat(decode(f, bits)); }

std::string to_decimal(const Real& x, int digits) {
  mpfr_srcptr p = x.backend().data();
  if (mpfr_nan_p(p)) return "nan";
  if (mpfr_inf_p(p)) return mpfr_signbit(p) ? "-inf" : "inf";
  char* out = nullptr;
  mpfr_asprintf(&out, "%.*Rg", digits, p);
  std::string r = out ? out : "";
  if (out) mpfr_free_str(out);
  return r;
}

}  // namespace attncheck::ref
