#!/usr/bin/env bash
# Worker protocol on the GPU machine (run from the repo root after device_run.sh unpacked gpu-bin/,
# or with BIN pointing at a build): the Triton merge served by the Python SDK, its unguarded
# variant reproducing the chunked-prefill NaN through `prefill --worker`, the SDPA recipe, the
# gate's cost through a worker against the same kernel in-process, and the per-call overhead of a
# 4096 x 32 x 128 merge, and batch_invariance over PyTorch's attention kernels. Needs the machine's python3 with torch and triton. Logs to $OUT.
# Prints one line per step with its exit code and the expected one; never stops early.
set -u
BIN="${BIN:-gpu-bin}"
[ -d "$BIN" ] || { [ -f gpu-pack/bin.tar.xz ] && tar xJf gpu-pack/bin.tar.xz; }
OUT="${OUT:-out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 CI=true
AC="$BIN/attncheck"
PY="python3 -m attncheck.worker"
TRITON="$PY examples/triton_merge/triton_merge.py"
log="$OUT/worker_gpu.log"; : > "$log"
step() {  # step NAME EXPECTED_RC CMD...
  local name=$1 want=$2; shift 2
  local t0=$(date +%s%N)
  "$@" > "$OUT/tmp.log" 2>&1; local rc=$?
  local t1=$(date +%s%N)
  { echo "===== $name rc=$rc (expected $want)"; cat "$OUT/tmp.log"; } >> "$log"
  printf '%-28s rc=%s expected=%s %8d ms  %s\n' "$name" "$rc" "$want" "$(( (t1 - t0) / 1000000 ))" \
    "$(grep -v '^Using configuration' "$OUT/tmp.log" | tail -n 1 | cut -c1-160)"
}
python3 -c 'import torch, triton, numpy; print("torch", torch.__version__, "triton", triton.__version__, "numpy", numpy.__version__, torch.cuda.get_device_name())'
step list                 0 "$AC" list --worker "$TRITON"
step triton_gate          0 "$AC" check --worker "$TRITON" --subject triton-merge,triton-merge-th --cases 100 --no-plots --report-dir "$OUT/triton"
step triton_unguarded     1 "$AC" check --worker "$TRITON" --subject triton-merge-unguarded --property merge_sentinels --cases 100 --no-plots --report-dir "$OUT/triton-unguarded"
step prefill_unguarded    1 "$AC" prefill --scenario corpus/prefill/miss-in-batch.json --attention textbook --merge triton-merge-unguarded --worker "$TRITON"
step prefill_guarded      0 "$AC" prefill --scenario corpus/prefill/miss-in-batch.json --attention textbook --merge triton-merge --worker "$TRITON"
# Speed: the same merge kernel (the example plugin wraps the built-in CUDA merge) in-process and
# through attncheck-isolate, gate suite, 100 cases per property; then the Triton merge through the
# Python worker beside the built-in merge through the C ABI.
step gate_inprocess       0 "$AC" check --plugin "$BIN/libattncheck_example_plugin.so" --cases 100 --no-plots --report-dir "$OUT/g-in"
step gate_isolate         0 "$AC" check --plugin "$BIN/libattncheck_example_plugin.so" --isolate --cases 100 --no-plots --report-dir "$OUT/g-iso"
step gate_builtin_merge   0 "$AC" check --backend cuda --subject merge --cases 100 --no-plots --report-dir "$OUT/g-merge"
step gate_triton_worker   0 "$AC" check --worker "$TRITON" --subject triton-merge --cases 100 --no-plots --report-dir "$OUT/g-triton"
step transport_bench      0 "$BIN/worker_transport_bench" "$BIN/libattncheck_example_plugin.so"
step triton_merge_bench   0 python3 examples/triton_merge/merge_bench.py
step sdpa                 any "$AC" check --worker "$PY examples/torch_sdpa/sdpa_subjects.py" --cases 50 --no-plots --report-dir "$OUT/sdpa"
# Batch invariance of PyTorch's kernels: flash-varlen sees the whole batch, the sdpa-* subjects one
# sequence per call; none declares it, so the property passes and report.json holds each spread.
step torch_batch          0 "$AC" check --worker "$PY examples/torch_sdpa/sdpa_subjects.py" --subject flash-varlen,sdpa-flash,sdpa-efficient,sdpa-math --property batch_invariance,chunked_prefill,accuracy --cases 100 --no-plots --report-dir "$OUT/torch-batch"
step sdk_pytest           0 env ATTNCHECK_BIN="$PWD/$AC" python3 -m pytest -q -p no:cacheprovider python/tests
grep -A3 "^===== \(transport_bench\|triton_merge_bench\)" "$log"
