// A deliberately broken plugin: it exports attncheck_plugin but not attncheck_plugin_abi_version
// (as happens when the version function is compiled without extern "C"). attncheck must refuse
// it with exit 2 and one line naming the file and the missing symbol.
#include "attncheck/plugin_abi.h"

namespace {
const ac_plugin g_plugin = {AC_ABI_VERSION, "missing-symbol", 0, nullptr};
}

extern "C" __attribute__((visibility("default"))) const ac_plugin* attncheck_plugin(void) {
  return &g_plugin;
}
