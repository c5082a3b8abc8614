// PTX source for the proxy-fence lint (ptx_proxy_lint.cpp): one instantiation of the Hopper kernel,
// fp16, d = 64, tiling (128, 64), with the mutation AC_PROXY_LINT_MUTATION (a HopperMutation
// enumerator: none for the correct kernel, no_proxy_fence for mutant 16). Compiled with -ptx for
// compute_90a only (tests/kernels_hopper/CMakeLists.txt), never linked; any tiling would do, since
// the fence and the partial V tile's stores are the same code in all of them.
#include "hopper/hopper_kernel.cuh"

#ifndef AC_PROXY_LINT_MUTATION
#error "define AC_PROXY_LINT_MUTATION to a HopperMutation enumerator"
#endif

namespace attncheck::kern::hopper {

template __global__ void hopper_attention_kernel<false, 64, 128, 64, HopperMutation::AC_PROXY_LINT_MUTATION>(
    const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
    const __grid_constant__ CUtensorMap, const fused::KernelParams);

}  // namespace attncheck::kern::hopper
