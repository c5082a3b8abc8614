#!/usr/bin/env bash
# The device server (harness/src/worker/serve.hpp) on the host backend, where CI can run it
# (ATTNCHECK_DEVICE_SERVER=on): the children's built-in subjects' calls go to it (report.json
# counts them), and the report's verdicts, case counts and statistics equal those of a run where
# every child makes its own calls. A server that dies mid-run, or whose calls hang, changes nothing
# either: its clients make their calls themselves from then on, and count them (report.json's
# device_servers[].redone), which must stay 0 while the server lives.
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
# Every input the protocol carries to a built-in: paged K/V, V inside K, head sizes, softcap,
# windows, sinks, FP8 caches with their descales, P's scale, FP8 output with its scale.
VARIANTS="--backend host --subject fused,fused-fp8-scaled,splitkv-packed --cases 12 --jobs 3 --no-plots --quiet
  --property declared_variants,fp8_output,fp8_descales,accuracy"
# Their verdicts are compared below, which names a difference; a failing exit here would not.
ATTNCHECK_DEVICE_SERVER=off "$AC" check $VARIANTS --report-dir variants-own >/dev/null || true
ATTNCHECK_DEVICE_SERVER=on "$AC" check $VARIANTS --report-dir variants-served >/dev/null || true
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
v_own, v_served = load("variants-own"), load("variants-served")
calls = lambda r: [s["calls"] for s in r["parallel"].get("device_servers", [])]
redone = lambda r: [s["redone"] for s in r["parallel"].get("device_servers", [])]
problems = []
if calls(own): problems.append(f"ATTNCHECK_DEVICE_SERVER=off started a server: {calls(own)}")
if not calls(served) or calls(served)[0] < 100:
    problems.append(f"the server made too few calls: {calls(served)} (expected hundreds)")
# A call the server failed and its child redid would hide a server-side defect: none may happen
# while the server lives, and the calls lost with a dead or hung server are counted.
for name, r in (("served", served), ("variants", v_served)):
    if redone(r) != [0]:
        problems.append(f"{name}: calls redone by the children: {r['parallel']['device_servers']}")
for name, r in (("died", died), ("hung", hung)):
    if not redone(r) or redone(r)[0] < 1 or not r["parallel"]["device_servers"][0].get("redone_first"):
        problems.append(f"{name}: the lost calls were not counted as redone: {r['parallel']['device_servers']}")
if not calls(v_served) or calls(v_served)[0] < 100:
    problems.append(f"the variants' server made too few calls: {calls(v_served)}")
if verdicts(v_served) != verdicts(v_own): problems.append("variants: served run differs from the children's own calls")
if len(v_own["results"]) < 9 or any(e["status"] != "passed" or e["cases_run"] < 1 for e in v_own["results"]):
    problems.append("the variants' reference run did not pass every pair with cases")
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
echo "device_server: served, dead-server, hung-server and own-calls runs agree; no call redone while the server lived"
