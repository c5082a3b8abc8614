// Host twin of split-KV attention (splitkv.cu): per (sequence, head, row tile) and per part of the
// key range, the fused twin's tile walk (kernels/fused/fused_twin.h) over that part only, giving
// the fp32 partial O / l (an FP8 cache: times V's descale, splitkv_math.h partial_o) and base-2 LSE
// the CUDA kernel writes; then the fold of splitkv_math.h in
// the requested order, in fp32; O rounded to the input type at the store. LSE natural,
// [heads, tokens]; an empty row: O = 0, LSE = -inf. The variants as in the fused twin; a sink is
// counted once, by the combine (splitkv_math.h merge_sink). SplitKVOptions::mutation runs mutants
// 11 and 23 (kernels/mutants/) through this same walk instead.
// Also holds the argument checks and the workspace size shared with the CUDA launcher.
// Check: ctest --test-dir build -R kernels_attention_twin
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/cuda_check.h"
#include "common/storage.h"
#include "fused/fused.h"
#include "fused/fused_twin.h"
#include "splitkv/splitkv.h"
#include "splitkv/splitkv_math.h"

namespace attncheck::kern {

static_assert(kSplitKVMaxSplits == splitkv::kMaxSplits, "split-KV accepts what its combine folds");

size_t splitkv_workspace_bytes(const ac_attention_args& a) {
  if (a.num_seqs <= 0 || !a.cu_seqlens_q_host) return 0;
  const size_t total_q = size_t(a.cu_seqlens_q_host[a.num_seqs]);
  return size_t(a.num_splits > 0 ? a.num_splits : 0) * total_q * size_t(a.num_heads) *
         (size_t(head_size_v_of(a)) + 1) * sizeof(float);
}

int fixed_split_count(const ac_attention_args& a, int keys_per_split) {
  int n = 1;
  for (int s = 0; s < a.num_seqs && a.cu_seqlens_k_host; ++s)
    n = std::max(n,
                 splitkv::fixed_parts(a.cu_seqlens_k_host[s + 1] - a.cu_seqlens_k_host[s], keys_per_split));
  return n;
}

int splitkv_check_fixed(const ac_attention_args& a, int keys_per_split, char* err, size_t err_len) {
  if (keys_per_split < 0 || keys_per_split % splitkv::kSplitTile != 0)
    AC_REFUSE("split-KV attention: %d keys per split is not a multiple of %d", keys_per_split,
              splitkv::kSplitTile);
  if (keys_per_split == 0) return AC_OK;
  if (const int need = fixed_split_count(a, keys_per_split); a.num_splits < need)
    AC_REFUSE("split-KV attention: %d keys per split need %d parts, num_splits is %d", keys_per_split, need,
              a.num_splits);
  return AC_OK;
}

int splitkv_check_args(const ac_attention_args& a, char* err, size_t err_len, ArgScope scope) {
  if (a.num_splits < 1 || a.num_splits > kSplitKVMaxSplits)
    AC_REFUSE("split-KV attention: num_splits %d out of range [1, %d]", a.num_splits, kSplitKVMaxSplits);
  const int fold = raw_enum(a.fold_order);
  if (fold != AC_FOLD_LEFT && fold != AC_FOLD_RIGHT && fold != AC_FOLD_TREE)
    AC_REFUSE("split-KV attention: unknown fold order %d", fold);
  return fused_check_args(a, FusedOptions{}, kNumSplitKVTilings, err, err_len, scope);
}

namespace {

// The whole walk: per (sequence, head, row tile) the fused twin's tile walk over each part of the
// key range, then per element the fold of the parts. M is fused::Mutation::none for the twin,
// another value for a mutant.
template <fused::Mutation M>
void splitkv_host_rows(const ac_attention_args& a, int keys_per_split) {
  const fused::TwinArgs x = fused::decode_args<M>(a, fused::VDescale::output);
  const int br = kSplitKVTilings[a.tiling].br, bc = kSplitKVTilings[a.tiling].bc;
  const int ns = a.num_splits;
  uint16_t* out = static_cast<uint16_t*>(a.out);
  for (int s = 0; s < a.num_seqs; ++s) {
    const int64_t q0 = a.cu_seqlens_q_host[s];
    for (int head = 0; head < x.h; ++head) {
      const fused::TwinHeadView view = fused::head_view<M>(a, x, s, head);
      for (int64_t row0 = 0; row0 < view.tq; row0 += br) {
        // Partials of every part, as the CUDA kernel writes them to its workspace.
        std::vector<std::vector<fused::TwinRowState>> parts(static_cast<size_t>(ns));
        for (int sp = 0; sp < ns; ++sp) {
          int lo, hi;
          splitkv::split_range(int(view.tk), ns, keys_per_split, sp, lo, hi);
          parts[size_t(sp)] = fused::twin_row_tile<M>(view, row0, br, bc, lo, hi);
          // Mutant 23 lets every partial count the sink (what a kernel that finishes each split as a
          // whole row would do); the correct combine counts it once, below.
          if constexpr (M == fused::Mutation::sink_every_split)
            for (fused::TwinRowState& st : parts[size_t(sp)]) {
              const float alpha = fused::join_sink(st.m, st.l, view.sink2);
              for (float& o : st.o) o *= alpha;
            }
        }
        for (size_t r = 0; r < parts[0].size(); ++r) {
          const int64_t tok = q0 + row0 + int64_t(r);
          float lse_final = neg_inf_f();
          for (int c = 0; c < x.dv; ++c) {
            float o_final, lse_c;
            splitkv::fold_partials<M>(
                ns, a.fold_order,
                [&](int sp, float& o, float& lse) {
                  const fused::TwinRowState& st = parts[size_t(sp)][r];
                  o = splitkv::partial_o(st.o[size_t(c)], st.l, view.v_descale);
                  lse = fused::partial_lse2(st.m, st.l);
                },
                o_final, lse_c);
            if (M != fused::Mutation::sink_every_split) splitkv::merge_sink(o_final, lse_c, view.sink2);
            lse_final = lse_c;
            out[(tok * x.h + head) * x.dv + c] = uint16_t(store_from_float(x.dtype, o_final));
          }
          if (a.lse) a.lse[int64_t(head) * x.total_q + tok] = splitkv::final_lse_natural<M>(lse_final);
        }
      }
    }
  }
}

}  // namespace

int splitkv_attention_host(const ac_attention_args& a, char* err, size_t err_len) {
  return splitkv_attention_host(a, SplitKVOptions{}, err, err_len);
}

int splitkv_attention_host(const ac_attention_args& a, const SplitKVOptions& o, char* err, size_t err_len) {
  ArgScope scope = kTwinScope;
  scope.fp8_per_sequence = true;  // V's descale multiplies each (sequence, head) view's partial O
  if (int rc = splitkv_check_args(a, err, err_len, scope)) return rc;
  if (int rc = splitkv_check_fixed(a, o.keys_per_split, err, err_len)) return rc;
  if (a.num_seqs == 0) return AC_OK;
  using fused::Mutation;
  switch (o.mutation) {
    case Mutation::none:
      splitkv_host_rows<Mutation::none>(a, o.keys_per_split);
      break;
    case Mutation::combine_plus_inf:
      splitkv_host_rows<Mutation::combine_plus_inf>(a, o.keys_per_split);
      break;
    case Mutation::sink_every_split:
      splitkv_host_rows<Mutation::sink_every_split>(a, o.keys_per_split);
      break;
    default:
      AC_REFUSE("split-KV attention: mutation %d has no host twin", int(o.mutation));
  }
  return AC_OK;
}

}  // namespace attncheck::kern
