#!/usr/bin/env bash
# The reproduce command a failing check prints (report.json, reproduce_command) works when pasted,
# and so does the one the replay it runs prints: run as written in a fresh shell, with no
# PYTHONPATH (ctest sets one for the worker, a fresh clone's shell has none: the command must carry
# it), it gives the same failure (exit 1 and the same failure class). check is started by its path
# and its command names that path (no attncheck on PATH then); the replay is started as
# "attncheck" from PATH and its command names "attncheck". Twice: with the worker command as given,
# and with one that holds what a double-quoted word would not keep ($, " and ').
#   reproduce_command.sh ATTNCHECK "WORKER COMMAND" SCRATCH_DIR
set -u
AC=$(realpath "$1")
S=$3
rm -rf "$S"
mkdir -p "$S/bin"
ln -s "$AC" "$S/bin/attncheck"

# A fresh shell: no PYTHONPATH; with "path", attncheck on PATH.
fresh_shell() {  # COMMAND [path]
  if [ "${2:-}" = path ]; then env -u PYTHONPATH PATH="$S/bin:$PATH" bash -c "$1" 2>&1; else env -u PYTHONPATH bash -c "$1" 2>&1; fi
}
# Pastes COMMAND, which must fail with the class check found; replay prints its own reproduce line,
# which must name attncheck as it was started (BINARY), and pasting that line must fail the same.
paste_twice() {  # NAME COMMAND BINARY [path]
  local out rc line
  out=$(fresh_shell "$2" "${4:-}"); rc=$?
  [ "$rc" -eq 1 ] || { echo "$1: exit $rc, want 1: $out"; exit 1; }
  echo "$out" | grep -q "FAIL $cls" || { echo "$1: did not fail with $cls: $out"; exit 1; }
  line=$(echo "$out" | sed -n 's/^  reproduce: //p' | head -1)
  echo "$1: replay printed: $line"
  case "$line" in "$3 "* | [A-Z]*=*" $3 "*) ;; *) echo "$1: replay's line does not start $3"; exit 1 ;; esac
  out=$(fresh_shell "$line" "${4:-}"); rc=$?
  [ "$rc" -eq 1 ] && echo "$out" | grep -q "FAIL $cls" || { echo "$1: replay's line exit $rc: $out"; exit 1; }
}
one_worker() {  # WORKER_COMMAND
  "$AC" check --worker "$1" --property merge_sentinels --no-plots --cases 100 --report-dir "$S/report" \
    >"$S/check.out" 2>&1
  local rc=$?
  [ "$rc" -eq 1 ] || { echo "check exit $rc, want 1: $(tail -c 300 "$S/check.out")"; exit 1; }
  read -r cls cmd < <(python3 -c '
import json, sys
e = [x for x in json.load(open(sys.argv[1]))["results"] if x["status"] == "failed"][0]
print(e["failure_class"], e["reproduce_command"])' "$S/report/report.json")
  echo "printed: $cmd"
  # The path check was started by, after the environment assignments it carries.
  case "$cmd" in "$AC "* | [A-Z]*=*" $AC "*) ;; *) echo "does not start the attncheck that ran ($AC)"; exit 1 ;; esac
  # The shell reads back the worker command that ran, word for word.
  local got
  got=$(python3 -c 'import shlex, sys; a = shlex.split(sys.argv[1]); print(a[a.index("--worker") + 1])' "$cmd")
  [ "$got" = "$1" ] || { echo "the printed --worker reads back as <$got>, not <$1>"; exit 1; }
  paste_twice "by path" "$cmd" "$AC"
  # Started as "attncheck" from PATH, replay names it so, and that line pastes too.
  paste_twice "from PATH" "${cmd/"$AC "/attncheck }" attncheck path
}
one_worker "$2"
one_worker "env AC_TAG='\$HOME \"q\" it'\\''s' $2"
echo "the pasted commands (check's and replay's, by path and from PATH, plain and odd worker commands) reproduce the failure"
