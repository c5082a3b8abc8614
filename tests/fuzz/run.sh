#!/usr/bin/env bash
# Fuzz every parser of user files for a bounded time: case files, reports / baselines, prefill
# scenarios, report merge input, bench.json (tests/fuzz/fuzz_*.cpp). Configures its own clang build
# (libFuzzer + ASan + UBSan on every library the targets link) unless FUZZ_BUILD_DIR is a tree
# configured with the fuzz targets already (the asan-ubsan preset's, which .ci/run builds for its
# sanitizer step), builds only the fuzz targets, seeds each from corpus/, reports/ and small
# generated files (make_seeds.py), runs each for FUZZ_SECONDS, FUZZ_PARALLEL targets at a time,
# prints the executions per target, and fails on any crash, leak, timeout or sanitizer report. A
# crashing input is kept as FUZZ_DIR/artifacts/<target>-crash-*.
#
# Environment: FUZZ_SECONDS (default 60, per target), FUZZ_BUILD_DIR (default build-fuzz),
# FUZZ_TARGETS (default "case report scenario merge bench"), FUZZ_JOBS (build jobs, default nproc),
# FUZZ_PARALLEL (targets run at once, default nproc). A longer campaign: tests/fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
BUILD="${FUZZ_BUILD_DIR:-build-fuzz}"
TARGETS="${FUZZ_TARGETS:-case report scenario merge bench}"
JOBS="${FUZZ_JOBS:-$(nproc)}"
PARALLEL="${FUZZ_PARALLEL:-$(nproc)}"

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (Debian: clang libclang-rt-14-dev)" >&2
  exit 2
fi
# Coverage instrumentation and sanitizers on every library the targets link, not only on the
# targets: the parsers live in the libraries.
work="$BUILD/fuzz"
mkdir -p "$work"
if grep -qs '^ATTNCHECK_FUZZ:BOOL=ON$' "$BUILD/CMakeCache.txt"; then
  echo "fuzz: $BUILD is configured with the fuzz targets; building them there"
else
  san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  # Line tables only (-g1) for the crash stacks: full debug information adds about a quarter to the build.
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTNCHECK_CUDA=OFF \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
    -DATTNCHECK_FUZZ=ON -DCMAKE_C_FLAGS="$san" -DCMAKE_CXX_FLAGS="$san" >"$work.configure.log" 2>&1 ||
    { cat "$work.configure.log" >&2; exit 1; }
fi
cmake --build "$BUILD" -j "$JOBS" --target attncheck_fuzz

rm -rf "$work/seeds" "$work/artifacts"
mkdir -p "$work/artifacts"
python3 tests/fuzz/make_seeds.py . "$work/seeds"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# One target for FUZZ_SECONDS: its summary line in $work/<target>.line; a finding also on stderr
# and a non-zero return.
fuzz_one() {
  local t=$1 bin="$BUILD/tests/fuzz/fuzz_$1" corpus="$work/corpus/$1" log="$work/$1.log" rc=0
  mkdir -p "$corpus"  # inputs libFuzzer found, kept between runs of this build dir
  "$bin" "$corpus" "$work/seeds/$t" -dict=tests/fuzz/json.dict -max_total_time="$FUZZ_SECONDS" \
    -max_len=65536 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$t-" >"$log" 2>&1 || rc=$?
  local execs crashes line
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  crashes=$(find "$work/artifacts" -name "$t-*" -type f | wc -l)
  line="fuzz_$t: ${execs:-?} executions in ${FUZZ_SECONDS}s, exit $rc, $crashes crashing inputs"
  echo "$line" >"$work/$t.line"
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ] || [ -z "$execs" ]; then
    {
      echo "$line"
      grep -E "ERROR|runtime error|SUMMARY|abort|what\(\)|round trip|cannot" "$log" | head -20 || true
      echo "full log: $log"
    } >&2
    return 1
  fi
}
status=0
running=0
for t in $TARGETS; do
  echo "fuzz: $t for ${FUZZ_SECONDS}s"
  fuzz_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$PARALLEL" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
for t in $TARGETS; do cat "$work/$t.line"; done
[ "$status" -eq 0 ] && echo "fuzz: 0 crashes" || echo "fuzz: FAILED (inputs in $work/artifacts/)" >&2
exit "$status"
