// Shared by the mutant tests: builds plugin-ABI arguments for tiny hand-made inputs and calls a
// registered subject (mutant or correct) by name through its ac_subject entry, so a test exercises
// exactly what the harness would. Host memory only (host twins); the GPU tests stage their own.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/attention_args.hpp"
#include "attncheck/plugin_abi.h"
#include "common/registry.h"
#include "common/storage.h"

namespace mt {

inline const ac_subject& subject(const std::string& name, bool mutant) {
  static std::vector<ac_subject> mutants, builtins;
  if (mutants.empty()) attncheck::kern::append_mutant_subjects(mutants, false);
  if (builtins.empty()) builtins = attncheck::kern::builtin_subjects(false);
  for (const ac_subject& s : mutant ? mutants : builtins)
    if (name == s.name) return s;
  throw std::runtime_error("no subject " + name);
}

inline uint16_t h(float f) { return attncheck::kern::float_to_f16(f); }
inline float f(uint16_t b) { return attncheck::kern::f16_to_float(b); }

// One merge call: num_tokens = 1, num_heads = 1, head_size = n, LSE [heads, tokens].
struct MergeRun {
  std::vector<float> out;  // decoded to float
  float out_lse = 0;
};
inline MergeRun run_merge(const ac_subject& s, ac_dtype dt, const std::vector<float>& p, float p_lse,
                          const std::vector<float>& sfx, float s_lse) {
  using namespace attncheck::kern;
  const int n = int(p.size());
  const DType t = DType(dt);
  const size_t esz = size_t(dtype_size(t));
  std::vector<unsigned char> pb(n * esz), sb(n * esz), ob(n * esz);
  for (int i = 0; i < n; ++i) {
    const uint32_t a = store_from_float(t, p[size_t(i)]), b = store_from_float(t, sfx[size_t(i)]);
    std::memcpy(&pb[size_t(i) * esz], &a, esz);  // little endian: the low bytes hold fp16/bf16
    std::memcpy(&sb[size_t(i) * esz], &b, esz);
  }
  float pl = p_lse, sl = s_lse, ol = 0;
  ac_merge_args a{};
  a.dtype = dt;
  a.num_tokens = 1;
  a.num_heads = 1;
  a.head_size = n;
  a.out = ob.data();
  a.out_stride_token = a.out_stride_head = n;
  a.out_lse = &ol;
  a.prefix_out = pb.data();
  a.prefix_stride_token = a.prefix_stride_head = n;
  a.prefix_lse = &pl;
  a.suffix_out = sb.data();
  a.suffix_stride_token = a.suffix_stride_head = n;
  a.suffix_lse = &sl;
  a.lse_stride_token = 1;
  a.lse_stride_head = 1;
  char err[256] = {};
  if (s.merge(s.self, &a, err, sizeof err) != AC_OK) throw std::runtime_error(err);
  MergeRun r;
  for (int i = 0; i < n; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &ob[size_t(i) * esz], esz);
    r.out.push_back(load_as_float(t, bits));
  }
  r.out_lse = ol;
  return r;
}

// One softmax row.
inline std::vector<float> run_softmax(const ac_subject& s, ac_dtype dt, const std::vector<float>& x) {
  using namespace attncheck::kern;
  const int n = int(x.size());
  const DType t = DType(dt);
  const size_t esz = size_t(dtype_size(t));
  std::vector<unsigned char> xb(n * esz), yb(n * esz);
  for (int i = 0; i < n; ++i) {
    const uint32_t a = store_from_float(t, x[size_t(i)]);
    std::memcpy(&xb[size_t(i) * esz], &a, esz);
  }
  ac_softmax_args a{};
  a.dtype = dt;
  a.rows = 1;
  a.cols = n;
  a.x = xb.data();
  a.y = yb.data();
  a.row_stride = n;
  char err[256] = {};
  if (s.softmax(s.self, &a, err, sizeof err) != AC_OK) throw std::runtime_error(err);
  std::vector<float> y;
  for (int i = 0; i < n; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &yb[size_t(i) * esz], esz);
    y.push_back(load_as_float(t, bits));
  }
  return y;
}

// One fp16 attention sequence: Q [tq, h, d], K [tk, hkv, d], V [tk, hkv, dv] (dv = d unless
// set_head_size_v), softmax scale 1, tiling 0 unless set.
// Logits are steered exactly: q rows are one-hot on coordinate 0 (q = 1), so logit(t, j) = k_j[0].
struct Attention {
  int h = 1, hkv = 1, d = 64, dv = 64, tq = 1, tk = 1;
  bool causal = false;
  std::vector<uint8_t> mask;  // empty, or [tq, tk]
  int num_splits = 1, tiling = 0;
  float scale = 1.0f;
  std::vector<uint16_t> q, k, v;
  std::vector<uint16_t> out;
  std::vector<float> lse;  // [h, tq]
  // The variants (plugin_abi.h AC_VAR_*): neutral unless a test sets them; page() pages K / V.
  float softcap = 0.0f;
  int window_left = -1, window_right = -1;
  std::vector<float> sinks;  // empty, or one per query head
  int page_size = 0, num_pages = 0, max_blocks = 0;
  std::vector<int32_t> table;
  std::vector<uint16_t> k_pool, v_pool;
  // An FP8 KV cache (plugin_abi.h AC_FP8_*): kv_dtype AC_DTYPE_E4M3 / AC_DTYPE_E5M2 reads k8 and
  // v8 (codes, laid out as k and v) times k_descale / v_descale (one value, or one per KV head).
  ac_dtype kv_dtype = AC_DTYPE_F16;
  std::vector<uint8_t> k8, v8;
  std::vector<float> k_descale, v_descale;
  // Q in FP8 (AC_FP8_Q): a non-empty q_descale reads q8 (codes laid out as q) instead of q.
  std::vector<uint8_t> q8;
  std::vector<float> q_descale;
  void set_fp8(ac_dtype format, uint8_t k_code, uint8_t v_code) {
    kv_dtype = format;
    k8.assign(k.size(), k_code);
    v8.assign(v.size(), v_code);
  }

  Attention(int heads, int kv_heads, int queries, int keys) : h(heads), hkv(kv_heads), tq(queries), tk(keys) {
    q.assign(size_t(tq) * h * d, h0());
    k.assign(size_t(tk) * hkv * d, h0());
    v.assign(size_t(tk) * hkv * dv, h0());
    for (int t = 0; t < tq; ++t)
      for (int i = 0; i < h; ++i) q[(size_t(t) * h + i) * d] = mt::h(1.0f);
  }
  static uint16_t h0() { return 0; }
  // V's own head size (AC_VAR_HEAD_SIZE_V): V becomes [tk, hkv, n] zeros, O [tq, h, n].
  void set_head_size_v(int n) {
    dv = n;
    v.assign(size_t(tk) * hkv * dv, h0());
  }
  void set_logit(int key, int kv_head, float logit) { k[(size_t(key) * hkv + kv_head) * d] = mt::h(logit); }
  void set_value(int key, int kv_head, float value) {
    for (int c = 0; c < dv; ++c) v[(size_t(key) * hkv + kv_head) * dv + c] = mt::h(value);
  }
  // K and V in pages of p keys: logical block b in pool page pages[b]; every other slot of the
  // pool_pages pages holds NaN, and table entries past the last block name page `poison`.
  void page(int p, const std::vector<int32_t>& pages, int pool_pages, int blocks, int32_t poison) {
    page_size = p;
    num_pages = pool_pages;
    max_blocks = blocks;
    table.assign(size_t(blocks), poison);
    const size_t row = size_t(hkv) * d, vrow = size_t(hkv) * dv;
    k_pool.assign(size_t(pool_pages) * p * row, 0x7e00);
    v_pool.assign(size_t(pool_pages) * p * vrow, 0x7e00);
    for (int j = 0; j < tk; ++j) {
      table[size_t(j / p)] = pages[size_t(j / p)];
      const size_t slot = size_t(pages[size_t(j / p)]) * p + size_t(j % p);
      std::copy_n(k.begin() + ptrdiff_t(size_t(j) * row), row, k_pool.begin() + ptrdiff_t(slot * row));
      std::copy_n(v.begin() + ptrdiff_t(size_t(j) * vrow), vrow, v_pool.begin() + ptrdiff_t(slot * vrow));
    }
  }
  float o(int t, int head, int c = 0) const { return mt::f(out[(size_t(t) * h + head) * dv + c]); }
  float lse_of(int t, int head) const { return lse[size_t(head) * tq + t]; }

  void run(const ac_subject& s) {
    out.assign(size_t(tq) * h * dv, 0x7e00);  // NaN: an element never written shows
    lse.assign(size_t(h) * tq, 12345.0f);
    int32_t cu_q[2] = {0, tq}, cu_k[2] = {0, tk};
    int64_t cu_m[2] = {0, int64_t(tq) * tk};
    const bool masked = !mask.empty();
    const bool paged = page_size > 0;
    const bool fp8 = kv_dtype != AC_DTYPE_F16;
    const void* kp = fp8 ? static_cast<const void*>(k8.data()) : paged ? k_pool.data() : k.data();
    const void* vp = fp8 ? static_cast<const void*>(v8.data()) : paged ? v_pool.data() : v.data();
    const ac_attention_args a =
        attncheck::AttentionArgs(AC_DTYPE_F16, h, hkv, d)
            .sequences(1, cu_q, cu_k)
            .tensors(q_descale.empty() ? static_cast<const void*>(q.data()) : q8.data(), kp, vp, out.data(),
                     lse.data())
            .scale(scale)
            .causal(causal)
            .mask(masked ? mask.data() : nullptr, masked ? cu_m : nullptr)
            .tiling(tiling)
            .splits(num_splits, AC_FOLD_LEFT)
            .variants(dv, softcap, window_left, window_right, sinks.empty() ? nullptr : sinks.data())
            .paged(page_size, num_pages, max_blocks, paged ? table.data() : nullptr,
                   paged ? table.data() : nullptr)
            .fp8_kv(fp8 ? kv_dtype : AC_DTYPE_F16, fp8 ? k_descale.data() : nullptr,
                    fp8 ? v_descale.data() : nullptr, k_descale.size() > 1 ? 1 : 0)
            .fp8_q(q_descale.empty() ? nullptr : q_descale.data());
    char err[256] = {};
    if (s.attention(s.self, &a, err, sizeof err) != AC_OK) throw std::runtime_error(err);
  }
};

}  // namespace mt
