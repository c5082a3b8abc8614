#!/usr/bin/env bash
# `attncheck check` exit 0 must mean that something was tested: every (subject, property) result in
# report.json passed after running at least one case. Runs a small gate over the built-in host
# subjects and over the example plugin, and checks each report with an independent reader.
#
#   gate_ran_cases.sh ATTNCHECK SCRATCH_DIR [PLUGIN]
set -u
AC=$1
S=$2
PLUGIN=${3:-}
rm -rf "$S"
mkdir -p "$S"
status=0

verify() {  # verify NAME REPORT_DIR EXIT
  python3 - "$1" "$2/report.json" "$3" <<'PY' || status=1
import json, sys
name, path, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
if rc != 0:
    # The implication says nothing about a failing run; a crash or usage error is still wrong here.
    print("%s: exit %d (not 0): nothing to check, but the built-in gate should pass" % (name, rc))
    sys.exit(1)
r = json.load(open(path))
results = r.get("results", [])
bad = [e for e in results if e.get("status") != "passed" or not isinstance(e.get("cases_run"), int) or e["cases_run"] < 1]
for e in bad:
    print("%s: exit 0 but %s / %s is %s after %s cases" % (name, e.get("subject"), e.get("property"), e.get("status"), e.get("cases_run")))
if not results:
    print("%s: exit 0 with no results at all" % name)
ok = results and not bad
print("%s: exit 0, %d results, every one passed with >= 1 case: %s" % (name, len(results), "yes" if ok else "NO"))
sys.exit(0 if ok else 1)
PY
}

rc=0
"$AC" check --backend host --no-plots --quiet --cases 3 --report-dir "$S/builtin" || rc=$?
verify builtin-gate "$S/builtin" "$rc"
if [ -n "$PLUGIN" ]; then
  rc=0
  "$AC" check --backend host --no-plots --quiet --cases 3 --plugin "$PLUGIN" --report-dir "$S/plugin" || rc=$?
  verify plugin-gate "$S/plugin" "$rc"
fi
exit $status
