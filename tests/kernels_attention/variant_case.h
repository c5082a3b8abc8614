// Test support for the engines' variants (plugin_abi.h AC_VAR_*) of the fused and split-KV kernels:
// a case's variants (softcap, window, sinks, page size), its K / V moved into shuffled page pools
// with poisoned spare slots, an fp64 attention that applies the variants (plain loops, double
// accumulation, independent of fused_math.h) and the kernel bound of attention_case.h widened by
// where the variants round.
//
// Bound (on top of attention_case.h's, kernel_attention_o_bound / _lse_bound):
//   - softcap: the logit error e of a capped score c = cap tanh(t / cap), t = scale q.k, is the dot
//     product's error through tanh's slope, sech^2(t / cap) (d 2^-24 |scale| sum |q k| + 2 |t| 2^-24:
//     the scale's and the division's roundings), plus tanh's own error and the products by cap and
//     log2 e, 8 |c| 2^-24 (budgets.cpp softcap_conditioning derives the same terms);
//   - a sink is one more logit whose weight joins l: its base-2 scaling, the subtraction of the max
//     and the rescale of l err by (2 |sink| + 2 |m| + 8) 2^-24, the largest e of the row if larger;
//   - the final store of O may land in the input type's subnormals (a sink above every score makes O
//     small): half the smallest subnormal, absolutely.
// Empty rows (no visible key): O = 0 exactly; LSE -inf, or the sink where the head has one.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attention_case.h"
#include "fused/fused_math.h"

namespace attncheck::test {

struct Variants {
  float softcap = 0.0f;       // 0: none
  int left = -1, right = -1;  // window sides, -1 unbounded
  std::vector<float> sinks;   // one per query head, empty: none
  int page_size = 0;          // 0: contiguous K / V
  std::string describe() const {
    std::ostringstream s;
    s << "softcap=" << softcap << " window=(" << left << ", " << right << ") sinks=" << sinks.size()
      << " page_size=" << page_size;
    return s.str();
  }
};

// The NaN and the largest finite value of the input type, what the spare slots of a pool hold.
inline uint16_t nan_bits(DType t) { return t == DType::f16 ? 0x7e00 : 0x7fc0; }
inline uint16_t huge_bits(DType t) { return t == DType::f16 ? 0x7bff : 0x7f7f; }

// K and V of a case as page pools [num_pages, page_size, h_kv, d] read through a block table: each
// sequence's ceil(Tk / P) pages drawn from a shuffled pool, the slots past a sequence's last key,
// two pages no sequence names and the page every table entry past a sequence's last page names all
// poisoned (NaN in column 0, the largest finite value elsewhere). The table has one entry more per
// sequence than the longest needs, so a walk one page too far reads the poison page, never outside
// the table.
struct PagedKV {
  int page_size = 0, num_pages = 0, max_blocks = 0;
  std::vector<uint16_t> k, v;
  std::vector<int32_t> table;
};

// fused-hopper's page size for a variant case's (its kernel copies pages of kHopperPageSizes, 16, 64
// and 256, hopper.h): the case's own where it is one of them, 16 for a page of one key and 64 for
// one of 5; 0 stays contiguous.
inline int hopper_page_size(int page) { return page == 1 ? 16 : page == 5 ? 64 : page; }

inline PagedKV page_case(const AttnCase& c, int page_size, uint64_t seed) {
  PagedKV p;
  p.page_size = page_size;
  const int64_t row = int64_t(c.kv_heads) * c.head_size, vrow = int64_t(c.kv_heads) * c.dv();  // per slot
  int needed = 0;
  for (int32_t tk : c.seqlens_k) {
    const int blocks = int((int64_t(tk) + page_size - 1) / page_size);
    needed += blocks;
    p.max_blocks = std::max(p.max_blocks, blocks);
  }
  p.max_blocks += 1;
  p.num_pages = needed + 3;  // two unnamed pages and the poison page
  std::vector<int32_t> order(size_t(p.num_pages));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  const int32_t poison_page = order.back();
  p.table.assign(c.seqlens_k.size() * size_t(p.max_blocks), poison_page);
  const size_t slots = size_t(p.num_pages) * size_t(page_size);
  p.k.assign(slots * size_t(row), huge_bits(c.dtype));
  p.v.assign(slots * size_t(vrow), huge_bits(c.dtype));
  for (size_t slot = 0; slot < slots; ++slot)
    for (int kvh = 0; kvh < c.kv_heads; ++kvh) {
      p.k[slot * size_t(row) + size_t(kvh * c.head_size)] = nan_bits(c.dtype);
      p.v[slot * size_t(vrow) + size_t(kvh * c.dv())] = nan_bits(c.dtype);
    }
  size_t next = 0;
  for (size_t s = 0; s < c.seqlens_k.size(); ++s)
    for (int32_t j = 0; j < c.seqlens_k[s]; ++j) {
      if (j % page_size == 0) p.table[s * size_t(p.max_blocks) + size_t(j / page_size)] = order[next++];
      const int64_t slot =
          int64_t(p.table[s * size_t(p.max_blocks) + size_t(j / page_size)]) * page_size + j % page_size;
      const int64_t key = int64_t(c.cu_k[s]) + j;
      std::copy_n(c.k.begin() + key * row, row, p.k.begin() + slot * row);
      std::copy_n(c.v.begin() + key * vrow, vrow, p.v.begin() + slot * vrow);
    }
  return p;
}

// The ABI arguments of a case with its variants; k and v point at the pools when paged (pool_k,
// pool_v, table: where the call reads them), sinks at the call's copy of the sinks (or null).
inline ac_attention_args variant_args(ac_attention_args a, const Variants& var, const PagedKV* paged,
                                      const void* pool_k, const void* pool_v, const int32_t* table,
                                      const float* sinks) {
  a.softcap = var.softcap;
  a.window_left = var.left;
  a.window_right = var.right;
  a.sinks = var.sinks.empty() ? nullptr : sinks;
  if (paged) {
    a.k = pool_k;
    a.v = pool_v;
    a.page_size = paged->page_size;
    a.num_pages = paged->num_pages;
    a.max_blocks = paged->max_blocks;
    a.block_table = table;
    a.block_table_host = paged->table.data();
  }
  return a;
}

// fp64 attention of one (token, head) with the variants, and its bounds (see the top of the file).
inline RowRef exact_variant_row(const AttnCase& c, const Variants& var, int seq, int row, int head) {
  const int d = c.head_size, dv = c.dv(), kvh = head / (c.heads / c.kv_heads);
  const int tq = c.seqlens_q[size_t(seq)], tk = c.seqlens_k[size_t(seq)];
  const int64_t tok = c.cu_q[size_t(seq)] + row;
  const double u = c.dtype == DType::f16 ? 0x1p-11 : 0x1p-8;
  const double store_sub = c.dtype == DType::f16 ? 0x1p-25 : 0x1p-134;
  const double scale = double(c.scale), cap = double(var.softcap);
  const bool has_sink = !var.sinks.empty();
  const double sink = has_sink ? double(var.sinks[size_t(head)]) : -INFINITY;
  std::vector<double> x, err;
  std::vector<int> keys;
  for (int j = 0; j < tk; ++j) {
    const int64_t diag = int64_t(row) + tk - tq;
    if (c.causal && j > diag) continue;
    if (var.left >= 0 && j < diag - var.left) continue;
    if (var.right >= 0 && j > diag + var.right) continue;
    if (c.with_mask && !c.mask[size_t(c.cu_mask[size_t(seq)] + int64_t(row) * tk + j)]) continue;
    double ad = 0;
    const double dot = case_dot(c, tok, head, c.cu_k[size_t(seq)] + j, kvh, ad);
    const double t = dot * scale, dot_err = attncheck::kernel_logit_error(double(d), ad * std::fabs(scale));
    keys.push_back(j);
    if (cap > 0) {
      const double a = std::fabs(t / cap);
      const double sech2 = a > 400 ? 0.0 : 4.0 / std::pow(std::exp(a) + std::exp(-a), 2);
      const double capped = cap * std::tanh(t / cap);
      x.push_back(capped);
      err.push_back(sech2 * (dot_err + 2 * std::fabs(t) * 0x1p-24) + 8 * std::fabs(capped) * 0x1p-24);
    } else {
      x.push_back(t);
      err.push_back(dot_err);
    }
  }
  RowRef r;
  r.o.assign(size_t(dv), 0.0);
  r.o_bound.assign(size_t(dv), 0.0);
  r.abs_weighted.assign(size_t(dv), 0.0);
  if (keys.empty()) {
    // O = 0 exactly; LSE = the sink (one rounding to base 2 and one back: a few fp32 ulps).
    r.lse = sink;
    r.lse_bound = has_sink ? 8 * 0x1p-24 * (std::fabs(sink) + 1) : 0.0;
    return r;
  }
  r.empty = false;
  const double m_scores = *std::max_element(x.begin(), x.end());
  const double m = std::max(m_scores, sink);
  double l = has_sink ? std::exp(sink - m) : 0.0, max_err = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    l += std::exp(x[j] - m);
    max_err = std::max(max_err, err[j]);
  }
  if (has_sink) max_err = std::max(max_err, (2 * std::fabs(sink) + 2 * std::fabs(m) + 8) * 0x1p-24);
  r.lse = m + std::log(l);
  double vmax = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    const double y = std::exp(x[j] - m) / l;
    const int64_t kt = c.cu_k[size_t(seq)] + keys[j];
    for (int i = 0; i < dv; ++i) {
      const double vi = in_value(c.dtype, c.v[size_t((kt * c.kv_heads + kvh) * dv + i)]);
      r.o[size_t(i)] += y * vi;
      r.abs_weighted[size_t(i)] += y * std::fabs(vi);
      vmax = std::max(vmax, std::fabs(vi));
    }
  }
  // P is formed against the scores' own max: the shifted sum the subnormal P divides by is l there.
  const double l_scores = l * std::exp(m - m_scores);
  const double keys_walked = double(tk) + (has_sink ? 1 : 0);
  const double sub =
      attncheck::kernel_subnormal_p_error(c.dtype == DType::f16, false, double(tk), vmax, l_scores);
  for (int i = 0; i < dv; ++i)
    r.o_bound[size_t(i)] = attncheck::kernel_attention_o_bound(u, r.abs_weighted[size_t(i)], r.o[size_t(i)],
                                                               max_err, keys_walked, sub) +
                           store_sub;
  r.lse_bound = attncheck::kernel_attention_lse_bound(max_err, keys_walked, r.lse);
  return r;
}

// A subject's output (O bits in the input type, natural LSE [heads, tokens], empty rows -inf or the
// sink) against the fp64 attention with the variants; "" or the first few mismatches. A NaN
// anywhere (a poisoned slot read) fails.
inline std::string compare_variants(const AttnCase& c, const Variants& var, const std::vector<uint16_t>& out,
                                    const std::vector<float>& lse) {
  std::ostringstream msg;
  int failures = 0;
  const int d = c.dv();  // O's head size
  const int64_t total_q = c.total_q();
  for (size_t s = 0; s < c.seqlens_q.size(); ++s)
    for (int row = 0; row < c.seqlens_q[s]; ++row)
      for (int h = 0; h < c.heads && failures < 8; ++h) {
        const RowRef r = exact_variant_row(c, var, int(s), row, h);
        const int64_t tok = c.cu_q[s] + row;
        for (int i = 0; i < d && failures < 8; ++i) {
          const double got = double(kern::load_as_float(c.dtype, out[size_t((tok * c.heads + h) * d + i)]));
          const bool ok = r.empty ? got == 0.0 : std::fabs(got - r.o[size_t(i)]) <= r.o_bound[size_t(i)];
          if (!ok) {
            ++failures;
            msg << "O[tok " << tok << ", head " << h << ", " << i << "] = " << got << " exact "
                << r.o[size_t(i)] << " bound " << r.o_bound[size_t(i)] << (r.empty ? " (empty row)" : "")
                << "\n";
          }
        }
        const double got = double(lse[size_t(int64_t(h) * total_q + tok)]);
        const bool ok = std::isinf(r.lse) ? got == r.lse : std::fabs(got - r.lse) <= r.lse_bound;
        if (!ok && failures < 8) {
          ++failures;
          msg << "LSE[head " << h << ", tok " << tok << "] = " << got << " exact " << r.lse << " bound "
              << r.lse_bound << (r.empty ? " (empty row)" : "") << "\n";
        }
      }
  if (failures) return c.describe() + " " + var.describe() + "\n" + msg.str();
  return "";
}

// One call of the variant tests: a case, its variants, the fused tiling, and the split-KV tiling,
// split count and fold order it also runs with.
struct VariantCase {
  AttnCase c;
  Variants var;
  int tiling = 0, split_tiling = 0, splits = 1;
  ac_fold fold = AC_FOLD_LEFT;
  std::string describe() const {
    std::ostringstream s;
    s << c.describe() << " " << var.describe() << " tiling " << tiling << " split tiling " << split_tiling
      << " splits " << splits << " fold " << int(fold);
    return s.str();
  }
};

// Case i of a list: tilings, split counts and fold orders rotate with i; the split-KV tiling
// starts at split_tiling_offset.
inline VariantCase rotated_case(AttnCase c, Variants v, int i, int split_tiling_offset) {
  VariantCase vc;
  vc.c = std::move(c);
  vc.var = std::move(v);
  vc.tiling = i % 4;
  vc.split_tiling = (i + split_tiling_offset) % 2;
  vc.splits = 1 + (i * 3) % 8;
  vc.fold = ac_fold(i % 3);
  return vc;
}

// The variant tests' cases (the twin test and the GPU test run the same list):
//   paged: every declared page size (1, 5, 16, 64, 256), a last page partly filled, a sequence
//     without keys, causal and masked ones;
//   softcap 1 and 30 on scores of spread about 6 (the cap bites), causal or not;
//   windows: left -1 / 0 / 3 / 63 / 64 by right -1 / 0 / 2, causal or not, Tq != Tk, a sequence
//     with Tq > Tk (causal rows without keys), GQA;
//   sinks ordinary (-3 .. 2) and above every score (7 .. 10), with empty rows (LSE = the sink);
//   combinations of all of them.
// Tilings, split counts and fold orders rotate through the cases.
inline std::vector<VariantCase> variant_cases() {
  std::vector<VariantCase> out;
  uint64_t seed = 9000;
  auto add = [&](AttnCase c, Variants v) {
    out.push_back(rotated_case(std::move(c), std::move(v), int(out.size()), 0));
  };
  const std::vector<float> ordinary{-1.0f, 0.5f, 2.0f, -3.0f}, above{7.0f, 9.0f, 8.0f, 10.0f};
  for (int page : {1, 5, 16, 64, 256}) {
    Variants v;
    v.page_size = page;
    add(make_case(seed++, page % 2 ? DType::f16 : DType::bf16, 4, 2, page <= 16 ? 64 : 128, {1, 37, 70, 3},
                  {300, 37, 129, 0}, page == 5 || page == 64, page == 16),
        v);
  }
  for (float cap : {1.0f, 30.0f})
    for (bool causal : {false, true}) {
      Variants v;
      v.softcap = cap;
      add(make_case(seed++, causal ? DType::bf16 : DType::f16, 2, 1, causal ? 64 : 128, {65, 1, 20},
                    {130, 200, 20}, causal, false, 2.5f),
          v);
    }
  for (int left : {-1, 0, 3, 63, 64})
    for (int right : {-1, 0, 2})
      for (bool causal : {false, true}) {
        if (left < 0 && right < 0) continue;
        Variants v;
        v.left = left;
        v.right = right;
        add(make_case(seed++, (left + right) % 2 ? DType::bf16 : DType::f16, left == 63 ? 4 : 2,
                      left == 63 ? 2 : 1, 64, {100, 1, 40, 7}, {200, 77, 40, 3}, causal, false),
            v);
      }
  for (const auto* sinks : {&ordinary, &above})
    for (bool causal : {false, true}) {
      Variants v;
      v.sinks = *sinks;
      add(make_case(seed++, causal ? DType::f16 : DType::bf16, 4, 2, 128, {33, 1, 7, 4}, {90, 300, 3, 0},
                    causal, false),
          v);
    }
  {
    Variants v;  // everything at once, GQA 4
    v.page_size = 5;
    v.softcap = 30.0f;
    v.left = 64;
    v.right = 2;
    v.sinks = {-1.0f, 0.5f, 2.0f, -3.0f, 1.0f, 0.0f, -2.0f, 3.0f};
    add(make_case(seed++, DType::bf16, 8, 2, 128, {100, 1, 9}, {230, 77, 5}, true, false, 1.5f), v);
  }
  {
    Variants v;  // paged, a left window, a mask, sinks above every score
    v.page_size = 16;
    v.left = 3;
    v.sinks = above;
    add(make_case(seed++, DType::f16, 4, 4, 64, {40, 17}, {90, 17}, false, true), v);
  }
  {
    Variants v;  // one key per page, a window on both sides, the cap at 30, causal Tq < Tk
    v.page_size = 1;
    v.softcap = 30.0f;
    v.left = 63;
    v.right = 2;
    add(make_case(seed++, DType::f16, 2, 1, 64, {70, 3}, {150, 64}, true, false, 2.0f), v);
  }
  {
    Variants v;  // pages of 256, cap 1, right window 0 without causal, sinks
    v.page_size = 256;
    v.softcap = 1.0f;
    v.right = 0;
    v.sinks = ordinary;
    add(make_case(seed++, DType::bf16, 4, 1, 128, {128, 2}, {300, 600}, false, false), v);
  }
  {
    Variants v;  // cap 30 and sinks above every score, causal, contiguous
    v.softcap = 30.0f;
    v.sinks = above;
    add(make_case(seed++, DType::f16, 4, 2, 64, {50, 1}, {50, 129}, true, false, 2.5f), v);
  }
  return out;
}

// A case on which each variant mutant (kernels/mutants/, fused_math.h Mutation 19 to 23) leaves the
// bound while the correct kernel stays inside it. Fused mutants are compiled for tiling 0 only.
//   19 page_off_by_one: pages of 16, last pages partly filled; their keys come from the poison page
//   20 read_past_end: the same pools, non-causal; the slot after each sequence's last key is poisoned
//   21 window_edge_off_by_one: left window 3, causal; every row sees a fifth key
//   22 softcap_before_scale: cap 30 on scores of spread about 6, d = 128: capping q.k (spread about
//      70) before the scale squashes every score to within 30 / sqrt(128) = 2.7
//   23 sink_every_split: sinks counted by each of 4 partials
struct MutantCase {
  kern::fused::Mutation mutation;
  VariantCase vc;
};
inline std::vector<MutantCase> variant_mutant_cases() {
  using kern::fused::Mutation;
  std::vector<MutantCase> out;
  auto add = [&](Mutation m, AttnCase c, Variants v, int splits) {
    VariantCase vc;
    vc.c = std::move(c);
    vc.var = std::move(v);
    vc.splits = splits;
    out.push_back({m, std::move(vc)});
  };
  Variants paged;
  paged.page_size = 16;
  add(Mutation::page_off_by_one, make_case(9500, DType::bf16, 2, 1, 128, {20, 9}, {100, 50}, false, false),
      paged, 1);
  add(Mutation::read_past_end, make_case(9501, DType::f16, 2, 1, 64, {20, 9}, {100, 50}, false, false), paged,
      1);
  Variants window;
  window.left = 3;
  add(Mutation::window_edge_off_by_one,
      make_case(9502, DType::f16, 2, 1, 64, {40, 9}, {100, 50}, true, false), window, 1);
  Variants cap;
  cap.softcap = 30.0f;
  add(Mutation::softcap_before_scale,
      make_case(9503, DType::bf16, 2, 1, 128, {20, 9}, {100, 50}, false, false, 2.5f), cap, 1);
  Variants sinks;
  sinks.sinks = {0.5f, 2.0f};
  add(Mutation::sink_every_split, make_case(9504, DType::f16, 2, 1, 64, {3, 1}, {200, 90}, false, false),
      sinks, 4);
  return out;
}

// c with V's own head size dv (AC_VAR_HEAD_SIZE_V): V redrawn as [total_k, kv_heads, dv], N(0, 1)
// rounded to the input type.
inline AttnCase with_head_size_v(AttnCase c, int dv, uint64_t seed) {
  c.head_size_v = dv;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  c.v.resize(size_t(c.total_k() * c.kv_heads * dv));
  for (uint16_t& e : c.v) e = round_to_input(c.dtype, normal(rng));
  return c;
}

// The host twins' (QK, V) head-size cases (fused.h kFusedTwinHeadPairs; the CUDA kernels refuse
// every pair, so only the twin test runs them): 64 / 32 with GQA and a mask, then paged with a
// window and sinks; MLA's prefill 192 / 128, causal, softcap; MLA's absorbed decode 576 / 512, one
// KV head, 16 query heads, one query per sequence, pages of 64, sinks. Tilings and splits rotate.
inline std::vector<VariantCase> head_pair_cases() {
  std::vector<VariantCase> out;
  auto add = [&](AttnCase c, Variants v) {
    out.push_back(rotated_case(std::move(c), std::move(v), int(out.size()), 1));
  };
  add(with_head_size_v(make_case(9600, DType::f16, 4, 2, 64, {33, 1, 7}, {90, 130, 7}, false, true), 32,
                       9610),
      Variants{});
  {
    Variants v;
    v.page_size = 5;
    v.left = 40;
    v.sinks = {-1.0f, 0.5f, 2.0f, -3.0f};
    add(with_head_size_v(make_case(9601, DType::bf16, 4, 1, 64, {70, 3}, {150, 64}, true, false), 32, 9611),
        v);
  }
  {
    Variants v;
    v.softcap = 30.0f;
    add(with_head_size_v(make_case(9602, DType::bf16, 2, 1, 192, {65, 20}, {65, 20}, true, false, 1.5f), 128,
                         9612),
        v);
  }
  {
    Variants v;
    v.page_size = 64;
    v.sinks.assign(16, 0.0f);
    for (int h = 0; h < 16; ++h) v.sinks[size_t(h)] = float(h % 5) - 2.0f;
    add(with_head_size_v(make_case(9603, DType::f16, 16, 1, 576, {1, 1, 1}, {200, 1, 65}, false, false), 512,
                         9613),
        v);
  }
  return out;
}

// MLA's absorbed decode (QK 576 / V 512), the pair splitkv-packed's CUDA kernel computes (hopper.h
// kPackedHeadPairs): one KV head with 128 query heads over rows of several key tiles (1000 keys, 13
// splits); pages of 64 with sinks, a sequence of one key; two KV heads of 16 query heads, two
// queries per sequence (speculative decode), causal, pages of 16, softcap 30 and a window of 100;
// a mask, and a sequence without keys (empty rows). Split tilings, counts and folds rotate.
inline std::vector<VariantCase> mla_cases() {
  std::vector<VariantCase> out;
  auto add = [&](AttnCase c, Variants v) {
    out.push_back(rotated_case(std::move(c), std::move(v), int(out.size()), 1));
  };
  auto mla = [](uint64_t seed, DType t, int heads, int kv_heads, std::vector<int32_t> tq,
                std::vector<int32_t> tk, bool causal, bool mask) {
    return with_head_size_v(
        make_case(seed, t, heads, kv_heads, 576, std::move(tq), std::move(tk), causal, mask), 512, seed + 50);
  };
  add(mla(9700, DType::bf16, 128, 1, {1, 1}, {1000, 130}, false, false), Variants{});
  out.back().splits = 13;
  {
    Variants v;
    v.page_size = 64;
    for (int h = 0; h < 16; ++h) v.sinks.push_back(float(h % 5) - 2.0f);
    add(mla(9701, DType::f16, 16, 1, {1, 1, 1}, {200, 1, 65}, false, false), v);
  }
  {
    Variants v;
    v.page_size = 16;
    v.softcap = 30.0f;
    v.left = 100;
    add(mla(9702, DType::f16, 32, 2, {2, 2}, {300, 70}, true, false), v);
  }
  add(mla(9703, DType::bf16, 16, 1, {1, 1, 1}, {77, 0, 129}, false, true), Variants{});
  return out;
}

// Mutant 25 (v_head_from_qk): V's rows read at the QK head size, 64 / 32, one KV head. Key j then
// reads V row 2j, and a key in V's second half reads past V (NaN in the twin).
inline VariantCase v_head_mutant_case() {
  VariantCase vc;
  vc.c = with_head_size_v(make_case(9620, DType::f16, 2, 1, 64, {20, 9}, {100, 50}, false, false), 32, 9621);
  return vc;
}

// How many elements of O are NaN (a poisoned slot read).
inline int64_t nan_count(const AttnCase& c, const std::vector<uint16_t>& out) {
  int64_t n = 0;
  for (uint16_t b : out) n += std::isnan(kern::load_as_float(c.dtype, b)) ? 1 : 0;
  return n;
}

}  // namespace attncheck::test
