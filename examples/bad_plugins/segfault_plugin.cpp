// A plugin whose merge dies of SIGSEGV on every call, as a kernel wrapper with a wild pointer
// would. In-process it takes attncheck down; with `attncheck check --isolate` it runs in a worker
// process: attncheck records the crash (signal and last stderr line), restarts the worker for
// the next property, exits 3, and the case is in the corpus.
#include <signal.h>

#include <cstdio>

#include "attncheck/plugin_abi.h"

namespace {
int segfaulting_merge(void*, const ac_merge_args* a, char*, size_t) {
  std::fprintf(stderr, "segfault-merge: about to dereference a wild pointer (%d tokens)\n", a->num_tokens);
  std::fflush(stderr);
  ::raise(SIGSEGV);
  return AC_OK;
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
const ac_subject g_subjects[] = {{"segfault-merge", "dies of SIGSEGV on every call", caps(),
                                  segfaulting_merge, nullptr, nullptr, nullptr, nullptr}};
const ac_plugin g_plugin = {AC_ABI_VERSION, "segfault", 1, g_subjects};
}  // namespace

extern "C" {
__attribute__((visibility("default"))) uint32_t attncheck_plugin_abi_version(void) { return AC_ABI_VERSION; }
__attribute__((visibility("default"))) const ac_plugin* attncheck_plugin(void) { return &g_plugin; }
}
