#!/usr/bin/env bash
# One batch of GPU work in one call (run on the device machine from the repo root):
#   GPU test executables, compute-sanitizer (memcheck, racecheck) on small shapes, the harness on
#   the CUDA backend, and the benchmarks. Binaries are built on the dev machine for sm_90 and
#   carried xz-packed in gpu-pack/ (tests/gpu/stage.sh puts them there; carry: ["gpu-pack"]). Logs go to $OUT (at most 8 files).
# GPU tests tagged [seed] or [large] are skipped under the sanitizer (too slow there); [race] holds
# the deliberately racy mutant, checked on its own (racecheck must report it).
# Usage: bash tests/gpu/device_run.sh [tests] [sanitize] [harness] [bench]   (default: all)
set -u
BIN="${BIN:-gpu-bin}"
[ -d "$BIN" ] || { [ -f gpu-pack/bin.tar.xz ] && tar xJf gpu-pack/bin.tar.xz; }
# Nothing to run, or nothing to run it on: one line, and not a pass.
[ -d "$BIN" ] || { echo "device_run.sh: no $BIN/ or gpu-pack/ (run tests/gpu/stage.sh first)" >&2; exit 2; }
nvidia-smi -L > /dev/null 2>&1 || { echo "device_run.sh: no GPU here (nvidia-smi -L failed)" >&2; exit 77; }
OUT="${OUT:-out}"; mkdir -p "$OUT"
steps="${*:-tests sanitize harness bench}"
export AC_EXAMPLE_PLUGIN_PATH="$PWD/$BIN/libattncheck_example_plugin.so"
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
has() { [[ " $steps " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv >> "$summary" 2>&1
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)

if has tests; then
  for t in "$BIN"/*_gpu; do
    [ -x "$t" ] || continue
    start=$(date +%s)
    timeout 500 "$t" > "$OUT/tmp.log" 2>&1; rc=$?
    end=$(date +%s)
    { echo "===== $(basename "$t") rc=$rc"; cat "$OUT/tmp.log"; } >> "$OUT/tests.log"
    note "test $(basename "$t") rc=$rc $(tail -n 2 "$OUT/tmp.log" | tr '\n' ' ' | cut -c1-200) ($((end - start)) s)"
  done
fi

if has sanitize && [ -n "$cs" ]; then
  for t in "$BIN"/*_gpu; do
    [ -x "$t" ] || continue
    # The Hopper test has its own small shapes for the sanitizers; its full cases are too slow there.
    filter="~[seed]~[large]~[race]"
    [ "$(basename "$t")" = kernels_hopper_gpu ] && filter="[sanitize]"
    for tool in memcheck racecheck synccheck; do
      timeout 300 "$cs" --tool "$tool" --error-exitcode 99 "$t" "$filter" > "$OUT/tmp.log" 2>&1; rc=$?
      { echo "===== $tool $(basename "$t") rc=$rc"; tail -n 40 "$OUT/tmp.log"; } >> "$OUT/sanitizer.log"
      note "sanitizer $tool $(basename "$t") rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/tmp.log" | tr '\n' ' ')"
    done
  done
fi

# The Hopper mutants once each under each tool: what the sanitizers say of a missing fence, a
# missing full-barrier wait and a stale pipeline phase (the tests judge them by their outputs).
if has sanitize && [ -n "$cs" ] && [ -x "$BIN/kernels_hopper_gpu" ]; then
  for tool in memcheck racecheck synccheck; do
    timeout 300 "$cs" --tool "$tool" --error-exitcode 99 "$BIN/kernels_hopper_gpu" "[sanitize-mutants]" > "$OUT/tmp.log" 2>&1; rc=$?
    { echo "===== $tool kernels_hopper_gpu [sanitize-mutants] rc=$rc"; tail -n 60 "$OUT/tmp.log"; } >> "$OUT/sanitizer.log"
    note "sanitizer $tool on the Hopper mutants: rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|mutant [0-9]' "$OUT/tmp.log" | tr '\n' ' ' | cut -c1-300)"
  done
fi

if has sanitize && [ -n "$cs" ] && [ -x "$BIN/mutants_gpu" ]; then
  timeout 300 "$cs" --tool racecheck --error-exitcode 99 "$BIN/mutants_gpu" "[race]" > "$OUT/tmp.log" 2>&1; rc=$?
  { echo "===== racecheck mutants_gpu [race] (expect 99) rc=$rc"; tail -n 30 "$OUT/tmp.log"; } >> "$OUT/sanitizer.log"
  note "sanitizer racecheck on mutant 12 (missing barrier): rc=$rc (99 = race found, as it must be)"
fi

if has harness && [ -x "$BIN/attncheck" ]; then
  "$BIN/attncheck" list > "$OUT/harness.log" 2>&1
  timeout 400 "$BIN/attncheck" check --backend cuda --suite gate --report-dir "$OUT/report" --corpus-dir "$OUT/corpus" >> "$OUT/harness.log" 2>&1; rc=$?
  note "harness gate (cuda) rc=$rc"
  [ -x "$BIN/attncheck" ] && timeout 200 "$BIN/attncheck" tiling --backend cuda --subject fused --cases 20 --report-dir "$OUT/tiling" >> "$OUT/harness.log" 2>&1; timeout 200 "$BIN/attncheck" tiling --backend cuda --subject splitkv --cases 10 --report-dir "$OUT/tiling-splitkv" >> "$OUT/harness.log" 2>&1
  note "harness tiling rc=$?"
  timeout 400 "$BIN/attncheck" mutants --backend cuda --oracle all --first-kill --no-shrink --report-dir "$OUT/mutants" >> "$OUT/harness.log" 2>&1
  note "harness mutants (cuda) rc=$?"
  tar czf "$OUT/reports.tgz" -C "$OUT" report tiling tiling-splitkv corpus mutants 2>/dev/null
  rm -rf "$OUT/report" "$OUT/tiling" "$OUT/tiling-splitkv" "$OUT/corpus" "$OUT/mutants"
fi

if has bench; then
  for b in ${BENCHES:-$BIN/merge_bench $BIN/fused_bench $BIN/hopper_bench}; do
    [ -x "$b" ] || continue
    { echo "===== $(basename "$b")"; timeout 300 "$b" 2>&1; echo "rc=$?"; } >> "$OUT/bench.log"
  done
  # PyTorch's SDPA backends at hopper_bench's shapes, same timing method, where torch is importable.
  { echo "===== kernels/bench/peers.py"; timeout 300 python3 kernels/bench/peers.py 10 2>&1; echo "rc=$?"; } >> "$OUT/bench.log"
  note "benchmarks done: $(ls "$BIN"/*_bench 2>/dev/null | xargs -n1 basename | tr '\n' ' ')"
fi
rm -f "$OUT/tmp.log"
