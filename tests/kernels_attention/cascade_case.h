// Test support for cascade attention: a causal case whose keys are, per sequence, P cached prefix
// keys followed by the chunk's Tq own keys, split into the two key sets the cascade's passes read.
// Causal bottom-right attention over the P + Tq keys is what the cascade must equal, so the fp64
// attention of attention_case.h on the whole case is the expected value.
#pragma once
#include <vector>

#include "attention_case.h"

namespace attncheck::test {

struct CascadeCase {
  AttnCase whole;  // causal, keys = prefix then chunk
  std::vector<uint16_t> pk, pv, sk, sv;
  std::vector<int32_t> cu_pk, cu_sk;
};

inline CascadeCase make_cascade_case(uint64_t seed, DType dt, int heads, int kv_heads, int d,
                                     const std::vector<int32_t>& prefix_lens,
                                     const std::vector<int32_t>& chunk_lens) {
  std::vector<int32_t> tk;
  for (size_t i = 0; i < prefix_lens.size(); ++i) tk.push_back(prefix_lens[i] + chunk_lens[i]);
  CascadeCase cc;
  cc.whole = make_case(seed, dt, heads, kv_heads, d, chunk_lens, tk, true, false);
  cc.cu_pk = {0};
  cc.cu_sk = {0};
  const size_t row = size_t(kv_heads) * size_t(d);
  for (size_t i = 0; i < prefix_lens.size(); ++i) {
    const size_t k0 = size_t(cc.whole.cu_k[i]);
    auto copy = [&](std::vector<uint16_t>& dst, const std::vector<uint16_t>& src, size_t from, size_t n) {
      dst.insert(dst.end(), src.begin() + long(from * row), src.begin() + long((from + n) * row));
    };
    copy(cc.pk, cc.whole.k, k0, size_t(prefix_lens[i]));
    copy(cc.pv, cc.whole.v, k0, size_t(prefix_lens[i]));
    copy(cc.sk, cc.whole.k, k0 + size_t(prefix_lens[i]), size_t(chunk_lens[i]));
    copy(cc.sv, cc.whole.v, k0 + size_t(prefix_lens[i]), size_t(chunk_lens[i]));
    cc.cu_pk.push_back(cc.cu_pk.back() + prefix_lens[i]);
    cc.cu_sk.push_back(cc.cu_sk.back() + chunk_lens[i]);
  }
  return cc;
}

}  // namespace attncheck::test
