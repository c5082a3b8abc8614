// Judging a softmax output: each element against the exact softmax of its row, with the rows a
// declared naive-exp hazard makes unpredictable flagged.
#include <algorithm>
#include <cmath>

#include "internal.hpp"

namespace attncheck::detail {

Judgement judge_softmax(const SoftmaxInput& s, const SoftmaxOutput& out, const Conventions& cv,
                        const Budget& b) {
  const AddSeconds timed(thread_time_split().judge);
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

}  // namespace attncheck::detail
