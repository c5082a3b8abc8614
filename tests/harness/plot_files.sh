#!/usr/bin/env bash
# `attncheck plot` on a report with tiling rows and split_order_drift results draws the pictures
# harness/plots/plot_report.py promises: the run's summary and error / budget per dtype, error /
# budget per tiling (fused and split-KV), per split count (split-KV only) and the drift of the
# split-KV subject. Exit 77 (skipped) where no python3 on PATH has matplotlib.
#   plot_files.sh ATTNCHECK SCRATCH
set -euo pipefail
AC=$1
S=$2
rm -rf "$S"
mkdir -p "$S"
"$AC" check --backend host --subject fused,splitkv --property split_order_drift --tiling --cases 4 --seed 1 \
  --no-plots --quiet --report-dir "$S/r" >/dev/null
set +e
out=$("$AC" plot "$S/r" 2>&1)
rc=$?
set -e
if [ "$rc" -eq 2 ] && grep -q "no python3 on PATH" <<<"$out"; then
  echo "skipped: $out"
  exit 77
fi
[ "$rc" -eq 0 ] || { echo "attncheck plot exited $rc: $out"; exit 1; }
P=$S/r/plots
ls "$P"
for stem in summary budget- tiling-fused- tiling-splitkv- splits-splitkv- drift-splitkv-host; do
  for ext in png svg; do
    compgen -G "$P/$stem*.$ext" >/dev/null || { echo "no $stem*.$ext"; exit 1; }
  done
done
# fused is not split-KV: no picture per split count, no drift.
if compgen -G "$P/splits-fused-*" >/dev/null || compgen -G "$P/drift-fused-*" >/dev/null; then
  echo "a split-KV picture of fused"
  exit 1
fi
# The numbers drawn are in the report: error / budget per tiling row, drift counts per split count.
python3 - "$S/r/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = [row for t in r["tilings"] for row in t["rows"]]
assert rows and all("max_ratio" in row["stats"] and "p50_ratio" in row["stats"] for row in rows)
drift = [e for e in r["results"] if e["subject"] == "splitkv" and e["property"] == "split_order_drift"][0]
assert [d["num_splits"] for d in drift["drift_by_splits"]] == list(range(1, 9)), drift["drift_by_splits"]
assert 0 <= drift["drift_fold_differ_fraction"] <= 1 and 0 <= drift["drift_splits_differ_fraction"] <= 1
print("report fields present")
PY
