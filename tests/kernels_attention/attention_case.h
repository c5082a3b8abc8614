// Test support for the attention kernels (fused, split-KV, cascade): random cases, an fp64
// attention written here (independent of the kernels: plain loops, double accumulation, no
// tiling, no online softmax) and an error bound derived from where the kernels round.
//
// The error bounds (kernel_attention_o_bound and friends) and their derivation are in
// properties/src/budgets.cpp, with every other budget.
// Empty rows (no visible key): O must be exactly 0 and LSE the subject's sentinel.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attncheck/attention_args.hpp"
#include "attncheck/budgets.hpp"
#include "attncheck/plugin_abi.h"
#include "common/storage.h"

namespace attncheck::test {

using kern::DType;

struct AttnCase {
  DType dtype = DType::f16;
  int heads = 1, kv_heads = 1, head_size = 64;
  int head_size_v = 0;  // V's and O's head size (AC_VAR_HEAD_SIZE_V); 0: head_size
  int dv() const { return head_size_v > 0 ? head_size_v : head_size; }
  std::vector<int32_t> seqlens_q, seqlens_k;
  bool causal = false;
  bool with_mask = false;
  float scale = 0.125f;
  std::vector<uint16_t> q, k, v;
  std::vector<uint8_t> mask;
  std::vector<int32_t> cu_q, cu_k;
  std::vector<int64_t> cu_mask;
  int64_t total_q() const { return cu_q.back(); }
  int64_t total_k() const { return cu_k.back(); }
  std::string describe() const {
    std::ostringstream s;
    s << (dtype == DType::f16 ? "fp16" : "bf16") << " h=" << heads << " hkv=" << kv_heads
      << " d=" << head_size << (dv() != head_size ? " dv=" + std::to_string(dv()) : "")
      << " causal=" << causal << " mask=" << with_mask << " seqs=[";
    for (size_t i = 0; i < seqlens_q.size(); ++i) s << seqlens_q[i] << "x" << seqlens_k[i] << " ";
    s << "]";
    return s.str();
  }
};

inline uint16_t round_to_input(DType t, float x) { return uint16_t(kern::store_from_float(t, x)); }

// Inputs ~ N(0, spread^2) rounded to the input type; mask ~ Bernoulli(keep) plus, when with_mask,
// every fourth row of each sequence fully masked (the empty-row case).
inline AttnCase make_case(uint64_t seed, DType dt, int heads, int kv_heads, int d, std::vector<int32_t> sq,
                          std::vector<int32_t> sk, bool causal, bool with_mask, float spread = 1.0f,
                          float keep = 0.7f) {
  AttnCase c;
  c.dtype = dt;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_size = d;
  c.seqlens_q = std::move(sq);
  c.seqlens_k = std::move(sk);
  c.causal = causal;
  c.with_mask = with_mask;
  c.scale = float(1.0 / std::sqrt(double(d)));
  c.cu_q = {0};
  c.cu_k = {0};
  c.cu_mask = {0};
  for (size_t i = 0; i < c.seqlens_q.size(); ++i) {
    c.cu_q.push_back(c.cu_q.back() + c.seqlens_q[i]);
    c.cu_k.push_back(c.cu_k.back() + c.seqlens_k[i]);
    c.cu_mask.push_back(c.cu_mask.back() + int64_t(c.seqlens_q[i]) * c.seqlens_k[i]);
  }
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  auto fill = [&](std::vector<uint16_t>& x, int64_t n) {
    x.resize(size_t(n));
    for (auto& e : x) e = round_to_input(dt, normal(rng));
  };
  fill(c.q, c.total_q() * heads * d);
  fill(c.k, c.total_k() * kv_heads * d);
  fill(c.v, c.total_k() * kv_heads * d);
  if (with_mask) {
    std::bernoulli_distribution b(keep);
    c.mask.resize(size_t(c.cu_mask.back()));
    for (size_t s = 0; s < c.seqlens_q.size(); ++s)
      for (int r = 0; r < c.seqlens_q[s]; ++r)
        for (int j = 0; j < c.seqlens_k[s]; ++j)
          c.mask[size_t(c.cu_mask[s] + int64_t(r) * c.seqlens_k[s] + j)] = (r % 4 == 3) ? 0 : uint8_t(b(rng));
  }
  return c;
}

// Sequence 0 of `batch` as a batch of its own: its queries, keys and values (the first rows of each
// tensor), no mask.
inline AttnCase first_alone(const AttnCase& batch) {
  AttnCase c = make_case(1, batch.dtype, batch.heads, batch.kv_heads, batch.head_size, {batch.seqlens_q[0]},
                         {batch.seqlens_k[0]}, batch.causal, false);
  c.scale = batch.scale;
  std::copy_n(batch.q.begin(), c.q.size(), c.q.begin());
  std::copy_n(batch.k.begin(), c.k.size(), c.k.begin());
  std::copy_n(batch.v.begin(), c.v.size(), c.v.begin());
  return c;
}

// Sequence 0's rows of a case's outputs: O [tokens, heads, d] and LSE [heads, tokens].
struct FirstRows {
  std::vector<uint16_t> out;
  std::vector<float> lse;
  bool operator==(const FirstRows& o) const {
    return out == o.out && lse.size() == o.lse.size() &&
           std::memcmp(lse.data(), o.lse.data(), lse.size() * 4) == 0;
  }
};
inline FirstRows first_rows(const AttnCase& c, const std::vector<uint16_t>& out,
                            const std::vector<float>& lse) {
  FirstRows r;
  const int64_t tq = c.seqlens_q[0];
  r.out.assign(out.begin(), out.begin() + tq * c.heads * c.head_size);
  for (int h = 0; h < c.heads; ++h)
    for (int64_t t = 0; t < tq; ++t) r.lse.push_back(lse[size_t(h * c.total_q() + t)]);
  return r;
}

// bf16, one query, two keys of d = 64 (scale 1/8): key 0 has logit 0 and V = 0, key 1 has base-2
// logit -720 / 8 log2 e = -129.84, so p_1 = 2^-129.84 = 1.3e-39, below 2^-126 but a bf16 value
// (bf16 reaches 2^-133), and V = 2^126 in every column. Exact: O = p_1 2^126 / (1 + p_1) =
// 2^-3.84 = 0.070 in every column. A kernel that flushes p_1 writes 0, which only the flush term of
// kernel_subnormal_p_error (2 keys x 2^-126 x 2^126 = 2) allows: the rest of the bound is about 1e-3.
inline AttnCase flushed_weight_case() {
  AttnCase c = make_case(1, DType::bf16, 1, 1, 64, {1}, {2}, false, false);
  c.scale = 0.125f;
  std::fill(c.q.begin(), c.q.end(), round_to_input(c.dtype, 0.0f));
  std::fill(c.k.begin(), c.k.end(), round_to_input(c.dtype, 0.0f));
  std::fill(c.v.begin(), c.v.begin() + 64, round_to_input(c.dtype, 0.0f));
  std::fill(c.v.begin() + 64, c.v.end(), round_to_input(c.dtype, 0x1p126f));
  c.q[0] = round_to_input(c.dtype, 1.0f);
  c.k[64] = round_to_input(c.dtype, -720.0f);
  return c;
}

// Where a case's tensors and offsets are for a call: the host vectors or their device copies.
struct CasePlaces {
  const void *q, *k, *v;
  void* out;
  float* lse;
  const int32_t *cu_q, *cu_k;
  const uint8_t* mask;
  const int64_t* cu_mask;
};
// The ABI arguments of a case at those places (the host offsets are always the case's own).
inline ac_attention_args case_args(const AttnCase& c, const CasePlaces& at, int tiling) {
  ac_attention_args a =
      AttentionArgs(ac_dtype(c.dtype), c.heads, c.kv_heads, c.head_size)
          .sequences(int32_t(c.seqlens_q.size()), at.cu_q, at.cu_k, c.cu_q.data(), c.cu_k.data())
          .tensors(at.q, at.k, at.v, at.out, at.lse)
          .scale(c.scale)
          .causal(c.causal)
          .mask(c.with_mask ? at.mask : nullptr, c.with_mask ? at.cu_mask : nullptr,
                c.with_mask ? c.cu_mask.data() : nullptr)
          .tiling(tiling)
          .splits(1, AC_FOLD_LEFT);
  a.head_size_v = c.dv();
  return a;
}
// The same with every tensor in host memory (the twins' view).
inline ac_attention_args host_args(const AttnCase& c, void* out, float* lse, int tiling) {
  return case_args(c,
                   {c.q.data(), c.k.data(), c.v.data(), out, lse, c.cu_q.data(), c.cu_k.data(), c.mask.data(),
                    c.cu_mask.data()},
                   tiling);
}

// fp64 attention of one (token, head): O, natural LSE and the error bounds above.
struct RowRef {
  std::vector<double> o, o_bound, abs_weighted;  // abs_weighted: A = sum_j y_j |v_j| per element
  double lse = -INFINITY, lse_bound = 0;
  bool empty = true;
};

inline double in_value(DType t, uint16_t b) { return double(kern::load_as_float(t, b)); }

// The fp64 dot product of query row `tok` (head `head`) with key row `kt` (KV head `kvh`), and in
// `abs_dot` the sum of the products' magnitudes (the logit's fp32 error scales with it).
inline double case_dot(const AttnCase& c, int64_t tok, int head, int64_t kt, int kvh, double& abs_dot) {
  const int d = c.head_size;
  double dot = 0;
  abs_dot = 0;
  for (int i = 0; i < d; ++i) {
    const double qi = in_value(c.dtype, c.q[size_t((tok * c.heads + head) * d + i)]);
    const double ki = in_value(c.dtype, c.k[size_t((kt * c.kv_heads + kvh) * d + i)]);
    dot += qi * ki;
    abs_dot += std::fabs(qi * ki);
  }
  return dot;
}

// p_flushed: the kernel flushes a weight below 2^-126 to 0 (fused-hopper), which its bound allows.
inline RowRef exact_row(const AttnCase& c, int seq, int row, int head, bool p_flushed = false) {
  const int d = c.head_size, kvh = head / (c.heads / c.kv_heads);
  const int tq = c.seqlens_q[size_t(seq)], tk = c.seqlens_k[size_t(seq)];
  const int64_t tok = c.cu_q[size_t(seq)] + row;
  const double u = c.dtype == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  std::vector<double> x, absdot;
  std::vector<int> keys;
  for (int j = 0; j < tk; ++j) {
    if (c.causal && j > row + tk - tq) continue;
    if (c.with_mask && !c.mask[size_t(c.cu_mask[size_t(seq)] + int64_t(row) * tk + j)]) continue;
    double ad = 0;
    const double dot = case_dot(c, tok, head, c.cu_k[size_t(seq)] + j, kvh, ad);
    keys.push_back(j);
    x.push_back(dot * double(c.scale));
    absdot.push_back(ad * std::fabs(double(c.scale)));
  }
  RowRef r;
  r.o.assign(size_t(d), 0.0);
  r.o_bound.assign(size_t(d), 0.0);
  r.abs_weighted.assign(size_t(d), 0.0);
  if (keys.empty()) return r;
  r.empty = false;
  const double m = *std::max_element(x.begin(), x.end());
  double l = 0, max_logit_err = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    l += std::exp(x[j] - m);
    max_logit_err = std::max(max_logit_err, attncheck::kernel_logit_error(double(d), absdot[j]));
  }
  r.lse = m + std::log(l);
  std::vector<double> a(size_t(d), 0.0);
  double vmax = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    const double y = std::exp(x[j] - m) / l;
    const int64_t kt = c.cu_k[size_t(seq)] + keys[j];
    for (int i = 0; i < d; ++i) {
      const double vi = in_value(c.dtype, c.v[size_t((kt * c.kv_heads + kvh) * d + i)]);
      r.o[size_t(i)] += y * vi;
      a[size_t(i)] += y * std::fabs(vi);
      vmax = std::max(vmax, std::fabs(vi));
    }
  }
  const double sub =
      attncheck::kernel_subnormal_p_error(c.dtype == DType::f16, p_flushed, double(tk), vmax, l);
  for (int i = 0; i < d; ++i)
    r.o_bound[size_t(i)] =
        attncheck::kernel_attention_o_bound(u, a[size_t(i)], r.o[size_t(i)], max_logit_err, double(tk), sub);
  r.abs_weighted = a;
  r.lse_bound = attncheck::kernel_attention_lse_bound(max_logit_err, double(tk), r.lse);
  return r;
}

// The rows (token, head) the GPU tests judge at the Llama-3-8B layer shape (8192 tokens, 32 heads): 16
// spread by a multiplicative hash, the last and the first.
inline std::vector<std::pair<int64_t, int>> seed_shape_rows() {
  std::vector<std::pair<int64_t, int>> rows;
  for (int i = 0; i < 16; ++i) rows.push_back({int64_t((i * 2654435761u) % 8192u), (i * 7) % 32});
  rows.push_back({8191, 31});
  rows.push_back({0, 0});
  return rows;
}

// Compare a subject's output (O bits in the input type, LSE in [heads, tokens] layout) with the
// fp64 attention; returns "" or the first few mismatches, with enough to reproduce them.
struct Conventions {
  int lse_base = 0;         // 0 natural, 2 base 2
  int empty_lse_sign = -1;  // sentinel of an empty row
  // Extra roundings of O to the input type (cascade: the partials are stored before the merge);
  // see kernel_extra_o_rounding_bound.
  int extra_o_roundings = 0;
  // p below 2^-126 flushed to 0 (fused-hopper's exp2); see kernel_subnormal_p_error.
  bool p_flushed = false;
};
// fused-hopper's: the defaults, with its exp2's flushed weights (hopper_kernel.cuh).
inline const Conventions kHopperConv{0, -1, 0, true};
inline std::string compare_with_exact(const AttnCase& c, const std::vector<uint16_t>& out,
                                      const std::vector<float>* lse, Conventions conv,
                                      const std::vector<std::pair<int64_t, int>>* only_rows = nullptr) {
  std::ostringstream msg;
  int failures = 0;
  const int d = c.head_size;
  const int64_t total_q = c.total_q();
  auto check_row = [&](int seq, int row, int head) {
    const RowRef r = exact_row(c, seq, row, head, conv.p_flushed);
    const int64_t tok = c.cu_q[size_t(seq)] + row;
    for (int i = 0; i < d && failures < 8; ++i) {
      const double got = double(kern::load_as_float(c.dtype, out[size_t((tok * c.heads + head) * d + i)]));
      const double u = c.dtype == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      const double bound =
          r.o_bound[size_t(i)] + attncheck::kernel_extra_o_rounding_bound(
                                     conv.extra_o_roundings, u, r.abs_weighted[size_t(i)], r.o[size_t(i)]);
      const bool ok = r.empty ? got == 0.0 : std::fabs(got - r.o[size_t(i)]) <= bound;
      if (!ok) {
        ++failures;
        msg << "O[tok " << tok << ", head " << head << ", " << i << "] = " << got << " exact "
            << r.o[size_t(i)] << " bound " << bound << (r.empty ? " (empty row)" : "") << "\n";
      }
    }
    if (lse && failures < 8) {
      const double got = double((*lse)[size_t(int64_t(head) * total_q + tok)]);
      bool ok;
      if (r.empty) {
        ok = std::isinf(got) && (got > 0) == (conv.empty_lse_sign > 0);
      } else {
        const double want = conv.lse_base == 2 ? r.lse / std::log(2.0) : r.lse;
        const double bound = conv.lse_base == 2 ? r.lse_bound / std::log(2.0) : r.lse_bound;
        ok = std::fabs(got - want) <= bound;
      }
      if (!ok) {
        ++failures;
        msg << "LSE[head " << head << ", tok " << tok << "] = " << got << " exact(natural) " << r.lse
            << " bound " << r.lse_bound << (r.empty ? " (empty row)" : "") << "\n";
      }
    }
  };
  if (only_rows) {
    for (auto [tok, head] : *only_rows) {
      int seq = 0;
      while (c.cu_q[size_t(seq) + 1] <= tok) ++seq;
      check_row(seq, int(tok - c.cu_q[size_t(seq)]), head);
    }
  } else {
    for (size_t s = 0; s < c.seqlens_q.size(); ++s)
      for (int row = 0; row < c.seqlens_q[s]; ++row)
        for (int h = 0; h < c.heads; ++h) check_row(int(s), row, h);
  }
  if (failures) return c.describe() + "\n" + msg.str();
  return "";
}

}  // namespace attncheck::test
