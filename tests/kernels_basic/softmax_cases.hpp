// Softmax cases shared by the host-twin test and the GPU test: rows of several classes, the
// fp64 check, and the naive overflow band. The launcher under test is passed in.
#pragma once
#include <catch2/catch.hpp>
#include <functional>
#include <string>

#include "kb_support.hpp"
#include "softmax/softmax.h"

namespace kb {

using SoftmaxRun = std::function<void(const ac_softmax_args&, attncheck::kern::SoftmaxVariant, Tensor& y)>;

inline ac_softmax_args softmax_args(const Tensor& x, Tensor& y, int rows, int cols, int64_t stride) {
  ac_softmax_args a{};
  a.dtype = ac_dtype(x.type);
  a.rows = rows;
  a.cols = cols;
  a.x = x.data();
  a.y = y.data();
  a.row_stride = stride;
  return a;
}

// Rows: normal logits (sigma 3), a late outlier (40 at a late column), some -inf entries, one
// all -inf row. Row r has cols entries, stored at r * stride.
inline Tensor softmax_rows(DType t, int rows, int cols, int64_t stride, std::mt19937_64& rng,
                           bool naive_safe_range) {
  Tensor x(t, size_t(rows) * size_t(stride));
  std::normal_distribution<float> n(0.0f, naive_safe_range ? 1.5f : 3.0f);
  std::bernoulli_distribution masked(0.1);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j) {
      float v = n(rng);
      if (masked(rng)) v = -INFINITY;
      if (r == 1) v = -INFINITY;                                        // fully masked row
      if (!naive_safe_range && r == 2 && j == cols * 3 / 4) v = 40.0f;  // late outlier
      x.set(size_t(r) * size_t(stride) + size_t(j), v);
    }
  return x;
}

// Bound per element: kernel_softmax_bound (its derivation is in properties/src/budgets.cpp).
inline void check_softmax_exact(const Tensor& x, const Tensor& y, int rows, int cols, int64_t stride,
                                bool naive, const std::string& what) {
  const double u = unit_roundoff(x.type);
  for (int r = 0; r < rows; ++r) {
    std::vector<double> row(static_cast<size_t>(cols));
    for (int j = 0; j < cols; ++j) row[size_t(j)] = x.get(size_t(r) * size_t(stride) + size_t(j));
    const std::vector<double> want = softmax_exact(row);
    double m = -kInf;
    for (double v : row) m = std::max(m, v);
    for (int j = 0; j < cols; ++j) {
      const double got = y.get(size_t(r) * size_t(stride) + size_t(j)), w = want[size_t(j)];
      if (w == 0) {
        REQUIRE(got == 0);
        continue;
      }
      const double arg = naive ? std::fabs(row[size_t(j)]) + std::fabs(m) : std::fabs(row[size_t(j)] - m);
      const double bound = attncheck::kernel_softmax_bound(u, ulp_at(y.type, w), w, double(cols), arg, naive);
      INFO(what << " row " << r << " col " << j << " x " << row[size_t(j)] << " got " << got << " want "
                << w);
      REQUIRE(std::fabs(got - w) <= bound);
    }
  }
}

// The fp16 overflow band: 11.0859375 is the largest fp16 logit with finite fp16 exp;
// at 11.09375 exp = 65758.9 rounds past 65504 to inf. Naive: finite / NaN; safe, online: finite.
inline void check_naive_overflow_band(const SoftmaxRun& run) {
  using attncheck::kern::SoftmaxVariant;
  for (float top : {11.0859375f, 11.09375f}) {
    const int cols = 300;  // more than one column per thread: the band must survive the fold
    Tensor x(DType::f16, size_t(cols));
    for (int j = 0; j < cols; ++j) x.set(size_t(j), j == 277 ? top : -2.0f);
    std::vector<double> row(static_cast<size_t>(cols));
    for (int j = 0; j < cols; ++j) row[size_t(j)] = x.get(size_t(j));
    const std::vector<double> want = softmax_exact(row);
    for (SoftmaxVariant v : {SoftmaxVariant::naive, SoftmaxVariant::safe, SoftmaxVariant::online}) {
      Tensor y(DType::f16, size_t(cols));
      run(softmax_args(x, y, 1, cols, cols), v, y);
      INFO("top logit " << top << " variant " << int(v));
      const bool overflow = v == SoftmaxVariant::naive && top == 11.09375f;
      if (overflow) {
        REQUIRE(std::isnan(y.get(277)));  // inf / inf
        REQUIRE(y.get(0) == 0.0);         // finite / inf
      } else {
        for (int j = 0; j < cols; ++j) {
          REQUIRE(std::isfinite(y.get(size_t(j))));
          REQUIRE(std::fabs(y.get(size_t(j)) - want[size_t(j)]) <=
                  0.5 * ulp_at(DType::f16, want[size_t(j)]) + 4e-3 * want[size_t(j)]);
        }
      }
    }
  }
}

inline void check_softmax_suite(const SoftmaxRun& run, uint64_t seed) {
  using attncheck::kern::SoftmaxVariant;
  std::mt19937_64 rng(seed);
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (int cols : {1, 7, 256, 257, 1000})
      for (SoftmaxVariant v : {SoftmaxVariant::naive, SoftmaxVariant::safe, SoftmaxVariant::online}) {
        const bool naive = v == SoftmaxVariant::naive;
        const int rows = 4;
        const int64_t stride = cols + 3;
        const Tensor x = softmax_rows(t, rows, cols, stride, rng, naive);
        Tensor y(t, x.size());
        run(softmax_args(x, y, rows, cols, stride), v, y);
        check_softmax_exact(x, y, rows, cols, stride, naive, "variant " + std::to_string(int(v)));
        for (int j = 0; j < cols; ++j) REQUIRE(y.bits(size_t(stride) + size_t(j)) == 0u);  // all -inf row: +0
      }
}

}  // namespace kb
