// Host twin of the fused attention forward (fused.cu): the same tile walk (row tiles of Br, key
// tiles of Bc), the same per-element math (fused_math.h), the same rounding points: the dot
// product in fp32, P rounded to the input type before P V, m / l / O in fp32, O rounded to the
// input type at the store. LSE fp32, [heads, tokens], natural or base 2; empty row: O = 0 and
// LSE = -inf (or +inf, FlashAttention-2's convention, on request). FusedOptions::mutation runs
// one of the attention mutants (kernels/mutants/) through this same walk instead; the race (12)
// and the 32-bit offsets (13) have no host analogue and are refused.
// Also holds fused_check_args, the argument checks the CUDA launcher runs as well.
// Check: ctest --test-dir build -R kernels_attention_twin
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/cuda_check.h"
#include "common/storage.h"
#include "fused/fused.h"
#include "fused/fused_math.h"
#include "fused/fused_twin.h"
#include "quantize/quantize_math.h"

namespace attncheck::kern {

namespace {

// Whether (head_size, head_size_v) of `a` is one of the scope's pairs.
bool scope_head_pair(const ac_attention_args& a, const ArgScope& scope) {
  for (int i = 0; i < scope.num_head_pairs; ++i)
    if (scope.head_pairs[i].qk == a.head_size && scope.head_pairs[i].v == a.head_size_v) return true;
  return false;
}

}  // namespace

const ac_tiling* fused_tilings(int* count) {
  if (count) *count = kNumFusedTilings;
  return kFusedTilings;
}

int fused_check_args(const ac_attention_args& a, const FusedOptions& o, int num_tilings, char* err,
                     size_t err_len, ArgScope scope) {
  if (a.dtype == AC_DTYPE_F32)
    AC_REFUSE("fused attention: dtype fp32 is not supported (tensor-core operands are fp16 or bf16)");
  if (const int dtype = raw_enum(a.dtype); dtype != AC_DTYPE_F16 && dtype != AC_DTYPE_BF16)
    AC_REFUSE("fused attention: unknown dtype %d", dtype);
  if (a.head_size != 64 && a.head_size != 128 && !scope_head_pair(a, scope))
    AC_REFUSE("fused attention: head size %d is not supported (64 or 128)", a.head_size);
  if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0)
    AC_REFUSE("fused attention: num_heads %d is not a positive multiple of num_kv_heads %d", a.num_heads,
              a.num_kv_heads);
  if (a.tiling < 0 || a.tiling >= num_tilings)
    AC_REFUSE("fused attention: tiling index %d out of range [0, %d)", a.tiling, num_tilings);
  if (a.num_seqs < 0) AC_REFUSE("fused attention: negative num_seqs %d", a.num_seqs);
  if (o.lse_base != 0 && o.lse_base != 2) AC_REFUSE("fused attention: lse_base %d (0 or 2)", o.lse_base);
  if (o.empty_lse_sign != -1 && o.empty_lse_sign != 1)
    AC_REFUSE("fused attention: empty_lse_sign %d (-1 or +1)", o.empty_lse_sign);
  if (a.num_seqs == 0) return AC_OK;
  if (!a.cu_seqlens_q_host || !a.cu_seqlens_k_host)
    AC_REFUSE("fused attention: cu_seqlens_q_host / cu_seqlens_k_host missing");
  if (a.cu_seqlens_q_host[0] != 0 || a.cu_seqlens_k_host[0] != 0)
    AC_REFUSE("fused attention: cu_seqlens must start at 0");
  for (int s = 0; s < a.num_seqs; ++s) {
    if (a.cu_seqlens_q_host[s + 1] < a.cu_seqlens_q_host[s] ||
        a.cu_seqlens_k_host[s + 1] < a.cu_seqlens_k_host[s])
      AC_REFUSE("fused attention: cu_seqlens decrease at sequence %d", s);
    if (a.mask && (!a.cu_mask_host || a.cu_mask_host[s + 1] - a.cu_mask_host[s] !=
                                          int64_t(a.cu_seqlens_q_host[s + 1] - a.cu_seqlens_q_host[s]) *
                                              (a.cu_seqlens_k_host[s + 1] - a.cu_seqlens_k_host[s])))
      AC_REFUSE("fused attention: mask block of sequence %d is not Tq x Tk (cu_mask)", s);
  }
  const int64_t total_q = a.cu_seqlens_q_host[a.num_seqs];
  const int64_t total_k = a.cu_seqlens_k_host[a.num_seqs];
  if (total_q > 0 && (!a.q || !a.out)) AC_REFUSE("fused attention: null q or out");
  if (total_k > 0 && (!a.k || !a.v)) AC_REFUSE("fused attention: null k or v");
  if (a.mask && !a.cu_mask) AC_REFUSE("fused attention: mask without cu_mask");
  if (fused::fp8_kv(a)) {
    if (!scope.fp8_kv) AC_REFUSE("fused attention: an FP8 KV cache is not read by this kernel");
    if (!a.k_descale || !a.v_descale)
      AC_REFUSE("fused attention: an FP8 KV cache without k_descale / v_descale");
    if (a.descale_granularity < 0 || a.descale_granularity > 2)
      AC_REFUSE(
          "fused attention: descale_granularity %d (0 per tensor, 1 per KV head, 2 per (sequence, KV head))",
          a.descale_granularity);
    if (a.descale_granularity == 2 && !scope.fp8_per_sequence)
      AC_REFUSE("fused attention: descales per (sequence, KV head) are not read by this kernel");
  }
  if (a.q_descale) {
    if (!scope.fp8_q) AC_REFUSE("fused attention: Q in FP8 (q_descale) is not read by this kernel");
    if (!fused::fp8_kv(a)) AC_REFUSE("fused attention: q_descale without an FP8 kv_dtype");
  }
  if (const int od = fused::fp8_out(a)) {
    if (!o.fp8_out) AC_REFUSE("fused attention: O in FP8 (out_dtype %d) is not written by this kernel", od);
    if (!a.output_scale || !(*a.output_scale > 0.0f) || !(*a.output_scale < INFINITY))
      AC_REFUSE("fused attention: an FP8 output without a positive finite output_scale");
  }
  if (a.p_scale) {
    if (!o.p_e4m3 || !fused::fp8_kv(a))
      AC_REFUSE("fused attention: p_scale given, but P is not held in e4m3fn in this call");
    if (!(*a.p_scale >= AC_MIN_P_SCALE && *a.p_scale <= AC_MAX_P_SCALE))
      AC_REFUSE("fused attention: p_scale %g is not in [2^-126, %g]", double(*a.p_scale),
                double(AC_MAX_P_SCALE));
  }
  return fused_check_variants(a, err, err_len, scope);
}

int fused_check_variants(const ac_attention_args& a, char* err, size_t err_len, ArgScope scope) {
  if (a.head_size_v != 0 && a.head_size_v != a.head_size && !scope_head_pair(a, scope))
    AC_REFUSE("fused attention: V head size %d differs from the QK head size %d%s", a.head_size_v,
              a.head_size, scope.num_head_pairs > 0 ? " and the pair is not declared" : "");
  if (a.v_in_k && (a.v != a.k || head_size_v_of(a) > a.head_size))
    AC_REFUSE("fused attention: V inside K needs v == k and a V head size (%d) at most the QK head size (%d)",
              head_size_v_of(a), a.head_size);
  if (!(a.softcap >= 0.0f && a.softcap <= AC_MAX_SOFTCAP))
    AC_REFUSE("fused attention: softcap %g outside 0 .. %g", double(a.softcap), double(AC_MAX_SOFTCAP));
  if (a.window_left < -1 || a.window_right < -1)
    AC_REFUSE("fused attention: window (%d, %d) below -1", a.window_left, a.window_right);
  if (a.page_size == 0) return AC_OK;
  bool declared = false;
  for (int i = 0; i < scope.num_page_sizes; ++i) declared = declared || scope.page_sizes[i] == a.page_size;
  if (!declared) {
    char sizes[96] = "";  // the declared sizes, named in the refusal (written only for one)
    for (int i = 0; i < scope.num_page_sizes; ++i) {
      const size_t at = std::strlen(sizes);
      std::snprintf(sizes + at, sizeof sizes - at, "%s%d", at ? ", " : "", int(scope.page_sizes[i]));
    }
    AC_REFUSE("fused attention: page size %d is not one of the declared sizes (%s)", a.page_size, sizes);
  }
  if (!a.block_table || !a.block_table_host || a.num_pages < 1)
    AC_REFUSE("fused attention: paged K / V without a block table or pages");
  for (int s = 0; s < a.num_seqs; ++s) {
    const int tk = a.cu_seqlens_k_host[s + 1] - a.cu_seqlens_k_host[s];
    if ((int64_t(tk) + a.page_size - 1) / a.page_size > a.max_blocks)
      AC_REFUSE("fused attention: sequence %d has %d keys, more than %d blocks of %d hold", s, tk,
                a.max_blocks, a.page_size);
    for (int b = 0; b * int64_t(a.page_size) < tk; ++b)
      if (const int page = a.block_table_host[int64_t(s) * a.max_blocks + b]; page < 0 || page >= a.num_pages)
        AC_REFUSE("fused attention: block_table[%d][%d] = %d is outside the pool of %d pages", s, b, page,
                  a.num_pages);
  }
  return AC_OK;
}

namespace {

// Writes one finished row: O / l rounded to the input type, LSE per the options (each fp32 result
// through the twin's arithmetic, fused_twin.h).
// The sink (sink2 = sink log2 e, -inf without one) joins the denominator first (fused_math.h
// join_sink).
// V's descale (1 unless it multiplies the output, VDescale::output) after the normalisation; the
// reciprocal of P's scale (1 unless FusedOptions::p_scale_on_output) before it.
// An FP8 output (fp8_out the out_dtype 3, 4 or 5, AC_FP8_OUT): each fp32 element divided by
// output_scale and cast, saturating, one byte per element; else the element stored in t.
// The maxima (AC_FP8_AMAX, amax non-NULL): the row's largest weight is its largest key's, e^0
// rescaled by the sink's join and divided by l, alpha inv in fp32 (a row without keys has none);
// its largest |O| is over the fp32 elements before output_scale and the cast. Mutant 36 (unnormalised)
// takes the weight before the division, alpha.
void store_row(const fused::TwinRowState& s, float sink2, float v_descale, DType t, void* out,
               int64_t out_index, float* lse, int64_t lse_index, const FusedOptions& o, int fp8_out = 0,
               float output_scale = 1.0f, float* amax = nullptr, bool unnormalised = false,
               float p_inv = 1.0f) {
  float m = s.m, l = s.l;
  const bool has_keys = s.m != neg_inf_f();
  const float alpha = fused::join_sink(m, l, sink2);
  const float inv = fused::twin_round(fused::inverse_row_sum(l), o.arithmetic);
  if (amax && has_keys)
    amax[0] = std::max(amax[0], unnormalised ? alpha : fused::twin_round(alpha * inv, o.arithmetic));
  for (size_t c = 0; c < s.o.size(); ++c) {
    const float x = fused::twin_round(s.o[c] * p_inv * alpha * inv * v_descale, o.arithmetic);
    if (amax) amax[1] = std::max(amax[1], std::fabs(x));
    if (fp8_out)
      static_cast<uint8_t*>(out)[out_index + int64_t(c)] = quantize_element(fp8_out, x, output_scale, true);
    else
      static_cast<uint16_t*>(out)[out_index + int64_t(c)] = uint16_t(store_from_float(t, x));
  }
  if (lse) {
    const float sentinel = o.empty_lse_sign > 0 ? pos_inf_f() : neg_inf_f();
    lse[lse_index] = fused::twin_round(fused::final_lse(m, l, o.lse_base == 2, sentinel), o.arithmetic);
  }
}

// The whole walk: every (sequence, head), row tiles of Br over the key range in tiles of Bc, each
// finished row stored. M is fused::Mutation::none for the twin, another value for a mutant.
template <fused::Mutation M>
void fused_host_rows(const ac_attention_args& a, const FusedOptions& o, int br, int bc) {
  const fused::TwinArgs x =
      fused::decode_args<M>(a, o.v_descale_output ? fused::VDescale::output : fused::VDescale::values);
  // Mutant 35 casts O to FP8 without dividing by output_scale.
  const int fp8_out = fused::fp8_out(a);
  const float output_scale = fp8_out && M != fused::Mutation::fp8_out_scale_ignored ? *a.output_scale : 1.0f;
  float amax[2] = {0.0f, 0.0f};  // AC_FP8_AMAX: P's and O's, written after the last row
  for (int s = 0; s < a.num_seqs; ++s) {
    const int64_t q0 = a.cu_seqlens_q_host[s];
    for (int head = 0; head < x.h; ++head) {
      fused::TwinHeadView view = fused::head_view<M>(a, x, s, head);
      view.p_e4m3 = o.p_e4m3 && fused::fp8_kv(a);
      if (view.p_e4m3 && a.p_scale) {
        view.p_scale = *a.p_scale;
        view.p_inv = 1.0f / view.p_scale;
      }
      // P's codes in P V, the reciprocal of the scale on O once (p_scale_on_output).
      float p_inv_out = 1.0f;
      if (view.p_e4m3 && o.p_scale_on_output) {
        p_inv_out = view.p_inv;
        view.p_inv = 1.0f;
      }
      const int64_t k_hi = fused::walked_keys<M>(view.tk, view.table != nullptr);
      for (int64_t row0 = 0; row0 < view.tq; row0 += br) {
        const auto states =
            o.arithmetic.ieee()
                ? fused::twin_row_tile<M>(view, row0, br, bc, 0, k_hi, o.exp_form)
                : fused::twin_row_tile<M, true>(view, row0, br, bc, 0, k_hi, o.exp_form, o.arithmetic);
        for (size_t r = 0; r < states.size(); ++r) {
          const int64_t tok = q0 + row0 + int64_t(r);
          store_row(states[r], view.sink2, view.v_descale, x.dtype, a.out, (tok * x.h + head) * x.dv, a.lse,
                    int64_t(head) * x.total_q + tok, o, fp8_out, output_scale, a.amax ? amax : nullptr,
                    M == fused::Mutation::fp8_amax_unnormalised, p_inv_out);
        }
      }
    }
  }
  if (a.amax) std::copy_n(amax, 2, a.amax);
}

}  // namespace

int fused_attention_host(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  if (int rc = fused_check_args(a, o, kNumFusedTilings, err, err_len, kTwinScope)) return rc;
  return fused_twin_tiles(a, o, kFusedTilings[a.tiling].br, kFusedTilings[a.tiling].bc, err, err_len);
}

int fused_twin_tiles(const ac_attention_args& a, const FusedOptions& o, int br, int bc, char* err,
                     size_t err_len) {
  if (a.num_seqs == 0) return AC_OK;
  using fused::Mutation;
  switch (o.mutation) {
    case Mutation::none:
      fused_host_rows<Mutation::none>(a, o, br, bc);
      break;
    case Mutation::forget_rescale_o:
      fused_host_rows<Mutation::forget_rescale_o>(a, o, br, bc);
      break;
    case Mutation::finite_mask_sentinel:
      fused_host_rows<Mutation::finite_mask_sentinel>(a, o, br, bc);
      break;
    case Mutation::gqa_head_mod:
      fused_host_rows<Mutation::gqa_head_mod>(a, o, br, bc);
      break;
    case Mutation::causal_off_by_one:
      fused_host_rows<Mutation::causal_off_by_one>(a, o, br, bc);
      break;
    case Mutation::page_off_by_one:
      fused_host_rows<Mutation::page_off_by_one>(a, o, br, bc);
      break;
    case Mutation::read_past_end:
      fused_host_rows<Mutation::read_past_end>(a, o, br, bc);
      break;
    case Mutation::window_edge_off_by_one:
      fused_host_rows<Mutation::window_edge_off_by_one>(a, o, br, bc);
      break;
    case Mutation::softcap_before_scale:
      fused_host_rows<Mutation::softcap_before_scale>(a, o, br, bc);
      break;
    case Mutation::fp8_v_descale_ignored:
      fused_host_rows<Mutation::fp8_v_descale_ignored>(a, o, br, bc);
      break;
    case Mutation::fp8_descale_by_query_head:
      fused_host_rows<Mutation::fp8_descale_by_query_head>(a, o, br, bc);
      break;
    case Mutation::fp8_v_descale_twice:
      fused_host_rows<Mutation::fp8_v_descale_twice>(a, o, br, bc);
      break;
    case Mutation::v_head_from_qk:
      fused_host_rows<Mutation::v_head_from_qk>(a, o, br, bc);
      break;
    case Mutation::v_in_k_own_stride:
      fused_host_rows<Mutation::v_in_k_own_stride>(a, o, br, bc);
      break;
    case Mutation::fp8_p_no_offset:
      fused_host_rows<Mutation::fp8_p_no_offset>(a, o, br, bc);
      break;
    case Mutation::fp8_p_scale_ignored:
      fused_host_rows<Mutation::fp8_p_scale_ignored>(a, o, br, bc);
      break;
    case Mutation::fp8_out_scale_ignored:
      fused_host_rows<Mutation::fp8_out_scale_ignored>(a, o, br, bc);
      break;
    case Mutation::fp8_q_descale_twice:
      fused_host_rows<Mutation::fp8_q_descale_twice>(a, o, br, bc);
      break;
    case Mutation::fp8_amax_unnormalised:
      fused_host_rows<Mutation::fp8_amax_unnormalised>(a, o, br, bc);
      break;
    case Mutation::fp8_row_accumulator:
      fused_host_rows<Mutation::fp8_row_accumulator>(a, o, br, bc);
      break;
    default:
      AC_REFUSE("fused attention: mutation %d has no host twin", int(o.mutation));
  }
  return AC_OK;
}

}  // namespace attncheck::kern
