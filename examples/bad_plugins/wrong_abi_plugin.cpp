// A deliberately incompatible plugin: it claims ABI version 99. attncheck must refuse it (exit 2,
// one line naming the file and the version) before calling anything else in it.
#include "attncheck/plugin_abi.h"

extern "C" {
__attribute__((visibility("default"))) uint32_t attncheck_plugin_abi_version(void) { return 99u; }
__attribute__((visibility("default"))) const ac_plugin* attncheck_plugin(void) { return nullptr; }
}
