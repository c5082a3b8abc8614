// Merge cases shared by the host-twin test and the GPU test: a strided layout (padded token and
// head strides, either LSE layout), random states and LSEs of several classes, and the fp64
// check of a result. The launcher under test is passed in (host twin or a CUDA wrapper).
#pragma once
#include <catch2/catch.hpp>
#include <functional>
#include <string>

#include "kb_support.hpp"
#include "merge/merge.h"

namespace kb {

struct MergeCase {
  DType type = DType::f16;
  int tokens = 3, heads = 2, d = 8;
  ac_lse_layout layout = AC_LSE_HEADS_TOKENS;
  int lse_base = 0;
  int pad = 0;  // extra elements per head row and per token, so strides are not the dense ones
  Tensor prefix, suffix, out;
  std::vector<float> p_lse, s_lse, out_lse;
  int64_t stride_head() const { return d + pad; }
  int64_t stride_token() const { return int64_t(heads) * (d + pad) + pad; }
  size_t elements() const { return size_t(tokens) * size_t(stride_token()); }
  int64_t lse_st() const { return layout == AC_LSE_HEADS_TOKENS ? 1 : heads; }
  int64_t lse_sh() const { return layout == AC_LSE_HEADS_TOKENS ? tokens : 1; }
  size_t at(int t, int h, int e) const { return size_t(t * stride_token() + h * stride_head() + e); }
  size_t lse_at(int t, int h) const { return size_t(t * lse_st() + h * lse_sh()); }

  // LSE classes: finite spread, +inf (FA2 empty), -inf, huge finite, equal.
  void fill(std::mt19937_64& rng) {
    prefix = random_tensor(type, elements(), rng);
    suffix = random_tensor(type, elements(), rng);
    out = Tensor(type, elements());
    p_lse.assign(size_t(tokens) * heads, 0.0f);
    s_lse.assign(size_t(tokens) * heads, 0.0f);
    out_lse.assign(size_t(tokens) * heads, 12345.0f);
    std::normal_distribution<float> lse(0.0f, 4.0f);
    std::uniform_int_distribution<int> cls(0, 9);
    for (size_t i = 0; i < p_lse.size(); ++i) {
      for (float* x : {&p_lse[i], &s_lse[i]}) {
        const int c = cls(rng);
        *x = c == 0 ? INFINITY : c == 1 ? -INFINITY : c == 2 ? 80.0f * lse(rng) : lse(rng);
      }
      if (cls(rng) == 0) s_lse[i] = p_lse[i];
    }
  }
  ac_merge_args args(void* o, const void* p, const void* s, float* olse, const float* pl,
                     const float* sl) const {
    ac_merge_args a{};
    a.dtype = ac_dtype(type);
    a.num_tokens = tokens;
    a.num_heads = heads;
    a.head_size = d;
    a.out = o;
    a.prefix_out = p;
    a.suffix_out = s;
    a.out_stride_token = a.prefix_stride_token = a.suffix_stride_token = stride_token();
    a.out_stride_head = a.prefix_stride_head = a.suffix_stride_head = stride_head();
    a.out_lse = olse;
    a.prefix_lse = pl;
    a.suffix_lse = sl;
    a.lse_stride_token = lse_st();
    a.lse_stride_head = lse_sh();
    return a;
  }
  ac_merge_args host_args() {
    return args(out.data(), prefix.data(), suffix.data(), out_lse.data(), p_lse.data(), s_lse.data());
  }

  // Every output element within its bound of the fp64 merge; never NaN; empty rows exactly 0.
  // Bounds: kernel_merge_o_bound, kernel_merge_lse_bound (derived in properties/src/budgets.cpp).
  void check_against_exact(const std::string& what) const {
    for (int t = 0; t < tokens; ++t)
      for (int h = 0; h < heads; ++h) {
        const MergeExact w = merge_exact(p_lse[lse_at(t, h)], s_lse[lse_at(t, h)], lse_base);
        INFO(what << " t=" << t << " h=" << h << " p_lse=" << p_lse[lse_at(t, h)]
                  << " s_lse=" << s_lse[lse_at(t, h)]);
        const double got_lse = out_lse[lse_at(t, h)];
        if (w.empty || w.lse == -kInf) {
          REQUIRE(got_lse == -kInf);
        } else {
          REQUIRE(std::fabs(got_lse - w.lse) <= attncheck::kernel_merge_lse_bound(w.lse));
        }
        for (int e = 0; e < d; ++e) {
          const size_t i = at(t, h, e);
          const double got = out.get(i);
          REQUIRE(!std::isnan(got));
          if (w.empty) {
            REQUIRE(out.bits(i) == 0u);  // +0 exactly
            continue;
          }
          const double p = prefix.get(i), s = suffix.get(i);
          const double want = w.p_weight * p + w.s_weight * s;
          const double scale = w.p_weight * std::fabs(p) + w.s_weight * std::fabs(s);
          const double bound = attncheck::kernel_merge_o_bound(ulp_at(type, want), scale);
          INFO("e=" << e << " got " << got << " want " << want << " bound " << bound);
          REQUIRE(std::fabs(got - want) <= bound);
        }
      }
  }
};

}  // namespace kb
