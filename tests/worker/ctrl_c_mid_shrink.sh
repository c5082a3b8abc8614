#!/usr/bin/env bash
# Ctrl-C while a failure shrinks: the run ends within a second, exit 1 (the failure found), and
# report.json says interrupted, with the failure and its cut shrink in it.
#   ctrl_c_mid_shrink.sh ATTNCHECK "WORKER COMMAND" SCRATCH_DIR
set -u
AC=$1
WORKER=$2
S=$3
rm -rf "$S"
mkdir -p "$S"
# The accuracy failure of the unguarded merge takes longer than 20 s to shrink fully, so the
# signal lands inside the shrink. The run gets its own process group, as a shell job would, and
# the signal goes to the whole group, as a terminal's Ctrl-C does.
setsid "$AC" check --worker "$WORKER" --property accuracy --no-plots --cases 100 --shrink-time 60 \
  --report-dir "$S/report" >"$S/out" 2>&1 &
pid=$!
# The first failure comes within about a second; its shrink runs on for more than 20 s.
sleep 4
t0=$(date +%s%N)
kill -INT -- "-$pid"
wait "$pid"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
fail=0
[ "$rc" -eq 1 ] || { echo "exit $rc, want 1"; fail=1; }
[ "$ms" -le 1000 ] || { echo "took $ms ms after Ctrl-C, want <= 1000"; fail=1; }
python3 - "$S/report/report.json" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
e = [x for x in r["results"] if x["property"] == "accuracy"][0]
assert r["interrupted"] is True, "report not marked interrupted"
assert e["status"] == "failed" and e["shrink_cut"] is True, (e["status"], e["shrink_cut"])
assert e["corpus_files"], "no corpus file for the failure"
PY
echo "Ctrl-C mid-shrink: exit $rc after $ms ms"
exit $fail
