// ac_subject adapters (plugin ABI) of the merge: `merge` (natural-log LSE, [heads, tokens]),
// `merge-th` (natural log, [tokens, heads]) and `merge-log2` (base-2 LSE, [heads, tokens]), each
// for the host twin and, in a CUDA build, the CUDA kernel. The kernel reads either LSE layout
// through the strides of ac_merge_args; the declared layout only tells the harness which strides
// to pass. All: fp32 / fp16 / bf16, head sizes 1..512, empty sentinel -inf (+inf accepted).
// `merge-fp8` is `merge` declaring FP8 outputs (ac_merge_args.out_dtype, output_scale).
#include "merge/merge.h"

namespace attncheck::kern {

namespace {

struct MergeSubjectSelf {
  MergeOptions options;
  bool cuda;
};

int merge_entry(void* self, const ac_merge_args* args, char* err, size_t err_len) {
  const auto* s = static_cast<const MergeSubjectSelf*>(self);
#if defined(ATTNCHECK_HAVE_CUDA)
  if (s->cuda) return merge_cuda(*args, s->options, err, err_len);
#endif
  return merge_host(*args, s->options, err, err_len);
}

ac_caps merge_caps(bool cuda, int lse_base, ac_lse_layout layout) {
  ac_caps c{};
  c.ops = AC_OP_MERGE;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32) | AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
  c.memory = cuda ? AC_MEMORY_CUDA : AC_MEMORY_HOST;
  c.head_size_min = 1;
  c.head_size_max = 512;
  c.lse_base = lse_base;
  c.lse_layout = layout;
  c.empty_lse_sign = -1;
  return c;
}

MergeSubjectSelf g_host_natural{{0, true}, false}, g_host_log2{{2, true}, false};
MergeSubjectSelf g_cuda_natural{{0, true}, true}, g_cuda_log2{{2, true}, true};

}  // namespace

void append_merge_subjects(std::vector<ac_subject>& out, bool cuda) {
  MergeSubjectSelf* natural = cuda ? &g_cuda_natural : &g_host_natural;
  MergeSubjectSelf* log2 = cuda ? &g_cuda_log2 : &g_host_log2;
  out.push_back(
      ac_subject{"merge",
                 cuda ? "merge of two attention states, natural-log LSE [heads, tokens] (CUDA)"
                      : "merge of two attention states, natural-log LSE [heads, tokens] (host twin)",
                 merge_caps(cuda, 0, AC_LSE_HEADS_TOKENS), merge_entry, nullptr, nullptr, natural, nullptr});
  out.push_back(
      ac_subject{"merge-th",
                 cuda ? "merge of two attention states, natural-log LSE [tokens, heads] (CUDA)"
                      : "merge of two attention states, natural-log LSE [tokens, heads] (host twin)",
                 merge_caps(cuda, 0, AC_LSE_TOKENS_HEADS), merge_entry, nullptr, nullptr, natural, nullptr});
  out.push_back(ac_subject{"merge-log2",
                           cuda ? "merge of two attention states, base-2 LSE [heads, tokens] (CUDA)"
                                : "merge of two attention states, base-2 LSE [heads, tokens] (host twin)",
                           merge_caps(cuda, 2, AC_LSE_HEADS_TOKENS), merge_entry, nullptr, nullptr, log2,
                           nullptr});
  // The same kernel declaring FP8 outputs: with an output_scale, out holds the saturating e4m3fn /
  // e5m2 / e4m3fnuz codes of the merged value divided by it (vLLM's merge_attn_states with
  // output_scale); otherwise the plain merge.
  ac_caps fp8 = merge_caps(cuda, 0, AC_LSE_HEADS_TOKENS);
  fp8.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3) | AC_DTYPE_BIT(AC_DTYPE_E5M2) | AC_DTYPE_BIT(AC_DTYPE_E4M3FNUZ);
  fp8.fp8 = AC_FP8_SATURATE;
  out.push_back(
      ac_subject{"merge-fp8",
                 cuda ? "merge of two attention states, FP8 output with output_scale, saturating (CUDA)"
                      : "merge of two attention states, FP8 output with output_scale, saturating (host "
                        "twin)",
                 fp8, merge_entry, nullptr, nullptr, natural, nullptr});
}

}  // namespace attncheck::kern
