// The smallest useful attncheck plugin: an fp32 attention-state merge on the host, with the
// guards every merge needs (FlashAttention-2's +inf empty sentinel read as empty; two empty
// states merge to out = 0, LSE = -inf; a NaN LSE stays NaN). All arithmetic is fp32.
#include <attncheck/plugin_abi.h>

#include <cmath>
#include <cstdio>

namespace {

int tiny_merge(void*, const ac_merge_args* a, char* err, size_t err_len) {
  if (a->dtype != AC_DTYPE_F32) {
    std::snprintf(err, err_len, "tiny-merge: fp32 only");
    return AC_ERR_UNSUPPORTED;
  }
  const auto* p_out = static_cast<const float*>(a->prefix_out);
  const auto* s_out = static_cast<const float*>(a->suffix_out);
  auto* out = static_cast<float*>(a->out);
  for (int64_t t = 0; t < a->num_tokens; ++t) {
    for (int64_t h = 0; h < a->num_heads; ++h) {
      const int64_t li = t * a->lse_stride_token + h * a->lse_stride_head;
      float pl = a->prefix_lse[li], sl = a->suffix_lse[li];
      if (pl == INFINITY) pl = -INFINITY;
      if (sl == INFINITY) sl = -INFINITY;
      const float m = std::fmax(pl, sl);
      float ps, ss, lse;
      bool empty = false;
      if (std::isnan(pl) || std::isnan(sl)) {
        ps = ss = lse = pl + sl;
      } else if (m == -INFINITY) {  // (-inf) - (-inf) would be NaN: write the empty state
        empty = true;
        ps = ss = 0.0f;
        lse = -INFINITY;
      } else {
        const float pe = std::exp(pl - m), se = std::exp(sl - m), sum = pe + se;
        ps = pe / sum;
        ss = se / sum;
        lse = std::log(sum) + m;
      }
      const float* p = p_out + t * a->prefix_stride_token + h * a->prefix_stride_head;
      const float* s = s_out + t * a->suffix_stride_token + h * a->suffix_stride_head;
      float* o = out + t * a->out_stride_token + h * a->out_stride_head;
      for (int32_t e = 0; e < a->head_size; ++e) o[e] = empty ? 0.0f : std::fma(p[e], ps, s[e] * ss);
      if (a->out_lse) a->out_lse[li] = lse;
    }
  }
  return AC_OK;
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

const ac_subject g_subjects[] = {{"tiny-merge", "fp32 attention-state merge, host, out of tree", caps(),
                                  tiny_merge, nullptr, nullptr, nullptr, nullptr}};
const ac_plugin g_plugin = {AC_ABI_VERSION, "tiny merge plugin", 1, g_subjects};

}  // namespace

extern "C" {
__attribute__((visibility("default"))) uint32_t attncheck_plugin_abi_version(void) { return AC_ABI_VERSION; }
__attribute__((visibility("default"))) const ac_plugin* attncheck_plugin(void) { return &g_plugin; }
}
