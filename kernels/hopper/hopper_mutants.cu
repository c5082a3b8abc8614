// The Hopper-specific mutants of fused-hopper (subjects mutant-hopper-*): the same kernel with one
// synchronisation step broken at compile time (HopperMutation, hopper.h). A separate file so the
// correct kernel's build does not wait on them.
// Check: ctest --test-dir build -L gpu -R kernels_hopper
#include "hopper/hopper_launch.cuh"

namespace attncheck::kern {

int hopper_mutant_cuda(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len,
                       HopperMutation m) {
  switch (m) {
    case HopperMutation::no_full_wait:
      return hopper::run_hopper<HopperMutation::no_full_wait>(a, o, err, err_len);
    case HopperMutation::stale_phase:
      return hopper::run_hopper<HopperMutation::stale_phase>(a, o, err, err_len);
    case HopperMutation::no_proxy_fence:
      return hopper::run_hopper<HopperMutation::no_proxy_fence>(a, o, err, err_len);
    case HopperMutation::none:
    case HopperMutation::fp8_row_accumulator:
      break;
  }
  AC_REFUSE("fused-hopper: mutation %d is not a mutant", int(m));
}

}  // namespace attncheck::kern
