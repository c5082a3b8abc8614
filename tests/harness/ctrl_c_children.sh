#!/usr/bin/env bash
# Ctrl-C at a terminal during check --jobs N: the signal reaches the process group, so every child
# gets it twice (from the terminal, and forwarded by its parent). Each child must stop after its
# case and report what it completed; none may be reported as crashed, and the run is interrupted.
#   ctrl_c_children.sh ATTNCHECK SCRATCH
set -u
AC=$1
S=$2
rm -rf "$S"
mkdir -p "$S"
# Its own process group, as a shell job has; the signal goes to the group, as a terminal's does.
setsid "$AC" check --backend host --subject fused,splitkv --property accuracy,run_to_run --cases 100000 \
  --jobs 4 --no-plots --report-dir "$S/report" >"$S/out" 2>&1 &
pid=$!
sleep 3
kill -INT -- "-$pid"
wait "$pid"
rc=$?
fail=0
[ "$rc" -eq 130 ] || { echo "exit $rc, want 130 (interrupted): $(tail -c 300 "$S/out")"; fail=1; }
python3 - "$S/report/report.json" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
assert r["interrupted"] is True, "report not marked interrupted"
assert len(r["results"]) == 4, [e["subject"] + "/" + e["property"] for e in r["results"]]
bad = [(e["subject"], e["property"], e["status"], e["message"][:120]) for e in r["results"]
       if e["status"] not in ("interrupted", "passed") or e["cases_run"] < 1]
assert not bad, bad
PY
echo "Ctrl-C with children: exit $rc, every pair interrupted after its cases"
exit $fail
