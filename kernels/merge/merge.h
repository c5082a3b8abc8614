// Launchers of the merge of two attention states (the LSE merge of two attention states):
//   out[t, h, :] = p_scale * prefix_out[t, h, :] + s_scale * suffix_out[t, h, :]
//   p_scale = e^(p_lse - M) / (e^(p_lse - M) + e^(s_lse - M)),  M = max(p_lse, s_lse)
//   out_lse[t, h] = M + log(e^(p_lse - M) + e^(s_lse - M))
// Arguments are the plugin ABI's ac_merge_args (strides in elements, LSE fp32 at
// lse[t * lse_stride_token + h * lse_stride_head] for both inputs and the output).
// Conventions: an input LSE of +inf (FlashAttention-2's empty sentinel) is read as empty (-inf);
// two empty inputs give out = 0 exactly and out_lse = -inf, never NaN. Math in fp32, scale first
// and multiply afterwards, so out is a convex combination and cannot overflow.
// Return AC_OK, AC_ERR_UNSUPPORTED (refused before launch, reason in err) or AC_ERR_DEVICE.
#pragma once
#include <cstddef>
#include <cstring>
#include <vector>

#include "attncheck/plugin_abi.h"

namespace attncheck::kern {

enum class MergeMutation : int;  // merge_math.h; complete here (fixed underlying type)

struct MergeOptions {
  int lse_base = 0;          // 0: natural log (exp/log); 2: base 2 (exp2/log2)
  bool allow_vector = true;  // CUDA only: false forces the scalar path (tests of that path)
  bool synchronize = true;   // CUDA only: false skips the final stream sync (benchmarks, callers
                             // that sync themselves); launch errors are still reported
  MergeMutation mutation{};  // none (0); another value runs a deliberately broken variant
                             // (kernels/mutants/) compiled from the same math
};

// True when out holds FP8 codes (ac_merge_args.out_dtype an FP8 format: kv_dtype 3, 4 or 5; any other
// value is the plain merge, out in dtype).
inline bool merge_fp8_out(const ac_merge_args& a) {
  int od;  // read as an int: a caller may store any value in the enum field
  std::memcpy(&od, &a.out_dtype, sizeof od);
  return od == AC_DTYPE_E4M3 || od == AC_DTYPE_E5M2 || od == AC_DTYPE_E4M3FNUZ;
}

// The checks both launchers run before touching memory: dtype, lse_base, head size (1..512),
// negative counts, null or element-misaligned pointers. AC_OK or AC_ERR_UNSUPPORTED with the
// reason. Zero tokens or zero heads is a valid empty merge.
int merge_check_args(const ac_merge_args& a, const MergeOptions& o, char* err, size_t err_len);

// Host twin: tensors in host memory.
int merge_host(const ac_merge_args& a, const MergeOptions& o, char* err, size_t err_len);

#if defined(ATTNCHECK_HAVE_CUDA)
// CUDA kernel: tensors in device memory, launched on a.stream, which is synchronized before
// returning (a device fault is reported as AC_ERR_DEVICE).
int merge_cuda(const ac_merge_args& a, const MergeOptions& o, char* err, size_t err_len);
// True when merge_cuda would take the 128-bit vector path for these arguments: head_size *
// element size a multiple of 16 bytes, every output pointer 16-byte aligned and every token and
// head stride a multiple of 16 bytes. Otherwise it takes the scalar path.
bool merge_cuda_uses_vector_path(const ac_merge_args& a, const MergeOptions& o);
// True when the vector path is the dense one: the three states [tokens, heads, d] contiguous, a row
// a power of two of 16-byte packs, fewer than about 2^31 packs, and the correct merge (a mutant).
bool merge_cuda_uses_dense_path(const ac_merge_args& a, const MergeOptions& o);
#endif

void append_merge_subjects(std::vector<ac_subject>& out, bool cuda);

}  // namespace attncheck::kern
