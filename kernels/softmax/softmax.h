// Launchers of the row softmax: y[r, :] = softmax(x[r, :]) per row, variants naive / safe /
// online (definitions, fold order and the all -inf convention in softmax_math.h).
// Arguments are the plugin ABI's ac_softmax_args (x and y of one dtype, one row stride).
// Return AC_OK, AC_ERR_UNSUPPORTED (refused before launch, reason in err) or AC_ERR_DEVICE.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attncheck/plugin_abi.h"
#include "common/storage.h"

namespace attncheck::kern {

// online_l_fp16 is a deliberately broken variant (kernels/mutants/, mutant 5): the online
// fold with its running sum l rounded to fp16 after every update; never a registered subject of
// its own except as a mutant.
enum class SoftmaxVariant { naive, safe, online, online_l_fp16 };

// Checks shared by both launchers: dtype, negative sizes, row_stride < cols, null or misaligned
// pointers. Zero rows or zero columns is a valid empty call.
int softmax_check_args(const ac_softmax_args& a, char* err, size_t err_len);

int softmax_host(const ac_softmax_args& a, SoftmaxVariant v, char* err, size_t err_len);
#if defined(ATTNCHECK_HAVE_CUDA)
int softmax_cuda(const ac_softmax_args& a, SoftmaxVariant v, char* err, size_t err_len);
#endif

// One row on the host, replaying the device fold order: x of type in, y of type out (cols
// elements each, contiguous). Returns the row's natural-log LSE (-inf for an empty row). The
// textbook attention twin uses it for its softmax step (S in fp32 or the input type, P in the
// input type).
float softmax_row_host(SoftmaxVariant v, DType in, const void* x, DType out, void* y, int64_t cols);

void append_softmax_subjects(std::vector<ac_subject>& out, bool cuda);

}  // namespace attncheck::kern
