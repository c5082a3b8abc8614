// Measuring one output element against its exact value, shared by the judges (judge_attention.cpp,
// judge_merge.cpp, judge_softmax.cpp; statistics over their elements are stats.cpp): the formats'
// bits, a subject's declared conventions, an element's measured fields and the worst-element
// summary replay prints.
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
double decode(ac_dtype d, uint32_t bits) {
  // A table for the 16-bit formats: the judges decode every input element once per row.
  static const std::vector<double> fp16 = [] {
    std::vector<double> t(65536);
    for (uint32_t b = 0; b < 65536; ++b) t[b] = ref::decode(ref::Format::fp16, b);
    return t;
  }();
  static const std::vector<double> bf16 = [] {
    std::vector<double> t(65536);
    for (uint32_t b = 0; b < 65536; ++b) t[b] = ref::decode(ref::Format::bf16, b);
    return t;
  }();
  if (d == AC_DTYPE_F16 && bits < 65536) return fp16[bits];
  if (d == AC_DTYPE_BF16 && bits < 65536) return bf16[bits];
  if (is_fp8(d)) return ref::decode_fp8(fp8_format(d), uint8_t(bits));
  return ref::decode(fmt(d), bits);
}
ref::Fp8Format fp8_format(ac_dtype d) {
  return d == AC_DTYPE_E5M2       ? ref::Fp8Format::e5m2
         : d == AC_DTYPE_E4M3FNUZ ? ref::Fp8Format::e4m3fnuz
                                  : ref::Fp8Format::e4m3fn;
}
double kv_value(const AttentionInput& a, const std::vector<int32_t>& rows, const Bits& t, int64_t row_width,
                size_t i) {
  const std::vector<float>& ds = &t == &a.k ? a.k_descale : a.v_descale;
  return decode(a.k_dtype(), t[i]) *
         (ds.empty() ? 1.0 : double(ds[a.kv_descale_slot(ds.size(), rows, i, row_width)]));
}
uint32_t round_bits(ac_dtype d, double x) { return ref::round_to_format(fmt(d), x); }
bool finite_bits(ac_dtype d, uint32_t bits) { return std::isfinite(decode(d, bits)); }
std::string hexfloat(ac_dtype d, uint32_t bits) {
  // Every FP8 value is a double (an FP8 output is a quantiser's).
  if (is_fp8(d)) return ref::to_hexfloat(decode(d, bits));
  return ref::to_hexfloat(fmt(d), bits);
}
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
  v.flushed_exp = (c.features & AC_FEAT_FLUSHED_EXP) != 0;
  v.p_e4m3 = (c.fp8 & AC_FP8_P_E4M3) != 0;
  v.truncated_sums = (c.fp8 & AC_FP8_TRUNCATED_SUMS) != 0;
  v.saturate = (c.fp8 & AC_FP8_SATURATE) != 0;
  v.has_lse = (c.features & AC_FEAT_LSE) != 0;
  v.layout = c.lse_layout;
  v.empty_lse_undefined = (c.flags & AC_CAP_EMPTY_LSE_UNDEFINED) != 0;
  v.refuses_zero_keys = (c.flags & AC_CAP_REFUSES_ZERO_KEYS) != 0;
  v.nondeterministic = (c.flags & AC_CAP_NONDETERMINISTIC) != 0;
  v.ftz_arithmetic = (c.flags & AC_CAP_FTZ_ARITHMETIC) != 0;
  // FTZ arithmetic flushes the final store too: its outputs' zeros are judged as declared ones.
  v.flushes_subnormals = (c.flags & AC_CAP_FLUSHES_SUBNORMALS) != 0 || v.ftz_arithmetic;
  v.batch_invariant = (c.flags & AC_CAP_BATCH_INVARIANT) != 0;
  v.empty_states_zero_o = (c.flags & AC_CAP_EMPTY_STATES_ZERO_O) != 0;
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

// The same definition as ulp_at, without MPFR.
double ulp_of(ac_dtype d, double S) {
  const ref::FormatSpec& sp = ref::spec(fmt(d));
  const int q = S == 0 ? sp.emin - 1 : std::max(std::ilogb(S) + 1 - sp.precision, sp.emin - 1);
  return std::ldexp(1.0, q);
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
  e.cancel_unit = unit;
  e.ratio = allowed > 0 ? err / allowed : (err == 0 ? 0 : std::numeric_limits<double>::infinity());
  e.within = err <= allowed;
}

std::pair<uint32_t, uint32_t> measure_fp8(Elem& e, ac_dtype d, uint32_t code, double lo, double hi,
                                          ref::Fp8Overflow ov) {
  const ref::Fp8Format f = fp8_format(d);
  const uint32_t c_lo = ref::encode_fp8(f, lo, ov), c_hi = ref::encode_fp8(f, hi, ov);
  const double v_lo = decode(d, c_lo), v_hi = decode(d, c_hi), v = decode(d, code);
  e.dtype = d;
  e.out_bits = code;
  e.out_value = v;
  e.out_finite = std::isfinite(v);
  e.allowed = 0;
  e.fp8_rounded = int32_t(ref::encode_fp8(f, e.exact, ov));
  // A NaN code at an end of a finite interval is an overflow to NaN (e4m3fn, e4m3fnuz): that side
  // of the interval is open, or, where the whole interval lies past the largest value on one side,
  // NaN is all it allows. A NaN value (x NaN) allows NaN alone.
  const bool lo_over = std::isnan(v_lo) && !std::isnan(lo), hi_over = std::isnan(v_hi) && !std::isnan(hi);
  if (std::isnan(lo) || std::isnan(hi) || (lo_over && lo > 0) || (hi_over && hi < 0)) {
    e.within = std::isnan(v);
  } else if (std::isnan(v)) {
    e.within = lo_over || hi_over;
  } else {
    e.within = v >= (lo_over ? -INFINITY : v_lo) && v <= (hi_over ? INFINITY : v_hi);
  }
  // Codes as a line of integers (sign-magnitude, both zeros at 0, an infinity one step past the
  // largest): the distance to the nearer end.
  auto line = [](uint32_t x) { return (x & 0x80u) ? -int64_t(x & 0x7fu) : int64_t(x & 0x7fu); };
  auto steps = [&](uint32_t other) {
    return std::isnan(v) || std::isnan(decode(d, other)) ? std::numeric_limits<double>::infinity()
                                                         : double(std::llabs(line(code) - line(other)));
  };
  e.ulp = e.within ? 0 : std::min(steps(c_lo), steps(c_hi));
  e.cancel = e.ulp;
  e.ratio = e.ulp;
  return {c_lo, c_hi};
}

void measure_fp8_output(Elem& e, ac_dtype d, uint32_t code, Fp8Interval iv, double scale,
                        ref::Fp8Overflow ov) {
  const bool nan = std::isnan(to_d(e.exact));
  e.exact = e.exact / Real(scale);
  const auto [c_lo, c_hi] = measure_fp8(e, d, code, nan ? NAN : iv.lo, nan ? NAN : iv.hi, ov);
  e.inputs += " output_scale=" + hexfloat(scale) + ": allowed " + fp8_code_text(d, c_lo) +
              (c_lo == c_hi ? "" : " to " + fp8_code_text(d, c_hi));
}

std::string fp8_code_text(ac_dtype d, uint32_t code) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%02x", code);
  return std::string(b) + " (" + hexfloat(d, code) + ")";
}

// LSE outputs are fp32 values.
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
  e.cancel_unit = 0x1p-23 * scale;
  e.cancel = err / e.cancel_unit;
  e.ratio = err / allowed;
  e.within = err <= allowed;
}

std::string where_th(const char* what, int64_t t, int64_t h, int64_t c) {
  std::string s = std::string(what) + "[token=" + std::to_string(t) + ",head=" + std::to_string(h);
  if (c >= 0) s += ",d=" + std::to_string(c);
  return s + "]";
}

// One O element of an attention or merge row, before it is measured.
Elem o_elem(int64_t row, int64_t t, int64_t h, int64_t c, const Real& exact) {
  Elem e;
  e.out = Out::O;
  e.row = row;
  e.where = where_th("O", t, h, c);
  e.exact = exact;
  e.exact_finite = isfinite(e.exact);
  return e;
}

TimeSplit& thread_time_split() {
  thread_local TimeSplit split;
  return split;
}

WorstElement to_worst(const Elem& e) {
  WorstElement w;
  w.where = e.where;
  w.input_bits = e.inputs;
  w.exact = ref::to_decimal(e.exact, 36);
  // An FP8 element's rounding follows its subject's overflow declaration (measure_fp8).
  const uint32_t rb = !is_fp8(e.dtype) ? ref::round_to_format(fmt(e.dtype), e.exact)
                      : e.fp8_rounded >= 0
                          ? uint32_t(e.fp8_rounded)
                          : ref::encode_fp8(fp8_format(e.dtype), e.exact, ref::Fp8Overflow::nonfinite);
  w.rounded_exact = hexfloat(e.dtype, rb);
  char b[24];
  std::snprintf(b, sizeof b,
                e.dtype == AC_DTYPE_F32 ? "0x%08x"
                : is_fp8(e.dtype)       ? "0x%02x"
                                        : "0x%04x",
                e.out_bits);
  w.output_bits = std::string(b) + " (" + hexfloat(e.dtype, e.out_bits) + ")";
  w.ulp = e.ulp;
  w.cancel_ulp = e.cancel;
  return w;
}

}  // namespace attncheck::detail
