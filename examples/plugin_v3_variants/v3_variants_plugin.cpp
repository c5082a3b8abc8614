// A version-3 plugin: an attention kernel that reads a paged KV cache and takes a softcap, a
// sliding window and attention sinks, declared as such (ac_caps.variants, page_sizes). The kernel
// is the built-in fused attention's host twin (kernels/fused), which computes every one of them;
// a user's paged decode kernel declares itself the same way and gets the same cases: pages
// shuffled and shared between sequences, poisoned slots past each sequence's keys, caps near the
// scores' range, windows whose edges fall inside key tiles, sinks above every score.
//
// Check: build/attncheck check --plugin build/examples/libattncheck_example_plugin_v3.so
#include "attncheck/plugin_abi.h"
#include "fused/fused.h"

namespace {

int attention_entry(void*, const ac_attention_args* args, char* err, size_t err_len) {
  return attncheck::kern::fused_attention_host(*args, attncheck::kern::FusedOptions{}, err, err_len);
}

// vLLM's 16, FlashMLA's 64, and a size of 5 that puts page boundaries inside every key tile.
const int32_t kPageSizes[] = {5, 16, 64};
const int32_t kHeadSizes[] = {64, 128};

ac_caps attention_caps() {
  ac_caps c{};
  c.ops = AC_OP_ATTENTION;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
  c.memory = AC_MEMORY_HOST;
  c.head_sizes = kHeadSizes;
  c.num_head_sizes = 2;
  c.lse_base = 0;
  c.lse_layout = AC_LSE_HEADS_TOKENS;
  c.empty_lse_sign = -1;
  c.features = AC_FEAT_CAUSAL | AC_FEAT_MASK | AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE;
  c.tilings = attncheck::kern::kFusedTilings;
  c.num_tilings = 1;  // the call's tiling index 0: (64, 64)
  c.max_splits = 1;
  // The version-3 words: what the kernel reads besides plain contiguous attention.
  c.variants = AC_VAR_PAGED_KV | AC_VAR_SOFTCAP | AC_VAR_WINDOW | AC_VAR_SINKS;
  c.page_sizes = kPageSizes;
  c.num_page_sizes = 3;
  // The largest call it takes (a kernel sized for a fixed workspace declares as much): attncheck's
  // cases stay within it, and a case past it is skipped with its reason, never passed here.
  c.max_call_seqs = 16;
  return c;
}

const ac_subject g_subjects[] = {
    {"example-paged-attention", "fused attention (host twin) over a paged KV cache, softcap, window, sinks",
     attention_caps(), nullptr, nullptr, attention_entry, nullptr, nullptr},
};

const ac_plugin g_plugin = {AC_ABI_VERSION, "attncheck example plugin, ABI version 3", 1, g_subjects};

}  // namespace

extern "C" {
__attribute__((visibility("default"))) uint32_t attncheck_plugin_abi_version(void) { return AC_ABI_VERSION; }
__attribute__((visibility("default"))) const ac_plugin* attncheck_plugin(void) { return &g_plugin; }
}
