#!/usr/bin/env bash
# The shard recipes of examples/shards/ run as their schedulers would run them (the index from
# SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX or the matrix value), then `report merge`: the merged
# report must equal a single run with the same seed, pair for pair (status, cases, statistics) and
# in the single run's order of results.
#   shard_recipes.sh ATTNCHECK SOURCE_DIR SCRATCH
set -euo pipefail
AC=$1
SRC=$2
S=$3
rm -rf "$S"
mkdir -p "$S"
cd "$S"
ARGS="--backend host --subject merge,softmax-online,textbook --cases 15"
"$AC" check --seed 1 --no-plots --quiet $ARGS --report-dir single >/dev/null
# Slurm: the array script itself, once per task.
for i in 0 1 2; do
  SLURM_ARRAY_TASK_COUNT=3 SLURM_ARRAY_TASK_ID=$i ATTNCHECK="$AC" SEED=1 ATTNCHECK_ARGS="$ARGS --quiet" \
    bash "$SRC/examples/shards/slurm.sbatch" >/dev/null
done
"$AC" report merge shards/* --out slurm-merged --no-plots >/dev/null
# Kubernetes Indexed Job: the container's command line with JOB_COMPLETION_INDEX set.
k8s_cmd=$(sed -n 's/^ *- attncheck check/attncheck check/p' "$SRC/examples/shards/k8s-indexed-job.yaml")
for i in 0 1 2 3 4 5 6 7; do
  c=${k8s_cmd//\/reports\//k8s\/}
  JOB_COMPLETION_INDEX=$i sh -c "${c//attncheck check/\"$AC\" check $ARGS --quiet}" >/dev/null
done
"$AC" report merge k8s/shard-* --out k8s-merged --no-plots >/dev/null
# GitHub matrix: the shard step's command with the matrix value substituted.
gh_cmd=$(sed -n 's/^ *- run: build\/attncheck check/attncheck check/p' "$SRC/examples/shards/github-matrix.yml")
for i in 0 1 2 3; do
  c=${gh_cmd//\$\{\{ matrix.shard \}\}/$i}
  sh -c "${c//attncheck check/\"$AC\" check $ARGS --quiet}" >/dev/null
done
"$AC" report merge shard-0 shard-1 shard-2 shard-3 --out gh-merged --no-plots >/dev/null
python3 - single/report.json slurm-merged/report.json k8s-merged/report.json gh-merged/report.json <<'PY'
import json, sys
def pairs(path):
    return {(e["subject"], e["property"]): e for e in json.load(open(path))["results"]}
def order(path):
    return [(e["subject"], e["property"]) for e in json.load(open(path))["results"]]
want = pairs(sys.argv[1])
for path in sys.argv[2:]:
    got = pairs(path)
    assert set(got) == set(want), f"{path}: pairs differ: {set(want) ^ set(got)}"
    assert order(path) == order(sys.argv[1]), f"{path}: order differs: {order(path)} != {order(sys.argv[1])}"
    for k, e in want.items():
        for f in ("status", "cases_run", "failure_class", "stats", "max_drift_ulp"):
            assert got[k][f] == e[f], f"{path}: {k} {f}: {got[k][f]} != {e[f]}"
    print(f"{path}: {len(got)} pairs, identical to the single run")
PY
