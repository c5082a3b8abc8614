#!/usr/bin/env bash
# SIGTERM and kill -9 at random moments of `attncheck check`, with a worker (its pairs run in the
# parent, the worker in a call) and with --jobs 2 (pairs in child processes):
#   - no process of the run outlives it: every descendant listed just before the signal (children,
#     workers, what they started) is gone within a second of the run's end;
#   - SIGTERM is a stop, not a death: exit 143 (or the run's own 0 or 1 when it had just ended), a
#     complete report set (every file matches the manifest's hash), no temporary or write-ahead file
#     left, and the next run on the same directories keeps no case "from a run that died";
#   - kill -9: the next run on the same directories works (exit 0 or 1) and leaves a complete set.
#
#   stop_campaign.sh ATTNCHECK REPO_ROOT SCRATCH_DIR [RUNS]   (RUNS per signal and mode, default 10: 20 of each signal)
set -u
AC=$1
ROOT=$2
S=$3
RUNS=${4:-10}
rm -rf "$S"
mkdir -p "$S"
S=$(cd "$S" && pwd)
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
WORKER="$PY -m attncheck.worker $ROOT/examples/python_worker/numpy_subjects.py"
n_fail=0

cmd() {  # cmd MODE DIR: the run of one mode into DIR
  case $1 in
    worker) echo "$AC check --worker \"$WORKER\" --property accuracy,merge_sentinels --cases 10 --no-plots --quiet --report-dir $2" ;;
    jobs) echo "$AC check --backend host --jobs 2 --subject merge,softmax-safe --cases 10 --no-plots --quiet --report-dir $2" ;;
  esac
}

# Every descendant of a pid, with its start time: "pid start" lines.
tree() {
  python3 - "$1" <<'PY'
import os, sys
kids = {}
for d in os.listdir("/proc"):
    if not d.isdigit():
        continue
    try:
        s = open("/proc/%s/stat" % d).read()
    except OSError:
        continue
    f = s[s.rindex(")") + 2:].split()
    kids.setdefault(int(f[1]), []).append((int(d), f[19]))
todo = [int(sys.argv[1])]
while todo:
    for pid, start in kids.get(todo.pop(), []):
        print(pid, start)
        todo.append(pid)
PY
}

# Whether any listed process still runs (same pid, same start time, not a zombie).
alive() {
  python3 - "$1" <<'PY'
import sys
left = []
for line in open(sys.argv[1]):
    pid, start = line.split()
    try:
        s = open("/proc/%s/stat" % pid).read()
    except OSError:
        continue
    f = s[s.rindex(")") + 2:].split()
    if f[19] == start and f[0] != "Z":
        left.append(pid)
print(" ".join(left))
sys.exit(1 if left else 0)
PY
}

complete() {  # complete DIR: one run's report set, every file matching the manifest
  [ "$(python3 "$(dirname "$0")/report_set.py" "$1")" = complete ]
}

fail() {
  n_fail=$((n_fail + 1))
  echo "FAIL  $*"
}

HW="$PY $ROOT/tests/hostile/hostile_worker.py"
# Three fixed moments first, each with a worker that never answers its call (--call-timeout 30).
# Ctrl-C: the run stops within a second, exit 130, its report written, the worker gone.
"$AC" check --worker "$HW hang-in-call" --property accuracy --cases 5 --call-timeout 30 --no-plots \
  --report-dir "$S/int" >"$S/int.out" 2>&1 &
pid=$!
sleep 2
tree "$pid" >"$S/tree"
t0=$(date +%s%N)
kill -INT "$pid"
wait "$pid"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
left=$(alive "$S/tree")
if [ "$rc" -ne 130 ] || [ "$ms" -gt 1000 ] || [ -n "$left" ] || ! complete "$S/int"; then
  fail "Ctrl-C with a worker in a call: exit $rc after $ms ms, left: '$left', report: $(ls "$S/int" | tr '\n' ' ')"
else
  echo "ok    Ctrl-C with a worker in a call: exit 130 after $ms ms, report written, no process left"
fi
# SIGTERM while a worker still starts (the run is being planned; the worker answers its handshake
# after 1 s): a stop, not a death, exit 143 once the worker has answered, its report written, no
# process left.
"$AC" check --worker "$HW slow-start" --property accuracy --cases 5 --call-timeout 30 --no-plots \
  --report-dir "$S/early" >"$S/early.out" 2>&1 &
pid=$!
sleep 0.4
tree "$pid" >"$S/tree"
kill -TERM "$pid"
wait "$pid"
rc=$?
sleep 1
left=$(alive "$S/tree")
if [ "$rc" -ne 143 ] || [ -n "$left" ] || ! complete "$S/early"; then
  fail "SIGTERM while a worker starts: exit $rc, left: '$left', report: $(ls "$S/early" 2>/dev/null | tr '\n' ' ')"
else
  echo "ok    SIGTERM while a worker starts: exit 143, report written, no process left"
fi
# Two runs, one report directory: the second is refused (exit 2, one line naming the first's pid)
# while the first runs, and touches nothing of it; the first then finishes with its own report and
# no case "from a run that died".
"$AC" check --worker "$HW hang-in-call" --property accuracy --cases 5 --call-timeout 30 --no-plots \
  --report-dir "$S/lock" >"$S/lock1.out" 2>&1 &
pid=$!
sleep 2
"$AC" check --backend host --subject merge --cases 2 --no-plots --report-dir "$S/lock" >"$S/lock2.out" 2>&1
rc2=$?
kill -INT "$pid"
wait "$pid"
rc1=$?
if [ "$rc2" -eq 2 ] && [ "$(wc -l <"$S/lock2.out")" -eq 1 ] &&
  grep -q "report directory $S/lock is in use by another attncheck run (pid $pid)" "$S/lock2.out" &&
  [ "$rc1" -eq 130 ] && complete "$S/lock" && grep -q '"hostile-merge"' "$S/lock/report.json" &&
  ! grep -rqs "earlier run died" "$S/lock/corpus"; then
  echo "ok    two runs, one report directory: the second exits 2 naming the first (pid $pid); the first's report stands"
else
  fail "two runs, one report directory: second exit $rc2 ($(head -c 200 "$S/lock2.out")), first exit $rc1"
fi
# kill -9: the worker in its call dies with the run.
"$AC" check --worker "$HW hang-in-call" --property accuracy --cases 5 --call-timeout 30 --no-plots \
  --report-dir "$S/k9" >/dev/null 2>&1 &
pid=$!
sleep 2
tree "$pid" >"$S/tree"
kill -9 "$pid"
wait "$pid" 2>/dev/null
sleep 1
if left=$(alive "$S/tree"); then
  echo "ok    kill -9 with a worker in a call: no process left ($(wc -l <"$S/tree") listed)"
else
  fail "kill -9 with a worker in a call: still running: $left"
  kill -9 $left 2>/dev/null
fi
# A process the worker started in a session of its own ends with the run (the worker writes its
# pid and start time into a file).
rm -f "$S/grandchild"
"$AC" check --worker "$HW setsid-child $S/grandchild" --property accuracy --cases 5 --call-timeout 30 \
  --no-plots --report-dir "$S/setsid" >/dev/null 2>&1
sleep 0.5
if [ -s "$S/grandchild" ] && left=$(alive "$S/grandchild"); then
  echo "ok    a worker's process in its own session: gone after the run"
else
  fail "a worker's process in its own session: still running: '$left' ($(cat "$S/grandchild" 2>/dev/null))"
  kill -9 $left 2>/dev/null
fi

for mode in worker jobs; do
  R="$S/$mode"
  t0=$(date +%s%N)
  eval "$(cmd $mode "$R")" >/dev/null 2>&1
  run_ms=$((($(date +%s%N) - t0) / 1000000))
  echo "$mode: one run takes ${run_ms} ms; signals at random moments within it"
  for sig in TERM KILL; do
    ok=0
    for i in $(seq 1 "$RUNS"); do
      touch "$S/started"
      # exec: $! is attncheck itself, not a subshell around it.
      eval "exec $(cmd $mode "$R")" >"$S/run.out" 2>&1 &
      pid=$!
      sleep "$(python3 -c "import random; print(random.uniform(0.05, $run_ms / 1000.0))")"
      tree "$pid" >"$S/tree"
      kill -"$sig" "$pid" 2>/dev/null
      wait "$pid"
      rc=$?
      sleep 1
      if ! left=$(alive "$S/tree"); then
        fail "$mode $sig run $i: processes outlived the run: $left"
        kill -9 $left 2>/dev/null
        continue
      fi
      if [ "$sig" = TERM ]; then
        case $rc in 0 | 1 | 143) ;; *) fail "$mode TERM run $i: exit $rc, expected 143 (or 0/1)"; continue ;; esac
        complete "$R" || { fail "$mode TERM run $i: report set incomplete"; continue; }
        [ "$R/report.json" -nt "$S/started" ] || { fail "$mode TERM run $i: exit $rc and no report of its own"; continue; }
        leftover=$(find "$R" -name 'inflight-*' -o -name '.tmp*')
        [ -z "$leftover" ] || { fail "$mode TERM run $i: left $leftover"; continue; }
      else
        case $rc in 0 | 1 | 137) ;; *) fail "$mode KILL run $i: exit $rc, expected 137 (or 0/1)"; continue ;; esac
      fi
      # The next run on the same directories.
      eval "$(cmd $mode "$R")" >"$S/next.out" 2>&1
      rc=$?
      case $rc in 0 | 1) ;; *) fail "$mode $sig run $i: the next run exited $rc: $(head -c 300 "$S/next.out")"; continue ;; esac
      complete "$R" || { fail "$mode $sig run $i: the next run's report set is incomplete"; continue; }
      if [ "$sig" = TERM ] && grep -rqs "earlier run died" "$R/corpus"; then
        fail "$mode TERM run $i: the next run kept a case from a run that was only stopped"
        continue
      fi
      ok=$((ok + 1))
    done
    echo "$mode $sig: $ok of $RUNS runs ok"
  done
done
echo "stop campaign: $n_fail failed"
[ "$n_fail" -eq 0 ]
