// Test support for an FP8 KV cache (plugin_abi.h kv_dtype, k_descale / v_descale): a case's K and V
// quantised to e4m3fn or e5m2 codes over their descales, the arguments pointing at them, and, for
// descales that are powers of two, the case holding the codes times their descales, which are then
// values of the input type: the fp64 attention of attention_case.h judges a kernel's FP8 run on it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "attention_case.h"

namespace attncheck::test {

// The KV head of element i of a case's K ([keys, kv_heads, head_size], width head_size) or V
// (width dv()).
inline size_t kv_head_of(const AttnCase& c, size_t i, int width) {
  return (i / size_t(width)) % size_t(c.kv_heads);
}
// The index of element i's descale in ds: one per tensor, per KV head, or per (sequence, KV head)
// (ds.size() says which; the sequence from the element's key row and cu_k).
inline size_t descale_at(const AttnCase& c, const std::vector<float>& ds, size_t i, int width) {
  if (ds.size() == 1) return 0;
  const size_t kvh = kv_head_of(c, i, width);
  if (ds.size() == size_t(c.kv_heads)) return kvh;
  const int64_t row = int64_t(i / size_t(width) / size_t(c.kv_heads));
  size_t s = 0;
  while (c.cu_k[s + 1] <= row) ++s;
  return s * size_t(c.kv_heads) + kvh;
}

struct Fp8Cache {
  ac_dtype kv_dtype;
  int granularity;  // 0: one descale per tensor, 1: one per KV head, 2: one per (sequence, KV head)
  std::vector<uint8_t> k, v;
  std::vector<float> kd, vd;
  float descale(const std::vector<float>& ds, size_t element, const AttnCase& c, int width) const {
    return ds[descale_at(c, ds, element, width)];
  }
};

// x over each element's descale, rounded to the nearest finite code (every finite code decoded, the
// nearest taken; past the largest, the largest). A tie may go either way: the codes are the
// kernel's input whichever it is.
inline std::vector<uint8_t> fp8_codes(const AttnCase& c, const std::vector<uint16_t>& x, int width,
                                      ac_dtype f, const std::vector<float>& ds) {
  std::vector<std::pair<float, int>> table;
  for (int code = 0; code < 256; ++code)
    if (const float v = kern::fp8_to_float(f, uint8_t(code)); std::isfinite(v)) table.push_back({v, code});
  std::sort(table.begin(), table.end());
  std::vector<uint8_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float y = float(in_value(c.dtype, x[i])) / ds[descale_at(c, ds, i, width)];
    auto hi = std::lower_bound(table.begin(), table.end(), std::make_pair(y, -1));
    if (hi == table.end()) --hi;
    const auto lo = hi == table.begin() ? hi : hi - 1;
    out[i] = uint8_t(std::fabs(lo->first - y) <= std::fabs(hi->first - y) ? lo->second : hi->second);
  }
  return out;
}

inline Fp8Cache fp8_cache(const AttnCase& c, ac_dtype f, std::vector<float> kd, std::vector<float> vd) {
  const int granularity = kd.size() == 1 ? 0 : kd.size() == size_t(c.kv_heads) ? 1 : 2;
  return {f, granularity, fp8_codes(c, c.k, c.head_size, f, kd), fp8_codes(c, c.v, c.dv(), f, vd), kd, vd};
}

// The case whose K and V are the cache's codes times their descales, rounded to the input type:
// exact where the descales are powers of two and the products stay in the type's range.
inline AttnCase dequantised(const AttnCase& c, const Fp8Cache& fc) {
  AttnCase e = c;
  for (size_t i = 0; i < e.k.size(); ++i)
    e.k[i] = round_to_input(c.dtype,
                            kern::fp8_to_float(fc.kv_dtype, fc.k[i]) * fc.descale(fc.kd, i, c, c.head_size));
  for (size_t i = 0; i < e.v.size(); ++i)
    e.v[i] =
        round_to_input(c.dtype, kern::fp8_to_float(fc.kv_dtype, fc.v[i]) * fc.descale(fc.vd, i, c, c.dv()));
  return e;
}

// Point a call at an FP8 cache whose codes and descales lie at k, v, kd, vd (host or device memory).
inline void point_at_fp8(ac_attention_args& a, const Fp8Cache& fc, const void* k, const void* v,
                         const float* kd, const float* vd) {
  a.k = k;
  a.v = v;
  a.kv_dtype = fc.kv_dtype;
  a.k_descale = kd;
  a.v_descale = vd;
  a.descale_granularity = fc.granularity;
}

}  // namespace attncheck::test
