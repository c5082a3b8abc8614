#!/usr/bin/env bash
# Build the GPU-side binaries for sm_90 on this machine and copy them to gpu-bin/ (git-ignored),
# to be carried to the device machine (the device tool's `carry: ["gpu-bin"]`).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
targets=$(cmake --build "$BUILD_DIR" --target help | sed -n 's/^\([A-Za-z0-9_]*\(_gpu\|_bench\)\|attncheck\): .*/\1/p' | sort -u)
cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target $targets
rm -rf gpu-bin && mkdir -p gpu-bin
for t in $targets; do f=$(find "$BUILD_DIR" -type f -name "$t" -perm -u+x | head -1); [ -n "$f" ] && cp "$f" gpu-bin/; done
strip gpu-bin/* 2>/dev/null || true
du -sh gpu-bin; ls gpu-bin
