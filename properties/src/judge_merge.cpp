// Judging a merge output: each O element and LSE of the merge of two attention states against the
// exact merge, in the subject's declared LSE base.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "internal.hpp"

namespace attncheck::detail {

namespace {

// An fp32 value's bits, "0x" and eight hex digits.
std::string fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", u);
  return b;
}

}  // namespace

Judgement judge_merge(const MergeInput& m, const MergeOutput& out, const Conventions& cv, const Budget& b) {
  const AddSeconds timed(thread_time_split().judge);
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
        const double sub_weighted =
            (wa > 0 && wa < tiny ? std::fabs(oa) : 0) + (wb > 0 && wb < tiny ? std::fabs(ob) : 0);
        // An FP8 output is the fp32 merge's value cast (budgets.cpp fp8_output_interval): its budget
        // is the fp32 output's.
        const double allowed = merge_o_allowance(
            b, to_d(ref::ulp_at(fmt(m.fp8_out() ? AC_DTYPE_F32 : m.dtype), Real(S))), S, Mabs, sub_weighted);
        e.inputs = in_lse + " prefix_out=" + hexfloat(m.dtype, m.prefix_out[size_t(row * D + c)]) +
                   " suffix_out=" + hexfloat(m.dtype, m.suffix_out[size_t(row * D + c)]);
        if (m.fp8_out()) {
          const double x = to_d(e.exact);
          Fp8Interval iv;
          if (info.visible != 1 || nan_in) {
            iv = fp8_output_interval(x, allowed, double(m.output_scale));
          } else {
            // One state empty: a merge returns the other's O itself (weights 1 and 0, exact in fp32),
            // so the only rounding before the cast is the division's: the quantiser's two quotients
            // (judge_quantize.cpp), the real one and the fp32 one, and nothing between ties.
            const double o = ea > -INFINITY ? oa : ob, s = double(m.output_scale);
            const double q_real = o / s, q_fp32 = double(float(o) / float(s));
            iv = {std::min(q_real, q_fp32), std::max(q_real, q_fp32)};
          }
          measure_fp8_output(e, m.out_dtype, out.out[size_t(row * D + c)], iv, double(m.output_scale),
                             ref::Fp8Overflow::saturate);
        } else {
          measure_bits(e, m.dtype, out.out[size_t(row * D + c)], S, allowed);
        }
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
  drop_excused_rows(J, m);
  return J;
}

}  // namespace attncheck::detail
