// Exact logsumexp, softmax, the online state, attention forward and merge.
//
// Where rounding happens (working precision p, default 200 bits; the analysis is in README.md):
//   - scores: the products q_c k_c of stored fp16/bf16/fp32 values are exact in double (at most
//     24+24 significand bits, exponents inside double's range). fp16 dot products are summed exactly
//     in a 128-bit integer (values are multiples of 2^-24), other formats by mpfr_sum, which rounds
//     the exact sum once. Multiplying by the softmax scale (a float, exact) rounds once more.
//   - softcap: s / cap, tanh and the product by cap round once each (|tanh'| <= 1: the score's
//     error is not amplified).
//   - weights: p_j = exp(s_j - m) rounds twice (the subtraction, the exp), each correctly; m is the
//     largest score or the sink, so every p_j <= 1.
//   - sums: l and each O~ element accumulate one correctly rounded add / fma per key; a sink adds its
//     weight to l only (a key whose value is 0).
//   - O = O~ / l and LSE = m + log l: one rounding each (two for base 2).
//
// Error analysis (full version in reference/README.md). u = 2^-p, n <= 2^20 keys, S = max |s_j|.
// Each weight carries a relative error eta <= u (4S + 2) (score rounding, the shift, the exp); the
// largest weight is exactly 1. l and O~ accumulate n - 1 rounded adds of exact products, an error
// of at most gamma_(n-1) sum p|v| (cancellation is bounded relative to sum p|v|, not |O~|). So
//   |O^_c - O_c| <= (8S + 2n + 6) u M_c,   M_c = sum p|v_c| / sum p  (weighted mean of |v|),
// which is <= 2^-159 M_c at 200 bits for n <= 2^20 and S <= 2^38 (softcap: (14S + 2n + 6) u M_c,
// 2^-158 M_c; a sink counts as a key with S >= |sink|). Against the 1/100 ulp of fp32
// that reports resolve (2^-30.7 relative; 2^-155.6 absolute for subnormal outputs) this leaves
// normal outputs resolved up to a cancellation ratio M_c/|O_c| of 2^121, and subnormal ones while
// M_c <= 8 (raise the precision for large values cancelling to subnormals: 216 bits cover fp16).
//
// Hot loops use raw mpfr_t temporaries allocated once per call (precision_internal.hpp), never
// expression templates.
#include "attncheck/reference/exact.hpp"

#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>

#include "attncheck/reference/offsets.hpp"
#include "precision_internal.hpp"

namespace attncheck::ref {
namespace {

using detail::Mp;
using detail::MpVec;

Real real_inf(int sign) {
  Real r;
  mpfr_set_inf(r.backend().data(), sign);
  return r;
}
Real real_zero() {
  Real r;
  mpfr_set_zero(r.backend().data(), 1);
  return r;
}

// Exact fixed-point accumulation of sum_j p_j W_j for one output column, used when a KV slice's
// finite values are integers W times one power of two 2^-s with |W| < 2^63 (always for fp16, where
// s <= 24 + 16; for bf16/fp32 when the values span at most 62 bits). p_j in (0, 1] is an MPFR number
// N 2^(e - 64 nl) (N its nl-limb significand), so p_j W_j = N W 2^(e - 64 nl) is an integer product
// shifted by a power of two. The sum is kept as integers (positive and negative parts) in units of
// 2^-F, F = 64 nl + 64: a term is truncated only below that unit, an absolute error under 2^-F 2^-s
// per term (2^-344 for fp16 at 200 bits; in general below 2^-320 times the smallest value's ulp),
// far below the rounded-add path's (n u sum p|v|). This replaces one MPFR multiply and one MPFR add
// per element by one mpn multiply, shift and add.
struct FixedAccumulator {
  int nl = 0;  // limbs of p
  int L = 0;   // limbs per accumulator
  long F = 0;
  std::vector<mp_limb_t> pos, neg, tmp;

  void reset(mpfr_prec_t prec, int d) {
    nl = static_cast<int>((prec + GMP_NUMB_BITS - 1) / GMP_NUMB_BITS);
    L = nl + 4;  // term < 2^(64 (nl + 1) + 65), plus 31 bits of carries for up to 2^31 terms
    F = 64L * nl + 64;
    pos.assign(static_cast<size_t>(d) * L, 0);
    neg.assign(static_cast<size_t>(d) * L, 0);
    tmp.assign(static_cast<size_t>(nl) + 2, 0);
  }

  // p > 0 finite with exponent <= 1 (p <= 1).
  void add(mpfr_srcptr p, int64_t w, int c) {
    if (w == 0) return;
    mp_limb_t* acc = (w > 0 ? pos.data() : neg.data()) + static_cast<size_t>(c) * L;
    const mp_limb_t mag = w > 0 ? static_cast<mp_limb_t>(w) : static_cast<mp_limb_t>(-w);
    const mp_limb_t* n = static_cast<const mp_limb_t*>(mpfr_custom_get_significand(p));
    mp_limb_t* t = tmp.data();
    t[nl] = mpn_mul_1(t, n, nl, mag);
    mp_size_t len = nl + 1;
    const long sh = mpfr_get_exp(p) + 64;  // the term in units of 2^-F is (N W) 2^sh
    if (sh >= 0) {
      const long off = sh / 64, bits = sh % 64;
      if (bits) {
        t[len] = mpn_lshift(t, t, len, static_cast<unsigned>(bits));
        ++len;
      }
      mpn_add(acc + off, acc + off, L - off, t, len);
    } else {
      const long drop = (-sh) / 64, bits = (-sh) % 64;
      if (drop >= len) return;  // entirely below the unit
      mp_limb_t* src = t + drop;
      len -= drop;
      if (bits) mpn_rshift(src, src, len, static_cast<unsigned>(bits));
      mpn_add(acc, acc, L, src, len);
    }
  }

  // out = (pos - neg) 2^-(F + shift), rounded once.
  void result(int c, long shift, mpfr_ptr out) {
    mp_limb_t* a = pos.data() + static_cast<size_t>(c) * L;
    mp_limb_t* b = neg.data() + static_cast<size_t>(c) * L;
    const bool negative = mpn_cmp(a, b, L) < 0;
    if (negative) std::swap(a, b);
    mpn_sub_n(a, a, b, L);  // |difference|, in place
    mpz_t z;
    mpz_roinit_n(z, a, negative ? -static_cast<mp_size_t>(L) : static_cast<mp_size_t>(L));
    mpfr_set_z(out, z, MPFR_RNDN);
    mpfr_mul_2si(out, out, -(F + shift), MPFR_RNDN);  // exact
  }
};

// Softmax-weighted sum over n scores (an array of mpfr, may contain +-inf/NaN) and value rows.
// value(j, c) gives the c-th value element of key j as a double (the stored fp16/bf16/fp32 value:
// at most 24 significand bits, times a KV head's v_scale: at most 48; any double's 53 bits make p * v
// exact in prec + 53 bits). Writes O (d elements, normalised) and
// LSE. A sink (finite, or nullptr for none) is a logit whose value is 0: it joins the max and l,
// never the accumulator, so every p stays <= 1 (what the fixed-point accumulator needs).
struct WeightedSoftmax {
  mpfr_prec_t prec;
  Mp m, p, l, t;
  Mp prod;  // p * v, exact: a value carries at most a double's 53 significand bits
  Mp vt;    // the value as an mpfr (exact)
  MpVec acc;
  FixedAccumulator fixed;
  explicit WeightedSoftmax(mpfr_prec_t prec_, int d)
      : prec(prec_),
        m(prec_),
        p(prec_),
        l(prec_),
        t(prec_),
        prod(prec_ + 53),
        vt(53),
        acc(static_cast<size_t>(d), prec_) {}

  // value_int(j, c), used when use_fixed, gives value(j, c) * 2^fixed_shift as an exact integer.
  template <class ValueAt, class ValueInt>
  void run(size_t n, mpfr_srcptr scores, int d, ValueAt value, LseBase base, std::vector<Real>& o, Real& lse,
           bool& empty, bool use_fixed = false, ValueInt value_int = nullptr, long fixed_shift = 0,
           mpfr_srcptr sink = nullptr) {
    o.assign(static_cast<size_t>(d), Real());
    lse = Real();
    empty = false;
    for (size_t j = 0; j < n; ++j)
      if (mpfr_nan_p(scores + j)) {  // a NaN logit makes the whole row NaN
        for (auto& x : o) mpfr_set_nan(x.backend().data());
        mpfr_set_nan(lse.backend().data());
        return;
      }
    mpfr_set_inf(m, -1);
    for (size_t j = 0; j < n; ++j)
      if (mpfr_greater_p(scores + j, m)) mpfr_set(m, scores + j, MPFR_RNDN);
    if (mpfr_inf_p(m) && mpfr_signbit(m)) {  // no visible key, or all -inf: the empty row
      empty = true;
      for (auto& x : o) mpfr_set_zero(x.backend().data(), 1);
      if (!sink) {
        mpfr_set_inf(lse.backend().data(), -1);
        return;
      }
      // Only the sink's mass: LSE = log e^sink = sink.
      mpfr_set(t, sink, MPFR_RNDN);
      if (base == LseBase::two) {
        mpfr_const_log2(p, MPFR_RNDN);
        mpfr_div(t, t, p, MPFR_RNDN);
      }
      mpfr_set(lse.backend().data(), t, MPFR_RNDN);
      return;
    }
    for (int c = 0; c < d; ++c) mpfr_set_zero(acc[c], 1);
    mpfr_set_zero(l, 1);
    if (mpfr_inf_p(m)) {  // +inf scores: the limit is uniform over them
      for (size_t j = 0; j < n; ++j) {
        if (!mpfr_inf_p(scores + j) || mpfr_signbit(scores + j)) continue;
        mpfr_add_ui(l, l, 1, MPFR_RNDN);
        for (int c = 0; c < d; ++c) mpfr_add_d(acc[c], acc[c], value(j, c), MPFR_RNDN);
      }
      for (int c = 0; c < d; ++c) mpfr_div(o[c].backend().data(), acc[c], l, MPFR_RNDN);
      mpfr_set_inf(lse.backend().data(), 1);
      return;
    }
    // +inf scores were handled above: against their infinite mass a finite sink weighs nothing.
    if (sink && mpfr_greater_p(sink, m)) mpfr_set(m, sink, MPFR_RNDN);
    if (use_fixed) fixed.reset(prec, d);
    for (size_t j = 0; j < n; ++j) {
      if (mpfr_inf_p(scores + j)) continue;  // -inf: weight exactly zero
      mpfr_sub(p, scores + j, m, MPFR_RNDN);
      mpfr_exp(p, p, MPFR_RNDN);
      mpfr_add(l, l, p, MPFR_RNDN);
      if constexpr (!std::is_same_v<ValueInt, std::nullptr_t>) {
        if (use_fixed) {
          if (mpfr_zero_p(p)) continue;  // underflowed MPFR's exponent range: below any unit
          for (int c = 0; c < d; ++c) fixed.add(p, value_int(j, c), c);
          continue;
        }
      }
      // An exact product and one rounded add: the same single rounding as mpfr_fma, and faster.
      for (int c = 0; c < d; ++c) {
        const double v = value(j, c);
        if (v == 0) continue;          // adds exactly nothing
        mpfr_set_d(vt, v, MPFR_RNDN);  // exact (a double); inf and NaN carry through
        mpfr_mul(prod, p, vt, MPFR_RNDN);
        mpfr_add(acc[c], acc[c], prod, MPFR_RNDN);
      }
    }
    if (sink) {  // a key with value 0: its weight joins l only
      mpfr_sub(p, sink, m, MPFR_RNDN);
      mpfr_exp(p, p, MPFR_RNDN);
      mpfr_add(l, l, p, MPFR_RNDN);
    }
    if (use_fixed)
      for (int c = 0; c < d; ++c) fixed.result(c, fixed_shift, acc[c]);
    for (int c = 0; c < d; ++c) mpfr_div(o[c].backend().data(), acc[c], l, MPFR_RNDN);
    mpfr_log(t, l, MPFR_RNDN);
    mpfr_add(t, t, m, MPFR_RNDN);
    if (base == LseBase::two) {
      mpfr_const_log2(p, MPFR_RNDN);
      mpfr_div(t, t, p, MPFR_RNDN);
    }
    mpfr_set(lse.backend().data(), t, MPFR_RNDN);
  }
};

}  // namespace

Real logsumexp(const std::vector<Real>& x, LseBase base) {
  const mpfr_prec_t prec = detail::working_prec();
  MpVec s(x.size(), prec);
  for (size_t j = 0; j < x.size(); ++j) mpfr_set(s[j], x[j].backend().data(), MPFR_RNDN);
  WeightedSoftmax ws(prec, 0);
  std::vector<Real> o;
  Real lse;
  bool empty = false;
  ws.run(
      x.size(), s.data(), 0, [](size_t, int) { return 0.0; }, base, o, lse, empty, false, nullptr);
  return lse;
}

std::vector<Real> softmax(const std::vector<Real>& x) {
  const mpfr_prec_t prec = detail::working_prec();
  std::vector<Real> y(x.size(), real_zero());
  Mp m(prec), l(prec), p(prec);
  mpfr_set_inf(m, -1);
  for (const auto& xi : x) {
    mpfr_srcptr v = xi.backend().data();
    if (mpfr_nan_p(v)) {
      for (auto& yi : y) mpfr_set_nan(yi.backend().data());
      return y;
    }
    if (mpfr_greater_p(v, m)) mpfr_set(m, v, MPFR_RNDN);
  }
  if (mpfr_inf_p(m) && mpfr_signbit(m)) return y;  // empty or all -inf: all zero
  if (mpfr_inf_p(m)) {
    size_t count = 0;
    for (const auto& xi : x) count += mpfr_inf_p(xi.backend().data()) && !mpfr_signbit(xi.backend().data());
    for (size_t i = 0; i < x.size(); ++i) {
      mpfr_srcptr v = x[i].backend().data();
      if (mpfr_inf_p(v) && !mpfr_signbit(v)) mpfr_set_ui(y[i].backend().data(), 1, MPFR_RNDN);
      mpfr_div_ui(y[i].backend().data(), y[i].backend().data(), count, MPFR_RNDN);
    }
    return y;
  }
  MpVec e(x.size(), prec);
  mpfr_set_zero(l, 1);
  for (size_t i = 0; i < x.size(); ++i) {
    mpfr_sub(e[i], x[i].backend().data(), m, MPFR_RNDN);
    mpfr_exp(e[i], e[i], MPFR_RNDN);
    mpfr_add(l, l, e[i], MPFR_RNDN);
  }
  for (size_t i = 0; i < x.size(); ++i) mpfr_div(y[i].backend().data(), e[i], l, MPFR_RNDN);
  return y;
}

OnlineState online_state_init(int head_size) {
  detail::working_prec();
  if (head_size < 0)
    throw ReferenceError("online_state_init: negative head_size " + std::to_string(head_size));
  OnlineState s{real_inf(-1), real_zero(), std::vector<Real>(static_cast<size_t>(head_size), real_zero())};
  return s;
}

void online_state_update(OnlineState& s, const std::vector<Real>& x,
                         const std::vector<std::vector<Real>>& v) {
  detail::working_prec();
  if (x.size() != v.size())
    throw ReferenceError("online_state_update: " + std::to_string(x.size()) + " logits but " +
                         std::to_string(v.size()) + " value vectors");
  for (const auto& vi : v)
    if (vi.size() != s.o.size())
      throw ReferenceError("online_state_update: value vector of size " + std::to_string(vi.size()) +
                           ", state head_size " + std::to_string(s.o.size()));
  Real m_new = s.m;
  for (const auto& xi : x)
    if (xi > m_new) m_new = xi;
  if (isinf(m_new) && m_new < 0) return;  // nothing seen yet and nothing new: the state is unchanged
  // The base-case guard: alpha = e^(m - m') is e^(-inf + inf) = NaN when both are -inf;
  // with m = -inf the old state is empty (l = 0, O~ = 0) and alpha is 0 by definition.
  const Real alpha = (isinf(s.m) && s.m < 0) ? real_zero() : Real(exp(s.m - m_new));
  s.l *= alpha;
  for (auto& oc : s.o) oc *= alpha;
  for (size_t i = 0; i < x.size(); ++i) {
    if (isinf(x[i]) && x[i] < 0) continue;
    const Real p = exp(x[i] - m_new);
    s.l += p;
    for (size_t c = 0; c < s.o.size(); ++c) s.o[c] += p * v[i][c];
  }
  s.m = m_new;
}

void validate(const AttentionProblem& pb) {
  auto fail = [](const std::string& what) { throw ReferenceError("invalid attention problem: " + what); };
  if (pb.dtype != Format::fp16 && pb.dtype != Format::bf16 && pb.dtype != Format::fp32) fail("unknown dtype");
  if (pb.num_heads <= 0) fail("num_heads = " + std::to_string(pb.num_heads) + " (must be > 0)");
  if (pb.num_kv_heads <= 0) fail("num_kv_heads = " + std::to_string(pb.num_kv_heads) + " (must be > 0)");
  if (pb.num_heads % pb.num_kv_heads != 0)
    fail("num_heads " + std::to_string(pb.num_heads) + " is not divisible by num_kv_heads " +
         std::to_string(pb.num_kv_heads));
  if (pb.head_size <= 0) fail("head_size = " + std::to_string(pb.head_size) + " (must be > 0)");
  if (pb.head_size_v < 0)
    fail("head_size_v = " + std::to_string(pb.head_size_v) + " (must be >= 0; 0 means head_size)");
  if (pb.seqlens_q.size() != pb.seqlens_k.size())
    fail("seqlens_q has " + std::to_string(pb.seqlens_q.size()) + " sequences, seqlens_k " +
         std::to_string(pb.seqlens_k.size()));
  int64_t total_q = 0, total_k = 0, total_mask = 0;
  for (size_t s = 0; s < pb.seqlens_q.size(); ++s) {
    if (pb.seqlens_q[s] < 0)
      fail("negative query length " + std::to_string(pb.seqlens_q[s]) + " in sequence " + std::to_string(s));
    if (pb.seqlens_k[s] < 0)
      fail("negative key length " + std::to_string(pb.seqlens_k[s]) + " in sequence " + std::to_string(s));
    total_q += pb.seqlens_q[s];
    total_k += pb.seqlens_k[s];
    total_mask += int64_t{pb.seqlens_q[s]} * pb.seqlens_k[s];
  }
  const int64_t qn = total_q * pb.num_heads * pb.head_size;
  const int64_t kn = total_k * pb.num_kv_heads * pb.head_size;
  const int64_t vn = total_k * pb.num_kv_heads * value_head_size(pb);
  if (static_cast<int64_t>(pb.q.size()) != qn)
    fail("q has " + std::to_string(pb.q.size()) + " elements, shape [total_q, num_heads, head_size] needs " +
         std::to_string(qn));
  if (static_cast<int64_t>(pb.k.size()) != kn)
    fail("k has " + std::to_string(pb.k.size()) +
         " elements, shape [total_k, num_kv_heads, head_size] needs " + std::to_string(kn));
  if (static_cast<int64_t>(pb.v.size()) != vn)
    fail("v has " + std::to_string(pb.v.size()) + " elements, shape [total_k, num_kv_heads, " +
         (pb.head_size_v > 0 ? "head_size_v" : "head_size") + "] needs " + std::to_string(vn));
  if (!pb.mask.empty() && static_cast<int64_t>(pb.mask.size()) != total_mask)
    fail("mask has " + std::to_string(pb.mask.size()) + " elements, sum of Tq_i * Tk_i is " +
         std::to_string(total_mask));
  if (!std::isfinite(pb.softmax_scale)) fail("softmax_scale is not finite");
  if (!std::isfinite(pb.softcap) || pb.softcap < 0)
    fail("softcap = " + std::to_string(pb.softcap) + " (must be finite and >= 0; 0 means no cap)");
  if (pb.window_left < -1)
    fail("window_left = " + std::to_string(pb.window_left) + " (must be >= -1; -1 means unbounded)");
  if (pb.window_right < -1)
    fail("window_right = " + std::to_string(pb.window_right) + " (must be >= -1; -1 means unbounded)");
  if (!pb.sinks.empty() && static_cast<int64_t>(pb.sinks.size()) != pb.num_heads)
    fail("sinks has " + std::to_string(pb.sinks.size()) + " values, num_heads is " +
         std::to_string(pb.num_heads) + " (one per query head, or none)");
  for (size_t i = 0; i < pb.sinks.size(); ++i)
    if (!std::isfinite(pb.sinks[i])) fail("sinks[" + std::to_string(i) + "] is not finite");
  for (const auto& [scales, name] : {std::pair{&pb.k_scale, "k_scale"}, std::pair{&pb.v_scale, "v_scale"},
                                     std::pair{&pb.q_scale, "q_scale"}}) {
    if (!scales->empty() && static_cast<int64_t>(scales->size()) != pb.num_kv_heads &&
        scales->size() != pb.seqlens_q.size() * static_cast<size_t>(pb.num_kv_heads))
      fail(std::string(name) + " has " + std::to_string(scales->size()) + " values, num_kv_heads is " +
           std::to_string(pb.num_kv_heads) + " (one per KV head, one per (sequence, KV head), or none)");
    for (size_t i = 0; i < scales->size(); ++i)
      if (!std::isfinite((*scales)[i]) || !((*scales)[i] > 0))
        fail(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string((*scales)[i]) +
             " (must be finite and > 0)");
  }
  if (spec(pb.dtype).storage_bits == 16) {
    auto check16 = [&](const std::vector<uint32_t>& t, const char* name) {
      for (uint32_t b : t)
        if (b > 0xffffu) fail(std::string(name) + " holds a bit pattern above 16 bits for a 16-bit dtype");
    };
    check16(pb.q, "q");
    check16(pb.k, "k");
    check16(pb.v, "v");
  }
}

namespace {
std::atomic<Accumulation> g_accumulation{Accumulation::automatic};
}  // namespace

void set_accumulation(Accumulation a) { g_accumulation.store(a); }
Accumulation accumulation() { return g_accumulation.load(); }

namespace {

// One sequence's keys and values for one KV head, decoded once and shared by every query row
// (and every query head of the GQA group) that reads them.
struct KvSlice {
  int d = 0, dv = 0;  // K's and V's head sizes
  int32_t tk = 0;
  std::vector<double> k;       // [tk, d], exact
  std::vector<int64_t> k_int;  // fp16 only: k * 2^24, exact integers
  std::vector<uint8_t> k_finite;
  std::vector<double> v;  // [tk, dv], exact (times the KV head's v_scale)
  double k_scale = 1;     // the KV head's k_scale, applied to its scores with the softmax scale
  double q_scale = 1;     // the KV head's q_scale, applied to its scores after that
  // Values as exact integers v * 2^v_shift (0 where not finite), when the slice's finite nonzero
  // values span at most 62 bits (always for fp16; typical bf16/fp32 activations too).
  bool v_fixed_ok = false;
  long v_shift = 0;
  std::vector<int64_t> v_int;
  std::vector<uint8_t> v_finite;  // per key: every value element finite
};

constexpr int kFp16Shift = 24;  // fp16 values are integer multiples of 2^-24

void load_kv(const AttentionProblem& pb, size_t seq, int64_t k_begin, int32_t tk, int32_t kv_head,
             KvSlice& kv) {
  const int d = pb.head_size, dv = value_head_size(pb);
  kv.d = d;
  kv.dv = dv;
  kv.tk = tk;
  const size_t n = static_cast<size_t>(tk) * d, nv = static_cast<size_t>(tk) * dv;
  kv.k.resize(n);
  kv.k_finite.assign(static_cast<size_t>(tk), 1);
  kv.v.resize(nv);
  kv.v_finite.assign(static_cast<size_t>(tk), 1);
  const bool fp16 = pb.dtype == Format::fp16;
  if (fp16) {
    kv.k_int.resize(n);
  }
  kv.k_scale = k_scale_of(pb, seq, kv_head);
  kv.q_scale = q_scale_of(pb, seq, kv_head);
  const double v_scale = v_scale_of(pb, seq, kv_head);
  int max_e = std::numeric_limits<int>::min(), min_lsb = std::numeric_limits<int>::max();
  for (int32_t j = 0; j < tk; ++j) {
    const size_t base = (static_cast<size_t>(k_begin + j) * pb.num_kv_heads + kv_head) * d;
    for (int c = 0; c < d; ++c) {
      const double kd = decode(pb.dtype, pb.k[base + c]);
      kv.k[static_cast<size_t>(j) * d + c] = kd;
      if (!std::isfinite(kd)) kv.k_finite[j] = 0;
      if (fp16 && std::isfinite(kd))
        kv.k_int[static_cast<size_t>(j) * d + c] = static_cast<int64_t>(kd * 0x1p24);
    }
    const size_t vbase = (static_cast<size_t>(k_begin + j) * pb.num_kv_heads + kv_head) * dv;
    for (int c = 0; c < dv; ++c) {
      const double vd = decode(pb.dtype, pb.v[vbase + c]) * v_scale;  // exact (above)
      kv.v[static_cast<size_t>(j) * dv + c] = vd;
      if (!std::isfinite(vd)) kv.v_finite[j] = 0;
      if (std::isfinite(vd) && vd != 0) {
        int e = 0;
        std::frexp(vd, &e);  // |vd| in [2^(e-1), 2^e), an odd integer times 2^quantum_exponent
        max_e = std::max(max_e, e);
        min_lsb = std::min(min_lsb, detail::quantum_exponent(vd));
      }
    }
  }
  const bool any_nonzero = max_e != std::numeric_limits<int>::min();
  kv.v_fixed_ok = accumulation() == Accumulation::automatic && (!any_nonzero || max_e - min_lsb <= 62);
  kv.v_shift = any_nonzero ? -min_lsb : 0;
  if (kv.v_fixed_ok) {
    kv.v_int.resize(nv);
    // Multiplying by 2^v_shift is exact: the results are integers below 2^63 (or zero), and 2^v_shift
    // (|v_shift| <= 173) is a double.
    const double scale = std::ldexp(1.0, static_cast<int>(kv.v_shift));
    for (size_t i = 0; i < nv; ++i)
      kv.v_int[i] = std::isfinite(kv.v[i]) ? static_cast<int64_t>(kv.v[i] * scale) : 0;
  }
}

struct Query {
  std::vector<double> q;
  std::vector<int64_t> q_int;
  bool finite = true;
};

void load_query(const AttentionProblem& pb, int64_t token, int32_t head, Query& qr) {
  const int d = pb.head_size;
  qr.q.resize(static_cast<size_t>(d));
  qr.q_int.resize(static_cast<size_t>(d));
  qr.finite = true;
  const size_t base = (static_cast<size_t>(token) * pb.num_heads + head) * d;
  for (int c = 0; c < d; ++c) {
    const double x = decode(pb.dtype, pb.q[base + c]);
    qr.q[c] = x;
    if (!std::isfinite(x))
      qr.finite = false;
    else if (pb.dtype == Format::fp16)
      qr.q_int[c] = static_cast<int64_t>(x * 0x1p24);  // exact
  }
}

// Computes rows for one (sequence, KV head), reusing all temporaries.
struct RowEngine {
  mpfr_prec_t prec;
  int d, dv;  // K's and V's head sizes
  MpVec scores;
  MpVec prods;
  std::vector<mpfr_ptr> prod_ptrs;
  std::vector<int32_t> visible;
  Mp sink;  // the row's sink logit (a float: exact)
  WeightedSoftmax ws;

  RowEngine(mpfr_prec_t prec_, int d_, int dv_)
      : prec(prec_), d(d_), dv(dv_), prods(static_cast<size_t>(d_), 53), sink(prec_), ws(prec_, dv_) {
    prod_ptrs.resize(static_cast<size_t>(d));
    for (int c = 0; c < d; ++c) prod_ptrs[c] = prods[c];
  }

  // softcap > 0 caps the scaled score: out = softcap * tanh(out / softcap), each step rounded once in
  // working precision (tanh' <= 1, so the score's rounding carries through unamplified).
  void score(mpfr_ptr out, Format dtype, const Query& qr, const KvSlice& kv, int32_t j, double scale,
             double softcap) {
    const double* k = kv.k.data() + static_cast<size_t>(j) * d;
    if (dtype == Format::fp16 && qr.finite && kv.k_finite[j]) {
      // Exact: |q_int k_int| < 2^80 and d < 2^31 terms, far inside 127 bits.
      const int64_t* ki = kv.k_int.data() + static_cast<size_t>(j) * d;
      __int128 acc = 0;
      for (int c = 0; c < d; ++c) acc += static_cast<__int128>(qr.q_int[c]) * ki[c];
      const bool neg = acc < 0;
      const unsigned __int128 u =
          neg ? -static_cast<unsigned __int128>(acc) : static_cast<unsigned __int128>(acc);
      mpfr_set_ui(out, static_cast<unsigned long>(u >> 64), MPFR_RNDN);
      mpfr_mul_2ui(out, out, 64, MPFR_RNDN);
      mpfr_add_ui(out, out, static_cast<unsigned long>(u), MPFR_RNDN);  // exact for prec >= 128
      if (neg) mpfr_neg(out, out, MPFR_RNDN);
      mpfr_mul_2si(out, out, -2 * kFp16Shift, MPFR_RNDN);
    } else {
      // Each product is exact in double (<= 48 significand bits, exponents within range); IEEE
      // gives inf * 0 = NaN. mpfr_sum rounds the exact sum once.
      for (int c = 0; c < d; ++c) mpfr_set_d(prods[c], qr.q[c] * k[c], MPFR_RNDN);
      mpfr_sum(out, prod_ptrs.data(), static_cast<unsigned long>(d), MPFR_RNDN);
    }
    mpfr_mul_d(out, out, scale, MPFR_RNDN);
    if (kv.q_scale != 1) mpfr_mul_d(out, out, kv.q_scale, MPFR_RNDN);
    if (softcap > 0) {  // +-inf caps to +-softcap; NaN stays NaN
      mpfr_div_d(out, out, softcap, MPFR_RNDN);
      mpfr_tanh(out, out, MPFR_RNDN);
      mpfr_mul_d(out, out, softcap, MPFR_RNDN);
    }
  }

  // Query row t (0-based in its sequence of tq queries over tk keys) of query head `head`.
  void row(const AttentionProblem& pb, const Query& qr, const KvSlice& kv, int32_t t, int32_t tq,
           int32_t head, const uint8_t* mask_row, LseBase base, ExactRow& out) {
    const int32_t tk = kv.tk;
    const auto [first, last] = pb.key_range(t, tq, tk);
    visible.clear();
    for (int64_t j = first; j <= last; ++j)
      if (!mask_row || mask_row[j]) visible.push_back(static_cast<int32_t>(j));
    if (scores.size() < visible.size())
      scores.resize(std::max<size_t>(visible.size(), static_cast<size_t>(tk)), prec);
    const double scale = static_cast<double>(pb.softmax_scale) * kv.k_scale;  // exact: two floats
    const double softcap = static_cast<double>(pb.softcap);
    for (size_t i = 0; i < visible.size(); ++i)
      score(scores[i], pb.dtype, qr, kv, visible[i], scale, softcap);
    mpfr_srcptr row_sink = nullptr;
    if (!pb.sinks.empty()) {
      mpfr_set_d(sink, static_cast<double>(pb.sinks[static_cast<size_t>(head)]), MPFR_RNDN);  // exact
      row_sink = sink;
    }
    const std::vector<double>& v = kv.v;
    const std::vector<int64_t>& vi = kv.v_int;
    const auto& vis = visible;
    const int ddv = dv;
    bool use_fixed = kv.v_fixed_ok;
    for (size_t i = 0; i < visible.size() && use_fixed; ++i) use_fixed = kv.v_finite[visible[i]] != 0;
    ws.run(
        visible.size(), scores.data(), dv,
        [&v, &vis, ddv](size_t i, int c) { return v[static_cast<size_t>(vis[i]) * ddv + c]; }, base, out.o,
        out.lse, out.empty, use_fixed,
        [&vi, &vis, ddv](size_t i, int c) { return vi[static_cast<size_t>(vis[i]) * ddv + c]; }, kv.v_shift,
        row_sink);
    if (visible.empty()) out.empty = true;
  }
};

}  // namespace

ExactRow exact_attention_row(const AttentionProblem& pb, int64_t token, int32_t head, LseBase base) {
  validate(pb);
  const mpfr_prec_t prec = detail::working_prec();
  const SequenceOffsets off = sequence_offsets(pb.seqlens_q, pb.seqlens_k);
  const int64_t total_q = off.q.back();
  if (token < 0 || token >= total_q)
    throw ReferenceError("token " + std::to_string(token) + " outside [0, " + std::to_string(total_q) + ")");
  if (head < 0 || head >= pb.num_heads)
    throw ReferenceError("head " + std::to_string(head) + " outside [0, " + std::to_string(pb.num_heads) +
                         ")");
  size_t s = 0;
  while (off.q[s + 1] <= token) ++s;
  const int32_t t = static_cast<int32_t>(token - off.q[s]);
  const int32_t tq = pb.seqlens_q[s], tk = pb.seqlens_k[s];
  const int32_t kv_head = head / (pb.num_heads / pb.num_kv_heads);
  // Thread-local buffers keep their capacity between calls: a long row then costs no fresh pages.
  thread_local KvSlice kv;
  thread_local Query qr;
  load_kv(pb, s, off.k[s], tk, kv_head, kv);
  load_query(pb, token, head, qr);
  RowEngine eng(prec, pb.head_size, value_head_size(pb));
  const uint8_t* mask_row = pb.mask.empty() ? nullptr : pb.mask.data() + off.mask[s] + int64_t{t} * tk;
  ExactRow out;
  eng.row(pb, qr, kv, t, tq, head, mask_row, base, out);
  return out;
}

std::vector<ExactRow> exact_attention(const AttentionProblem& pb, LseBase base) {
  validate(pb);
  const mpfr_prec_t prec = detail::working_prec();
  const SequenceOffsets off = sequence_offsets(pb.seqlens_q, pb.seqlens_k);
  const int32_t h = pb.num_heads, group = pb.num_heads / pb.num_kv_heads;
  std::vector<ExactRow> out(static_cast<size_t>(off.q.back() * h));
  RowEngine eng(prec, pb.head_size, value_head_size(pb));
  KvSlice kv;
  Query qr;
  for (size_t s = 0; s < pb.seqlens_q.size(); ++s) {
    const int32_t tq = pb.seqlens_q[s], tk = pb.seqlens_k[s];
    if (tq == 0) continue;
    for (int32_t g = 0; g < pb.num_kv_heads; ++g) {
      load_kv(pb, s, off.k[s], tk, g, kv);  // once per (sequence, KV head): shared by the GQA group
      for (int32_t t = 0; t < tq; ++t) {
        const int64_t token = off.q[s] + t;
        const uint8_t* mask_row = pb.mask.empty() ? nullptr : pb.mask.data() + off.mask[s] + int64_t{t} * tk;
        for (int32_t i = g * group; i < (g + 1) * group; ++i) {
          load_query(pb, token, i, qr);
          eng.row(pb, qr, kv, t, tq, i, mask_row, base, out[static_cast<size_t>(token * h + i)]);
        }
      }
    }
  }
  return out;
}

namespace {

ExactState merge_states(const std::vector<const ExactState*>& states, LseBase base, bool plus_inf_is_empty) {
  const mpfr_prec_t prec = detail::working_prec();
  if (states.empty()) throw ReferenceError("exact_merge: no states to merge");
  const size_t d = states[0]->o.size();
  for (const ExactState* s : states)
    if (s->o.size() != d)
      throw ReferenceError("exact_merge: head sizes differ (" + std::to_string(s->o.size()) + " vs " +
                           std::to_string(d) + ")");
  ExactState r{std::vector<Real>(d, real_zero()), real_inf(-1)};
  Mp m(prec), w(prec), l(prec), t(prec);
  MpVec acc(d, prec);
  mpfr_set_inf(m, -1);
  bool any_nan = false, any_plus_inf = false;
  auto is_empty = [&](mpfr_srcptr x) { return mpfr_inf_p(x) && (mpfr_signbit(x) || plus_inf_is_empty); };
  for (const ExactState* s : states) {
    mpfr_srcptr x = s->lse.backend().data();
    if (mpfr_nan_p(x))
      any_nan = true;
    else if (is_empty(x))
      continue;
    else if (mpfr_inf_p(x))
      any_plus_inf = true;
    else if (mpfr_greater_p(x, m))
      mpfr_set(m, x, MPFR_RNDN);
  }
  if (any_nan || any_plus_inf) {
    for (auto& x : r.o) mpfr_set_nan(x.backend().data());
    if (any_nan)
      mpfr_set_nan(r.lse.backend().data());
    else
      mpfr_set_inf(r.lse.backend().data(), 1);
    return r;
  }
  if (mpfr_inf_p(m)) return r;  // all empty: O = 0, LSE = -inf
  mpfr_set_zero(l, 1);
  for (size_t c = 0; c < d; ++c) mpfr_set_zero(acc[c], 1);
  for (const ExactState* s : states) {
    mpfr_srcptr x = s->lse.backend().data();
    if (is_empty(x)) continue;  // weight exactly zero, whatever its O holds
    mpfr_sub(w, x, m, MPFR_RNDN);
    if (base == LseBase::two)
      mpfr_exp2(w, w, MPFR_RNDN);
    else
      mpfr_exp(w, w, MPFR_RNDN);
    mpfr_add(l, l, w, MPFR_RNDN);
    for (size_t c = 0; c < d; ++c) mpfr_fma(acc[c], w, s->o[c].backend().data(), acc[c], MPFR_RNDN);
  }
  for (size_t c = 0; c < d; ++c) mpfr_div(r.o[c].backend().data(), acc[c], l, MPFR_RNDN);
  if (base == LseBase::two)
    mpfr_log2(t, l, MPFR_RNDN);
  else
    mpfr_log(t, l, MPFR_RNDN);
  mpfr_add(r.lse.backend().data(), t, m, MPFR_RNDN);
  return r;
}

}  // namespace

ExactState exact_merge(const std::vector<ExactState>& states, LseBase base, bool plus_inf_is_empty) {
  std::vector<const ExactState*> ptrs;
  for (const auto& s : states) ptrs.push_back(&s);
  return merge_states(ptrs, base, plus_inf_is_empty);
}

ExactState exact_merge(const ExactState& a, const ExactState& b, LseBase base, bool plus_inf_is_empty) {
  return merge_states({&a, &b}, base, plus_inf_is_empty);
}

}  // namespace attncheck::ref
