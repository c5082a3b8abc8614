#!/usr/bin/env bash
# One short GPU lease in one call: the GPU tests, the harness on the CUDA backend and the worker
# checks run side by side (the H200 has room for all of them; none of them is timed), then the
# sanitizers on the small shapes, then the benchmarks alone on the idle GPU. Every step has its own
# timeout, so a hang costs only its step. Logs under $OUT; one summary line per step.
#   bash tests/gpu/session.sh [par] [sanitize] [bench] [timing] [ab]   (from the repo root, with gpu-pack/
#   carried; default: par sanitize bench). A device call is limited to 10 minutes: run the steps in
#   separate calls when they may not fit in one. timing: the default gate and --suite long alone on
#   the idle machine, three and one times, wall seconds in the summary. ab: below.
set -u
steps="${*:-par sanitize bench}"
has() { [[ " $steps " == *" $1 "* ]]; }
BIN="${BIN:-gpu-bin}"
[ -d "$BIN" ] || { [ -f gpu-pack/bin.tar.xz ] && tar xJf gpu-pack/bin.tar.xz; }
# Nothing to run, or nothing to run it on: one line, and not a pass.
[ -d "$BIN" ] || { echo "session.sh: no $BIN/ or gpu-pack/ (run tests/gpu/stage.sh first)" >&2; exit 2; }
nvidia-smi -L > /dev/null 2>&1 || { echo "session.sh: no GPU here (nvidia-smi -L failed)" >&2; exit 77; }
OUT="${OUT:-out}"; mkdir -p "$OUT"
export AC_EXAMPLE_PLUGIN_PATH="$PWD/$BIN/libattncheck_example_plugin.so"
summary="$OUT/summary.txt"; : >> "$summary"
note() { echo "$*" >> "$summary"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv >> "$summary" 2>&1
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)

tests() {
  for t in "$BIN"/*_gpu; do
    local s=$(date +%s)
    # kernels_attention_variants_gpu (softcaps and windows over many key tiles) ran past 150 s beside
    # the harness and worker steps.
    timeout 240 "$t" > "$OUT/test-$(basename "$t").log" 2>&1; local rc=$?
    note "test $(basename "$t") rc=$rc $(tail -n 2 "$OUT/test-$(basename "$t").log" | tr '\n' ' ' | cut -c1-160) ($(($(date +%s) - s)) s)"
  done
}
harness() {
  local s=$(date +%s)
  timeout 200 "$BIN/attncheck" check --backend cuda --suite gate --no-plots --report-dir "$OUT/gate" > "$OUT/gate.log" 2>&1
  note "harness gate (cuda) rc=$? ($(($(date +%s) - s)) s): $(tail -n 1 "$OUT/gate.log" | cut -c1-200)"
  s=$(date +%s)
  timeout 420 "$BIN/attncheck" mutants --backend cuda --oracle all --first-kill --no-shrink --report-dir "$OUT/mutants" > "$OUT/mutants.log" 2>&1
  note "harness mutants (cuda) rc=$? ($(($(date +%s) - s)) s): $(tail -n 1 "$OUT/mutants.log" | cut -c1-200)"
}
worker() {
  OUT="$OUT/worker" timeout 360 bash tests/gpu/worker_gpu.sh > "$OUT/worker_gpu.out" 2>&1
  note "worker_gpu rc=$?"
}
secs() { local ms=$((($(date +%s%N) - $1) / 1000000)); echo "$((ms / 1000)).$((ms % 1000 / 100))"; }
timing() {
  local i s
  for i in 1 2 3; do
    s=$(date +%s%N)
    timeout 200 "$BIN/attncheck" check --backend cuda --report-dir "$OUT/timing-gate-$i" > "$OUT/timing-gate-$i.log" 2>&1
    note "timing gate run $i rc=$? $(secs "$s") s: $(tail -n 1 "$OUT/timing-gate-$i.log" | cut -c1-160)"
  done
  s=$(date +%s%N)
  # SIGINT at the limit: the run stops after its cases and still writes its report.
  timeout -s INT -k 60 300 "$BIN/attncheck" check --backend cuda --suite long --report-dir "$OUT/timing-long" > "$OUT/timing-long.log" 2>&1
  note "timing --suite long rc=$? $(secs "$s") s: $(tail -n 1 "$OUT/timing-long.log" | cut -c1-160)"
}
has timing && timing
if has par; then
  tests & harness & worker &
  wait
fi

if has sanitize && [ -n "$cs" ] && [ -x "$BIN/kernels_hopper_gpu" ]; then
  for tool in memcheck racecheck synccheck; do
    timeout 100 "$cs" --tool "$tool" --error-exitcode 99 "$BIN/kernels_hopper_gpu" "[sanitize],[.sanitize-fp8]" > "$OUT/san.log" 2>&1
    note "sanitizer $tool hopper [sanitize],[.sanitize-fp8] rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san.log" | tr '\n' ' ')"
    timeout 60 "$cs" --tool "$tool" --error-exitcode 99 "$BIN/kernels_hopper_gpu" "[sanitize-mutants]" > "$OUT/san-m.log" 2>&1
    note "sanitizer $tool hopper mutants rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|mutant [0-9]' "$OUT/san-m.log" | tr '\n' ' ' | cut -c1-300)"
    timeout 60 "$cs" --tool "$tool" --error-exitcode 99 "$BIN/kernels_attention_variants_gpu" "[.sanitize-var]" > "$OUT/san-v.log" 2>&1
    note "sanitizer $tool variants [.sanitize-var] rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|All tests' "$OUT/san-v.log" | tr '\n' ' ')"
    cat "$OUT/san.log" "$OUT/san-m.log" "$OUT/san-v.log" >> "$OUT/sanitizer.log"
  done
  for t in kernels_attention_fused_gpu mutants_gpu; do
    timeout 60 "$cs" --tool memcheck --error-exitcode 99 "$BIN/$t" "~[seed]~[large]~[race]" > "$OUT/san.log" 2>&1
    note "sanitizer memcheck $t rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/san.log" | tr '\n' ' ')"
  done
  rm -f "$OUT/san.log" "$OUT/san-m.log" "$OUT/san-v.log"
fi

# ab: hopper_bench's T = 8192 rows of this tree and of gpu-bin/hopper_bench-base (stage.sh
# BASE_REV) in turn, new, base, new, base, on the idle GPU: a change is judged against its base
# within one lease, and the repeat shows the spread between two runs of one binary.
if has ab; then
  if [ -x "$BIN/hopper_bench-base" ]; then
    rev=$(cat "$BIN/hopper_bench-base.rev" 2>/dev/null)
    for k in new base new base; do
      b="$BIN/hopper_bench" label=new
      [ "$k" = base ] && b="$BIN/hopper_bench-base" label="base${rev:+ $rev}"
      { echo "===== $label: $b"; timeout 150 "$b" 10 hopper8192; echo "rc=$?"; } >> "$OUT/ab.log" 2>&1
    done
    note "ab done: $(grep -c '^=====' "$OUT/ab.log") runs in ab.log"
  else
    note "ab: no $BIN/hopper_bench-base (tests/gpu/stage.sh with BASE_REV=<rev>)"
  fi
fi

has bench && { echo "===== attncheck bench (the built-in kernels, ceilings and PyTorch's backends; bench.json)";
  PYTHONPATH="$PWD/python" timeout 300 "$BIN/attncheck" bench --repeats 10 --out "$OUT/bench.json"; echo "rc=$?";
  echo "===== merge_bench (every dtype and LSE layout)"; timeout 40 "$BIN/merge_bench"; echo "rc=$?"; } > "$OUT/bench.log" 2>&1 && note "benchmarks done"
# The report directories, without their pictures (a tarball over the device tool's size limit does
# not come back); the step logs stay beside the summary.
dirs=$(cd "$OUT" && ls -d gate/ mutants/ worker/ timing-*/ 2>/dev/null)
[ -n "$dirs" ] && tar czf "$OUT/reports.tgz" --exclude=plots -C "$OUT" $dirs && (cd "$OUT" && rm -rf $dirs)
cat "$summary"
