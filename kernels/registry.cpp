#include "common/registry.h"

namespace attncheck::kern {

bool built_with_cuda() {
#if defined(ATTNCHECK_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

std::vector<ac_subject> builtin_subjects(bool cuda) {
  std::vector<ac_subject> out;
  append_merge_subjects(out, cuda);
  append_softmax_subjects(out, cuda);
  append_textbook_subjects(out, cuda);
  append_fused_subjects(out, cuda);
  append_splitkv_subjects(out, cuda);
  append_hopper_subjects(out, cuda);
  append_quantize_subjects(out, cuda);
  return out;
}

}  // namespace attncheck::kern
