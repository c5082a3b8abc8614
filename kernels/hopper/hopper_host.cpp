// Host side of fused-hopper that needs no GPU: its argument checks (fused's, against the Hopper
// tilings) and its host twin, fused's twin walked with the tile (BR, BC) of kHopperTilings: the
// Hopper kernel walks row tiles of BR and key tiles of BC from key 0 (a left window: from the first
// key the tile's first row sees) with the causal (and right window) end of the tile's last row, and
// rounds where fused rounds (dot in fp32, P to the input type, m / l / O fp32, the cap and the sink
// as fused, O to the input type at the store) but for p: its exponent argument in one fma (not under
// a cap, as the twin's walk knows) and a p below 2^-126 flushed to 0 (fused::ExpForm{true, true}).
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
  // Softcap, window and sinks are computed (hopper_kernel.cuh VAR); the tensor maps read K and V as
  // contiguous tensors of one head size (fused_check_args refuses V's own head size: no pairs in
  // its scope).
  if (a.page_size != 0) AC_REFUSE("fused-hopper: paged K / V is not built (its copies are tensor-map tiles)");
  return fused_check_args(a, o, kNumHopperTilings, err, err_len);
}

int hopper_attention_host(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len) {
  if (int rc = hopper_check_args(a, o, err, err_len)) return rc;
  FusedOptions twin = o;
  twin.exp_form = fused::ExpForm{true, true};  // the kernel's exponent: one fma, flushed exp2
  return fused_twin_tiles(a, twin, kHopperTilings[a.tiling].br, kHopperTilings[a.tiling].bc, err, err_len);
}

}  // namespace attncheck::kern
