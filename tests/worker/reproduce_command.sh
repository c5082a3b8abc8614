#!/usr/bin/env bash
# The reproduce command a failing check prints (report.json, reproduce_command) works when pasted,
# and so does the one the replay it runs prints:
# run as written in a fresh shell, with "attncheck" on PATH pointing at this build and no
# PYTHONPATH (ctest sets one for the worker, a fresh clone's shell has none: the command must carry
# it), it gives the same failure (exit 1 and the same failure class).
#   reproduce_command.sh ATTNCHECK "WORKER COMMAND" SCRATCH_DIR
set -u
AC=$(realpath "$1")
WORKER=$2
S=$3
rm -rf "$S"
mkdir -p "$S/bin"
ln -s "$AC" "$S/bin/attncheck"
"$AC" check --worker "$WORKER" --property merge_sentinels --no-plots --cases 100 --report-dir "$S/report" \
  >"$S/check.out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || { echo "check exit $rc, want 1: $(tail -c 300 "$S/check.out")"; exit 1; }
read -r cls cmd < <(python3 -c '
import json, sys
e = [x for x in json.load(open(sys.argv[1]))["results"] if x["status"] == "failed"][0]
print(e["failure_class"], e["reproduce_command"])' "$S/report/report.json")
echo "printed: $cmd"
# attncheck, after the environment assignments it carries.
case "$cmd" in attncheck\ * | [A-Z]*=*\ attncheck\ *) ;; *) echo "not an attncheck command"; exit 1 ;; esac

paste_in_fresh_shell() { env -u PYTHONPATH PATH="$S/bin:$PATH" bash -c "$1" 2>&1; }
out=$(paste_in_fresh_shell "$cmd")
rc=$?
[ "$rc" -eq 1 ] || { echo "pasted command exit $rc, want 1: $out"; exit 1; }
echo "$out" | grep -q "FAIL $cls" || { echo "pasted command did not fail with $cls: $out"; exit 1; }
# replay prints its own reproduce line: that one must paste as well.
again=$(echo "$out" | sed -n 's/^  reproduce: //p' | head -1)
[ -n "$again" ] || { echo "replay printed no reproduce line: $out"; exit 1; }
echo "replay printed: $again"
out2=$(paste_in_fresh_shell "$again")
rc=$?
[ "$rc" -eq 1 ] || { echo "replay's reproduce line exit $rc, want 1: $out2"; exit 1; }
echo "$out2" | grep -q "FAIL $cls" || { echo "replay's reproduce line did not fail with $cls: $out2"; exit 1; }
echo "the pasted commands (check's and replay's) reproduce the failure ($cls)"
