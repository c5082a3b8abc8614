#!/usr/bin/env bash
# The device server (harness/src/worker/serve.hpp) on the host backend, where CI can run it
# (ATTNCHECK_DEVICE_SERVER=on): the children's built-in subjects' calls go to it (report.json
# counts them), and the report's verdicts, case counts and statistics equal those of a run where
# every child makes its own calls. A server that dies mid-run changes nothing either: its
# clients make their calls themselves from then on.
#   device_server.sh ATTNCHECK SCRATCH
set -euo pipefail
AC=$1
S=$2
rm -rf "$S"
mkdir -p "$S"
cd "$S"
ARGS="--backend host --subject merge,softmax-online,fused,splitkv --cases 12 --jobs 3 --no-plots --quiet"
ATTNCHECK_DEVICE_SERVER=off "$AC" check $ARGS --report-dir own >/dev/null
ATTNCHECK_DEVICE_SERVER=on "$AC" check $ARGS --report-dir served >/dev/null
ATTNCHECK_DEVICE_SERVER=on ATTNCHECK_DEVICE_SERVER_DIES_AFTER=40 "$AC" check $ARGS --report-dir died >/dev/null
python3 - <<'PY'
import json, sys
def load(d):
    return json.load(open(d + "/report.json"))
def verdicts(r):
    drop = {"seconds", "time_split", "seconds_to_first_failure", "shrink_seconds"}
    return [{k: v for k, v in e.items() if k not in drop} for e in r["results"]]
own, served, died = load("own"), load("served"), load("died")
calls = lambda r: [s["calls"] for s in r["parallel"].get("device_servers", [])]
problems = []
if calls(own): problems.append(f"ATTNCHECK_DEVICE_SERVER=off started a server: {calls(own)}")
if not calls(served) or calls(served)[0] < 100:
    problems.append(f"the server made too few calls: {calls(served)} (expected hundreds)")
if calls(died) != [-1]:
    problems.append(f"the server told to die still answered shutdown: {calls(died)}")
if verdicts(served) != verdicts(own): problems.append("served run differs from the children's own calls")
if verdicts(died) != verdicts(own): problems.append("run with a dead server differs from the children's own calls")
if len(own["results"]) < 10 or any(e["status"] != "passed" or e["cases_run"] < 1 for e in own["results"]):
    problems.append("the reference run did not pass every pair with cases")
for p in problems: print("device_server:", p)
sys.exit(1 if problems else 0)
PY
echo "device_server: served run, dead-server run and own-calls run agree"
