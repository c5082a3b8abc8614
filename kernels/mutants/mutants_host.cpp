// Host twins of the attention mutants (issue 6): the fused twin's tile walk (fused/fused_twin.h,
// twin_row_tile<M>) and the split-KV fold (splitkv/splitkv_math.h, fold_partials<M>,
// final_lse_natural<M>) instantiated with a fused::Mutation. Rounding points are those of the
// correct twins: dot products in fp32, P rounded to the input type before P V, m / l / O in fp32,
// O rounded to the input type at the store; LSE fp32 natural log, [heads, tokens]; empty row
// -inf (unless the mutation is the one that breaks exactly that).
// What is duplicated here is only the walk over (sequence, head, row tile) that
// fused_attention_host and splitkv_attention_host also do; the per-element math is shared.
// Check: ctest --test-dir build -R mutants
#include <cstdint>
#include <vector>

#include "common/cuda_check.h"
#include "common/storage.h"
#include "fused/fused.h"
#include "fused/fused_math.h"
#include "fused/fused_twin.h"
#include "mutants/mutants.h"
#include "splitkv/splitkv.h"
#include "splitkv/splitkv_math.h"

namespace attncheck::kern {

namespace {

using fused::Mutation;

// The (sequence, head) views of one call, as the correct twins build them, with the KV head
// chosen by kv_head_of<M> (mutant 9 breaks exactly that).
struct DecodedArgs {
  DType t;
  int d, h, hkv, group;
  int64_t total_q;
  std::vector<float> q, k, v;
};

DecodedArgs decode(const ac_attention_args& a) {
  DecodedArgs x{DType(a.dtype), a.head_size, a.num_heads, a.num_kv_heads, a.num_heads / a.num_kv_heads,
                a.cu_seqlens_q_host[a.num_seqs], {}, {}, {}};
  const int64_t total_k = a.cu_seqlens_k_host[a.num_seqs];
  x.q = fused::decode_tensor(x.t, a.q, x.total_q * x.h * x.d);
  x.k = fused::decode_tensor(x.t, a.k, total_k * x.hkv * x.d);
  x.v = fused::decode_tensor(x.t, a.v, total_k * x.hkv * x.d);
  return x;
}

template <Mutation M>
fused::TwinHeadView head_view(const ac_attention_args& a, const DecodedArgs& x, int s, int head) {
  const int64_t q0 = a.cu_seqlens_q_host[s], k0 = a.cu_seqlens_k_host[s];
  const int kvh = fused::kv_head_of<M>(head, x.group, x.hkv);
  return fused::TwinHeadView{x.t,
                             x.d,
                             a.cu_seqlens_q_host[s + 1] - q0,
                             a.cu_seqlens_k_host[s + 1] - k0,
                             x.q.data() + (q0 * x.h + head) * x.d,
                             x.k.data() + (k0 * x.hkv + kvh) * x.d,
                             x.v.data() + (k0 * x.hkv + kvh) * x.d,
                             int64_t(x.h) * x.d,
                             int64_t(x.hkv) * x.d,
                             a.mask ? a.mask + a.cu_mask_host[s] : nullptr,
                             a.causal != 0,
                             a.softmax_scale * fused::kLog2e};
}

template <Mutation M>
int fused_host_walk(const ac_attention_args& a) {
  const DecodedArgs x = decode(a);
  const int br = kFusedTilings[a.tiling].br, bc = kFusedTilings[a.tiling].bc;
  uint16_t* out = static_cast<uint16_t*>(a.out);
  for (int s = 0; s < a.num_seqs; ++s) {
    const int64_t q0 = a.cu_seqlens_q_host[s];
    for (int head = 0; head < x.h; ++head) {
      const fused::TwinHeadView view = head_view<M>(a, x, s, head);
      for (int64_t row0 = 0; row0 < view.tq; row0 += br) {
        const auto states = fused::twin_row_tile<M>(view, row0, br, bc, 0, view.tk);
        for (size_t r = 0; r < states.size(); ++r) {
          const int64_t tok = q0 + row0 + int64_t(r);
          const float inv = fused::inverse_row_sum(states[r].l);
          for (int c = 0; c < x.d; ++c)
            out[(tok * x.h + head) * x.d + c] = uint16_t(store_from_float(x.t, states[r].o[size_t(c)] * inv));
          if (a.lse)
            a.lse[int64_t(head) * x.total_q + tok] =
                fused::final_lse(states[r].m, states[r].l, false, fused::neg_inf_f());
        }
      }
    }
  }
  return AC_OK;
}

template <Mutation M>
int splitkv_host_walk(const ac_attention_args& a) {
  const DecodedArgs x = decode(a);
  const int br = kSplitKVTilings[a.tiling].br, bc = kSplitKVTilings[a.tiling].bc;
  const int ns = a.num_splits;
  uint16_t* out = static_cast<uint16_t*>(a.out);
  for (int s = 0; s < a.num_seqs; ++s) {
    const int64_t q0 = a.cu_seqlens_q_host[s];
    for (int head = 0; head < x.h; ++head) {
      const fused::TwinHeadView view = head_view<M>(a, x, s, head);
      for (int64_t row0 = 0; row0 < view.tq; row0 += br) {
        std::vector<std::vector<fused::TwinRowState>> parts(static_cast<size_t>(ns));
        for (int sp = 0; sp < ns; ++sp) {
          int lo, hi;
          splitkv::split_range(int(view.tk), ns, sp, lo, hi);
          parts[size_t(sp)] = fused::twin_row_tile<M>(view, row0, br, bc, lo, hi);
        }
        for (size_t r = 0; r < parts[0].size(); ++r) {
          const int64_t tok = q0 + row0 + int64_t(r);
          float lse_final = fused::neg_inf_f();
          for (int c = 0; c < x.d; ++c) {
            float po[splitkv::kMaxSplits] = {}, pl[splitkv::kMaxSplits];
            for (int sp = 0; sp < splitkv::kMaxSplits; ++sp) pl[sp] = fused::neg_inf_f();
            for (int sp = 0; sp < ns; ++sp) {
              const fused::TwinRowState& st = parts[size_t(sp)][r];
              po[sp] = st.o[size_t(c)] * fused::inverse_row_sum(st.l);
              pl[sp] = fused::partial_lse2(st.m, st.l);
            }
            float o_final;
            splitkv::fold_partials<M>(po, pl, ns, a.fold_order, o_final, lse_final);
            out[(tok * x.h + head) * x.d + c] = uint16_t(store_from_float(x.t, o_final));
          }
          if (a.lse) a.lse[int64_t(head) * x.total_q + tok] = splitkv::final_lse_natural<M>(lse_final);
        }
      }
    }
  }
  return AC_OK;
}

}  // namespace

int fused_mutant_host(int mutation, const ac_attention_args& a, char* err, size_t err_len) {
  if (int rc = fused_check_args(a, FusedOptions{}, kNumFusedTilings, err, err_len)) return rc;
  if (a.num_seqs == 0) return AC_OK;
  switch (Mutation(mutation)) {
    case Mutation::none: return fused_host_walk<Mutation::none>(a);
    case Mutation::forget_rescale_o: return fused_host_walk<Mutation::forget_rescale_o>(a);
    case Mutation::finite_mask_sentinel: return fused_host_walk<Mutation::finite_mask_sentinel>(a);
    case Mutation::gqa_head_mod: return fused_host_walk<Mutation::gqa_head_mod>(a);
    case Mutation::causal_off_by_one: return fused_host_walk<Mutation::causal_off_by_one>(a);
    default: AC_REFUSE("fused mutant: mutation %d has no host twin", mutation);
  }
}

int splitkv_mutant_host(int mutation, const ac_attention_args& a, char* err, size_t err_len) {
  if (int rc = splitkv_check_args(a, err, err_len)) return rc;
  if (a.num_seqs == 0) return AC_OK;
  switch (Mutation(mutation)) {
    case Mutation::none: return splitkv_host_walk<Mutation::none>(a);
    case Mutation::combine_plus_inf: return splitkv_host_walk<Mutation::combine_plus_inf>(a);
    default: AC_REFUSE("split-KV mutant: mutation %d has no host twin", mutation);
  }
}

}  // namespace attncheck::kern
