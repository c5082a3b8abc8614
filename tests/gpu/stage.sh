#!/usr/bin/env bash
# Build the GPU-side binaries for sm_90 on this machine and copy them to gpu-bin/ (git-ignored),
# to be carried to the device machine (the device tool's `carry: ["gpu-bin"]`).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${BUILD_DIR:-build}"
# A base that is not a revision here would fail only after the long build: say so first.
if [ -n "${BASE_REV:-}" ] && ! git rev-parse --verify -q "$BASE_REV^{commit}" > /dev/null; then
  echo "stage.sh: BASE_REV '$BASE_REV' is not a git revision here" >&2
  exit 2
fi
# The executable target $2 built somewhere under the build directory $1, never the base revision's
# build below it (BASE_REV, below: its hopper_bench found first was carried as this tree's).
built() { find "$1" \( -path "$1/base-build" -o -path "$1/base-src" \) -prune -o -type f -name "$2" -perm -u+x -print | head -1; }
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
targets=$(cmake --build "$BUILD_DIR" --target help | sed -n 's/^\([A-Za-z0-9_]*\(_gpu\|_bench\)\|attncheck\): .*/\1/p' | sort -u)
cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target $targets
rm -rf gpu-bin && mkdir -p gpu-bin
for t in $targets; do f=$(built "$BUILD_DIR" "$t"); [ -n "$f" ] && cp "$f" gpu-bin/; done
cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target attncheck attncheck-isolate attncheck_example_plugin worker_transport_bench
cp "$BUILD_DIR/attncheck" "$BUILD_DIR/attncheck-isolate" "$BUILD_DIR"/worker_transport_bench gpu-bin/
cp "$BUILD_DIR"/examples/libattncheck_example_plugin.so gpu-bin/
# BASE_REV=<rev>: that revision's hopper_bench as well, built in a worktree under the build
# directory, as gpu-bin/hopper_bench-base, so that `tests/gpu/session.sh ab` times a kernel change
# beside its base in one lease (two leases of the same binary differ by up to 10%).
if [ -n "${BASE_REV:-}" ]; then
  wt="$(realpath -m "$BUILD_DIR")/base-src"
  git worktree remove --force "$wt" 2>/dev/null || rm -rf "$wt"
  git worktree add --detach "$wt" "$BASE_REV" >/dev/null
  cmake -S "$wt" -B "$BUILD_DIR/base-build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR/base-build" -j "${JOBS:-2}" --target hopper_bench
  cp "$(built "$BUILD_DIR/base-build" hopper_bench)" gpu-bin/hopper_bench-base
  git -C "$wt" rev-parse --short HEAD > gpu-bin/hopper_bench-base.rev
  git worktree remove --force "$wt"
fi
strip gpu-bin/* 2>/dev/null || true
du -sh gpu-bin; ls gpu-bin
# The carried tree is limited to 64 MiB: ship the binaries xz-compressed. Each binary links the
# same device code; one stream with -9's 64 MiB window finds it again in the next binary (17 MB for
# 281 MB; -6's 8 MiB window in two threads, 70 MB).
# Packed in the build directory (ignored, not carried, the same file system) and moved over the old
# pack: a device call that carries gpu-pack/ meanwhile takes a whole pack, the old or the new.
mkdir -p gpu-pack && tar cf - gpu-bin | xz -T1 -9 > "$BUILD_DIR/bin.tar.xz.part" &&
  mv "$BUILD_DIR/bin.tar.xz.part" gpu-pack/bin.tar.xz
ls -la gpu-pack
