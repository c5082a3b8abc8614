#!/usr/bin/env bash
# Ctrl-C while a failure shrinks: the run ends within a second, exit 1 (the failure found), and
# report.json says interrupted, with the failure and its cut shrink in it.
#   ctrl_c_mid_shrink.sh ATTNCHECK "WORKER COMMAND" SCRATCH_DIR
# The worker's merge-np-slow touches a marker at its first NaN (the first failure) and then takes
# 0.2 s per call, so a second after the marker appears the run is inside the shrink.
set -u
AC=$1
WORKER=$2
S=$3
rm -rf "$S"
mkdir -p "$S"
export ATTNCHECK_FAILED_MARKER="$S/failed"
# Its own process group, as a shell job has; the signal goes to the group, as a terminal's does.
setsid "$AC" check --worker "$WORKER" --subject merge-np-slow --property merge_sentinels --no-plots --cases 100 \
  --shrink-time 60 --report-dir "$S/report" >"$S/out" 2>&1 &
pid=$!
for _ in $(seq 300); do [ -e "$ATTNCHECK_FAILED_MARKER" ] && break; sleep 0.05; done
[ -e "$ATTNCHECK_FAILED_MARKER" ] || { echo "no failure within 15 s"; kill -9 -- "-$pid"; exit 1; }
sleep 1
t0=$(date +%s%N)
kill -INT -- "-$pid"
wait "$pid"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
fail=0
[ "$rc" -eq 1 ] || { echo "exit $rc, want 1: $(tail -c 300 "$S/out")"; fail=1; }
[ "$ms" -le 1000 ] || { echo "took $ms ms after Ctrl-C, want <= 1000"; fail=1; }
python3 - "$S/report/report.json" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
e = r["results"][0]
assert r["interrupted"] is True, "report not marked interrupted"
assert e["status"] == "failed" and e["shrink_cut"] is True, (e["status"], e["shrink_cut"])
assert e["corpus_files"], "no corpus file for the failure"
PY
echo "Ctrl-C mid-shrink: exit $rc after $ms ms"
exit $fail
