// Host twin of the attention-state merge (merge.cu): the same per-(token, head) weights and the
// same per-element fma from merge_math.h, walked token by token, head by head. All math is fp32;
// the only rounding to fp16 / bf16 is the store of each output element (storage.h, nearest-even).
// Conventions: LSE base natural (or 2 via MergeOptions), either LSE layout through the strides,
// +inf read as empty, two empty inputs give out = 0 and out_lse = -inf.
// Need not match the GPU bit for bit (expf / logf differ by an ulp between libm and CUDA), but
// computes the same function with the same guards and rounding points.
// Check: ctest -R kernels_basic_merge_host
#include <cinttypes>
#include <cstdint>

#include "common/cuda_check.h"
#include "common/host_tensor.h"
#include "common/storage.h"
#include "merge/merge.h"
#include "merge/merge_math.h"

namespace attncheck::kern {

int merge_check_args(const ac_merge_args& a, const MergeOptions& o, char* err, size_t err_len) {
  const int dtype = raw_enum(a.dtype);
  if (dtype != AC_DTYPE_F32 && dtype != AC_DTYPE_F16 && dtype != AC_DTYPE_BF16)
    AC_REFUSE("merge: unsupported dtype %d (fp32, fp16, bf16 only)", dtype);
  if (o.lse_base != 0 && o.lse_base != 2)
    AC_REFUSE("merge: unsupported lse_base %d (0: natural, 2: base 2)", o.lse_base);
  if (int(o.mutation) < int(MergeMutation::none) || int(o.mutation) > int(MergeMutation::fp8_scale_ignored))
    AC_REFUSE("merge: unknown mutation %d", int(o.mutation));
  if (a.head_size < 1 || a.head_size > 512)
    AC_REFUSE("merge: unsupported head_size %d (1..512)", int(a.head_size));
  if (a.num_tokens < 0 || a.num_heads < 0)
    AC_REFUSE("merge: impossible shape: num_tokens %d, num_heads %d", int(a.num_tokens), int(a.num_heads));
  if (a.num_tokens == 0 || a.num_heads == 0) return AC_OK;
  if (!a.out || !a.prefix_out || !a.suffix_out || !a.prefix_lse || !a.suffix_lse)
    AC_REFUSE("merge: null tensor pointer (out, prefix_out, suffix_out, prefix_lse, suffix_lse)");
  if (merge_fp8_out(a) && !a.output_scale)
    AC_REFUSE("merge: an FP8 output (out_dtype %d) without output_scale", raw_enum(a.out_dtype));
  const uintptr_t elem = uintptr_t(dtype_size(DType(a.dtype)));
  if ((!merge_fp8_out(a) && !aligned_to(a.out, elem)) || !aligned_to(a.prefix_out, elem) ||
      !aligned_to(a.suffix_out, elem))
    AC_REFUSE("merge: output pointer not aligned to its %d-byte element", int(elem));
  if (!aligned_to(a.prefix_lse, 4) || !aligned_to(a.suffix_lse, 4) ||
      (a.out_lse && !aligned_to(a.out_lse, 4)))
    AC_REFUSE("merge: LSE pointer not aligned to 4 bytes");
  return AC_OK;
}

namespace {
template <MergeMutation M>
void merge_host_rows(const ac_merge_args& a, const MergeOptions& o) {
  const DType t = DType(a.dtype);
  const bool fp8 = merge_fp8_out(a);
  const float scale = fp8 ? *a.output_scale : 1.0f;
  for (int64_t tok = 0; tok < a.num_tokens; ++tok) {
    for (int64_t h = 0; h < a.num_heads; ++h) {
      const int64_t li = tok * a.lse_stride_token + h * a.lse_stride_head;
      const MergeWeights w = merge_weights<M>(a.prefix_lse[li], a.suffix_lse[li], o.lse_base);
      const int64_t po = tok * a.prefix_stride_token + h * a.prefix_stride_head;
      const int64_t so = tok * a.suffix_stride_token + h * a.suffix_stride_head;
      const int64_t oo = tok * a.out_stride_token + h * a.out_stride_head;
      for (int64_t e = 0; e < a.head_size; ++e) {
        const float v =
            merge_element<M>(load_host(a.prefix_out, t, po + e), load_host(a.suffix_out, t, so + e), w);
        if (fp8)
          static_cast<uint8_t*>(a.out)[oo + e] = merge_fp8_store<M>(raw_enum(a.out_dtype), v, scale);
        else
          store_host(a.out, t, oo + e, v);
      }
      if (a.out_lse) a.out_lse[li] = w.out_lse;
    }
  }
}
}  // namespace

int merge_host(const ac_merge_args& a, const MergeOptions& o, char* err, size_t err_len) {
  if (const int rc = merge_check_args(a, o, err, err_len); rc != AC_OK) return rc;
  switch (o.mutation) {
    case MergeMutation::none:
      merge_host_rows<MergeMutation::none>(a, o);
      break;
    case MergeMutation::no_inf_mapping:
      merge_host_rows<MergeMutation::no_inf_mapping>(a, o);
      break;
    case MergeMutation::no_both_empty_guard:
      merge_host_rows<MergeMutation::no_both_empty_guard>(a, o);
      break;
    case MergeMutation::multiply_then_divide:
      merge_host_rows<MergeMutation::multiply_then_divide>(a, o);
      break;
    case MergeMutation::base_swap:
      merge_host_rows<MergeMutation::base_swap>(a, o);
      break;
    case MergeMutation::fp8_scale_ignored:
      merge_host_rows<MergeMutation::fp8_scale_ignored>(a, o);
      break;
  }
  return AC_OK;
}

}  // namespace attncheck::kern
