#!/usr/bin/env bash
# What check's stderr and replay's output say, read against the report a failing run wrote:
#   - a plugin merge wrong by 2^-10 on its first output fails accuracy and merge_sentinels; each
#     failure's line on check's stderr and replay's verdict line carry the case's context (the
#     phrase report.json records) and its message, and the element line of both is report.md's
#     quoted element, err/budget included;
#   - "backend: ..." is printed when built-ins run, not for a plugin-only run;
#   - a replay that judges nothing (the subject refuses the case, or lacks its dtype) exits 1 with
#     one line saying so and why;
#   - chunked-prefill scenarios beside cases are named with the command that runs them, not
#     counted as malformed.
#   failure_lines.sh ATTNCHECK WRONG_MERGE_PLUGIN PYTHON SOURCE_DIR SCRATCH
set -euo pipefail
AC=$1 PLUGIN=$2 PY=$3 SRC=$4 S=$5
rm -rf "$S"
mkdir -p "$S"
fail() { echo "FAIL: $*"; exit 1; }

set +e
"$AC" check --plugin "$PLUGIN" --subject wrong-merge --property accuracy,merge_sentinels --cases 20 --seed 1 \
  --jobs 1 --no-plots --report-dir "$S/run" >"$S/check.out" 2>"$S/check.err"
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "the wrong merge's run exited $rc, not 1: $(cat "$S/check.err")"
! grep -q '^backend: ' "$S/check.err" || fail "a plugin-only run printed the built-ins' backend"
"$AC" check --subject merge --property merge_sentinels --cases 2 --jobs 1 --no-plots --backend host \
  --report-dir "$S/builtin" >/dev/null 2>"$S/builtin.err"
grep -q '^backend: host twins' "$S/builtin.err" || fail "a run of a built-in did not name its backend"

# One tab-separated row per failure of report.json: status, property, class, context, message,
# quoted element (JSON), corpus file.
"$PY" - "$S/run/report.json" >"$S/failures.tsv" <<'EOF'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    if r["status"] != "passed":
        w = r["worst_element"]
        print("\t".join([r["status"], r["property"], r["failure_class"], r["context"], r["message"],
                         json.dumps(w), r["corpus_files"][0]]))
EOF
[ "$(wc -l <"$S/failures.tsv")" -eq 2 ] || fail "expected 2 failures in report.json: $(cat "$S/failures.tsv")"
while IFS=$'\t' read -r status property class context message element file; do
  [ "$status" = failed ] || fail "$property: $status"
  # The context names the dtype, the shape and the failing row (case_context's phrase).
  [[ "$context" =~ ^fp32,\ [0-9]+\ tokens?\ x\ [0-9]+\ heads?,\ d=[0-9]+,\ row\ [0-9]+: ]] || fail "context '$context'"
  quoted=$(grep -A6 "^\*\*wrong-merge / $property\*\*" "$S/run/report.md" | sed -n 's/^- quoted element: `\(.*\)`$/\1/p')
  quoted=${quoted%%$'\n'*}
  [ -n "$quoted" ] || fail "$property: no quoted element in report.md"
  [[ "$quoted" == *"  err/budget "* ]] || fail "$property: report.md's element has no err/budget: $quoted"
  # report.md prints report.json's numbers: the exact value and the output as written, the ulp and
  # err/budget to 3 digits. The plugin moves an output of magnitude at least 1 by 2^-10 of itself:
  # 2^13 fp32 ulps within its binade, far over any budget.
  "$PY" - "$quoted" "$element" <<'EOF' || fail "$property: report.md's element is not report.json's"
import json, re, sys
md, w = sys.argv[1], json.loads(sys.argv[2])
f = dict(re.findall(r"  (exact|output|ulp|err/budget) (\S+(?: \(0x[^)]*\))?)", md))
assert f["exact"] == w["exact"] and f["output"] == w["output"], (f, w)
for key, j in (("ulp", w["ulp"]), ("err/budget", w["err_budget"])):
    assert abs(float(f[key]) - j) <= 5e-3 * j, (key, f[key], j)
assert w["ulp"] == 8192 and w["err_budget"] > 1, w
EOF
  line="FAIL wrong-merge / $property: $class: $context: $message"
  grep -qxF "$line" "$S/check.err" || fail "check's stderr lacks '$line'"
  grep -A1 -xF "$line" "$S/check.err" | grep -qxF "  quoted element: $quoted" || fail "$property: check's stderr element"
  set +e
  "$AC" replay "$file" --plugin "$PLUGIN" >"$S/replay.out" 2>&1 </dev/null
  rc=$?
  set -e
  [ "$rc" -eq 1 ] || fail "replay of $file exited $rc"
  grep -qxF "$file: wrong-merge: FAIL $class: $context: $message" "$S/replay.out" || fail "replay's verdict: $(cat "$S/replay.out")"
  grep -qxF "  $quoted" "$S/replay.out" || fail "replay's element line is not report.md's: $(cat "$S/replay.out")"
  echo "$property: check's stderr, report.md and replay agree: $context; $quoted"
done <"$S/failures.tsv"

# Nothing judged: a refusal and a dtype the subject lacks, each one line, exit 1.
file=$(cut -f7 "$S/failures.tsv" | head -n 1)
set +e
out=$("$AC" replay "$file" --plugin "$PLUGIN" --subject refusing-merge 2>&1)
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "a refused replay exited $rc: $out"
[ "$out" = "$file: refusing-merge: nothing judged, refused: refusing-merge merge: refusing-merge refuses every call, as a kernel declaring more than it serves" ] ||
  fail "refused replay printed: $out"
set +e
out=$("$AC" replay "$SRC/corpus/attention-seed-worked-example.json" --subject fused --backend host 2>&1)
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "an fp32 case replayed on fused exited $rc: $out"
[ "$out" = "$SRC/corpus/attention-seed-worked-example.json: fused: nothing judged, not applicable: subject lacks dtype fp32" ] ||
  fail "fp32 replay on fused printed: $out"
echo "replays that judge nothing exit 1 with one line"

# Prefill scenarios beside cases: named with their command, not malformed.
out=$("$AC" replay "$SRC/corpus" --subject merge --backend host 2>&1)
! grep -q malformed <<<"$out" || fail "a scenario counted as malformed: $out"
for f in all-hit miss-in-batch; do
  grep -qxF "skipped: $SRC/corpus/prefill/$f.json: a chunked-prefill scenario, not a case: run it with attncheck prefill --scenario $SRC/corpus/prefill/$f.json" <<<"$out" ||
    fail "scenario $f not named: $out"
done
set +e
out=$("$AC" replay "$SRC/corpus/prefill/all-hit.json" --subject merge --backend host 2>&1)
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "attncheck prefill --scenario $SRC/corpus/prefill/all-hit.json" <<<"$out" ||
  fail "a scenario named on the command line: exit $rc: $out"
echo "prefill scenarios are named with the command that runs them"
