#!/usr/bin/env bash
# The reproduce command a failing check prints (report.json, reproduce_command) works when pasted,
# and so does the one the replay it runs prints: run as written in a fresh shell, with no
# PYTHONPATH (ctest sets one for the worker, a fresh clone's shell has none: the command must carry
# it), it gives the same failure (exit 1 and the same failure class). check is started by its path
# and its command names that path (no attncheck on PATH then); the replay is started as
# "attncheck" from PATH and its command names "attncheck".
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
# The path check was started by, after the environment assignments it carries.
case "$cmd" in "$AC "* | [A-Z]*=*" $AC "*) ;; *) echo "does not start the attncheck that ran ($AC)"; exit 1 ;; esac

# A fresh shell: no PYTHONPATH; attncheck on PATH only when asked.
fresh_shell() { env -u PYTHONPATH bash -c "$1" 2>&1; }
fresh_shell_on_path() { env -u PYTHONPATH PATH="$S/bin:$PATH" bash -c "$1" 2>&1; }
expect_failure() {  # NAME OUTPUT RC
  [ "$3" -eq 1 ] || { echo "$1 exit $3, want 1: $2"; exit 1; }
  echo "$2" | grep -q "FAIL $cls" || { echo "$1 did not fail with $cls: $2"; exit 1; }
}
out=$(fresh_shell "$cmd")
expect_failure "pasted command" "$out" $?
# replay prints its own reproduce line, naming the binary as it was started: the path here.
again=$(echo "$out" | sed -n 's/^  reproduce: //p' | head -1)
echo "replay printed: $again"
case "$again" in "$AC "* | [A-Z]*=*" $AC "*) ;; *) echo "replay's line does not start $AC"; exit 1 ;; esac
out2=$(fresh_shell "$again")
expect_failure "replay's reproduce line" "$out2" $?
# Started as "attncheck" from PATH, replay names it so, and that line pastes too.
onpath=${again/"$AC "/attncheck }
out3=$(fresh_shell_on_path "$onpath")
expect_failure "replay started from PATH" "$out3" $?
third=$(echo "$out3" | sed -n 's/^  reproduce: //p' | head -1)
echo "replay from PATH printed: $third"
case "$third" in "attncheck "* | [A-Z]*=*" attncheck "*) ;; *) echo "its line does not start attncheck"; exit 1 ;; esac
out4=$(fresh_shell_on_path "$third")
expect_failure "its reproduce line" "$out4" $?
echo "the pasted commands (check's and replay's, by path and from PATH) reproduce the failure ($cls)"
