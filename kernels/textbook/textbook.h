// Launchers of textbook attention: three kernels and two materialised T_q x T_k intermediates,
//   S = softmax_scale * Q K^T   (fp32, or the input dtype)       [heads, T_q, T_k] per sequence
//   P = softmax(S)              (safe, or naive), input dtype    [heads, T_q, T_k] per sequence
//   O = P V                     (fp32 accumulation), input dtype; LSE fp32, natural log
// the slow baseline of the Background chapter, and the only kernel allowed memory ~ T_q x T_k.
// Arguments are the plugin ABI's ac_attention_args (GQA, bottom-right causal, varlen, mask).
// Return AC_OK, AC_ERR_UNSUPPORTED (refused before launch, reason in err) or AC_ERR_DEVICE.
#pragma once
#include <cstddef>
#include <vector>

#include "attncheck/plugin_abi.h"
#include "common/storage.h"

namespace attncheck::kern {

struct TextbookOptions {
  bool naive_softmax = false;         // naive: exp(S) without the max shift, rounded to P's type
  DType score_dtype = DType::f32;     // S storage: fp32 or the input dtype ...
  bool score_as_input = false;        // ... true: S in the input dtype whatever score_dtype says
  size_t* bytes_allocated = nullptr;  // out: bytes of S and P, h * T_q * T_k * (|S| + |P|) summed
  ac_lse_layout lse_layout = AC_LSE_HEADS_TOKENS;
};

// Checks shared by both launchers (dtype, head size 1..256, heads, offsets, pointers, score type).
int textbook_check_args(const ac_attention_args& a, const TextbookOptions& o, char* err, size_t err_len);
// The bytes S and P take for these arguments (what bytes_allocated reports).
size_t textbook_intermediate_bytes(const ac_attention_args& a, const TextbookOptions& o);

int textbook_attention_host(const ac_attention_args& a, const TextbookOptions& o, char* err, size_t err_len);
#if defined(ATTNCHECK_HAVE_CUDA)
int textbook_attention_cuda(const ac_attention_args& a, const TextbookOptions& o, char* err, size_t err_len);
#endif

void append_textbook_subjects(std::vector<ac_subject>& out, bool cuda);

}  // namespace attncheck::kern
