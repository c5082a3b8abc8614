// Test support for the basic kernels (merge, softmax, textbook attention): host tensors as raw
// bytes in a storage type, random inputs that are exactly representable in that type, and
// independent fp64 oracles written here from the definitions (never from the kernels' code):
//   merge:     out = (e^p_lse * p + e^s_lse * s) / (e^p_lse + e^s_lse), +inf read as -inf
//   softmax:   y = e^(x - max) / sum e^(x - max)
//   attention: O = softmax(scale * q K^T over visible keys) V, LSE = log sum e^s
// Error bounds are derived per case from where the kernel rounds (stated beside each bound).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attncheck/budgets.hpp"
#include "common/storage.h"

namespace kb {

using attncheck::kern::DType;

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Unit roundoff of each storage format (half an ulp at 1).
inline double unit_roundoff(DType t) {
  return t == DType::f32   ? std::ldexp(1.0, -24)
         : t == DType::f16 ? std::ldexp(1.0, -11)
                           : std::ldexp(1.0, -8);
}
// Spacing of the format at |x| (subnormal spacing below the normal range).
inline double ulp_at(DType t, double x) {
  const int p = t == DType::f32 ? 24 : t == DType::f16 ? 11 : 8;
  const int emin = t == DType::f32 ? -126 : t == DType::f16 ? -14 : -126;
  x = std::fabs(x);
  int e = x == 0 ? emin : std::ilogb(x);
  if (e < emin) e = emin;
  return std::ldexp(1.0, e - (p - 1));
}

// A host tensor in one storage type.
struct Tensor {
  DType type = DType::f32;
  std::vector<unsigned char> bytes;
  Tensor() = default;
  Tensor(DType t, size_t n) : type(t), bytes(n * size_t(attncheck::kern::dtype_size(t)), 0) {}
  size_t size() const { return bytes.size() / size_t(attncheck::kern::dtype_size(type)); }
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  double get(size_t i) const {
    if (type == DType::f32) {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      return f;
    }
    uint16_t b;
    std::memcpy(&b, bytes.data() + 2 * i, 2);
    return attncheck::kern::load_as_float(type, b);
  }
  uint32_t bits(size_t i) const {
    if (type == DType::f32) {
      uint32_t u;
      std::memcpy(&u, bytes.data() + 4 * i, 4);
      return u;
    }
    uint16_t b;
    std::memcpy(&b, bytes.data() + 2 * i, 2);
    return b;
  }
  // Stores v rounded to the type (the value must be a float already; tests feed representable data).
  void set(size_t i, float v) {
    const uint32_t b = attncheck::kern::store_from_float(type, v);
    if (type == DType::f32)
      std::memcpy(bytes.data() + 4 * i, &b, 4);
    else {
      const uint16_t h = uint16_t(b);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
};

inline Tensor random_tensor(DType t, size_t n, std::mt19937_64& rng, double sigma = 1.0) {
  std::normal_distribution<double> dist(0.0, sigma);
  Tensor x(t, n);
  for (size_t i = 0; i < n; ++i) x.set(i, float(dist(rng)));
  return x;
}

// ---- merge oracle ------------------------------------------------------------------------
struct MergeExact {
  double p_weight, s_weight, lse;  // exact mixing weights (sum 1) and merged LSE, natural or base 2
  bool empty;
};
inline MergeExact merge_exact(double p_lse, double s_lse, int base) {
  if (p_lse == kInf) p_lse = -kInf;
  if (s_lse == kInf) s_lse = -kInf;
  if (p_lse == -kInf && s_lse == -kInf) return {0, 0, -kInf, true};
  const double m = std::max(p_lse, s_lse);
  auto ex = [&](double x) { return base == 2 ? std::exp2(x) : std::exp(x); };
  const double pe = ex(p_lse - m), se = ex(s_lse - m), sum = pe + se;
  return {pe / sum, se / sum, m + (base == 2 ? std::log2(sum) : std::log(sum)), false};
}

// ---- softmax oracle ----------------------------------------------------------------------
// Exact softmax of a row (fp64; the row's values are exact in fp64). All -inf: zeros, LSE -inf.
inline std::vector<double> softmax_exact(const std::vector<double>& x, double* lse = nullptr) {
  double m = -kInf;
  for (double v : x) m = std::max(m, v);
  std::vector<double> y(x.size(), 0.0);
  if (m == -kInf) {
    if (lse) *lse = -kInf;
    return y;
  }
  double sum = 0;
  for (double v : x) sum += std::exp(v - m);
  for (size_t j = 0; j < x.size(); ++j) y[j] = std::exp(x[j] - m) / sum;
  if (lse) *lse = m + std::log(sum);
  return y;
}

// ---- attention oracle --------------------------------------------------------------------
struct AttnCase {
  DType type = DType::f16;
  int heads = 1, kv_heads = 1, d = 8;
  std::vector<int32_t> seq_q, seq_k;
  bool causal = false;
  bool use_mask = false;
  float scale = 0.0f;  // 0: 1/sqrt(d)
  // filled by build()
  std::vector<int32_t> cu_q, cu_k;
  std::vector<int64_t> cu_mask;
  std::vector<uint8_t> mask;
  Tensor q, k, v;
  int total_q = 0, total_k = 0;

  void build(std::mt19937_64& rng, double sigma = 1.0) {
    if (scale == 0.0f) scale = float(1.0 / std::sqrt(double(d)));
    cu_q = {0};
    cu_k = {0};
    cu_mask = {0};
    for (size_t s = 0; s < seq_q.size(); ++s) {
      cu_q.push_back(cu_q.back() + seq_q[s]);
      cu_k.push_back(cu_k.back() + seq_k[s]);
      cu_mask.push_back(cu_mask.back() + int64_t(seq_q[s]) * seq_k[s]);
    }
    total_q = cu_q.back();
    total_k = cu_k.back();
    q = random_tensor(type, size_t(total_q) * heads * d, rng, sigma);
    k = random_tensor(type, size_t(total_k) * kv_heads * d, rng, sigma);
    v = random_tensor(type, size_t(total_k) * kv_heads * d, rng, 1.0);
    mask.assign(size_t(cu_mask.back()), 1);
    if (use_mask) {
      std::bernoulli_distribution visible(0.7);
      for (auto& b : mask) b = visible(rng) ? 1 : 0;
      // one fully masked row in the first non-empty sequence: the empty-row convention
      for (size_t s = 0; s < seq_q.size(); ++s)
        if (seq_q[s] > 0 && seq_k[s] > 0) {
          for (int j = 0; j < seq_k[s]; ++j) mask[size_t(cu_mask[s]) + size_t(j)] = 0;
          break;
        }
    }
  }
  bool visible(size_t s, int i, int j) const {
    const int tq = seq_q[s], tk = seq_k[s];
    if (causal && j > i + tk - tq) return false;
    if (use_mask && !mask[size_t(cu_mask[s]) + size_t(i) * size_t(tk) + size_t(j)]) return false;
    return true;
  }
  // Exact O (fp64 of the stored inputs), LSE, the fp64 scores (for bounds) per (token, head).
  struct Row {
    std::vector<double> o;
    double lse;
    double sum_p_abs_v_max;  // max over c of sum_j p_j |v_jc|: scale of the P-rounding error
    double max_abs_s;
    int keys;
  };
  std::vector<Row> exact() const {
    std::vector<Row> rows(size_t(total_q) * heads);
    const int group = heads / kv_heads;
    for (size_t s = 0; s < seq_q.size(); ++s)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < seq_q[s]; ++i) {
          const int tk = seq_k[s], kvh = h / group;
          std::vector<double> x(size_t(tk), -kInf);
          double max_abs_s = 0;
          for (int j = 0; j < tk; ++j) {
            if (!visible(s, i, j)) continue;
            double dot = 0;
            for (int c = 0; c < d; ++c)
              dot += q.get((size_t(cu_q[s] + i) * heads + h) * d + c) *
                     k.get((size_t(cu_k[s] + j) * kv_heads + kvh) * d + c);
            x[size_t(j)] = double(scale) * dot;
            max_abs_s = std::max(max_abs_s, std::fabs(x[size_t(j)]));
          }
          Row r;
          const std::vector<double> p = softmax_exact(x, &r.lse);
          r.o.assign(size_t(d), 0.0);
          r.sum_p_abs_v_max = 0;
          r.keys = tk;
          r.max_abs_s = max_abs_s;
          for (int c = 0; c < d; ++c) {
            double acc = 0, acc_abs = 0;
            for (int j = 0; j < tk; ++j) {
              const double vv = v.get((size_t(cu_k[s] + j) * kv_heads + kvh) * d + c);
              acc += p[size_t(j)] * vv;
              acc_abs += p[size_t(j)] * std::fabs(vv);
            }
            r.o[size_t(c)] = acc;
            r.sum_p_abs_v_max = std::max(r.sum_p_abs_v_max, acc_abs);
          }
          rows[size_t(cu_q[s] + i) * heads + h] = r;
        }
    return rows;
  }
  size_t expected_intermediate_bytes(int score_bytes, int p_bytes) const {
    size_t total = 0;
    for (size_t s = 0; s < seq_q.size(); ++s)
      total += size_t(heads) * size_t(seq_q[s]) * size_t(seq_k[s]) * size_t(score_bytes + p_bytes);
    return total;
  }
};

}  // namespace kb
