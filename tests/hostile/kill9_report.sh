#!/usr/bin/env bash
# kill -9 at random moments of `attncheck check`: a reader never sees a report set mixed from two
# runs, the next run removes the temporaries a killed one left, and every corpus file parses.
#
#   kill9_report.sh ATTNCHECK SCRATCH_DIR PLUGIN [KILLS]
#
# The runs alternate seeds, so each run's report.json and report.md name their own seed. After
# each kill the report directory is judged twice, independently: by attncheck (report merge reads
# it through check_report_set) and by this script (the seed in report.json against the one in
# report.md, and every file against the manifest's FNV-1a hash). They must agree: complete (one
# run's files), or refused as incomplete by attncheck. Never exit 3, never a mixed set accepted.
# The example plugin makes every case a write-ahead corpus file, so kills also land in corpus writes.
set -u
AC=$1
S=$2
PLUGIN=$3
KILLS=${4:-10}
BUDGET_S=${KILL9_BUDGET_S:-50}
rm -rf "$S"
mkdir -p "$S"
R="$S/report"
start=$(date +%s)

run() {  # run SEED: one check into $R, in the background; sets $pid
  "$AC" check --backend host --no-plots --quiet --cases 40 --seed "$1" --plugin "$PLUGIN" --report-dir "$R" \
    >"$S/run.out" 2>&1 &
  pid=$!
}

judge() {  # prints complete|incomplete|empty from the files alone
  python3 "$(dirname "$0")/report_set.py" "$R"
}

# A complete report first: the "previous run" every kill competes with.
"$AC" check --backend host --no-plots --quiet --cases 40 --seed 1 --plugin "$PLUGIN" --report-dir "$R" >/dev/null 2>&1
t0=$(date +%s%N)
"$AC" check --backend host --no-plots --quiet --cases 40 --seed 2 --plugin "$PLUGIN" --report-dir "$R" >/dev/null 2>&1
run_ms=$((($(date +%s%N) - t0) / 1000000))
echo "one run takes ${run_ms} ms; killing at random moments within it"

fail=0
complete=0
refused=0
left_tmp=0
kills=0
for i in $(seq "$KILLS"); do
  [ $(($(date +%s) - start)) -ge "$BUDGET_S" ] && break
  run $((i + 2))
  # Uniform in [0, 1.1 x run time]: before, during and just after the report is written.
  delay_ms=$((RANDOM * (run_ms * 11 / 10 + 1) / 32768))
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  kills=$((kills + 1))
  tmps=$(find "$R" -name '.tmp-*' | wc -l)
  [ "$tmps" -gt 0 ] && left_tmp=$((left_tmp + 1))
  mine=$(judge)
  rc=0
  "$AC" report merge "$R" --out "$S/read" --no-plots >"$S/merge.out" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ] && [ "$mine" = complete ]; then
    complete=$((complete + 1))
  elif [ "$rc" -eq 2 ] && [ "$mine" != complete ] && grep -q 'not one complete run' "$S/merge.out"; then
    refused=$((refused + 1))
  else
    fail=1
    echo "kill $i at ${delay_ms} ms: attncheck read exit $rc, files say $mine: $(head -c 300 "$S/merge.out")"
  fi
done

# The next run cleans up: no temporaries, a complete set, every corpus file a readable case.
rc=0
"$AC" check --backend host --no-plots --cases 40 --seed 99 --plugin "$PLUGIN" --report-dir "$R" >"$S/final.out" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
  fail=1
  echo "the run after the kills exited $rc: $(tail -c 300 "$S/final.out")"
fi
if [ -n "$(find "$R" -name '.tmp-*' -o -name 'inflight-*')" ]; then
  fail=1
  echo "left behind after the next run: $(find "$R" -name '.tmp-*' -o -name 'inflight-*' | head -5)"
fi
[ "$(judge)" = complete ] || { fail=1; echo "the final report set is not complete"; }
ncases=$(find "$R/corpus" -name '*.json' 2>/dev/null | wc -l)
if [ "$ncases" -gt 0 ]; then
  rc=0
  "$AC" replay "$R/corpus" --backend host --plugin "$PLUGIN" >"$S/replay.out" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ] || grep -q 'skipped (malformed)' "$S/replay.out"; then
    fail=1
    echo "corpus files do not all parse (replay exit $rc): $(grep -m3 'malformed\|attncheck:' "$S/replay.out")"
  fi
fi
echo "kill -9: $kills kills in $(($(date +%s) - start)) s; after each: $complete complete sets read, $refused incomplete sets refused, $left_tmp left temporaries; next run: $(grep -c '^removed' "$S/final.out") removed, corpus $ncases cases all parse: $([ $fail -eq 0 ] && echo yes || echo no)"
exit $fail
