#!/usr/bin/env bash
# Builds hopper_bitcheck (hopper_bitcheck.cpp): the working tree's fused-hopper against the one at
# git revision REV, in one sm_90a binary, to run on the GPU machine. REV's
# kernels/hopper/hopper_{kernel,launch,wgmma}.cuh are copied under namespace hopper_old and put
# first on old_kernel.cu's include path; the rest (hopper.h, fused's math) is the working tree's,
# so REV must agree with it there.
#   tests/kernels_hopper/bitcheck/build.sh REV [BUILD_DIR] [OUT_DIR]
# BUILD_DIR: a CUDA build of the working tree (default build-cuda), whose libac_kernels.a holds the
# new kernel; OUT_DIR (default BUILD_DIR/bitcheck) gets hopper_bitcheck. $NVCC and $CXX override
# nvcc (else on PATH or in /usr/local/cuda) and g++. $CUDA_INCLUDE (folders, ':'-separated) and
# $CUDA_LIBDIR name the toolkit's headers and libraries where they are not where nvcc's own profile
# says (ctest passes what CMake found).
set -euo pipefail
cd "$(dirname "$0")/../../.."
die() { echo "bitcheck/build.sh: $1" >&2; exit "${2:-2}"; }
[ $# -ge 1 ] || die "usage: tests/kernels_hopper/bitcheck/build.sh REV [BUILD_DIR] [OUT_DIR]"
rev=$1 build=${2:-build-cuda} out=${3:-${2:-build-cuda}/bitcheck}
git rev-parse --verify -q "$rev^{commit}" > /dev/null || die "'$rev' is not a git revision here"
lib=$build/kernels/libac_kernels.a budgets=$build/properties/libac_budgets.a
[ -f "$lib" ] && [ -f "$budgets" ] || die "no $lib or $budgets (build the working tree with CUDA first)"
nvcc=${NVCC:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2> /dev/null)} || die "no nvcc here" 77
old=$out/old/hopper
rm -rf "$out/old" && mkdir -p "$old"
for f in hopper_kernel.cuh hopper_launch.cuh hopper_wgmma.cuh; do
  git show "$rev:kernels/hopper/$f" > "$old/$f" 2> /dev/null || die "$rev has no kernels/hopper/$f"
  sed -i 's/namespace attncheck::kern::hopper\b/namespace attncheck::kern::hopper_old/' "$old/$f"
done
src=tests/kernels_hopper/bitcheck defs="-DATTNCHECK_HAVE_CUDA=1 -DATTNCHECK_HAVE_SM90A=1"
inc=() libdirs=()
IFS=: read -r -a dirs <<< "${CUDA_INCLUDE:-}"
for d in "${dirs[@]}"; do [ -n "$d" ] && inc+=(-isystem "$d"); done
[ -n "${CUDA_LIBDIR:-}" ] && libdirs+=(-L"$CUDA_LIBDIR")
# Every step through nvcc with one host compiler, $CXX: the host file then also finds the CUDA
# headers where nvcc's own profile puts them (not always beside nvcc).
nv=("$nvcc" -ccbin "${CXX:-g++}")
"${nv[@]}" $defs "${inc[@]}" -I"$out/old" -Ikernels -Iabi/include -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a \
  --expt-relaxed-constexpr -std=c++20 -x cu -c "$src/old_kernel.cu" -o "$out/old_kernel.o"
"${nv[@]}" -x c++ $defs "${inc[@]}" -Itests/kernels_attention -Ikernels -Iabi/include -Icore/include -Iproperties/include \
  -O2 -std=c++20 -c "$src/hopper_bitcheck.cpp" -o "$out/hopper_bitcheck.o"
"${nv[@]}" -cudart static -o "$out/hopper_bitcheck" "$out/hopper_bitcheck.o" "$out/old_kernel.o" \
  "$lib" "$budgets" "${libdirs[@]}" -lrt -lpthread -ldl
echo "$out/hopper_bitcheck: the working tree's fused-hopper against $(git rev-parse --short "$rev")'s"
