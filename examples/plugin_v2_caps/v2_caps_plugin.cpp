// A version-2 plugin: the built-in merge's host twin (kernels/merge), as in plugin_wrap_builtin,
// declared with a version-2 contract flag. It flushes nothing itself; declaring
// AC_CAP_FLUSHES_SUBNORMALS only lets a zero stand for an exact subnormal output, so the exact
// kernel still passes, and the flag shows in `attncheck list` ("flushes subnormals").
//
// Check: build/attncheck check --plugin build/examples/libattncheck_example_plugin_v2.so
#include "attncheck/plugin_abi.h"
#include "merge/merge.h"

namespace {

int merge_entry(void*, const ac_merge_args* args, char* err, size_t err_len) {
  return attncheck::kern::merge_host(*args, attncheck::kern::MergeOptions{}, err, err_len);
}

ac_caps merge_caps() {
  ac_caps c{};
  c.ops = AC_OP_MERGE;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32) | AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
  c.memory = AC_MEMORY_HOST;
  c.head_size_min = 1;
  c.head_size_max = 512;
  c.lse_base = 0;
  c.lse_layout = AC_LSE_HEADS_TOKENS;
  c.empty_lse_sign = -1;
  c.flags = AC_CAP_FLUSHES_SUBNORMALS;  // the version-2 word
  return c;
}

const ac_subject g_subjects[] = {
    {"example-merge-v2", "built-in merge (host twin) as a version-2 plugin", merge_caps(), merge_entry,
     nullptr, nullptr, nullptr},
};

const ac_plugin g_plugin = {AC_ABI_VERSION, "attncheck example plugin, ABI version 2", 1, g_subjects};

}  // namespace

extern "C" {
__attribute__((visibility("default"))) uint32_t attncheck_plugin_abi_version(void) { return AC_ABI_VERSION; }
__attribute__((visibility("default"))) const ac_plugin* attncheck_plugin(void) { return &g_plugin; }
}
