// Host twin of textbook attention (textbook.cu): the same three steps with the same rounding
// points, in the same order, materialising S and P in host memory exactly as the GPU does in
// device memory (and reporting the same byte count):
//   S = scale * Q K^T, fp32 fma chain over c = 0 .. d-1, rounded to S's type (fp32 or input);
//   P = softmax_row_host(S row) (safe or naive, the device fold tree), rounded to the input type;
//   O = fp32 fma chain of P[j] * V[j] over j = 0 .. T_k-1, rounded to the input type.
// LSE natural log; empty rows give O = 0, LSE = -inf; GQA, bottom-right causal, mask, varlen as
// in textbook_math.h. Need not match the GPU bit for bit (exp differs), same function otherwise.
// Check: ctest -R kernels_basic_textbook_host
#include <cstdint>
#include <vector>

#include "common/cuda_check.h"
#include "common/host_tensor.h"
#include "softmax/softmax.h"
#include "textbook/textbook.h"
#include "textbook/textbook_math.h"

namespace attncheck::kern {

namespace {

DType score_type(const ac_attention_args& a, const TextbookOptions& o) {
  return o.score_as_input ? DType(a.dtype) : o.score_dtype;
}
}  // namespace

int textbook_check_args(const ac_attention_args& a, const TextbookOptions& o, char* err, size_t err_len) {
  if (const int dtype = raw_enum(a.dtype);
      dtype != AC_DTYPE_F32 && dtype != AC_DTYPE_F16 && dtype != AC_DTYPE_BF16)
    AC_REFUSE("textbook: unsupported dtype %d (fp32, fp16, bf16 only)", dtype);
  const DType st = score_type(a, o);
  if (st != DType::f32 && st != DType(a.dtype))
    AC_REFUSE("textbook: unsupported score dtype %d (fp32 or the input dtype)", int(st));
  if (a.head_size < 1 || a.head_size > 256)
    AC_REFUSE("textbook: unsupported head_size %d (1..256)", int(a.head_size));
  if (a.num_heads < 1 || a.num_kv_heads < 1 || a.num_heads % a.num_kv_heads != 0)
    AC_REFUSE("textbook: impossible head counts: num_heads %d, num_kv_heads %d", int(a.num_heads),
              int(a.num_kv_heads));
  if (a.num_heads > 65535) AC_REFUSE("textbook: num_heads %d > 65535", int(a.num_heads));
  // The subject declares no tilings, so the loader passes -1; 0 is kept for direct callers.
  if (a.tiling != -1 && a.tiling != 0)
    AC_REFUSE("textbook: tiling index %d (no tilings declared: -1, or 0)", int(a.tiling));
  if (a.num_seqs < 0) AC_REFUSE("textbook: impossible shape: num_seqs %d", int(a.num_seqs));
  if (a.num_seqs == 0) return AC_OK;
  if (!a.cu_seqlens_q_host || !a.cu_seqlens_k_host)
    AC_REFUSE("textbook: null cu_seqlens_q_host / cu_seqlens_k_host");
  if (a.cu_seqlens_q_host[0] != 0 || a.cu_seqlens_k_host[0] != 0)
    AC_REFUSE("textbook: impossible shape: cu_seqlens must start at 0");
  for (int32_t s = 0; s < a.num_seqs; ++s) {
    const int64_t tq = int64_t(a.cu_seqlens_q_host[s + 1]) - a.cu_seqlens_q_host[s];
    const int64_t tk = int64_t(a.cu_seqlens_k_host[s + 1]) - a.cu_seqlens_k_host[s];
    if (tq < 0 || tk < 0)
      AC_REFUSE("textbook: impossible shape: sequence %d has T_q %lld, T_k %lld", int(s), (long long)tq,
                (long long)tk);
    if (tq * a.num_heads > INT32_MAX)
      AC_REFUSE("textbook: sequence %d: T_q * num_heads > 2^31 - 1 rows", int(s));
  }
  const int64_t total_q = a.cu_seqlens_q_host[a.num_seqs];
  const int64_t total_k = a.cu_seqlens_k_host[a.num_seqs];
  if (total_q > 0 && (!a.q || !a.out)) AC_REFUSE("textbook: null q or out");
  if (total_k > 0 && (!a.k || !a.v)) AC_REFUSE("textbook: null k or v");
  if (a.mask && !a.cu_mask_host) AC_REFUSE("textbook: mask given without cu_mask_host");
  const uintptr_t elem = uintptr_t(dtype_size(DType(a.dtype)));
  if (!aligned_to(a.q, elem) || !aligned_to(a.k, elem) || !aligned_to(a.v, elem) || !aligned_to(a.out, elem))
    AC_REFUSE("textbook: q/k/v/out pointer not aligned to its %d-byte element", int(elem));
  if (a.lse && !aligned_to(a.lse, 4)) AC_REFUSE("textbook: lse pointer not aligned to 4 bytes");
  return AC_OK;
}

size_t textbook_intermediate_bytes(const ac_attention_args& a, const TextbookOptions& o) {
  if (a.num_seqs <= 0 || !a.cu_seqlens_q_host || !a.cu_seqlens_k_host) return 0;
  const size_t per_score = size_t(dtype_size(score_type(a, o))) + size_t(dtype_size(DType(a.dtype)));
  size_t total = 0;
  for (int32_t s = 0; s < a.num_seqs; ++s) {
    const size_t tq = size_t(a.cu_seqlens_q_host[s + 1] - a.cu_seqlens_q_host[s]);
    const size_t tk = size_t(a.cu_seqlens_k_host[s + 1] - a.cu_seqlens_k_host[s]);
    total += size_t(a.num_heads) * tq * tk * per_score;
  }
  return total;
}

int textbook_attention_host(const ac_attention_args& a, const TextbookOptions& o, char* err, size_t err_len) {
  if (const int rc = textbook_check_args(a, o, err, err_len); rc != AC_OK) return rc;
  const size_t bytes = textbook_intermediate_bytes(a, o);
  if (o.bytes_allocated) *o.bytes_allocated = bytes;
  if (a.num_seqs == 0) return AC_OK;
  const DType in = DType(a.dtype), st = score_type(a, o);
  const int64_t d = a.head_size, hq = a.num_heads, hkv = a.num_kv_heads;
  const int64_t total_q = a.cu_seqlens_q_host[a.num_seqs];
  const SoftmaxVariant variant = o.naive_softmax ? SoftmaxVariant::naive : SoftmaxVariant::safe;
  std::vector<unsigned char> s_buf, p_buf;  // this sequence's S and P, [heads, T_q, T_k]
  for (int32_t s = 0; s < a.num_seqs; ++s) {
    const int64_t q0 = a.cu_seqlens_q_host[s], k0 = a.cu_seqlens_k_host[s];
    const int64_t tq = a.cu_seqlens_q_host[s + 1] - q0, tk = a.cu_seqlens_k_host[s + 1] - k0;
    const uint8_t* mask = a.mask ? a.mask + a.cu_mask_host[s] : nullptr;
    s_buf.assign(size_t(hq * tq * tk) * size_t(dtype_size(st)), 0);
    p_buf.assign(size_t(hq * tq * tk) * size_t(dtype_size(in)), 0);
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kvh = kv_head_of(int32_t(h), int32_t(hq), int32_t(hkv));
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t row = h * tq + i;
        for (int64_t j = 0; j < tk; ++j) {
          float acc = 0.0f;
          for (int64_t c = 0; c < d; ++c)
            acc = dot_step(acc, load_host(a.q, in, ((q0 + i) * hq + h) * d + c),
                           load_host(a.k, in, ((k0 + j) * hkv + kvh) * d + c));
          const bool visible =
              (!a.causal || causal_visible(i, j, tq, tk)) && (!mask || mask[i * tk + j] != 0);
          store_host(s_buf.data(), st, row * tk + j, masked_score(visible, acc, a.softmax_scale));
        }
        const float lse =
            softmax_row_host(variant, st, s_buf.data() + size_t(row * tk) * size_t(dtype_size(st)), in,
                             p_buf.data() + size_t(row * tk) * size_t(dtype_size(in)), tk);
        if (a.lse) a.lse[lse_index(o.lse_layout, h, q0 + i, hq, total_q)] = lse;
      }
      for (int64_t i = 0; i < tq; ++i) {
        for (int64_t c = 0; c < d; ++c) {
          float acc = 0.0f;
          for (int64_t j = 0; j < tk; ++j)
            acc = dot_step(acc, load_host(p_buf.data(), in, (h * tq + i) * tk + j),
                           load_host(a.v, in, ((k0 + j) * hkv + kvh) * d + c));
          store_host(a.out, in, ((q0 + i) * hq + h) * d + c, acc);
        }
      }
    }
  }
  return AC_OK;
}

}  // namespace attncheck::kern
