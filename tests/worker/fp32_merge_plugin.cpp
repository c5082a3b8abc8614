// A plugin whose one merge subject declares fp32 only, as a user's kernel without half-precision
// code would: it wraps the built-in merge's host twin and refuses every other dtype with
// AC_ERR_UNSUPPORTED. worker_transport_bench must bench it in fp32, never ask it for fp16.
#include <cstdio>

#include "attncheck/plugin_abi.h"
#include "merge/merge.h"

namespace {
int fp32_merge(void*, const ac_merge_args* args, char* err, size_t err_len) {
  if (args->dtype != AC_DTYPE_F32) {
    std::snprintf(err, err_len, "fp32-merge takes fp32 only");
    return AC_ERR_UNSUPPORTED;
  }
  return attncheck::kern::merge_host(*args, attncheck::kern::MergeOptions{}, err, err_len);
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
const ac_subject g_subjects[] = {
    {"fp32-merge", "built-in merge (host twin), fp32 only", caps(), fp32_merge, nullptr, nullptr, nullptr}};
const ac_plugin g_plugin = {AC_ABI_VERSION, "fp32-only merge", 1, g_subjects};
}  // namespace

extern "C" {
__attribute__((visibility("default"))) uint32_t attncheck_plugin_abi_version(void) { return AC_ABI_VERSION; }
__attribute__((visibility("default"))) const ac_plugin* attncheck_plugin(void) { return &g_plugin; }
}
