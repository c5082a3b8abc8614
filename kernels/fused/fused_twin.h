// Host twin core of the fused attention forward, shared by the fused twin (fused_host.cpp) and the
// split-KV twin (kernels/splitkv/splitkv_host.cpp), and through them by the attention mutants:
// decodes a call's tensors once, views one (sequence, head), and walks it as the CUDA kernel
// does, row tiles of Br, key tiles of Bc from the start of the key range, with the per-element math
// of fused_math.h. Rounding points as on the GPU: the dot product in fp32, P rounded to the input
// type before P V, m / l / O in fp32. An FP8 KV cache: codes decoded exactly, K's descale folded
// into the softmax scale (one fp32 rounding), V's multiplied into each value (one fp32 rounding
// each) or, for a kernel that applies it to the output, into O (VDescale). Q in FP8 (AC_FP8_Q): its
// codes decoded exactly, its descale folded into the softmax scale before K's (one fp32 rounding
// more); P in e4m3fn with the offset 2^8 where the subject declares it (AC_FP8_P_E4M3, p_e4m3), or
// with the call's p_scale (AC_FP8_P_SCALE): p_scale p rounded to fp32, then to e4m3fn, read back
// times the fp32 reciprocal of p_scale. O in FP8 (AC_FP8_OUT, fused_host.cpp store_row): the fp32
// element divided by output_scale in fp32, then one saturating cast to the format.
// It does not match the GPU bit for bit (the tensor core sums in another order, exp2 differs), it
// computes the same function with the same hazards. V and O have head_size_v columns (AC_VAR_HEAD_SIZE_V), K
// and Q head_size; nothing else changes. Mutation switch: decode_args<M>, head_view<M> and twin_row_tile<M>
// take the fused::Mutation of fused_math.h; Mutation::none is the correct twin. Check: ctest --test-dir build
// -R kernels_attention_twin
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "attncheck/plugin_abi.h"
#include "common/storage.h"
#include "fused/fused.h"
#include "fused/fused_math.h"

namespace attncheck::kern::fused {

// One (sequence, head) problem as the twin sees it: rows of Q and K/V already decoded to float
// (exact: fp16/bf16 values are floats), pointers to the first row (paged: to the pool's first
// slot), strides in elements, and the call's variants.
struct TwinHeadView {
  DType dtype;
  int head_size;
  int64_t tq, tk;  // queries and keys of the sequence
  const float* q;  // row t at q + t * q_stride
  const float* k;  // key j at k + slot(j) * kv_stride (slot: kv_slot, the key itself unpaged)
  const float* v;  // key j at v + slot(j) * v_stride, head_size_v columns
  int64_t q_stride, kv_stride;
  const uint8_t* mask;  // [tq, tk] or null
  bool causal;
  float scale_log2;  // softmax_scale * log2 e, rounded to float once
  // The variants (plugin_abi.h AC_VAR_*), neutral when the call does not use them.
  int head_size_v = 0;
  int64_t v_stride = 0;
  float scale = 0.0f, softcap = 0.0f;  // the softmax scale itself, and the cap (0: none)
  int window_left = -1, window_right = -1;
  float sink2 = neg_inf_f();       // the row's sink times log2 e, -inf without one
  const int32_t* table = nullptr;  // this sequence's block-table row, null unpaged
  int page_size = 0;
  int64_t last_page = 0;  // index of the sequence's last page in its table row
  // An FP8 cache whose V descale the kernel applies to the output (VDescale::output): the head's
  // descale; 1 otherwise (a product by 1 is exact).
  float v_descale = 1.0f;
  // AC_FP8_P_E4M3 in an FP8 call: P held in e4m3fn with the offset 2^8 (fused_math.h p_e4m3), not
  // rounded to the input type; or with the call's p_scale (AC_FP8_P_SCALE) and its fp32 reciprocal.
  bool p_e4m3 = false;
  float p_scale = 256.0f, p_inv = 0x1p-8f;
};

// Where a kernel applies an FP8 cache's V descale. values: to each decoded V value before P V, one
// fp32 rounding each (a kernel that dequantises V tiles to fp32; the fused twin). output: to the
// normalised output, once per row and part, after P V on the codes themselves (FlashAttention-3's
// contract, which lets the tensor cores take V's codes exactly: splitkv-packed and its twin, the
// split-KV twin).
enum class VDescale { values, output };

// Decode a stored tensor of n elements to floats.
inline std::vector<float> decode_tensor(DType t, const void* data, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (t == DType::f32) {
    const float* f = static_cast<const float*>(data);
    std::copy(f, f + n, out.begin());
  } else {
    const uint16_t* b = static_cast<const uint16_t*>(data);
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = load_as_float(t, b[i]);
  }
  return out;
}

// n FP8 codes of format kv_dtype (AC_DTYPE_E4M3 / AC_DTYPE_E5M2) decoded to floats (exact).
// The 256 values fp8_to_float gives an FP8 cache's codes: a long row decodes by lookup.
inline std::array<float, 256> fp8_values(int kv_dtype) {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[size_t(c)] = fp8_to_float(kv_dtype, uint8_t(c));
  return t;
}

inline std::vector<float> decode_codes(int kv_dtype, const void* data, int64_t n) {
  const auto* c = static_cast<const uint8_t*>(data);
  const std::array<float, 256> values = fp8_values(kv_dtype);
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = values[c[i]];
  return out;
}

// The tensors of one call, decoded once, and its head counts (group = h / h_kv query heads per
// KV head).
struct TwinArgs {
  DType dtype;
  int d, h, hkv, group;
  int64_t total_q;
  std::vector<float> q, k, v;
  int dv = 0;                // V's and O's head size
  std::vector<float> sinks;  // per query head, host copy (empty: none)
  VDescale v_descale_at = VDescale::values;
};

// Sequence s's KV head kvh's descale: one per tensor (granularity 0), one per KV head (1) or one
// per (sequence, KV head) (2); host memory (the twins' calls).
inline float descale_of(const ac_attention_args& a, const float* d, int s, int kvh) {
  return a.descale_granularity == 2   ? d[int64_t(s) * a.num_kv_heads + kvh]
         : a.descale_granularity == 1 ? d[kvh]
                                      : d[0];
}

// M: mutant 25 (fused_math.h v_row_elems) reads V rows of the QK head size; what lies past V's
// last element then reads as NaN here (on the GPU, whatever memory follows V).
template <Mutation M = Mutation::none>
TwinArgs decode_args(const ac_attention_args& a, VDescale v_descale_at = VDescale::values) {
  TwinArgs x{DType(a.dtype),
             a.head_size,
             a.num_heads,
             a.num_kv_heads,
             a.num_heads / a.num_kv_heads,
             a.cu_seqlens_q_host[a.num_seqs],
             {},
             {},
             {},
             head_size_v_of(a),
             {},
             v_descale_at};
  // Paged K / V: the whole pool is decoded (what the walk reads of it is its business).
  const int64_t kv_rows =
      a.page_size > 0 ? int64_t(a.num_pages) * a.page_size : a.cu_seqlens_k_host[a.num_seqs];
  // Q in FP8 (AC_FP8_Q): codes decoded exactly; the descale joins the softmax scale (head_view).
  x.q = a.q_descale ? decode_codes(int(a.kv_dtype), a.q, x.total_q * x.h * x.d)
                    : decode_tensor(x.dtype, a.q, x.total_q * x.h * x.d);
  // V inside K (AC_VAR_V_IN_K): V's (row, KV head) is the first dv values of K's, v == k. Mutant 33
  // reads it at V's own stride (row r's V from element r dv of K's storage).
  const int64_t v_width = a.v_in_k && M != Mutation::v_in_k_own_stride ? x.d : x.dv;
  if (fp8_kv(a)) {
    // An FP8 cache: K's codes decoded exactly (its descale joins the softmax scale, head_view), V's
    // decoded and, under VDescale::values, multiplied by their KV head's descale in fp32 (one
    // rounding each); under VDescale::output left as codes (head_view carries the descale).
    const auto* vc = static_cast<const uint8_t*>(a.v);
    x.k = decode_codes(int(a.kv_dtype), a.k, kv_rows * x.hkv * x.d);
    const std::array<float, 256> values = fp8_values(int(a.kv_dtype));
    x.v.resize(size_t(kv_rows * x.hkv * x.dv));
    for (int64_t rh = 0; rh < kv_rows * x.hkv; ++rh) {  // (row, KV head)
      const int kvh = int(rh % x.hkv);
      // Under VDescale::values the granularity is 0 or 1 (per sequence needs ArgScope::fp8_per_sequence,
      // which only VDescale::output kernels set).
      const float d = v_descale_at == VDescale::output ? 1.0f : descale_of(a, a.v_descale, 0, kvh);
      const uint8_t* codes = vc + rh * v_width;
      float* out = x.v.data() + rh * x.dv;
      for (int c = 0; c < x.dv; ++c) {
        const float code = values[codes[c]];
        out[c] = M == Mutation::fp8_v_descale_ignored ? code
                 : M == Mutation::fp8_v_descale_twice ? code * d * d
                                                      : code * d;
      }
    }
  } else {
    x.k = decode_tensor(x.dtype, a.k, kv_rows * x.hkv * x.d);
    if (a.v_in_k) {
      x.v.resize(size_t(kv_rows * x.hkv * x.dv));
      for (size_t i = 0; i < x.v.size(); ++i)
        x.v[i] = x.k[size_t(int64_t(i) / x.dv * v_width + int64_t(i) % x.dv)];
    } else {
      x.v = decode_tensor(x.dtype, a.v, kv_rows * x.hkv * x.dv);
    }
  }
  if (const int vw = v_row_elems<M>(x.d, x.dv); vw > x.dv)
    x.v.resize(size_t(kv_rows * x.hkv * vw), std::numeric_limits<float>::quiet_NaN());
  if (a.sinks) x.sinks.assign(a.sinks, a.sinks + a.num_heads);  // host memory: the twins' calls
  return x;
}

// The view of (sequence s, query head `head`), reading the KV head kv_head_of<M> picks (mutant 9
// changes exactly that) and V rows of v_row_elems<M> elements (mutant 25 that).
template <Mutation M = Mutation::none>
TwinHeadView head_view(const ac_attention_args& a, const TwinArgs& x, int s, int head) {
  const int64_t q0 = a.cu_seqlens_q_host[s], k0 = a.page_size > 0 ? 0 : a.cu_seqlens_k_host[s];
  const int kvh = kv_head_of<M>(head, x.group, x.hkv), vw = v_row_elems<M>(x.d, x.dv);
  // A sequence of a call with no queries (or no keys) still gets a view; an empty tensor has no
  // base to offset (null plus an offset is undefined), and such a view reads nothing.
  auto at = [](const auto& t, int64_t offset) { return t.empty() ? nullptr : t.data() + offset; };
  TwinHeadView h{x.dtype,
                 x.d,
                 a.cu_seqlens_q_host[s + 1] - q0,
                 a.cu_seqlens_k_host[s + 1] - a.cu_seqlens_k_host[s],
                 at(x.q, (q0 * x.h + head) * x.d),
                 at(x.k, (k0 * x.hkv + kvh) * x.d),
                 at(x.v, (k0 * x.hkv + kvh) * vw),
                 int64_t(x.h) * x.d,
                 int64_t(x.hkv) * x.d,
                 a.mask ? a.mask + a.cu_mask_host[s] : nullptr,
                 a.causal != 0,
                 a.softmax_scale * kLog2e};
  h.head_size_v = x.dv;
  h.v_stride = int64_t(x.hkv) * vw;
  h.scale = a.softmax_scale;
  if (fp8_kv(a)) {
    // K's descale folded into the softmax scale, rounded once in fp32 (then times log2 e, once more);
    // Q's before it, where Q is in FP8 (FlashAttention-3's scale * q_descale * k_descale), once more.
    // Mutant 27 reads k_descale at the query head (wrapped into the array), not the KV head; mutant
    // 30 folds q_descale in twice.
    const int at = M == Mutation::fp8_descale_by_query_head
                       ? (a.descale_granularity == 1 ? head % a.num_kv_heads : 0)
                       : kvh;
    float scale = a.softmax_scale;
    if (a.q_descale) {
      const float qd = descale_of(a, a.q_descale, s, kvh);
      scale = scale * qd;
      if constexpr (M == Mutation::fp8_q_descale_twice) scale = scale * qd;
    }
    h.scale = scale * descale_of(a, a.k_descale, s, at);
    h.scale_log2 = h.scale * kLog2e;
    if (x.v_descale_at == VDescale::output) h.v_descale = descale_of(a, a.v_descale, s, kvh);
  }
  h.softcap = a.softcap;
  h.window_left = a.window_left;
  h.window_right = a.window_right;
  if (!x.sinks.empty()) h.sink2 = x.sinks[size_t(head)] * kLog2e;
  if (a.page_size > 0) {
    h.table = a.block_table_host + int64_t(s) * a.max_blocks;
    h.page_size = a.page_size;
    h.last_page = h.tk > 0 ? (h.tk - 1) / a.page_size : 0;
  }
  return h;
}

// One fp32 value as arithmetic `ar` leaves it (TwinArithmetic, fused_math.h): below 2^-126 flushed
// to a zero of its sign under ftz, then truncated toward zero to ar.mantissa_bits significant bits.
inline float twin_round(float x, TwinArithmetic ar) {
  if (ar.ftz && std::fabs(x) < 0x1p-126f) x = std::copysign(0.0f, x);
  if (ar.mantissa_bits < 24 && std::isfinite(x)) {
    uint32_t b = 0;
    std::memcpy(&b, &x, 4);
    b &= ~((1u << (24 - ar.mantissa_bits)) - 1u);
    std::memcpy(&x, &b, 4);
  }
  return x;
}

// Hopper's e4m3 tensor-core sum as measured on fused-hopper-fp8's wgmma (kernels_hopper_gpu
// "[truncated_sums]"; plugin_abi.h AC_FP8_TRUNCATED_SUMS without the budget's bit of margin): one
// instruction adds c and up to 32 products a[i] b[i] of e4m3fn values. L is the largest exponent
// field among the addends (E_a + E_b for a product of nonzero codes, a subnormal at e4m3fn's -6;
// ilogb(c) for the accumulator); each addend is truncated toward zero to a multiple of 2^(L - 13),
// and the sum kept to 13 bits after its leading one, toward zero. Every step is exact in double
// (at most 33 addends on one grid, each below 2^(L + 2)). Mutant 37's walk (twin_row_tile) sums
// P V with it; the tests emulate the device's sums with it (tests/kernels_attention/tensor_core_model.h).
constexpr int kE4m3MinExp = -6, kE4m3Frac = 3;  // e4m3fn: smallest normal 2^-6, 3 fraction bits
inline double tc_truncate_to(double x, double grid) { return std::trunc(x / grid) * grid; }
inline int tc_field(double x) { return std::max(std::ilogb(x), kE4m3MinExp); }
// A NaN addend (a NaN code's product, or c) gives NaN, as the tensor cores do.
inline double tc_instruction(double c, const double* a, const double* b, size_t n) {
  int L = c != 0 ? std::ilogb(c) : std::numeric_limits<int>::min();
  bool nan = std::isnan(c);
  for (size_t i = 0; i < n; ++i) {
    nan = nan || std::isnan(a[i] * b[i]);
    if (a[i] != 0 && b[i] != 0) L = std::max(L, tc_field(a[i]) + tc_field(b[i]));
  }
  if (nan) return std::numeric_limits<double>::quiet_NaN();
  if (L == std::numeric_limits<int>::min()) return 0;
  const double grid = std::ldexp(1.0, L - 13);
  double sum = tc_truncate_to(c, grid);
  for (size_t i = 0; i < n; ++i) sum += tc_truncate_to(a[i] * b[i], grid);
  return sum == 0 ? 0 : tc_truncate_to(sum, std::ldexp(1.0, std::ilogb(sum) - 13));
}

// The unnormalised state of one row after the key range [k_lo, k_hi): m (base-2 scaled logits),
// l, O~ (head_size floats).
struct TwinRowState {
  float m, l;
  std::vector<float> o;
};

// Runs the row tile [row0, row0 + br) over keys [k_lo, k_hi) in tiles of bc, as one CTA does, and
// returns the state of every row of the tile that exists (row < tq). f: how p is formed (fused_math.h).
// Modelled: every input and fp32 result passes through twin_round(ar) (a non-IEEE TwinArithmetic);
// false compiles the IEEE walk alone.
template <Mutation M = Mutation::none, bool Modelled = false>
std::vector<TwinRowState> twin_row_tile(const TwinHeadView& h, int64_t row0, int br, int bc, int64_t k_lo,
                                        int64_t k_hi, ExpForm f = {}, TwinArithmetic ar = {}) {
  auto fl = [ar](float x) {
    if constexpr (Modelled)
      x = twin_round(x, ar);
    else
      (void)ar;
    return x;
  };
  const int d = h.head_size, dv = h.head_size_v > 0 ? h.head_size_v : d;
  const int64_t rows = std::max<int64_t>(0, std::min<int64_t>(br, h.tq - row0));
  std::vector<TwinRowState> st(size_t(rows),
                               TwinRowState{neg_inf_f(), 0.0f, std::vector<float>(size_t(dv), 0.0f)});
  // The kernel stops at the last key the tile's last row can see under causal masking (and a right
  // window), and starts at the key tile holding the first its first row can see under a left window.
  int64_t k_end = k_hi;
  const int64_t last_row = std::min<int64_t>(row0 + br, h.tq) - 1;
  if (h.causal)
    k_end = std::min<int64_t>(k_end, last_row + h.tk - h.tq + 1 + (M == Mutation::causal_off_by_one ? 1 : 0));
  if (h.window_right >= 0) k_end = std::min<int64_t>(k_end, last_row + h.tk - h.tq + h.window_right + 1);
  k_lo = window_walk_start(k_lo, window_first_key<M>(row0, h.tq, h.tk, h.window_left), bc);
  auto slot = [&h](int64_t j) { return h.table ? kv_slot<M>(h.table, h.page_size, j, h.last_page) : j; };
  std::vector<float> x(static_cast<size_t>(bc)), p(static_cast<size_t>(bc)), dots(static_cast<size_t>(bc));
  std::vector<char> vis(static_cast<size_t>(bc));
  for (int64_t n0 = k_lo; n0 < k_end; n0 += bc) {
    const int64_t n1 = std::min<int64_t>(n0 + bc, k_end);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = row0 + r;
      const float* qr = h.q + row * h.q_stride;
      float tile_max = neg_inf_f();
      for (int64_t j = n0; j < n0 + bc; ++j) {
        // Keys past the range are -inf; keys in range hidden by causal or the mask get masked_logit
        // (-inf; a finite sentinel only in mutant 7), as the kernel's per-element test does.
        float xj = j < std::min<int64_t>(n0 + bc, k_hi) ? masked_logit<M>() : neg_inf_f();
        // A key past the sequence (only mutant 20 walks there) has no mask entry.
        const bool visible = j < n1 && (!h.causal || causal_visible<M>(row, j, h.tq, h.tk)) &&
                             window_visible<M>(row, j, h.tq, h.tk, h.window_left, h.window_right) &&
                             (!h.mask || j >= h.tk || h.mask[row * h.tk + j] != 0);
        if (visible) {
          const float* kj = h.k + slot(j) * h.kv_stride;
          float dot = 0.0f;
          for (int c = 0; c < d; ++c) dot = fl(dot + fl(fl(qr[c]) * fl(kj[c])));
          xj = fl(scaled_logit<M>(dot, h.scale, h.scale_log2, h.softcap));
          dots[size_t(j - n0)] = dot;
        }
        vis[size_t(j - n0)] = visible;
        x[size_t(j - n0)] = xj;
        tile_max = std::max(tile_max, xj);
      }
      TwinRowState& s = st[size_t(r)];
      const float m_new = std::max(s.m, tile_max);
      const float alpha = fl(rescale_factor(s.m, m_new));
      const float off = exponent_offset(m_new);
      float tile_sum = 0.0f;
      for (int j = 0; j < bc; ++j) {
        // The fused exponent (ExpForm::fma) folds the scale into the exp2 argument: a capped
        // logit has no such form, its p is 2^(x - m) as computed.
        p[size_t(j)] = fl(twin_probability(x[size_t(j)], dots[size_t(j)], vis[size_t(j)] && h.softcap == 0.0f,
                                           h.scale_log2, off, f));
        tile_sum = fl(tile_sum + p[size_t(j)]);
      }
      s.l = fl(fl(s.l * alpha) + tile_sum);
      if constexpr (M != Mutation::forget_rescale_o)
        for (float& o : s.o) o = fl(o * alpha);
      if (M == Mutation::fp8_row_accumulator && h.p_e4m3) {
        // Mutant 37 in an FP8 call (fused-hopper-fp8's twin: P's codes, V's codes, VDescale::output):
        // each chunk of 32 keys from the tile's start is one instruction adding into O itself, so
        // the truncation meets every product of the row, not a chain of 128 as declared.
        double pc[32], vc[32];
        for (int64_t j0 = n0; j0 < n1; j0 += 32) {
          const size_t n = size_t(std::min<int64_t>(j0 + 32, n1) - j0);
          for (size_t i = 0; i < n; ++i) pc[i] = p_e4m3<M>(p[size_t(j0 - n0) + i], h.p_scale, h.p_inv);
          for (int c = 0; c < dv; ++c) {
            for (size_t i = 0; i < n; ++i) vc[i] = h.v[slot(j0 + int64_t(i)) * h.v_stride + c];
            s.o[size_t(c)] = float(tc_instruction(s.o[size_t(c)], pc, vc, n));
          }
        }
      } else {
        for (int64_t j = n0; j < n1; ++j) {
          // Masked keys inside the range are multiplied by p = 0 as on the GPU (same hazard: an
          // infinite value there gives NaN on both).
          const float pj = fl(h.p_e4m3 ? p_e4m3<M>(p[size_t(j - n0)], h.p_scale, h.p_inv)
                                       : round_through(h.dtype, p[size_t(j - n0)]));
          const float* vj = h.v + slot(j) * h.v_stride;
          for (int c = 0; c < dv; ++c) s.o[size_t(c)] = fl(s.o[size_t(c)] + fl(pj * fl(vj[c])));
        }
      }
      s.m = m_new;
    }
  }
  return st;
}

}  // namespace attncheck::kern::fused
