// A plugin that dies in a chosen way on a chosen call, to prove that a subject's death costs only
// its own (subject, property) pair: exit 3, the case kept in the corpus, the rest of the run
// reported. It wraps the built-in merge's host twin, so calls before the chosen one are correct.
//   ATTNCHECK_DIE     segv | abort | exit0 | throw | hang | nonul (fills the error buffer without
//                     a terminating NUL and refuses the call) | noisy (40 lines of noise on stderr,
//                     then a last line with the cause, then abort) | overrun (a correct merge,
//                     then one byte past the end of O changed); unset: never dies
//   ATTNCHECK_DIE_AT  the call number (1-based, per process) that dies; default 3
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "attncheck/plugin_abi.h"
#include "merge/merge.h"

namespace {

int g_calls = 0;

int merge_entry(void*, const ac_merge_args* args, char* err, size_t err_len) {
  const char* how = std::getenv("ATTNCHECK_DIE");
  const char* at = std::getenv("ATTNCHECK_DIE_AT");
  if (how && ++g_calls == (at ? std::atoi(at) : 3)) {
    const std::string h = how;
    if (h == "segv") std::raise(SIGSEGV);
    if (h == "abort") std::abort();
    if (h == "noisy") {
      for (int i = 0; i < 40; ++i) std::fprintf(stderr, "dying-merge: noise line %d of 40\n", i + 1);
      std::fprintf(stderr, "dying-merge: the cause: call %d aborts on purpose\n", g_calls);
      std::abort();
    }
    if (h == "exit0") std::exit(0);
    if (h == "throw") throw std::runtime_error("thrown inside the plugin");
    if (h == "hang")
      for (;;) ::pause();
    if (h == "nonul") {
      std::memset(err, 'x', err_len);
      return AC_ERR_UNSUPPORTED;
    }
    if (h == "overrun") {
      const int rc = attncheck::kern::merge_host(*args, attncheck::kern::MergeOptions{}, err, err_len);
      const ac_dtype o = args->out_dtype == AC_DTYPE_E4M3 || args->out_dtype == AC_DTYPE_E5M2 ||
                                 args->out_dtype == AC_DTYPE_E4M3FNUZ
                             ? args->out_dtype
                             : args->dtype;
      const size_t elem = o == AC_DTYPE_F32 ? 4 : o == AC_DTYPE_F16 || o == AC_DTYPE_BF16 ? 2 : 1;
      static_cast<unsigned char*>(
          args->out)[size_t(args->num_tokens) * size_t(args->num_heads) * size_t(args->head_size) * elem] ^=
          0xffu;
      return rc;
    }
  }
  return attncheck::kern::merge_host(*args, attncheck::kern::MergeOptions{}, err, err_len);
}

ac_caps caps() {
  ac_caps c{};
  c.ops = AC_OP_MERGE;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32) | AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
  c.memory = AC_MEMORY_HOST;
  c.head_size_min = 1;
  c.head_size_max = 512;
  c.lse_base = 0;
  c.lse_layout = AC_LSE_HEADS_TOKENS;
  c.empty_lse_sign = -1;
  return c;
}

const ac_subject g_subjects[] = {{"dying-merge", "merge host twin that dies on a chosen call", caps(),
                                  merge_entry, nullptr, nullptr, nullptr, nullptr}};
const ac_plugin g_plugin = {AC_ABI_VERSION, "dying plugin", 1, g_subjects};

}  // namespace

extern "C" {
__attribute__((visibility("default"))) uint32_t attncheck_plugin_abi_version(void) { return AC_ABI_VERSION; }
__attribute__((visibility("default"))) const ac_plugin* attncheck_plugin(void) { return &g_plugin; }
}
