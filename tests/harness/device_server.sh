#!/usr/bin/env bash
# The device server (harness/src/worker/serve.hpp) on the host backend, where CI can run it
# (ATTNCHECK_DEVICE_SERVER=on): the children's built-in subjects' calls go to it (report.json
# counts them), and the report's verdicts, case counts and statistics equal those of a run where
# every child makes its own calls. A server that dies mid-run, or whose calls hang, changes nothing
# either: its clients make their calls themselves from then on.
#   device_server.sh ATTNCHECK SCRATCH
set -euo pipefail
AC=$1
S=$2
rm -rf "$S"
mkdir -p "$S"
cd "$S"
ARGS="--backend host --subject merge,softmax-online,fused,splitkv,quantize-fp8,merge-fp8 --cases 12 --jobs 3 --no-plots --quiet"
ATTNCHECK_DEVICE_SERVER=off "$AC" check $ARGS --report-dir own >/dev/null
ATTNCHECK_DEVICE_SERVER=on "$AC" check $ARGS --report-dir served >/dev/null
ATTNCHECK_DEVICE_SERVER=on ATTNCHECK_DEVICE_SERVER_DIES_AFTER=40 "$AC" check $ARGS --report-dir died >/dev/null
# A server whose calls hang past the clients' deadline (half of --call-timeout): its watchdog ends it
# and the children make their calls themselves, within their own timeout.
ATTNCHECK_DEVICE_SERVER=on ATTNCHECK_DEVICE_SERVER_DELAY_MS=1500 "$AC" check $ARGS --call-timeout 2 \
  --report-dir hung >/dev/null
# Another value is a usage error: one line, exit 2, no report written.
set +e
err=$(ATTNCHECK_DEVICE_SERVER=yes "$AC" check $ARGS --report-dir bad 2>&1 >/dev/null)
rc=$?
set -e
if [ "$rc" -ne 2 ] || [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ] || [ -e bad ]; then
  echo "device_server: ATTNCHECK_DEVICE_SERVER=yes gave exit $rc: $err"
  exit 1
fi
python3 - <<'PY'
import json, sys
def load(d):
    return json.load(open(d + "/report.json"))
def verdicts(r):
    drop = {"seconds", "time_split", "seconds_to_first_failure", "shrink_seconds"}
    return [{k: v for k, v in e.items() if k not in drop} for e in r["results"]]
own, served, died, hung = load("own"), load("served"), load("died"), load("hung")
calls = lambda r: [s["calls"] for s in r["parallel"].get("device_servers", [])]
problems = []
if calls(own): problems.append(f"ATTNCHECK_DEVICE_SERVER=off started a server: {calls(own)}")
if not calls(served) or calls(served)[0] < 100:
    problems.append(f"the server made too few calls: {calls(served)} (expected hundreds)")
if [s["device"] for s in served["parallel"]["device_servers"]] != ["inherited"]:
    problems.append(f"the server's device is not labelled as parallel.devices labels it: {served['parallel']}")
if calls(died) != [-1]:
    problems.append(f"the server told to die still answered shutdown: {calls(died)}")
if verdicts(served) != verdicts(own): problems.append("served run differs from the children's own calls")
if verdicts(died) != verdicts(own): problems.append("run with a dead server differs from the children's own calls")
if calls(hung) != [-1]:
    problems.append(f"the hung server was not ended by its watchdog: {calls(hung)}")
if verdicts(hung) != verdicts(own): problems.append("run with a hung server differs from the children's own calls")
if len(own["results"]) < 10 or any(e["status"] != "passed" or e["cases_run"] < 1 for e in own["results"]):
    problems.append("the reference run did not pass every pair with cases")
for p in problems: print("device_server:", p)
sys.exit(1 if problems else 0)
PY
echo "device_server: served, dead-server, hung-server and own-calls runs agree"
