// Host side of fused-hopper that needs no GPU: its argument checks (fused's, against the Hopper
// tilings) and its host twin, fused's twin walked with the tile (BR, BC) of kHopperTilings: the
// Hopper kernel walks row tiles of BR and key tiles of BC from key 0 (a left window: from the first
// key the tile's first row sees) with the causal (and right window) end of the tile's last row, and
// rounds where fused rounds (dot in fp32, P to the input type, m / l / O fp32, the cap and the sink
// as fused, O to the input type at the store) but for p: its exponent argument in one fma (not under
// a cap, as the twin's walk knows) and a p below 2^-126 flushed to 0 (fused::ExpForm{true, true}).
// fused-hopper-fp8's checks and twin too (hopper.h).
// Check: ctest --test-dir build -R kernels_hopper
#include "common/cuda_check.h"
#include "hopper/hopper.h"

namespace attncheck::kern {

bool hopper_built() {
#if defined(ATTNCHECK_HAVE_SM90A)
  return true;
#else
  return false;
#endif
}

int hopper_check_args(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  // Softcap, window and sinks are computed (hopper_kernel.cuh VAR), and paged K / V at the page sizes
  // whose pages the tensor maps' chunks lay out (kHopperPageSizes); the maps read tiles of one head
  // size (fused_check_args refuses V's own head size: no pairs in its scope) and checks the table.
  ArgScope scope;
  scope.page_sizes = kHopperPageSizes;
  scope.num_page_sizes = kNumHopperPageSizes;
  return fused_check_args(a, o, kNumHopperTilings, err, err_len, scope);
}

int hopper_fp8_check_args(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  static_assert(kHopperTilings[0].br == 128 && kHopperTilings[0].bc == 128, "the FP8 kernel's tiling");
  if (a.page_size != 0) AC_REFUSE("fused-hopper-fp8: paged K / V is not built");
  if (a.softcap != 0.0f || a.window_left != -1 || a.window_right != -1 || a.sinks)
    AC_REFUSE("fused-hopper-fp8: softcap, window and sinks are not built");
  if (a.head_size != kHopperFp8HeadSizes[0])
    AC_REFUSE("fused-hopper-fp8: head size %d (the kernel is built for %d)", a.head_size,
              kHopperFp8HeadSizes[0]);
  if (fused::fp8_kv(a)) {
    if (a.kv_dtype != AC_DTYPE_E4M3)
      AC_REFUSE("fused-hopper-fp8: FP8 in e4m3fn only (kv_dtype %d)", int(a.kv_dtype));
    if (!a.q_descale)
      AC_REFUSE(
          "fused-hopper-fp8: an FP8 call with Q in its input type (AC_FP8_Q_REQUIRED: Q, K and V in e4m3fn)");
  }
  // V's descale multiplies the output, so descales per (sequence, KV head) are read as well.
  return fused_check_args(a, o, kNumHopperFp8Tilings, err, err_len, ArgScope{nullptr, 0, true, true, true});
}

int hopper_fp8_attention_host(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  if (int rc = hopper_fp8_check_args(a, o, err, err_len)) return rc;
  FusedOptions twin = o;
  twin.exp_form = fused::ExpForm{true, true};
  twin.p_e4m3 = true;
  twin.v_descale_output = true;
  twin.p_scale_on_output = true;  // the kernel's P V takes P's codes (hopper_kernel.cuh)
  return fused_twin_tiles(a, twin, kHopperTilings[0].br, kHopperTilings[0].bc, err, err_len);
}

int hopper_attention_host(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  if (int rc = hopper_check_args(a, o, err, err_len)) return rc;
  FusedOptions twin = o;
  twin.exp_form = fused::ExpForm{true, true};  // the kernel's exponent: one fma, flushed exp2
  return fused_twin_tiles(a, twin, kHopperTilings[a.tiling].br, kHopperTilings[a.tiling].bc, err, err_len);
}

}  // namespace attncheck::kern
