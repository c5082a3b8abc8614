// A plugin whose merge is wrong by a known amount, and one that refuses every call, to prove that
// a failure reads true where it is printed (check's stderr, replay) and that a replay judging
// nothing does not pass. Both wrap the built-in merge's host twin (fp32 only):
//   wrong-merge     the first output element of every call, O[token 0, head 0, d 0], is moved by
//                   2^-10 of max(1, |O|): about 8192 fp32 ulps, far over any merge budget, so
//                   accuracy and merge_sentinels fail on their first case;
//   refusing-merge  declares the same capabilities and refuses every call with a reason
//                   (AC_ERR_UNSUPPORTED), as a kernel that declares more than it serves.
#include <cmath>
#include <cstdio>

#include "attncheck/plugin_abi.h"
#include "merge/merge.h"

namespace {

int wrong_merge(void*, const ac_merge_args* args, char* err, size_t err_len) {
  const int rc = attncheck::kern::merge_host(*args, attncheck::kern::MergeOptions{}, err, err_len);
  if (rc != AC_OK || args->num_tokens == 0 || args->num_heads == 0 || args->head_size == 0) return rc;
  float* o = static_cast<float*>(args->out);
  o[0] += std::ldexp(std::fmax(1.0f, std::fabs(o[0])), -10);
  return rc;
}

int refusing_merge(void*, const ac_merge_args*, char* err, size_t err_len) {
  std::snprintf(err, err_len, "refusing-merge refuses every call, as a kernel declaring more than it serves");
  return AC_ERR_UNSUPPORTED;
}

ac_caps caps() {
  ac_caps c{};
  c.ops = AC_OP_MERGE;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32);
  c.memory = AC_MEMORY_HOST;
  c.head_size_min = 1;
  c.head_size_max = 512;
  c.lse_base = 0;
  c.lse_layout = AC_LSE_HEADS_TOKENS;
  c.empty_lse_sign = -1;
  return c;
}

const ac_subject g_subjects[] = {{"wrong-merge", "merge host twin with its first output moved by 2^-10",
                                  caps(), wrong_merge, nullptr, nullptr, nullptr, nullptr},
                                 {"refusing-merge", "merge that refuses every call", caps(), refusing_merge,
                                  nullptr, nullptr, nullptr, nullptr}};
const ac_plugin g_plugin = {AC_ABI_VERSION, "wrong and refusing merges", 2, g_subjects};

}  // namespace

extern "C" {
__attribute__((visibility("default"))) uint32_t attncheck_plugin_abi_version(void) { return AC_ABI_VERSION; }
__attribute__((visibility("default"))) const ac_plugin* attncheck_plugin(void) { return &g_plugin; }
}
