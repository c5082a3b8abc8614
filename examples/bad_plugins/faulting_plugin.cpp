// A deliberately faulting plugin: a merge subject that reports AC_ERR_DEVICE on every call, as a
// kernel that faulted the GPU would. attncheck must exit 3, with the case that did it already
// written to the corpus (write-ahead, done for every plugin subject).
#include <cstdio>

#include "attncheck/plugin_abi.h"

namespace {
int faulting_merge(void*, const ac_merge_args*, char* err, size_t err_len) {
  std::snprintf(err, err_len, "simulated device fault (illegal memory access)");
  return AC_ERR_DEVICE;
}
ac_caps caps() {
  ac_caps c{};
  c.ops = AC_OP_MERGE;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32);
  c.memory = AC_MEMORY_HOST;
  c.head_size_min = 1;
  c.head_size_max = 512;
  c.empty_lse_sign = -1;
  return c;
}
const ac_subject g_subjects[] = {{"faulting-merge", "reports a device fault on every call", caps(),
                                  faulting_merge, nullptr, nullptr, nullptr, nullptr}};
const ac_plugin g_plugin = {AC_ABI_VERSION, "faulting", 1, g_subjects};
}  // namespace

extern "C" {
__attribute__((visibility("default"))) uint32_t attncheck_plugin_abi_version(void) { return AC_ABI_VERSION; }
__attribute__((visibility("default"))) const ac_plugin* attncheck_plugin(void) { return &g_plugin; }
}
