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
#include <vector>

#include "common/cuda_check.h"
#include "common/storage.h"
#include "fused/fused.h"
#include "fused/fused_math.h"
#include "fused/fused_twin.h"

namespace attncheck::kern {

const ac_tiling* fused_tilings(int* count) {
  if (count) *count = kNumFusedTilings;
  return kFusedTilings;
}

int fused_check_args(const ac_attention_args& a, const FusedOptions& o, int num_tilings, char* err,
                     size_t err_len) {
  if (a.dtype == AC_DTYPE_F32)
    AC_REFUSE("fused attention: dtype fp32 is not supported (tensor-core operands are fp16 or bf16)");
  if (const int dtype = raw_enum(a.dtype); dtype != AC_DTYPE_F16 && dtype != AC_DTYPE_BF16)
    AC_REFUSE("fused attention: unknown dtype %d", dtype);
  if (a.head_size != 64 && a.head_size != 128)
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
  return AC_OK;
}

namespace {

// Writes one finished row: O / l rounded to the input type, LSE per the options (each fp32 result
// through the twin's arithmetic, fused_twin.h).
void store_row(const fused::TwinRowState& s, DType t, void* out, int64_t out_index, float* lse,
               int64_t lse_index, const FusedOptions& o) {
  const float inv = fused::twin_round(fused::inverse_row_sum(s.l), o.arithmetic);
  for (size_t c = 0; c < s.o.size(); ++c) {
    const uint32_t bits = store_from_float(t, fused::twin_round(s.o[c] * inv, o.arithmetic));
    static_cast<uint16_t*>(out)[out_index + int64_t(c)] = uint16_t(bits);
  }
  if (lse) {
    const float sentinel = o.empty_lse_sign > 0 ? pos_inf_f() : neg_inf_f();
    lse[lse_index] = fused::twin_round(fused::final_lse(s.m, s.l, o.lse_base == 2, sentinel), o.arithmetic);
  }
}

// The whole walk: every (sequence, head), row tiles of Br over the key range in tiles of Bc, each
// finished row stored. M is fused::Mutation::none for the twin, another value for a mutant.
template <fused::Mutation M>
void fused_host_rows(const ac_attention_args& a, const FusedOptions& o, int br, int bc) {
  const fused::TwinArgs x = fused::decode_args(a);
  for (int s = 0; s < a.num_seqs; ++s) {
    const int64_t q0 = a.cu_seqlens_q_host[s];
    for (int head = 0; head < x.h; ++head) {
      const fused::TwinHeadView view = fused::head_view<M>(a, x, s, head);
      for (int64_t row0 = 0; row0 < view.tq; row0 += br) {
        const auto states =
            o.arithmetic.ieee()
                ? fused::twin_row_tile<M>(view, row0, br, bc, 0, view.tk, o.exp_form)
                : fused::twin_row_tile<M, true>(view, row0, br, bc, 0, view.tk, o.exp_form, o.arithmetic);
        for (size_t r = 0; r < states.size(); ++r) {
          const int64_t tok = q0 + row0 + int64_t(r);
          store_row(states[r], x.dtype, a.out, (tok * x.h + head) * x.d, a.lse,
                    int64_t(head) * x.total_q + tok, o);
        }
      }
    }
  }
}

}  // namespace

int fused_attention_host(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  if (int rc = fused_check_args(a, o, kNumFusedTilings, err, err_len)) return rc;
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
    default:
      AC_REFUSE("fused attention: mutation %d has no host twin", int(o.mutation));
  }
  return AC_OK;
}

}  // namespace attncheck::kern
