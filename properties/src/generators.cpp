// Generators, one per failure class (generators.hpp). Everything is built with gen::exec from
// integer picks (gen::inRange scales with RapidCheck's size and shrinks toward its lower bound),
// so shrinking drives counts toward 0/1 and values toward the simplest member of their class.
// Logits are exact doubles, rounded once to the storage format where they become tensor bits.
#include "attncheck/generators.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "attncheck/hash.hpp"
#include "internal.hpp"

namespace attncheck::gen {

using detail::round_bits;
namespace g = rc::gen;

namespace {

// A 64-bit seed, any of them at every RapidCheck size: gen::arbitrary scales its bits with the size,
// which is 0 for a run's first case, so that case's seed would be 0 whatever --seed says.
rc::Gen<uint64_t> any_seed() { return g::resize(rc::kNominalSize, g::arbitrary<uint64_t>()); }

// Bulk draws. A long row's tensors hold 10^6 elements or more, and one RapidCheck pick each (a
// generator object, a shrink tree) took seconds per case. While a BulkDraws scope is on, the
// per-element picks below (draw, draw_bool, pick_class) come instead from one drawn seed through
// splitmix64: the same distributions at full size, without shrink trees (attention cases are
// shrunk by their structure, shrink.cpp). Outside a scope every pick is RapidCheck's, as before.
thread_local uint64_t* t_bulk = nullptr;

class BulkDraws {
 public:
  explicit BulkDraws(bool on) : saved_(t_bulk) {
    if (!on) return;
    state_ = *any_seed();
    t_bulk = &state_;
  }
  ~BulkDraws() { t_bulk = saved_; }
  BulkDraws(const BulkDraws&) = delete;
  BulkDraws& operator=(const BulkDraws&) = delete;

 private:
  uint64_t state_ = 0;
  uint64_t* saved_;
};

uint64_t bulk_next() { return hash::splitmix64(*t_bulk += hash::kGoldenGamma); }
// Uniform on [lo, hi): gen::inRange outside a bulk scope (scaled by size, shrinking toward lo).
int draw(int lo, int hi) { return t_bulk ? lo + int(bulk_next() % uint64_t(hi - lo)) : *g::inRange(lo, hi); }
bool draw_bool() { return t_bulk ? (bulk_next() >> 63) != 0 : *g::arbitrary<bool>(); }

// A class pick: uniform over [0, n) at every size, shrinking toward 0 (the plainest class).
// gen::inRange scales its range with RapidCheck's size, which is below 20 in a run's first 20
// cases: a class picked with it would stay near 0 early on, and later classes would appear only
// late in a run, or never in a short one.
int pick_class(int n) {
  return t_bulk ? int(bulk_next() % uint64_t(n)) : *g::resize(rc::kNominalSize, g::inRange(0, n));
}

// A "normal-ish" sample: uniform magnitude in [0, 3 sigma] with a sign, shrinking to 0.
double sample_sigma(double sigma) {
  const int mag = draw(0, 3073);
  const bool neg = draw_bool();
  const double v = sigma * mag / 1024.0;
  return neg ? -v : v;
}

// A structural count uniform on [lo, hi) at every size, shrinking toward lo: the dimensions a class
// of bug needs from a run's first case (two KV heads for a grouped-query head map; a batch's
// neighbours and their key counts), which gen::inRange would keep at lo for a run's first half
// (inRange(1, 3) gives 1 below size 50). A kill within 20 cases needs them early (the mutants'
// margins, kernels/mutants/README.md). Query counts keep their ramp: they set most of a case's
// cost, and the properties that need several query rows draw their own (chunked_prefill).
int pick_in(int lo, int hi) { return lo + pick_class(std::max(1, hi - lo)); }

double pick_sigma() { return *g::element(1.0, 0.5, 3.0, 10.0); }

// The FP8 formats of caps.kv_dtypes, in the names table's order (the draw order of every stream).
std::vector<ac_dtype> declared_fp8_formats(uint32_t kv_dtypes) {
  std::vector<ac_dtype> formats;
  for (const auto& [f, name] : kv_dtype_spellings())
    if (kv_dtypes & AC_DTYPE_BIT(f)) formats.push_back(f);
  return formats;
}

int64_t scaled_count(int max_n) { return *g::inRange(0, std::max(1, max_n) + 1); }

}  // namespace

rc::Gen<std::vector<double>> normal_logits(int n) {
  return g::exec([n] {
    const double sigma = pick_sigma();
    std::vector<double> x(static_cast<size_t>(n));
    for (double& v : x) v = sample_sigma(sigma);
    return x;
  });
}

rc::Gen<std::vector<double>> late_outlier_logits(int n) {
  // The late-outlier case: sigma 3 logits with +40 at index 4000 of 8192, scaled to the row length, so the
  // running max jumps by ~30 after many blocks.
  return g::exec([n] {
    std::vector<double> x(static_cast<size_t>(n));
    for (double& v : x) v = sample_sigma(3.0);
    if (n > 0) {
      const int at = int(int64_t(n) * 4000 / 8192);
      x[size_t(at)] = *g::element(40.0, 20.0, 60.0);
    }
    return x;
  });
}

rc::Gen<std::vector<double>> overflow_band_logits(ac_dtype d, int n) {
  return g::exec([d, n] {
    std::vector<double> x(static_cast<size_t>(n));
    for (double& v : x) v = sample_sigma(1.0);
    if (n > 0) {
      // Values straddling the threshold: fp16 11.0859375 (last finite exp) and 11.09375 (first +inf).
      const double t = detail::overflow_log_threshold(d);
      const int k = *g::inRange(-8, 9);
      double center = d == AC_DTYPE_F16 ? 11.0859375 : t;
      const double step = d == AC_DTYPE_F16 ? 0.0078125 : (d == AC_DTYPE_BF16 ? 0.25 : 0.0078125);
      const int at = *g::inRange(0, n);
      x[size_t(at)] = center + step * k;
      if (*g::arbitrary<bool>()) x[size_t(*g::inRange(0, n))] = center + step;
    }
    return x;
  });
}

rc::Gen<std::vector<double>> fp16_overflow_band_logits(int n) {
  return overflow_band_logits(AC_DTYPE_F16, n);
}

rc::Gen<std::vector<double>> underflow_band_logits(int n) {
  // Spread below max - 17.33, where fp16 exp(x - max) rounds to zero, and a row maximum that itself
  // sits deep in the negative range.
  return g::exec([n] {
    std::vector<double> x(static_cast<size_t>(n));
    const double top = -double(*g::inRange(0, 30));
    for (double& v : x) v = top - 16.0 - std::fabs(sample_sigma(3.0));
    if (n > 0) x[size_t(*g::inRange(0, n))] = top;
    return x;
  });
}

rc::Gen<std::vector<double>> huge_magnitude_logits(int n) {
  return g::exec([n] {
    const double big = *g::element(100.0, 1e4, 6e4);
    std::vector<double> x(static_cast<size_t>(n));
    for (double& v : x) {
      const int kind = pick_class(4);
      v = kind == 0 ? sample_sigma(1.0) : kind == 1 ? -big : kind == 2 ? big : -big + sample_sigma(1.0);
    }
    return x;
  });
}

rc::Gen<std::vector<double>> all_equal_logits(int n) {
  return g::exec([n] {
    const double v = *g::element(0.0, 1.0, -20.0, 11.0, 100.0, -1e4);
    return std::vector<double>(size_t(n), v);
  });
}

rc::Gen<std::vector<double>> any_logits(ac_dtype d, int n) {
  return g::weightedOneOf<std::vector<double>>({{6, normal_logits(n)},
                                                {2, late_outlier_logits(n)},
                                                {2, overflow_band_logits(d, n)},
                                                {1, underflow_band_logits(n)},
                                                {1, huge_magnitude_logits(n)},
                                                {1, all_equal_logits(n)}});
}

rc::Gen<uint32_t> special_bits(ac_dtype d) {
  return g::exec([d] {
    const double max_finite = d == AC_DTYPE_F16 ? 65504.0 : d == AC_DTYPE_BF16 ? 0x1.fep127 : 0x1.fffffep127;
    const double min_sub = d == AC_DTYPE_F16 ? 0x1p-24 : d == AC_DTYPE_BF16 ? 0x1p-133 : 0x1p-149;
    const double v =
        *g::element(0.0, -0.0, 1.0, -1.0, INFINITY, -INFINITY, min_sub, -min_sub, max_finite, -max_finite);
    return round_bits(d, v);
  });
}

// One finite element (finite_bits), its picks drawn in place.
uint32_t draw_finite_bits(ac_dtype d) {
  const int kind = pick_class(8);
  if (kind == 0) {
    static constexpr int kNum[] = {0, 1, -1, 2, -2}, kDen[] = {1, 2, 4};
    const int num = t_bulk ? kNum[draw(0, 5)] : *g::element(0, 1, -1, 2, -2);
    const int den = t_bulk ? kDen[draw(0, 3)] : *g::element(1, 2, 4);
    return round_bits(d, double(num) / den);
  }
  if (kind == 1) {
    // Subnormals and tiny magnitudes, which RapidCheck's float generators never produce.
    const double min_sub = d == AC_DTYPE_F16 ? 0x1p-24 : d == AC_DTYPE_BF16 ? 0x1p-133 : 0x1p-149;
    // The magnitude's draw before the sign's, in statements of their own (here and below): the
    // operands of one expression may be evaluated in either order, and a seed must draw the same
    // case under any compiler.
    const int m = draw(0, 1000);
    return round_bits(d, min_sub * (1 + m) * (draw_bool() ? -1 : 1));
  }
  if (kind == 2) {
    // Any magnitude up to 1e4 (6e4 for fp16/bf16 stays finite in fp32 accumulation).
    const int e = draw(-20, 14);
    const int m = draw(0, 1024);
    return round_bits(d, std::ldexp(1.0 + m / 1024.0, e) * (draw_bool() ? -1 : 1));
  }
  return round_bits(d, sample_sigma(1.0));
}

rc::Gen<uint32_t> finite_bits(ac_dtype d) {
  return g::exec([d] { return draw_finite_bits(d); });
}

// An element of a tensor: one nested pick, or in a bulk scope drawn in place.
uint32_t element_bits(ac_dtype d) { return t_bulk ? draw_finite_bits(d) : *finite_bits(d); }

rc::Gen<Bits> random_values(ac_dtype d, int64_t n) {
  return g::exec([d, n] {
    Bits b(static_cast<size_t>(n));
    for (uint32_t& x : b) x = element_bits(d);
    return b;
  });
}

rc::Gen<Bits> constant_values(ac_dtype d, int64_t n) {
  return g::exec([d, n] { return Bits(size_t(n), element_bits(d)); });
}

rc::Gen<Bits> sign_cancelling_values(ac_dtype d, int rows, int head_size) {
  // Rows come in pairs v, -v (plus a tiny tail), so the output is near zero and relative error explodes.
  return g::exec([d, rows, head_size] {
    Bits b(size_t(rows) * size_t(head_size));
    for (int r = 0; r < rows; r += 2)
      for (int c = 0; c < head_size; ++c) {
        const uint32_t x = element_bits(d);
        b[size_t(r * head_size + c)] = x;
        if (r + 1 < rows)
          b[size_t((r + 1) * head_size + c)] = x ^ (d == AC_DTYPE_F32 ? 0x80000000u : 0x8000u);
      }
    return b;
  });
}

rc::Gen<Bits> near_max_values(ac_dtype d, int64_t n) {
  // 2^(emax-1) (1 + k/1024), k <= 1000, either sign: within a factor of two of the largest finite
  // value but below it, so a convex combination of two stays finite while their plain sum does not.
  return g::exec([d, n] {
    const int e = d == AC_DTYPE_F16 ? 15 : 127;
    Bits b(static_cast<size_t>(n));
    for (uint32_t& x : b) {
      const int m = *g::inRange(0, 1001);
      x = round_bits(d, std::ldexp(1.0 + m / 1024.0, e) * (*g::arbitrary<bool>() ? -1 : 1));
    }
    return b;
  });
}

rc::Gen<Bits> any_values(ac_dtype d, int rows, int head_size) {
  const int64_t n = int64_t(rows) * head_size;
  return g::weightedOneOf<Bits>({{5, random_values(d, n)},
                                 {1, constant_values(d, n)},
                                 {2, sign_cancelling_values(d, rows, head_size)}});
}

rc::Gen<std::vector<uint8_t>> fully_masked_rows_mask(int tq, int tk) {
  return g::exec([tq, tk] {
    std::vector<uint8_t> m(size_t(tq) * size_t(tk), 1);
    for (int t = 0; t < tq; ++t)
      if (*g::arbitrary<bool>() || t == 0)
        for (int j = 0; j < tk; ++j) m[size_t(t * tk + j)] = 0;
    return m;
  });
}

rc::Gen<std::vector<uint8_t>> all_but_one_masked(int tq, int tk) {
  return g::exec([tq, tk] {
    std::vector<uint8_t> m(size_t(tq) * size_t(tk), 0);
    for (int t = 0; t < tq && tk > 0; ++t) m[size_t(t * tk + *g::inRange(0, tk))] = 1;
    return m;
  });
}

rc::Gen<std::vector<uint8_t>> random_mask(int tq, int tk) {
  return g::exec([tq, tk] {
    std::vector<uint8_t> m(size_t(tq) * size_t(tk));
    for (uint8_t& x : m) x = pick_class(4) == 0 ? 0 : 1;
    return m;
  });
}

rc::Gen<std::vector<uint8_t>> any_mask(int tq, int tk) {
  return g::weightedOneOf<std::vector<uint8_t>>(
      {{2, fully_masked_rows_mask(tq, tk)}, {2, all_but_one_masked(tq, tk)}, {3, random_mask(tq, tk)}});
}

rc::Gen<std::pair<float, float>> merge_lse_pair() {
  return g::exec([] {
    auto ordinary = [] { return float(sample_sigma(*g::element(1.0, 10.0))); };
    const int kind = pick_class(12);
    switch (kind) {
      case 0:
        return std::pair<float, float>{INFINITY, ordinary()};  // FA2 sentinel, prefix side
      case 1:
        return std::pair<float, float>{ordinary(), INFINITY};  // suffix side
      case 2:
        return std::pair<float, float>{INFINITY, INFINITY};  // both FA2-empty
      case 3:
        return std::pair<float, float>{-INFINITY, ordinary()};
      case 4:
        return std::pair<float, float>{ordinary(), -INFINITY};
      case 5:
        return std::pair<float, float>{-INFINITY, -INFINITY};  // chunked prefill, no prefix hit
      case 6:
        return std::pair<float, float>{INFINITY, -INFINITY};
      case 7: {
        const float a = ordinary();
        return std::pair<float, float>{a, a};  // equal LSEs
      }
      case 8: {  // a gap past fp32's exp range (e^-104 is below the smallest subnormal)
        const float a = ordinary();
        const float gap = float(*g::element(104.0, 120.0, 200.0, 1e4));
        return *g::arbitrary<bool>() ? std::pair<float, float>{a, a - gap}
                                     : std::pair<float, float>{a - gap, a};
      }
      case 9: {  // above 88.7: exp(LSE) itself overflows fp32
        const float big = float(*g::element(89.0, 100.0, 1e4, 6e4, 1e30));
        return std::pair<float, float>{big + float(sample_sigma(1.0)), big + float(sample_sigma(1.0))};
      }
      default:
        return std::pair<float, float>{ordinary(), ordinary()};
    }
  });
}

Domain domain_for(const Subject& s, int max_keys, const std::vector<ac_dtype>& only) {
  Domain d;
  const ac_caps& c = s.caps();
  for (ac_dtype t : {AC_DTYPE_F16, AC_DTYPE_BF16, AC_DTYPE_F32})
    if (s.has_dtype(t) && (only.empty() || std::find(only.begin(), only.end(), t) != only.end()))
      d.dtypes.push_back(t);
  if (c.head_sizes) {
    for (int32_t i = 0; i < c.num_head_sizes; ++i) d.head_sizes.push_back(c.head_sizes[i]);
  } else {
    // A range is drawn at sizes that reach each of a kernel's paths: small and odd sizes its scalar
    // ones; 64 and 128 the vector and tensor-core ones; 13 a scalar tail after a vector body of 8;
    // 80, 96 and 112 a block of columns past the last 64-column block; 256 and the range's two ends
    // its widest and narrowest. A failing case's shrinker tries each smaller one (shrink.cpp).
    for (int32_t h : {1, 3, 8, 16, 5, 64, 128, 13, 80, 96, 112, 256})
      if (s.supports_head_size(h)) d.head_sizes.push_back(h);
    for (int32_t h : {c.head_size_min, std::min<int32_t>(c.head_size_max, AC_MAX_HEAD_SIZE)})
      if (std::find(d.head_sizes.begin(), d.head_sizes.end(), h) == d.head_sizes.end() &&
          s.supports_head_size(h))
        d.head_sizes.push_back(h);
  }
  d.features = c.features;
  d.max_keys = std::max(1, max_keys);
  for (int32_t i = 0; c.tilings && i < c.num_tilings; ++i)
    d.tile_keys = std::max(d.tile_keys, int(c.tilings[i].bc));
  // A black-box kernel declares no tilings; its key tiles are unknown, so rows still cross the
  // common ones, where the run allows rows that long (a declared tile is crossed regardless).
  if (c.num_tilings <= 0 && (c.ops & (AC_OP_ATTENTION | AC_OP_SPLITKV)) && d.max_keys >= kNominalTileKeys)
    d.tile_keys = kNominalTileKeys;
  d.zero_keys = (c.flags & AC_CAP_REFUSES_ZERO_KEYS) == 0;
  d.empty_states_zero_o = (c.flags & AC_CAP_EMPTY_STATES_ZERO_O) != 0;
  d.max_batch = c.memory == AC_MEMORY_CUDA ? kMaxBatchDevice : kMaxBatchHost;
  d.max_call_seqs = c.max_call_seqs;
  d.max_call_tokens = c.max_call_tokens;
  d.max_call_keys = c.max_call_keys;
  if (d.max_call_keys > 0) d.max_keys = int(std::min<int64_t>(d.max_keys, d.max_call_keys));
  if (d.max_call_tokens > 0) d.max_tokens = std::min(d.max_tokens, d.max_call_tokens);
  d.variants = c.variants;
  d.kv_dtypes = c.kv_dtypes;
  d.fp8 = c.fp8;
  for (int32_t i = 0; c.page_sizes && i < c.num_page_sizes; ++i) d.page_sizes.push_back(c.page_sizes[i]);
  for (int32_t i = 0; (c.variants & AC_VAR_HEAD_SIZE_V) && c.head_pairs && i < c.num_head_pairs; ++i)
    d.head_pairs.push_back(c.head_pairs[i]);
  return d;
}

void poison_row(ac_dtype d, uint32_t* row, int64_t n) {
  // FP8: NaN 0x7f (e4m3fn, e5m2) or 0x80 (e4m3fnuz), the largest finite 0x7e (448), 0x7b (57344)
  // or 0x7f (240).
  const uint32_t nan = d == AC_DTYPE_E4M3FNUZ ? 0x80u
                       : is_fp8(d)            ? 0x7fu
                       : d == AC_DTYPE_F32    ? 0x7fc00000u
                       : d == AC_DTYPE_F16    ? 0x7e00u
                                              : 0x7fc0u;
  const uint32_t huge = d == AC_DTYPE_E4M3       ? 0x7eu
                        : d == AC_DTYPE_E5M2     ? 0x7bu
                        : d == AC_DTYPE_E4M3FNUZ ? 0x7fu
                        : d == AC_DTYPE_F32      ? 0x7f7fffffu
                        : d == AC_DTYPE_F16      ? 0x7bffu
                                                 : 0x7f7fu;
  for (int64_t c = 0; c < n; ++c) row[c] = c == 0 ? nan : huge;
}

namespace {

// Paged K / V of a (contiguous) input: page size P from the declared ones, each sequence's keys
// in ceil(Tk / P) pages of a shuffled pool, sequence 1 sharing sequence 0's first whole pages
// (their keys made equal first) in one case of three, a poisoned page that every table entry past
// a sequence's last page names, and one or two unreferenced poisoned pages.
void page_kv(const Domain& dom, AttentionInput& a) {
  const int32_t P = *g::elementOf(dom.page_sizes);
  const size_t seqs = a.seqlens_k.size();
  const int64_t Hkv = a.num_kv_heads, D = a.head_size, Dv = a.dv();
  std::vector<int64_t> first(seqs + 1, 0);
  for (size_t s = 0; s < seqs; ++s) first[s + 1] = first[s] + a.seqlens_k[s];
  int32_t shared = 0;  // whole pages sequence 1 takes from sequence 0
  if (seqs >= 2 && pick_class(3) == 0) {
    shared = int32_t(std::min(a.seqlens_k[0], a.seqlens_k[1]) / P);
    const int64_t keys = int64_t(shared) * P;
    std::copy_n(a.k.begin() + first[0] * Hkv * D, keys * Hkv * D, a.k.begin() + first[1] * Hkv * D);
    std::copy_n(a.v.begin() + first[0] * Hkv * Dv, keys * Hkv * Dv, a.v.begin() + first[1] * Hkv * Dv);
  }
  int32_t max_blocks = 1, own_pages = 0;
  for (size_t s = 0; s < seqs; ++s) {
    const int32_t blocks = int32_t((int64_t(a.seqlens_k[s]) + P - 1) / P);
    max_blocks = std::max(max_blocks, blocks);
    own_pages += blocks - (s == 1 ? shared : 0);
  }
  // Entries past every sequence's last page (at least one, as the engines' tables are padded to
  // the batch's longest): a read past a sequence's keys lands on the poisoned page there.
  max_blocks += int32_t(*g::inRange(1, 3));
  const int32_t spare = int32_t(*g::inRange(1, 3));
  const int32_t pages = own_pages + spare;  // the spares: the poison page and unreferenced ones
  // A shuffled assignment of physical pages (uniform draws mixed by one seed: cheap for long rows).
  std::vector<int32_t> order(static_cast<size_t>(pages));
  for (int32_t i = 0; i < pages; ++i) order[size_t(i)] = i;
  uint64_t h = *any_seed();
  for (int32_t i = pages - 1; i > 0; --i) {
    h = hash::splitmix64(h);
    std::swap(order[size_t(i)], order[size_t(h % uint64_t(i + 1))]);
  }
  const int32_t poison_page = order[size_t(pages - 1)];
  std::vector<int32_t> table(seqs * size_t(max_blocks), poison_page);
  Bits k(size_t(pages) * P * Hkv * D), v(size_t(pages) * P * Hkv * Dv);
  for (int64_t r = 0; r < int64_t(pages) * P; ++r)
    for (int64_t kvh = 0; kvh < Hkv; ++kvh) {
      poison_row(a.k_dtype(), k.data() + (r * Hkv + kvh) * D, D);
      poison_row(a.k_dtype(), v.data() + (r * Hkv + kvh) * Dv, Dv);
    }
  int32_t next = 0;
  for (size_t s = 0; s < seqs; ++s) {
    const int32_t blocks = int32_t((int64_t(a.seqlens_k[s]) + P - 1) / P);
    for (int32_t b = 0; b < blocks; ++b) {
      const int32_t page = s == 1 && b < shared ? table[size_t(b)] : order[size_t(next++)];
      table[s * size_t(max_blocks) + size_t(b)] = page;
      for (int64_t j = int64_t(b) * P; j < std::min<int64_t>(int64_t(b + 1) * P, a.seqlens_k[s]); ++j) {
        const int64_t from = first[s] + j, to = int64_t(page) * P + j % P;
        std::copy_n(a.k.begin() + from * Hkv * D, Hkv * D, k.begin() + to * Hkv * D);
        std::copy_n(a.v.begin() + from * Hkv * Dv, Hkv * Dv, v.begin() + to * Hkv * Dv);
      }
    }
  }
  a.k = std::move(k);
  a.v = std::move(v);
  a.page_size = P;
  a.num_pages = pages;
  a.max_blocks = max_blocks;
  a.block_table = std::move(table);
}

}  // namespace

AttentionInput fp8_copy(const AttentionInput& a, ac_dtype format, std::vector<float> k_descale,
                        std::vector<float> v_descale, std::vector<float> q_descale) {
  AttentionInput q = a;
  q.kv_dtype = format;
  q.k_descale = std::move(k_descale);
  q.v_descale = std::move(v_descale);
  q.q_descale = std::move(q_descale);
  const ref::Fp8Format f = detail::fp8_format(format);
  auto quantise = [&](Bits& t, const std::vector<float>& d, auto slot_of) {
    for (size_t i = 0; i < t.size(); ++i) {
      const float ds = d[slot_of(i)];
      t[i] = ref::encode_fp8(f, detail::decode(a.dtype, t[i]) / double(ds), ref::Fp8Overflow::saturate);
    }
  };
  const std::vector<int32_t> rows = q.kv_row_sequences(), tokens = q.token_sequences();
  const size_t n = q.k_descale.size();
  quantise(q.k, q.k_descale, [&](size_t i) { return q.kv_descale_slot(n, rows, i, q.head_size); });
  quantise(q.v, q.v_descale, [&](size_t i) { return q.kv_descale_slot(n, rows, i, q.dv()); });
  if (!q.q_descale.empty())
    quantise(q.q, q.q_descale, [&](size_t i) { return q.q_descale_slot(n, tokens, i); });
  return q;
}

AttentionInput paged_copy(const AttentionInput& c, int32_t P, uint64_t shuffle, int32_t shared) {
  AttentionInput a = c;
  const size_t seqs = c.seqlens_k.size();
  const int64_t Hkv = c.num_kv_heads, D = c.head_size, Dv = c.dv();
  shared = seqs < 2 ? 0 : std::min({shared, c.seqlens_k[0] / P, c.seqlens_k[1] / P});  // whole pages of both
  int32_t max_blocks = 1, pages = 1;                                                   // the poison page
  for (size_t s = 0; s < seqs; ++s) {
    const int32_t blocks = int32_t((int64_t(c.seqlens_k[s]) + P - 1) / P);
    max_blocks = std::max(max_blocks, blocks + 1);  // one entry past the longest, as drawn
    pages += blocks - (s == 1 ? shared : 0);
  }
  const int32_t poison_page = pages - 1;
  // The physical page of each page taken in key order: itself, or a permutation (page_kv's mix).
  std::vector<int32_t> order(static_cast<size_t>(pages - 1));
  for (int32_t i = 0; i < pages - 1; ++i) order[size_t(i)] = i;
  for (int32_t i = pages - 2; shuffle && i > 0; --i) {
    shuffle = hash::splitmix64(shuffle);
    std::swap(order[size_t(i)], order[size_t(shuffle % uint64_t(i + 1))]);
  }
  a.k.assign(size_t(pages) * P * Hkv * D, 0);
  a.v.assign(size_t(pages) * P * Hkv * Dv, 0);
  for (int64_t r = 0; r < int64_t(pages) * P; ++r)
    for (int64_t kvh = 0; kvh < Hkv; ++kvh) {
      poison_row(c.k_dtype(), a.k.data() + (r * Hkv + kvh) * D, D);
      poison_row(c.k_dtype(), a.v.data() + (r * Hkv + kvh) * Dv, Dv);
    }
  a.block_table.assign(seqs * size_t(max_blocks), poison_page);
  int32_t next = 0;
  int64_t first = 0;
  for (size_t s = 0; s < seqs; ++s) {
    for (int64_t j = 0; j < c.seqlens_k[s]; ++j) {
      const size_t b = size_t(j / P);
      const bool borrowed = s == 1 && b < size_t(shared);
      if (j % P == 0)
        a.block_table[s * size_t(max_blocks) + b] = borrowed ? a.block_table[b] : order[size_t(next++)];
      if (borrowed) continue;  // sequence 0's page, written there
      const int64_t to = int64_t(a.block_table[s * size_t(max_blocks) + b]) * P + j % P;
      std::copy_n(c.k.begin() + (first + j) * Hkv * D, Hkv * D, a.k.begin() + to * Hkv * D);
      std::copy_n(c.v.begin() + (first + j) * Hkv * Dv, Hkv * Dv, a.v.begin() + to * Hkv * Dv);
    }
    first += c.seqlens_k[s];
  }
  a.page_size = P;
  a.num_pages = pages;
  a.max_blocks = max_blocks;
  if (c.v_in_k) a.share_v_with_k();
  return a;
}

// `a` quantised to a declared FP8 format (descales per tensor, or at a declared finer granularity), each
// descale amax / largest times a factor drawn from `factors` (0: the power of two above amax /
// largest, times 2^`pow2_headroom`). Q too in three quarters of the cases where the subject
// declares AC_FP8_Q (in every case under AC_FP8_Q_REQUIRED), with descales drawn alike.
void quantise_fp8_kv(const Domain& dom, AttentionInput& a, const std::vector<double>& factors,
                     int pow2_headroom) {
  const ac_dtype format = *g::elementOf(declared_fp8_formats(dom.kv_dtypes));
  const double largest = ref::fp8_spec(detail::fp8_format(format)).largest;
  const int32_t H = a.num_kv_heads;
  // The granularity: per tensor or a declared finer one, alike (per KV head: half the cases).
  // Per KV head first: a subject declaring it alone draws as before per sequence existed.
  std::vector<size_t> groups;
  if (dom.fp8 & AC_FP8_DESCALE_PER_KV_HEAD) groups.push_back(size_t(H));
  groups.push_back(1);
  if (dom.fp8 & AC_FP8_DESCALE_PER_SEQUENCE) groups.push_back(a.seqlens_q.size() * size_t(H));
  const size_t n_groups = groups.size() > 1 ? groups[size_t(pick_class(int(groups.size())))] : 1;
  const std::vector<int32_t> rows = a.kv_row_sequences(), tokens = a.token_sequences();
  auto descales = [&](const Bits& t, auto slot_of) {
    std::vector<double> amax(n_groups, 0.0);
    for (size_t i = 0; i < t.size(); ++i) {
      const double x = detail::decode(a.dtype, t[i]);
      const size_t g = slot_of(i);
      if (std::isfinite(x)) amax[g] = std::max(amax[g], std::fabs(x));
    }
    std::vector<float> d(amax.size());
    for (size_t g = 0; g < d.size(); ++g) {
      const double factor = *g::elementOf(factors);
      const double scale = amax[g] > 0 ? amax[g] / largest : 1.0;
      d[g] = float(factor > 0 ? scale * factor : std::ldexp(1.0, std::ilogb(scale) + 1 + pow2_headroom));
    }
    return d;
  };
  std::vector<float> kd =
      descales(a.k, [&](size_t i) { return a.kv_descale_slot(n_groups, rows, i, a.head_size); });
  std::vector<float> vd =
      descales(a.v, [&](size_t i) { return a.kv_descale_slot(n_groups, rows, i, a.dv()); });
  std::vector<float> qd;
  if ((dom.fp8 & AC_FP8_Q) && ((dom.fp8 & AC_FP8_Q_REQUIRED) || pick_class(4) != 0))
    qd = descales(a.q, [&](size_t i) { return a.q_descale_slot(n_groups, tokens, i); });
  a = fp8_copy(a, format, std::move(kd), std::move(vd), std::move(qd));
  // P's scale per call (AC_FP8_P_SCALE, cuDNN's scale_s): 448 (a weight of 1 on the largest code),
  // the fixed 2^8, scales whose reciprocal is not an fp32 power of two (300.5, 96, 57.375), and small
  // ones under which most weights are e4m3fn subnormals (16) or zero (1: weights below 2^-10).
  if (dom.fp8 & AC_FP8_P_SCALE) a.p_scale = *g::element(448.0f, 256.0f, 300.5f, 96.0f, 57.375f, 16.0f, 1.0f);
  if (a.v_in_k) {  // V's codes are K's, read times V's own descale (here K's)
    a.share_v_with_k();
    a.v_descale = a.k_descale;
  }
}

// An FP8 KV cache in a third of the cases, quantised as the engines store one: code = encode(x /
// scale), saturating, and the descale the scale itself, per tensor or per KV head. The scale is
// amax / the format's largest value times a drawn factor: 1 (amax lands on the largest code), 1/2
// and 1/4 (values past it before quantisation: saturated), 4 (the top codes unused), or a power of
// two times the amax's own scale (descales of 2^k). The reference judges the codes times the
// descales the kernel is given, so the quantisation error is never the kernel's.
void with_fp8_kv(const Domain& dom, AttentionInput& a) {
  if (!(dom.kv_dtypes & kFp8DtypeBits) || pick_class(3) != 0) return;
  quantise_fp8_kv(dom, a, {1.0, 0.5, 0.25, 4.0, 0.0}, 0);
}

void with_variants(const Domain& dom, AttentionInput& a, bool sinks) {
  if (dom.kv_dtypes) with_fp8_kv(dom, a);
  if (dom.variants == 0) return;
  int64_t longest = 0;
  for (int32_t t : a.seqlens_k) longest = std::max<int64_t>(longest, t);
  if ((dom.variants & AC_VAR_SOFTCAP) && pick_class(3) == 0)
    // Scores here span about +-10 (structured rows reach the dtype's extremes): a cap of 1 or 5
    // saturates tanh, 30 and 50 (Gemma's) barely bend it; 11 sits at fp16's overflow band.
    a.softcap = float(*g::element(1.0, 5.0, 11.0, 30.0, 50.0));
  if ((dom.variants & AC_VAR_WINDOW) && pick_class(3) == 0) {
    const int tile = std::max(dom.tile_keys, 1);
    a.window_left = int32_t(*g::element<int64_t>(0, 1, 3, tile - 1, tile, tile + 1, longest));
    a.window_right = int32_t(*g::element<int64_t>(-1, -1, 0, 2, tile));
  }
  if (sinks && (dom.variants & AC_VAR_SINKS) && pick_class(3) == 0) {
    const double base = *g::element(0.0, 12.0, -30.0);  // ordinary, above every score, negligible
    a.sinks.resize(size_t(a.num_heads));
    for (float& x : a.sinks) x = float(base + draw(-1024, 1025) / 256.0);
  }
  if ((dom.variants & AC_VAR_PAGED_KV) && !dom.page_sizes.empty() && pick_class(2) == 0) page_kv(dom, a);
}

bool can_draw_empty_attention_rows(const Domain& d) {
  return d.zero_keys || (d.features & (AC_FEAT_MASK | AC_FEAT_CAUSAL)) != 0;
}

bool empty_state_lse(float lse) { return std::isinf(lse); }

void zero_empty_states(MergeInput& m) {
  const size_t D = size_t(m.head_size), zero = round_bits(m.dtype, 0.0);
  for (size_t r = 0; r < m.prefix_lse.size(); ++r) {
    if (empty_state_lse(m.prefix_lse[r])) std::fill_n(m.prefix_out.begin() + r * D, D, zero);
    if (empty_state_lse(m.suffix_lse[r])) std::fill_n(m.suffix_out.begin() + r * D, D, zero);
  }
}

int64_t first_empty_state_with_o(const MergeInput& m) {
  const size_t D = size_t(m.head_size);
  auto nonzero = [&](const Bits& o, size_t r) {
    for (size_t c = 0; c < D; ++c)
      if (detail::decode(m.dtype, o[r * D + c]) != 0) return true;
    return false;
  };
  for (size_t r = 0; r < m.prefix_lse.size(); ++r)
    if ((empty_state_lse(m.prefix_lse[r]) && nonzero(m.prefix_out, r)) ||
        (empty_state_lse(m.suffix_lse[r]) && nonzero(m.suffix_out, r)))
      return int64_t(r);
  return -1;
}

rc::Gen<MergeInput> merge_input(const Domain& dom) {
  return g::exec([dom] {
    MergeInput m;
    m.dtype = *g::elementOf(dom.dtypes);
    m.num_tokens = int32_t(pick_class(5));
    m.num_heads = int32_t(1 + pick_class(4));
    const int64_t rows = int64_t(m.num_tokens) * m.num_heads;
    // LSEs are picked before the head size and values: gen::exec picks are positional, so a shrink
    // of the head size (fewer value picks) leaves the LSE pairs, which usually carry the failure, alone.
    for (int64_t r = 0; r < rows; ++r) {
      const auto [a, b] = *merge_lse_pair();
      m.prefix_lse.push_back(a);
      m.suffix_lse.push_back(b);
    }
    m.head_size = *g::elementOf(dom.head_sizes);
    // One case in eight holds output states near the format's largest value on both sides
    // (mutant 3: an unscaled p + s overflows fp32 there; fp32 and bf16 reach it, fp16 cannot).
    const bool near_max = pick_class(8) == 0;
    m.prefix_out = near_max ? *near_max_values(m.dtype, rows * m.head_size)
                            : *any_values(m.dtype, int(rows), m.head_size);
    m.suffix_out = near_max ? *near_max_values(m.dtype, rows * m.head_size)
                            : *any_values(m.dtype, int(rows), m.head_size);
    if (dom.empty_states_zero_o) zero_empty_states(m);
    // A merge declaring FP8 outputs (caps.kv_dtypes) writes one in three cases of four, divided by
    // a scale of 1, a power of two, any value, or one small enough that most outputs saturate.
    // Drawn last, so the streams of the other merges are unchanged.
    if (dom.kv_dtypes && pick_class(4) != 0) {
      m.out_dtype = *g::elementOf(declared_fp8_formats(dom.kv_dtypes));
      m.output_scale = *g::element(1.0f, 0.0625f, 4.0f, 0.3f, 1e-3f, 37.5f);
    }
    return m;
  });
}

rc::Gen<MergeInput> merge_sentinel_input(const Domain& dom) {
  return g::exec([dom] {
    MergeInput m = *merge_input(dom);
    // Force at least one empty side (+inf or -inf) on every row.
    for (size_t r = 0; r < m.prefix_lse.size(); ++r) {
      const int which = pick_class(6);
      const float empty = *g::element(-INFINITY, INFINITY);
      if (which <= 1)
        m.prefix_lse[r] = empty;
      else if (which <= 3)
        m.suffix_lse[r] = empty;
      else {
        m.prefix_lse[r] = empty;
        m.suffix_lse[r] = *g::element(-INFINITY, INFINITY);
      }
    }
    if (m.num_tokens == 0) m.num_tokens = 0;
    // The sides made empty here held values drawn for a visible state.
    if (dom.empty_states_zero_o) zero_empty_states(m);
    return m;
  });
}

rc::Gen<SoftmaxInput> softmax_input(const Domain& dom) {
  return g::exec([dom] {
    SoftmaxInput s;
    s.dtype = *g::elementOf(dom.dtypes);
    s.rows = int32_t(pick_class(5));
    s.cols =
        int32_t(dom.max_keys > 256 && pick_class(4) == 0 ? *g::inRange(dom.max_keys / 2, dom.max_keys + 1)
                                                         : scaled_count(std::min(dom.max_keys, 64)));
    for (int r = 0; r < s.rows; ++r) {
      const auto x = *any_logits(s.dtype, s.cols);
      const int masking = pick_class(6);  // 0: fully masked row, 1: random -inf entries
      for (int c = 0; c < s.cols; ++c) {
        double v = x[size_t(c)];
        if (masking == 0 || (masking == 1 && pick_class(3) == 0)) v = -INFINITY;
        s.x.push_back(round_bits(s.dtype, v));
      }
    }
    return s;
  });
}

rc::Gen<SoftmaxInput> softmax_overflow_band_input(const Domain& dom) {
  return g::exec([dom] {
    SoftmaxInput s;
    s.dtype = *g::elementOf(dom.dtypes);
    s.rows = int32_t(*g::inRange(1, 4));
    s.cols = int32_t(*g::inRange(1, std::min(dom.max_keys, 32) + 1));
    for (int r = 0; r < s.rows; ++r)
      for (double v : *overflow_band_logits(s.dtype, s.cols)) s.x.push_back(round_bits(s.dtype, v));
    return s;
  });
}

namespace {

struct ShapeChoice {
  bool empty_rows = false, overflow_band = false, split = false;
};

AttentionInput attention_with(const Domain& dom, ShapeChoice choice) {
  AttentionInput a;
  a.dtype = *g::elementOf(dom.dtypes);
  a.head_size = *g::elementOf(dom.head_sizes);
  // A subject with V head sizes of their own (AC_VAR_HEAD_SIZE_V) gets one of its pairs in half of
  // its cases (MLA's 192 / 128, 576 / 512).
  if (!dom.head_pairs.empty() && pick_class(2) == 0) {
    const ac_head_pair pair = *g::elementOf(dom.head_pairs);
    a.head_size = pair.qk;
    a.head_size_v = pair.v;
  }
  const bool gqa = (dom.features & AC_FEAT_GQA) != 0;
  a.num_kv_heads = int32_t(pick_in(1, 3));
  const int ratio = gqa ? *g::element(1, 2, 4, 8) : 1;
  a.num_heads = a.num_kv_heads * ratio;
  const bool varlen = (dom.features & AC_FEAT_VARLEN) != 0 && !choice.split;
  const int nseq = varlen ? *g::inRange(1, 4) : 1;
  const bool long_rows = dom.max_keys > 256 && pick_class(4) == 0;
  for (int s = 0; s < nseq; ++s) {
    const int tq = int(*g::inRange(choice.split ? 1 : 0, dom.max_tokens + 1));
    // A subject refusing zero keys gets at least one (a split case two: each piece one).
    const int min_tk = dom.zero_keys ? 0 : choice.split ? 2 : 1;
    int tk = long_rows ? int(*g::inRange(dom.max_keys / 2, dom.max_keys + 1))
                       : int(*g::inRange(min_tk, std::max(min_tk, std::min(dom.max_keys, 64)) + 1));
    tk = std::max(tk, min_tk);
    // One row in four spans two key tiles of the subject (up to 2 Bc + 8 keys), or the rescale of
    // O and l between tiles is never exercised (mutant 6, "forgets to rescale O", survived
    // the gate with rows of at most 64 keys and Bc = 64).
    if (!long_rows && dom.tile_keys > 0 && pick_class(4) == 0)
      tk = int(*g::inRange(dom.tile_keys + 1, 2 * dom.tile_keys + 9));
    if (choice.overflow_band) tk = std::max(tk, 1);
    a.seqlens_q.push_back(tq);
    a.seqlens_k.push_back(tk);
  }
  if (!choice.split && (dom.features & AC_FEAT_CAUSAL)) a.causal = pick_class(3) == 0;
  // Empty rows without a zero-key range: a mask, else causal alignment (below).
  const bool causal_empty = choice.empty_rows && !dom.zero_keys && (dom.features & AC_FEAT_CAUSAL) &&
                            (!(dom.features & AC_FEAT_MASK) || pick_class(2) == 0);
  const bool use_mask = (dom.features & AC_FEAT_MASK) && !choice.overflow_band && !causal_empty &&
                        (choice.empty_rows || pick_class(3) == 0);
  if (use_mask)
    for (int s = 0; s < nseq; ++s) {
      const auto m = choice.empty_rows
                         ? *fully_masked_rows_mask(a.seqlens_q[size_t(s)], a.seqlens_k[size_t(s)])
                         : *any_mask(a.seqlens_q[size_t(s)], a.seqlens_k[size_t(s)]);
      a.mask.insert(a.mask.end(), m.begin(), m.end());
    }
  if (causal_empty) {
    // Bottom-right alignment: query t sees keys up to t + Tk - Tq, so the first Tq - Tk rows see none.
    a.causal = true;
    a.seqlens_q[0] = a.seqlens_k[0] + int32_t(*g::inRange(1, 4));
  } else if (choice.empty_rows && !use_mask && dom.zero_keys) {
    // Without a mask, empty rows come from zero-length key ranges or causal alignment (Tq > Tk).
    a.seqlens_k[0] = 0;
    if (a.seqlens_q[0] == 0) a.seqlens_q[0] = 1;
  }
  const int64_t TQ = detail::total_q(a), TK = detail::total_k(a);
  const int64_t H = a.num_heads, Hkv = a.num_kv_heads, D = a.head_size;
  // A long row's elements are drawn in bulk (the gate's rows are never long: its streams keep
  // their RapidCheck picks).
  const BulkDraws bulk(long_rows);
  a.q.assign(size_t(TQ * H * D), round_bits(a.dtype, 0.0));
  a.k.assign(size_t(TK * Hkv * D), round_bits(a.dtype, 0.0));
  const bool structured = choice.overflow_band || pick_class(3) != 0;
  if (structured) {
    // Query row (t, h) is one-hot on coordinate (t*H + h) % D; k carries the target logits there.
    a.softmax_scale = 1.0f;
    for (int64_t t = 0; t < TQ; ++t)
      for (int64_t h = 0; h < H; ++h)
        a.q[size_t((t * H + h) * D + (t * H + h) % D)] = round_bits(a.dtype, 1.0);
    int64_t k0 = 0;
    for (size_t s = 0; s < a.seqlens_k.size(); ++s) {
      const int tk = a.seqlens_k[s];
      const int64_t coords =
          std::min<int64_t>(D, std::max<int64_t>(1, int64_t(a.seqlens_q[s]) * H + (TQ * H) % D));
      for (int64_t kvh = 0; kvh < Hkv; ++kvh)
        for (int64_t c = 0; c < std::min<int64_t>(D, coords + H); ++c) {
          const auto x = choice.overflow_band ? *overflow_band_logits(a.dtype, tk) : *any_logits(a.dtype, tk);
          for (int j = 0; j < tk; ++j)
            a.k[size_t(((k0 + j) * Hkv + kvh) * D + c)] = round_bits(a.dtype, x[size_t(j)]);
        }
      k0 += tk;
    }
  } else {
    // Random q and k with scores of standard deviation sigma after the 1/sqrt(d) scale.
    const double sigma = *g::element(1.0, 3.0);
    a.softmax_scale = float(1.0 / std::sqrt(double(D)));
    for (uint32_t& x : a.q) x = round_bits(a.dtype, draw(-1024, 1025) / 1024.0 * std::sqrt(3.0));
    for (uint32_t& x : a.k) x = round_bits(a.dtype, draw(-1024, 1025) / 1024.0 * std::sqrt(3.0) * sigma);
  }
  a.v = *any_values(a.dtype, int(TK * Hkv), int(a.dv()));
  // V inside K in half of a declaring subject's cases with a V head size of its own (MLA's absorbed
  // decode as FlashMLA stores its cache).
  if ((dom.variants & AC_VAR_V_IN_K) && a.dv() < a.head_size && pick_class(2) == 0) a.share_v_with_k();
  // A split case's window becomes a mask on one of its pieces (split_equals_whole): only for a
  // subject that takes masks.
  gen::Domain vdom = dom;
  if (choice.split && !(dom.features & AC_FEAT_MASK)) vdom.variants &= ~uint32_t(AC_VAR_WINDOW);
  with_variants(vdom, a);
  return a;
}

}  // namespace

namespace {

// n values uniform on [-scale, scale), rounded to `dtype`, from the 53 high bits of one splitmix64
// draw per element and stream: the layer's and the streamed case's 10^7 to 10^8 values come from
// one drawn seed, not from one RapidCheck pick each, which would take minutes to draw. Element i
// depends on i alone, so the threads (one per core, each over at least 2^20 elements) do not change
// a bit.
void uniform_fill(ac_dtype dtype, uint64_t seed, Bits& b, int64_t n, uint64_t stream, double scale) {
  b.resize(size_t(n));
  // The loop is instantiated per format, rounding inline where the result is normal (all but
  // values within 2^-14 of zero): a call and a switch per value were half of a batch case's
  // generation time.
  auto fill_as = [&]<ref::Format F>(int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t r = hash::splitmix64(seed ^ hash::splitmix64(stream * hash::kGoldenGamma + uint64_t(i)));
      const double x = (double(r >> 11) * 0x1p-52 - 1.0) * scale;
      uint32_t bits = 0;
      b[size_t(i)] = ref::round_normal<F>(x, bits) ? bits : ref::round_to_format(F, x);
    }
  };
  auto fill = [&](int64_t begin, int64_t end) {
    switch (dtype) {
      case AC_DTYPE_F16:
        return fill_as.template operator()<ref::Format::fp16>(begin, end);
      case AC_DTYPE_BF16:
        return fill_as.template operator()<ref::Format::bf16>(begin, end);
      default:
        return fill_as.template operator()<ref::Format::fp32>(begin, end);
    }
  };
  const int64_t threads =
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 1 + n / (int64_t(1) << 20));
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(fill, n * t / threads, n * (t + 1) / threads);
  fill(0, n / threads);
  for (std::thread& th : pool) th.join();
}

// A drawn dtype and d = 128 where the subject takes it, else its largest head size: the layer's
// and the streamed case's format.
int32_t realistic_head_size(const Domain& dom) {
  return std::find(dom.head_sizes.begin(), dom.head_sizes.end(), 128) != dom.head_sizes.end()
             ? 128
             : *std::max_element(dom.head_sizes.begin(), dom.head_sizes.end());
}
AttentionInput realistic_format(const Domain& dom) {
  AttentionInput a;
  a.dtype = *g::elementOf(dom.dtypes);
  a.head_size = realistic_head_size(dom);
  return a;
}

// The Llama-3-8B layer: Llama-3-8B's 32 query heads over 8 KV heads (32 over 32 without GQA), d = 128
// (else the largest size the subject takes), one sequence of dom.layer_tokens queries and keys,
// causal or not, logits of standard deviation 1 or 3 after the 1/sqrt(d) scale. Its values come
// from one drawn seed (uniform_fill); a failure is cut down by the structural shrinker (shrink.cpp).
AttentionInput layer_input(const Domain& dom) {
  AttentionInput a = realistic_format(dom);
  a.num_heads = 32;
  a.num_kv_heads = (dom.features & AC_FEAT_GQA) ? 8 : 32;
  a.seqlens_q = {dom.layer_tokens};
  a.seqlens_k = {dom.layer_tokens};
  a.causal = (dom.features & AC_FEAT_CAUSAL) && *g::arbitrary<bool>();
  const double sigma = *g::element(1.0, 3.0);
  const uint64_t seed = *any_seed();
  const int64_t T = dom.layer_tokens, D = a.head_size;
  a.softmax_scale = float(1.0 / std::sqrt(double(D)));
  // Uniform entries of variance 1 (q) and sigma^2 (k): scores q.k / sqrt(d) then have variance sigma^2.
  uniform_fill(a.dtype, seed, a.q, T * a.num_heads * D, 1, std::sqrt(3.0));
  uniform_fill(a.dtype, seed, a.k, T * a.num_kv_heads * D, 2, std::sqrt(3.0) * sigma);
  uniform_fill(a.dtype, seed, a.v, T * a.num_kv_heads * D, 3, 1.0);
  return a;
}

// Attention whose K and V hold at least dom.streamed_kv_bytes together (streamed_kv_input).
AttentionInput streamed_input(const Domain& dom) {
  AttentionInput a = realistic_format(dom);
  a.num_heads = a.num_kv_heads = kStreamedHeads;
  const int64_t D = a.head_size, per_key = 2 * int64_t(a.num_kv_heads) * D * dtype_bytes(a.dtype);
  const int64_t keys =
      std::max<int64_t>(1, (dom.streamed_kv_bytes + per_key - 1) / per_key) + kStreamedPartialKeys;
  a.seqlens_q = {kStreamedQueries};
  a.seqlens_k = {int32_t(std::min<int64_t>(keys, INT32_MAX))};
  const uint64_t seed = *any_seed();
  a.softmax_scale = float(1.0 / std::sqrt(double(D)));
  // Scores of variance 1 after the 1/sqrt(d) scale (as the layer's with sigma 1).
  uniform_fill(a.dtype, seed, a.q, int64_t(kStreamedQueries) * a.num_heads * D, 1, std::sqrt(3.0));
  uniform_fill(a.dtype, seed, a.k, keys * a.num_kv_heads * D, 2, std::sqrt(3.0));
  uniform_fill(a.dtype, seed, a.v, keys * a.num_kv_heads * D, 3, 1.0);
  return a;
}

}  // namespace

namespace {

// The longest key row attention_with and attention_batch_input draw: max_keys (long rows, past
// 256) or 64, or two of the subject's key tiles and 8.
int longest_key_row(const Domain& dom) {
  return std::max({dom.max_keys > 256 ? dom.max_keys : std::min(dom.max_keys, 64),
                   dom.tile_keys > 0 ? 2 * dom.tile_keys + 8 : 0, 1});
}

// The most heads and the largest head size those generators draw: 2 KV heads with up to 8 query
// heads each under GQA.
AttentionShape widest_heads(const Domain& dom) {
  AttentionShape a;
  a.kv_heads = 2;
  a.heads = (dom.features & AC_FEAT_GQA) ? 16 : 2;
  a.head_size = *std::max_element(dom.head_sizes.begin(), dom.head_sizes.end());
  return a;
}

}  // namespace

std::vector<AttentionShape> largest_attention_shapes(const Domain& dom) {
  // attention_with: up to 2 KV heads with up to 8 query heads each under GQA; up to 3 sequences
  // under varlen; keys up to max_keys (long rows) or 64, or two tiles and 8; queries up to
  // max_tokens, the first sequence's up to its keys + 3 where empty rows come from causal
  // alignment (a subject that refuses zero keys).
  AttentionShape a = widest_heads(dom);
  const int64_t nseq = (dom.features & AC_FEAT_VARLEN) ? 3 : 1;
  const int64_t tk = longest_key_row(dom);
  for (int64_t s = 0; s < nseq; ++s) {
    const bool causal_empty = s == 0 && !dom.zero_keys && (dom.features & AC_FEAT_CAUSAL);
    a.seqlens_q.push_back(causal_empty ? std::max<int64_t>(dom.max_tokens, tk + 3) : dom.max_tokens);
    a.seqlens_k.push_back(tk);
  }
  std::vector<AttentionShape> out{a};
  if (dom.layer_tokens > 0) {
    // layer_input.
    AttentionShape l;
    l.heads = 32;
    l.kv_heads = (dom.features & AC_FEAT_GQA) ? 8 : 32;
    l.head_size = realistic_head_size(dom);
    l.seqlens_q = l.seqlens_k = {dom.layer_tokens};
    out.push_back(l);
  }
  return out;
}

AttentionShape largest_streamed_shape(const Domain& dom) {
  // streamed_input, at its widest format (fp32's 4 bytes need the fewest keys; 2 bytes the most).
  AttentionShape a;
  a.heads = a.kv_heads = kStreamedHeads;
  a.head_size = realistic_head_size(dom);
  const int64_t per_key = 2 * a.kv_heads * a.head_size * 2;
  a.seqlens_q = {kStreamedQueries};
  a.seqlens_k = {std::max<int64_t>(1, (dom.streamed_kv_bytes + per_key - 1) / per_key) +
                 kStreamedPartialKeys};
  return a;
}

std::pair<int64_t, int64_t> largest_softmax_shape(const Domain& dom) {
  // softmax_input: up to 4 rows of up to max_keys (long rows) or 64 columns; the overflow band's
  // up to 3 rows of 32.
  return {4, std::max(dom.max_keys > 256 ? dom.max_keys : std::min(dom.max_keys, 64), 1)};
}

std::pair<int64_t, int64_t> largest_merge_shape(const Domain& dom) {
  // merge_input: up to 4 tokens of up to 4 heads.
  return {16, *std::max_element(dom.head_sizes.begin(), dom.head_sizes.end())};
}

rc::Gen<AttentionInput> attention_input(const Domain& dom) {
  return g::exec([dom] {
    // Only the long suite draws the layer: the pick is made only there, so other runs' case
    // streams are unchanged.
    if (dom.layer_tokens > 0 && pick_class(4) == 0) return layer_input(dom);
    const int kind = pick_class(8);
    ShapeChoice c;
    c.empty_rows = kind == 0;
    c.overflow_band = kind == 1;
    return attention_with(dom, c);
  });
}
rc::Gen<AttentionInput> attention_streamed_input(const Domain& dom) {
  return g::exec([dom] { return streamed_input(dom); });
}
rc::Gen<AttentionInput> attention_empty_rows_input(const Domain& dom) {
  return g::exec([dom] {
    ShapeChoice c;
    c.empty_rows = true;
    return attention_with(dom, c);
  });
}
namespace {
// An FP8 property's input before its quantisation: drawn without an FP8 cache and unpaged (a
// poisoned slot's codes neither scale nor leave the descales alone).
AttentionInput unquantised_contiguous(const Domain& dom) {
  gen::Domain plain = dom;
  plain.kv_dtypes = 0;
  plain.variants &= ~uint32_t(AC_VAR_PAGED_KV);
  return attention_with(plain, ShapeChoice{});
}
}  // namespace
namespace {
// The plain contract for a case whose logits the generator sets through one-hot queries: scale 1,
// and every row sees every key with key 0 setting its max (no cap to squash the logits, no mask,
// window or causal cut, no sink).
void one_hot_plain(AttentionInput& a) {
  a.softmax_scale = 1.0f;
  a.softcap = 0.0f;
  a.sinks.clear();
  a.window_left = a.window_right = -1;
  a.causal = false;
  a.mask.clear();
}
// Whether the subject's call limits (ac_caps max_call_*) take the long row.
bool fits_fp8_long_row(const Domain& dom) {
  return dom.max_call_keys == 0 || dom.max_call_keys >= kFp8LongRowKeys;
}
// The long row, V = 1 to be set after quantisation: one query, one-hot on coordinate 0 (scale 1),
// key 0 at logit 0 and every other key at -1/16, -2/16 or -3/16 (bulk draws from one seed, so that
// a failure shrinks by that one draw); no mask, window, cap or sink. Key 0 leads, so the max never
// moves and O is never rescaled: O = 1. Its cost is in K's and V's elements, hence one head at the
// smallest head size. Every weight but key 0's sits just below it, so P = e4m3fn(256 p) is 240, 224
// or 208, off the grids of 128 and 256 that an accumulator of 13 bits has from 2^20 and 2^21 on:
// one that keeps a row's P V there (the e4m3 tensor cores' across key tiles, mutant 37) cuts each
// later product to 128 and then, past 2^21, to 0, and ends about 43% low at this length, where O's
// budget allows about 13% (tests/mutants "mutant 37" derives the stall by hand).
void fp8_long_row(const Domain& dom, AttentionInput& a) {
  const AttentionShape shape = fp8_long_row_shape(dom);
  a.num_kv_heads = int32_t(shape.kv_heads);
  a.num_heads = int32_t(shape.heads);
  a.head_size = int32_t(shape.head_size);
  a.head_size_v = 0;
  a.seqlens_q = {1};
  a.seqlens_k = {kFp8LongRowKeys};
  one_hot_plain(a);
  a.v_in_k = false;
  const int64_t D = a.head_size;
  const uint32_t zero = round_bits(a.dtype, 0.0), one = round_bits(a.dtype, 1.0);
  a.q.assign(size_t(D), zero);
  a.q[0] = one;
  a.k.assign(size_t(kFp8LongRowKeys * D), zero);
  a.v.assign(size_t(kFp8LongRowKeys * D), one);
  const BulkDraws bulk(true);
  for (int64_t j = 1; j < kFp8LongRowKeys; ++j)
    a.k[size_t(j * D)] = round_bits(a.dtype, -double(draw(1, 4)) / 16);
}
}  // namespace
AttentionShape fp8_long_row_shape(const Domain& dom) {
  AttentionShape a;
  a.head_size = *std::min_element(dom.head_sizes.begin(), dom.head_sizes.end());
  a.seqlens_q = {1};
  a.seqlens_k = {kFp8LongRowKeys};
  return a;
}
rc::Gen<AttentionInput> attention_fp8_kv_input(const Domain& dom) {
  return g::exec([dom] {
    // Unquantised and unpaged (the exchange needs every stored code scalable), then quantised with
    // descales of at least 4 amax / largest: the codes stay within a quarter of the largest, so
    // that doubling them twice stays exact.
    AttentionInput a = unquantised_contiguous(dom);
    // V = 1 everywhere in a quarter of the cases (descale 1): every row that sees a key has O = 1,
    // whatever its weights, unless P is lost on the way (mass conservation).
    const int kind = pick_class(4);
    const bool ones = kind == 0;
    if (ones && pick_class(4) != 0 && fits_fp8_long_row(dom)) fp8_long_row(dom, a);
    if (kind == 1) {
      // Small weights in another quarter: every query one-hot on coordinate 0 (scale 1), key 0 of
      // each sequence at logit 0 with V = 0, every other key at a logit in [-9.25, -7.5] with V = 1.
      // Each row has O = sum_(j>0) p_j / l: all of it in weights e^-9.25 .. e^-7.5 (7e-5 .. 6e-4),
      // below half of e4m3fn's smallest subnormal 2^-9, to which a P cast without
      // FlashAttention-3's 2^8 offset rounds them: zero, the whole of O lost. With the offset, 256 p
      // (0.02 .. 0.14) is a normal e4m3fn number, within 2^-4 of itself.
      const int64_t Hkv = a.num_kv_heads, D = a.head_size, Dv = a.dv();
      one_hot_plain(a);
      // At least one query and 8 keys a sequence (the drawn values are replaced anyway): 7 small
      // weights, so that a case fails by several budgets wherever they are lost, whatever its size.
      const uint32_t zero = round_bits(a.dtype, 0.0), one = round_bits(a.dtype, 1.0);
      int64_t queries = 0;
      for (int32_t& tq : a.seqlens_q) queries += tq = std::max(tq, 1);
      a.q.assign(size_t(queries * a.num_heads * D), zero);
      for (size_t i = 0; i < a.q.size(); i += size_t(D)) a.q[i] = one;
      int64_t total = 0;
      for (int32_t& tk : a.seqlens_k) total += tk = std::max(tk, 8);
      a.k.assign(size_t(total * Hkv * D), zero);
      a.v.assign(size_t(total * Hkv * Dv), zero);
      int64_t first = 0;
      for (const int32_t tk : a.seqlens_k) {
        for (int64_t j = 0; j < tk; ++j)
          for (int64_t g = 0; g < Hkv; ++g) {
            const int64_t row = (first + j) * Hkv + g;
            a.k[size_t(row * D)] = round_bits(a.dtype, j == 0 ? 0.0 : -double(pick_in(30, 38)) / 4);
            std::fill_n(a.v.begin() + row * Dv, Dv, j == 0 ? zero : one);
          }
        first += tk;
      }
    }
    quantise_fp8_kv(dom, a, {4.0, 16.0, 0.0}, 2);
    if (ones) {
      a.v.assign(a.v.size(),
                 ref::encode_fp8(detail::fp8_format(a.kv_dtype), 1.0, ref::Fp8Overflow::saturate));
      a.v_descale.assign(a.v_descale.size(), 1.0f);
    }
    return a;
  });
}
namespace {
// O asked for in FP8 in a declared format, output_scale drawn around vmax / the format's largest
// (vmax: max |V| before quantisation, |O| <= vmax since each row is a convex combination of V's).
void ask_fp8_output(const Domain& dom, AttentionInput& a, double vmax) {
  a.out_dtype = *g::elementOf(declared_fp8_formats(dom.kv_dtypes));
  const double largest = ref::fp8_spec(detail::fp8_format(a.out_dtype)).largest;
  const double unit = vmax > 0 ? vmax / largest : 1.0;
  // 1: the largest |O| lands at most on the largest code; 1/4: rows past it (saturated, or the
  // format's NaN / infinity where the subject does not saturate); 4 and 1024: the lower codes and
  // the subnormals; 0: a power of two (the division exact).
  const double factor = *g::element(1.0, 0.25, 4.0, 1024.0, 0.0);
  a.output_scale = fp8_output_scale(unit, factor);
}
// max |V| over the finite values of an unquantised input.
double max_abs_v(const AttentionInput& a) {
  double vmax = 0;
  for (const uint32_t b : a.v) {
    const double x = std::fabs(detail::decode(a.dtype, b));
    if (std::isfinite(x)) vmax = std::max(vmax, x);
  }
  return vmax;
}
}  // namespace
float fp8_output_scale(double unit, double factor) {
  const double scale = factor > 0 ? unit * factor : std::ldexp(1.0, std::ilogb(unit) + 1);
  // An fp32 V of a few subnormal ulps gives a unit that rounds to 0 in fp32: no contract's scale
  // (positive and finite), nor one a case file can carry. fp32's smallest normal is the floor.
  return std::max(float(scale), 0x1p-126f);
}
rc::Gen<AttentionInput> attention_fp8_output_input(const Domain& dom) {
  return g::exec([dom] {
    // Unpaged (a poisoned slot's huge values would set the descales) and quantised in every case.
    AttentionInput a = unquantised_contiguous(dom);
    const double vmax = max_abs_v(a);
    quantise_fp8_kv(dom, a, {1.0, 0.5, 4.0, 0.0}, 0);
    ask_fp8_output(dom, a, vmax);
    return a;
  });
}
rc::Gen<AttentionInput> attention_fp8_amax_input(const Domain& dom) {
  return g::exec([dom] {
    // Every row judged (rows are sampled only far above the domain's sizes), quantised as for
    // fp8_output; O in FP8 too in half the cases where the subject declares it (amax[1] is O's
    // before output_scale).
    AttentionInput a = unquantised_contiguous(dom);
    const double vmax = max_abs_v(a);
    quantise_fp8_kv(dom, a, {1.0, 0.5, 4.0, 0.0}, 0);
    if ((dom.fp8 & AC_FP8_OUT) && pick_class(2) == 0) ask_fp8_output(dom, a, vmax);
    a.want_amax = true;
    return a;
  });
}
rc::Gen<AttentionInput> attention_overflow_band_input(const Domain& dom) {
  return g::exec([dom] {
    ShapeChoice c;
    c.overflow_band = true;
    return attention_with(dom, c);
  });
}
int batch_limit(const Domain& dom) {
  const int run = dom.max_batch > 0 ? dom.max_batch : kMaxBatchHost;
  return dom.max_call_seqs > 0 ? std::min(run, dom.max_call_seqs) : run;
}

// The longest query range of a batch neighbour: past 128 queries of one KV head's group.
int batch_max_queries(const Domain& dom) { return std::max(dom.max_tokens, 130); }

namespace {

// q, k and v of `a`'s shape uniform of variance 1 from one drawn seed, scale 1/sqrt(d): the
// high-entropy values of the batch and prefill cases (constant or impulse values hide a changed
// fold order).
void fill_unit_variance(AttentionInput& a) {
  int64_t T = 0, Tk = 0;
  for (size_t s = 0; s < a.seqlens_q.size(); ++s) {
    T += a.seqlens_q[s];
    Tk += a.seqlens_k[s];
  }
  const uint64_t seed = *any_seed();
  const int64_t D = a.head_size;
  a.softmax_scale = float(1.0 / std::sqrt(double(D)));
  uniform_fill(a.dtype, seed, a.q, T * a.num_heads * D, 1, std::sqrt(3.0));
  uniform_fill(a.dtype, seed, a.k, Tk * a.num_kv_heads * D, 2, std::sqrt(3.0));
  uniform_fill(a.dtype, seed, a.v, Tk * a.num_kv_heads * D, 3, std::sqrt(3.0));
}

}  // namespace

rc::Gen<AttentionInput> attention_batch_input(const Domain& dom) {
  return g::exec([dom] {
    AttentionInput a;
    a.dtype = *g::elementOf(dom.dtypes);
    a.head_size = *g::elementOf(dom.head_sizes);
    const bool gqa = (dom.features & AC_FEAT_GQA) != 0;
    a.num_kv_heads = int32_t(pick_in(1, 3));
    const int group = gqa ? *g::element(1, 2, 4, 8) : 1;
    a.num_heads = a.num_kv_heads * group;
    const int min_tk = dom.zero_keys ? 0 : 1, max_tk = longest_key_row(dom);
    const bool long_rows = dom.max_keys > 256;
    // One sequence of a kind: 0 decode (one query), 1 prefill (queries up to max_tokens), 2 empty
    // key range (or one key where zero keys are refused), 3 a query range of group x Tq near 64 or
    // 128, 4 a long row.
    auto sequence = [&](int kind) {
      int tq = 1, tk = 1;
      switch (kind) {
        case 0:
          tk = pick_in(std::max(min_tk, 1), max_tk + 1);
          break;
        case 1:
          tq = *g::inRange(1, dom.max_tokens + 1);
          tk = pick_in(min_tk, std::min(max_tk, 64) + 1);
          break;
        case 2:
          tq = *g::inRange(1, dom.max_tokens + 1);
          tk = min_tk;
          break;
        case 3: {
          const int target = *g::element(63, 64, 65, 127, 128, 129);
          tq = std::max(1, (target + group - 1) / group);
          tk = pick_in(std::max(min_tk, 1), std::min(max_tk, 64) + 1);
          break;
        }
        default:
          tq = *g::inRange(1, dom.max_tokens + 1);
          tk = long_rows ? *g::inRange(dom.max_keys / 2, dom.max_keys + 1) : max_tk;
      }
      if (dom.max_call_tokens > 0) tq = std::min(tq, dom.max_call_tokens);
      a.seqlens_q.push_back(tq);
      a.seqlens_k.push_back(tk);
    };
    // How many neighbours: a few, up to the limit, or the limit itself (past the SM count on a
    // device); their kinds mixed, or all decode rows (a decode batch that one prefill row joins:
    // the victim).
    const int limit = batch_limit(dom);
    const int size_class = pick_class(4);
    const int neighbours = size_class <= 1   ? pick_in(0, std::min(limit, 4))
                           : size_class == 2 ? pick_in(0, limit)
                                             : limit - 1;
    // The batch's longest query range is one sequence's: at most one neighbour takes the 64 / 128
    // band (kind 3), so the band costs one sequence, not many.
    const bool decode_batch = pick_class(3) == 0;
    const int victim_kind = pick_class(5);
    const int position = neighbours == 0 ? 0 : *g::element(0, neighbours / 2, neighbours);
    const int banded =
        neighbours > 0 && victim_kind != 3 && pick_class(3) == 0 ? pick_in(0, neighbours + 1) : -1;
    for (int i = 0; i <= neighbours; ++i) {
      const int other = decode_batch ? 0 : *g::element(0, 1, 2, 4);
      sequence(i == position ? victim_kind : i == banded ? 3 : other);
    }
    // Within the subject's declared call limits: neighbours dropped from the end (the victim kept)
    // until the batch's query tokens and keys fit.
    auto over = [&] {
      int64_t tokens = 0, keys = 0;
      for (size_t i = 0; i < a.seqlens_q.size(); ++i) {
        tokens += a.seqlens_q[i];
        keys += a.seqlens_k[i];
      }
      return (dom.max_call_tokens > 0 && tokens > dom.max_call_tokens) ||
             (dom.max_call_keys > 0 && keys > dom.max_call_keys);
    };
    for (size_t victim = size_t(position); over() && a.seqlens_q.size() > 1;) {
      const size_t drop = a.seqlens_q.size() - 1 == victim ? victim - 1 : a.seqlens_q.size() - 1;
      a.seqlens_q.erase(a.seqlens_q.begin() + std::ptrdiff_t(drop));
      a.seqlens_k.erase(a.seqlens_k.begin() + std::ptrdiff_t(drop));
      if (drop < victim) --victim;
    }
    if (dom.features & AC_FEAT_CAUSAL) a.causal = pick_class(3) == 0;
    if ((dom.features & AC_FEAT_MASK) && pick_class(4) == 0)
      for (size_t s = 0; s < a.seqlens_q.size(); ++s) {
        const auto m = *any_mask(a.seqlens_q[s], a.seqlens_k[s]);
        a.mask.insert(a.mask.end(), m.begin(), m.end());
      }
    fill_unit_variance(a);
    // The call-wide variants (a cap, a window, sinks) and a paged pool shared by the whole batch:
    // batch_invariance pages each victim alone again (its own pages, the same page size).
    with_variants(dom, a);
    return a;
  });
}

constexpr int kPrefillGroup = 4;

rc::Gen<AttentionInput> attention_prefill_input(const Domain& dom) {
  return g::exec([dom] {
    AttentionInput a;
    a.dtype = *g::elementOf(dom.dtypes);
    a.head_size = *g::elementOf(dom.head_sizes);
    a.num_kv_heads = int32_t(*g::inRange(1, 3));
    // Groups to kPrefillGroup (a prompt's every query is a row, so heads cost more here than in a
    // decode case).
    a.num_heads = a.num_kv_heads * ((dom.features & AC_FEAT_GQA) ? *g::element(1, 2, kPrefillGroup) : 1);
    const int T = *g::inRange(2, std::max(2, longest_key_row(dom)) + 1);
    a.seqlens_q = {T};
    a.seqlens_k = {T};
    a.causal = true;
    fill_unit_variance(a);
    // The engines prefill through their caches, with their models' variants: each declared one in
    // some cases (with_variants), paged K / V among them.
    with_variants(dom, a);
    return a;
  });
}

AttentionShape largest_prefill_shape(const Domain& dom) {
  // attention_prefill_input: one sequence of the longest key row, queries as many; widest_heads'
  // KV heads and head size, with groups of at most kPrefillGroup.
  AttentionShape a = widest_heads(dom);
  a.heads = a.kv_heads * ((dom.features & AC_FEAT_GQA) ? kPrefillGroup : 1);
  a.seqlens_q = {std::max(2, longest_key_row(dom))};
  a.seqlens_k = a.seqlens_q;
  return a;
}

AttentionShape largest_batch_shape(const Domain& dom) {
  // attention_batch_input: batch_limit sequences of the longest queries and keys a kind draws.
  AttentionShape a = widest_heads(dom);
  a.seqlens_q.assign(size_t(batch_limit(dom)), batch_max_queries(dom));
  a.seqlens_k.assign(size_t(batch_limit(dom)), longest_key_row(dom));
  return a;
}

rc::Gen<AttentionInput> attention_split_input(const Domain& dom) {
  return g::exec([dom] {
    ShapeChoice c;
    c.split = true;
    return attention_with(dom, c);
  });
}

// ---- the KV-cache quantiser (AC_OP_QUANTIZE) ---------------------------------------------------

namespace {

// One scale: 1, a power of two (2^-10 .. 2^10: the quotient is x shifted, ties stay ties), any fp32
// value in 2^-12 .. 2^7 with a full mantissa (the fp32 quotient then rounds, next to ties too), or a
// power of two a few fp32 ulps off: a tie times it is stored as the tie shifted, in any input dtype,
// so its quotient lies a few fp32 ulps from the tie, where only a quotient of one correctly rounded
// division lands on the contract's side (x times a rounded 1 / scale, for one, may not).
// The exponent is drawn before the mantissa, each into its own variable: as two arguments of one
// call their order would be the compiler's (g++ evaluates ldexp's right to left, clang++ left to
// right), and a seed would draw different cases under each.
float quantize_scale() {
  switch (pick_class(4)) {
    case 0:
      return 1.0f;
    case 1:
      return std::ldexp(1.0f, draw(-10, 11));
    case 2: {
      const int e = draw(-12, 8);
      const int m = draw(0, 1 << 23);
      return std::ldexp(1.0f + float(m) * 0x1p-23f, e);
    }
    default: {
      const int e = draw(-10, 11);
      const int m = draw(-3, 4);
      return std::ldexp(1.0f + float(m) * 0x1p-23f, e);
    }
  }
}

// One element of x for scale s: the quotient x / s it aims at, by the contract's hazards, stored
// in dtype d (one rounding of target * s, which may overflow d: an infinite x is a hazard too).
uint32_t quantize_element(ac_dtype d, ref::Fp8Format f, double s) {
  const ref::Fp8Spec& sp = ref::fp8_spec(f);
  const double L = sp.largest;
  const double step_at_largest = std::ldexp(1.0, std::ilogb(L) - sp.mantissa_bits);
  const double tiny = std::ldexp(1.0, sp.quantum_min);
  const double sign = draw_bool() ? -1.0 : 1.0;
  // The value of positive code c of the format, the code past the largest being L + one step (where
  // a wider exponent would put it): the ties are halfway between neighbours.
  auto code_value = [&](int c) {
    return c > sp.largest_code ? L + step_at_largest : ref::decode_fp8(f, uint8_t(c));
  };
  double target = 0;
  switch (pick_class(6)) {
    case 0: {  // anywhere in the format's range and a little past both ends
      const int e = draw(sp.quantum_min - 2, std::ilogb(L) + 3);
      target = std::ldexp(1.0 + draw(0, 4096) / 4096.0, e);
      break;
    }
    case 1:    // a tie between two neighbouring codes (the last one: the overflow threshold)
    case 2: {  // or next to one, by 2^-k relatively
      const int c = draw(0, sp.largest_code + 1);
      target = (code_value(c) + code_value(c + 1)) / 2;
      if (pick_class(2) == 1) {
        const double side = draw_bool() ? 1 : -1;
        target *= 1.0 + side * std::ldexp(1.0, -draw(8, 13));
      }
      break;
    }
    case 3:  // around the largest value: saturated or overflowing, or the largest itself
      target = L * (1.0 + draw(-2, 9) / 32.0);
      break;
    case 4:  // around the smallest subnormal: the ties to zero and to it
      target = tiny * (*g::element(0.25, 0.5, 0.75, 1.0, 1.5, 2.5));
      break;
    default: {  // x itself special: infinities, NaN, zeros, the largest and the smallest of d
      const double dmax = detail::decode(d, d == AC_DTYPE_F32   ? 0x7f7fffffu
                                            : d == AC_DTYPE_F16 ? 0x7bffu
                                                                : 0x7f7fu);
      const double x = *g::element(INFINITY, -INFINITY, NAN, 0.0, -0.0, dmax, -dmax, 1.0);
      if (std::isnan(x)) return d == AC_DTYPE_F32 ? 0x7fc00000u : d == AC_DTYPE_F16 ? 0x7e00u : 0x7fc0u;
      return round_bits(d, x);
    }
  }
  return round_bits(d, sign * target * s);
}

}  // namespace

rc::Gen<QuantizeInput> quantize_input(const Domain& dom) {
  return g::exec([dom] {
    QuantizeInput q;
    q.dtype = *g::elementOf(dom.dtypes);
    q.out_dtype = *g::elementOf(declared_fp8_formats(dom.kv_dtypes));
    q.num_tokens = pick_in(1, 5);
    q.num_heads = pick_in(1, 5);
    q.head_size = *g::elementOf(dom.head_sizes);
    const bool per_head = (dom.fp8 & AC_FP8_DESCALE_PER_KV_HEAD) && q.num_heads > 1 && pick_class(2) == 1;
    for (int32_t h = 0; h < (per_head ? q.num_heads : 1); ++h) q.scales.push_back(quantize_scale());
    const ref::Fp8Format f = detail::fp8_format(q.out_dtype);
    q.x.resize(size_t(q.num_tokens) * size_t(q.num_heads) * size_t(q.head_size));
    for (size_t i = 0; i < q.x.size(); ++i)
      q.x[i] = quantize_element(q.dtype, f,
                                double(q.scale_of_head(int64_t(i / size_t(q.head_size)) % q.num_heads)));
    return q;
  });
}

std::pair<int64_t, int64_t> largest_quantize_shape(const Domain& dom) {
  // quantize_input: up to 4 tokens of up to 4 heads, of the widest head size.
  return {16, *std::max_element(dom.head_sizes.begin(), dom.head_sizes.end())};
}

}  // namespace attncheck::gen
