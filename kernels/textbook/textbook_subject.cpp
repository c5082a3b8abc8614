// ac_subject adapters (plugin ABI) of textbook attention: `textbook` (S in fp32, safe softmax)
// and `textbook-naive` (S in the input dtype, naive softmax: declares AC_FEAT_NAIVE_EXP), each
// for the host twin and, in a CUDA build, the CUDA kernels. fp32 / fp16 / bf16, head sizes
// 1..256, GQA, bottom-right causal, mask, varlen; LSE natural log, [heads, tokens], empty -inf.
#include "textbook/textbook.h"

namespace attncheck::kern {

namespace {

struct TextbookSubjectSelf {
  bool naive;
  bool cuda;
};

int textbook_entry(void* self, const ac_attention_args* args, char* err, size_t err_len) {
  const auto* s = static_cast<const TextbookSubjectSelf*>(self);
  TextbookOptions o;
  o.naive_softmax = s->naive;
  o.score_as_input = s->naive;
  o.lse_layout = AC_LSE_HEADS_TOKENS;
#if defined(ATTNCHECK_HAVE_CUDA)
  if (s->cuda) return textbook_attention_cuda(*args, o, err, err_len);
#endif
  return textbook_attention_host(*args, o, err, err_len);
}

ac_caps textbook_caps(bool cuda, bool naive) {
  ac_caps c{};
  c.ops = AC_OP_ATTENTION;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32) | AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
  c.memory = cuda ? AC_MEMORY_CUDA : AC_MEMORY_HOST;
  c.head_size_min = 1;
  c.head_size_max = 256;
  c.lse_base = 0;
  c.lse_layout = AC_LSE_HEADS_TOKENS;
  c.empty_lse_sign = -1;
  c.features = AC_FEAT_CAUSAL | AC_FEAT_MASK | AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE |
               (naive ? AC_FEAT_NAIVE_EXP | AC_FEAT_SCORES_IN_INPUT_TYPE : 0u);
  // Each sequence's S and P are its own: the twin loops over sequences and the CUDA kernels run one
  // launch triple per sequence, with fixed tiles and no atomics.
  c.flags |= AC_CAP_BATCH_INVARIANT;
  return c;
}

TextbookSubjectSelf g_self[2][2] = {{{false, false}, {true, false}}, {{false, true}, {true, true}}};

}  // namespace

void append_textbook_subjects(std::vector<ac_subject>& out, bool cuda) {
  TextbookSubjectSelf* self = g_self[cuda ? 1 : 0];
  out.push_back(ac_subject{"textbook",
                           cuda ? "textbook attention: S fp32, safe softmax, P in input type (CUDA)"
                                : "textbook attention: S fp32, safe softmax, P in input type (host twin)",
                           textbook_caps(cuda, false), nullptr, nullptr, textbook_entry, &self[0], nullptr});
  out.push_back(ac_subject{"textbook-naive",
                           cuda ? "textbook attention: S in input type, naive softmax (CUDA)"
                                : "textbook attention: S in input type, naive softmax (host twin)",
                           textbook_caps(cuda, true), nullptr, nullptr, textbook_entry, &self[1], nullptr});
}

}  // namespace attncheck::kern
