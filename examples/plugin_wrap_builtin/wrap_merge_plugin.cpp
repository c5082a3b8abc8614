// An attncheck plugin, written the way a user would write one for their own kernel: it wraps
// attncheck's built-in attention-state merge (kernels/merge) and exports it through the plugin
// ABI (abi/include/attncheck/plugin_abi.h), as
//   example-merge       the host twin (always), tensors in host memory
//   example-merge-cuda  the CUDA kernel (only when built with nvcc), tensors in device memory
// Conventions declared below: natural-log LSE, [heads, tokens] LSE layout, empty sentinel -inf,
// fp32 / fp16 / bf16, head sizes 1..512. No rounding happens in this file; the wrapped kernel
// computes in fp32 and rounds once when it stores each output element.
//
// It is built as a version-1 plugin (examples/CMakeLists.txt defines AC_TARGET_ABI_VERSION=1), the
// binary layout attncheck must keep loading; examples/plugin_v2_caps is its version-2 sibling.
//
// Build: cmake --build build --target attncheck_example_plugin
// Check: build/attncheck check --plugin build/examples/libattncheck_example_plugin.so
//        (add --subject example-merge to run only the host twin)
#include "attncheck/plugin_abi.h"
#include "merge/merge.h"

namespace {

// The per-subject state handed back as `self`: here only which backend to call.
struct WrappedMerge {
  bool cuda;
};

int merge_entry(void* self, const ac_merge_args* args, char* err, size_t err_len) {
  const auto* w = static_cast<const WrappedMerge*>(self);
#if defined(ATTNCHECK_HAVE_CUDA)
  if (w->cuda) return attncheck::kern::merge_cuda(*args, attncheck::kern::MergeOptions{}, err, err_len);
#else
  (void)w;
#endif
  return attncheck::kern::merge_host(*args, attncheck::kern::MergeOptions{}, err, err_len);
}

ac_caps merge_caps(ac_memory memory) {
  ac_caps c{};
  c.ops = AC_OP_MERGE;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32) | AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
  c.memory = memory;
  c.head_size_min = 1;
  c.head_size_max = 512;
  c.lse_base = 0;                      // natural log
  c.lse_layout = AC_LSE_HEADS_TOKENS;  // vLLM's [heads, tokens]
  c.empty_lse_sign = -1;               // an empty row's LSE is -inf
  return c;
}

WrappedMerge g_host{false};
#if defined(ATTNCHECK_HAVE_CUDA)
WrappedMerge g_cuda{true};
#endif

const ac_subject g_subjects[] = {
    {"example-merge", "built-in merge (host twin) wrapped as a plugin", merge_caps(AC_MEMORY_HOST),
     merge_entry, nullptr, nullptr, &g_host},
#if defined(ATTNCHECK_HAVE_CUDA)
    {"example-merge-cuda", "built-in merge (CUDA kernel) wrapped as a plugin", merge_caps(AC_MEMORY_CUDA),
     merge_entry, nullptr, nullptr, &g_cuda},
#endif
};

const ac_plugin g_plugin = {AC_ABI_VERSION, "attncheck example plugin (wrapped merge)",
                            int32_t(sizeof g_subjects / sizeof g_subjects[0]), g_subjects};

}  // namespace

extern "C" {
// attncheck reads this first and refuses the library if it differs from its own AC_ABI_VERSION.
__attribute__((visibility("default"))) uint32_t attncheck_plugin_abi_version(void) { return AC_ABI_VERSION; }
__attribute__((visibility("default"))) const ac_plugin* attncheck_plugin(void) { return &g_plugin; }
}
