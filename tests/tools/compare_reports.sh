#!/usr/bin/env bash
# Compares two report.json files on everything a run decides: every (subject, property) verdict,
# failure class, case count, message, counterexample, statistic, tiling row and baseline record.
# What only describes the run (timestamps, the command line, git describe, wall and per-stage
# seconds, the parallel section) is left out. Exit 0 when they agree; else the diff and exit 1.
#   tests/tools/compare_reports.sh BEFORE/report.json AFTER/report.json
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: compare_reports.sh BEFORE/report.json AFTER/report.json" >&2; exit 2; }
norm='del(.timestamp, .command, .git_describe, .parallel, .tool_version)
      | .results |= map(del(.seconds, .seconds_to_first_failure, .shrink_seconds, .time_split))'
diff <(jq -S "$norm" "$1") <(jq -S "$norm" "$2") && echo "same: $1 $2"
