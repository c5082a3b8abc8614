// A deliberately invalid plugin: version and symbols are right, but its one subject declares
// attention without any tiling and without an attention function. attncheck must refuse it
// (exit 2, naming the subject and the first problem). Built as a version-1 plugin, where an
// attention subject must declare a tiling.
#define AC_TARGET_ABI_VERSION 1
#include "attncheck/plugin_abi.h"

namespace {
ac_caps bad_caps() {
  ac_caps c{};
  c.ops = AC_OP_ATTENTION;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F16);
  c.memory = AC_MEMORY_HOST;
  c.head_size_min = 64;
  c.head_size_max = 64;
  c.empty_lse_sign = -1;
  return c;
}
const ac_subject g_subjects[] = {
    {"no-tilings", "declares attention but no tilings", bad_caps(), nullptr, nullptr, nullptr, nullptr}};
const ac_plugin g_plugin = {AC_ABI_VERSION, "bad-caps", 1, g_subjects};
}  // namespace

extern "C" {
__attribute__((visibility("default"))) uint32_t attncheck_plugin_abi_version(void) { return AC_ABI_VERSION; }
__attribute__((visibility("default"))) const ac_plugin* attncheck_plugin(void) { return &g_plugin; }
}
