#!/usr/bin/env bash
# report.md and report.html of two real runs, a passing one (the example plugin) and a failing one
# (the same plugin beside a numpy merge without the both-empty guard, served by the Python SDK):
#   text     the first line is the verdict sentence, failures come first, the failure carries its
#            case's context (which merge side is empty) and its reproduce command;
#   browser  each report.html, figures drawn into it, opened in a real headless browser (Debian's
#            chromium): the page's DOM holds the verdict, one table row per result and one <svg>
#            per figure, and the browser logs no error. Exit 77 (skipped) where chromium is absent.
#   report_pages.sh text|browser ATTNCHECK PLUGIN PYTHON SOURCE_DIR SCRATCH
set -euo pipefail
mode=$1 AC=$2 PLUGIN=$3 PY=$4 SRC=$5 S=$6
if [ "$mode" = browser ]; then
  browser=$(command -v chromium || command -v chromium-browser || true)
  [ -n "$browser" ] || { echo "skipped: no chromium on PATH (Debian: apt-get install chromium)"; exit 77; }
fi
rm -rf "$S"
mkdir -p "$S"
fail() { echo "FAIL: $*"; exit 1; }
"$AC" check --plugin "$PLUGIN" --backend host --cases 10 --seed 1 --quiet --no-plots --report-dir "$S/pass" >/dev/null
set +e
# The failing run has the passing plugin beside the planted bug, which runs after it.
PYTHONPATH=$SRC/python "$AC" check --plugin "$PLUGIN" \
  --worker "$PY -m attncheck.worker $SRC/examples/python_worker/unguarded_merge.py" --backend host \
  --property merge_sentinels --dtype fp32 --cases 50 --seed 1 --quiet --no-plots --report-dir "$S/fail" >/dev/null
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "the planted bug's run exited $rc, not 1"

if [ "$mode" = text ]; then
  first=$(head -n 1 "$S/pass/report.md")
  [[ "$first" =~ ^"## PASS: "([0-9]+)" of "([0-9]+)" subject x property results passed"$ ]] || fail "pass: first line '$first'"
  [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] || fail "pass: $first"
  md=$S/fail/report.md
  first=$(head -n 1 "$md")
  [ "$first" = "## FAIL: 1 of 1 properties failed on merge-np-unguarded: merge_sentinels" ] || fail "fail: first line '$first'"
  # The table: the failure before the passing row.
  f=$(grep -n '^| \*\*failed\*\* | merge-np-unguarded (host) | merge_sentinels |' "$md" | cut -d: -f1)
  p=$(grep -n '^| pass | example-merge (host) | merge_sentinels |' "$md" | cut -d: -f1)
  [ -n "$f" ] && [ -n "$p" ] && [ "$f" -lt "$p" ] || fail "order: failed row at '$f', passing row at '$p'"
  # The context: dtype, shape, and the failing row's empty sides (both -inf: no prefix hit).
  grep -q '^- case: fp32, [0-9]* tokens\? x [0-9]* heads\?, d=[0-9]*, row [0-9]*: prefix empty (-inf), suffix empty (-inf)$' "$md" \
    || fail "no context line in $md"
  grep -q '^- reproduce: `.*attncheck replay .*/corpus/merge-merge-np-unguarded-merge_sentinels-.*\.json --subject merge-np-unguarded' "$md" \
    || fail "no reproduce line in $md"
  grep -q '<li>case: fp32, .*prefix empty (-inf), suffix empty (-inf)</li>' "$S/fail/report.html" || fail "no context in report.html"
  echo "report.md and report.html of both runs read as expected"
  exit 0
fi

for run in pass fail; do
  dir=$S/$run
  figures=0
  if "$AC" plot "$dir" >/dev/null 2>&1; then
    figures=$(ls "$dir/plots" | grep -c '^\(summary\|budget-.*\)\.svg$' || true)
  fi
  results=$(grep -o '"property":' "$dir/report.json" | wc -l)
  # A fresh profile per page; --no-sandbox: CI containers run as root.
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --user-data-dir="$S/profile-$run" \
    --enable-logging=stderr --v=0 --dump-dom "file://$dir/report.html" >"$S/$run.dom" 2>"$S/$run.log" \
    || fail "$run: chromium exited $?: $(tail -n 3 "$S/$run.log")"
  verdict=$(grep -o '<h1 id="verdict" class="[a-z]*">[^<]*</h1>' "$S/$run.dom" || true)
  [ -n "$verdict" ] || fail "$run: no verdict heading in the rendered page"
  rows=$(grep -o '<tr' "$S/$run.dom" | wc -l)
  [ "$rows" -eq $((results + 1)) ] || fail "$run: $rows table rows for $results results"
  svgs=$(grep -o '<svg' "$S/$run.dom" | wc -l)
  [ "$svgs" -eq "$figures" ] || fail "$run: $svgs svg elements for $figures figures"
  if grep -E 'ERROR:CONSOLE|Uncaught|Failed to load' "$S/$run.log"; then fail "$run: the browser logged an error"; fi
  echo "$run: $verdict, $results results, $figures figures"
done
