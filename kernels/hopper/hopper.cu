// CUDA launcher of fused-hopper (kernel: hopper_kernel.cuh), built for sm_90a only: every tiling
// of kHopperTilings, fp16 and bf16, head sizes 64 and 128.
// Check: ctest --test-dir build -L gpu -R kernels_hopper
#include "hopper/hopper_launch.cuh"

namespace attncheck::kern {

int hopper_attention_cuda(const ac_attention_args& a, const FusedOptions& o, char* err, size_t err_len,
                          HopperMutation m) {
  switch (m) {
    case HopperMutation::none:
      return hopper::run_hopper<HopperMutation::none>(a, o, err, err_len);
    case HopperMutation::no_full_wait:
    case HopperMutation::stale_phase:
    case HopperMutation::no_proxy_fence:
      return hopper_mutant_cuda(a, o, err, err_len, m);
    case HopperMutation::fp8_row_accumulator:
      break;  // an FP8 instantiation (hopper_fp8.cu)
  }
  AC_REFUSE("fused-hopper: unknown mutation %d", int(m));
}

}  // namespace attncheck::kern
