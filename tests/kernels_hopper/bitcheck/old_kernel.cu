// The fused-hopper kernel of another revision for hopper_bitcheck: build.sh puts that revision's
// kernels/hopper/hopper_{kernel,launch,wgmma}.cuh, renamed to namespace hopper_old, first on the
// include path, so this includes them instead of the working tree's.
#include "hopper/hopper_launch.cuh"
int run_old_hopper(const ac_attention_args& a, char* err, size_t len) {
  return attncheck::kern::hopper_old::run_hopper<attncheck::kern::HopperMutation::none>(a, {}, err, len);
}
