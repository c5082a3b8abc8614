#!/usr/bin/env bash
# Nsight Compute on fused-hopper and on PyTorch's cuDNN attention at the Llama-3-8B layer shape (T = 8192,
# 32/8 heads, d = 128, fp16, non-causal), one launch each, side by side: which limit binds (tensor
# pipe, shared memory, issue, stalls). Run on the device machine from the repo root with gpu-pack/
# carried; clocks are left alone (--clock-control none). Writes under $OUT: <name>.txt (ncu's
# details page: its "highest-utilized pipeline" line gives the tensor pipe's share), <name>-source.csv
# (per-SASS-instruction samples, fused-hopper only) and a summary.txt line per kernel with the
# metrics of $metrics that the report holds (on the H200 in 2026-12: duration, warp instructions,
# issue activity, registers, block, grid and shared memory; the pipe metrics were absent there).
#   bash tests/gpu/profile.sh [tiling...]   tilings as the kernel's template arguments BR, BC
#                                           (default: 192,64 128,128), or fp8: fused-hopper-fp8's
#                                           instantiation (bf16 O, non-causal); CUDNN=0 leaves cuDNN out
#   bash tests/gpu/profile.sh decode8       splitkv-packed on the e4m3 cache at batch 8, T_k = 32768
#                                           (hopper_bench's rows: contiguous, pages of 16 scattered,
#                                           pages of 16 in order), every launch of the three rows (the
#                                           timer's two warm-ups and its one timed call each, in that
#                                           order): decode8.txt, and a summary line per launch
set -u
BIN="${BIN:-gpu-bin}"
[ -d "$BIN" ] || { [ -f gpu-pack/bin.tar.xz ] && tar xJf gpu-pack/bin.tar.xz; }
[ -x "$BIN/hopper_bench" ] || { echo "profile.sh: no $BIN/hopper_bench (run tests/gpu/stage.sh first)" >&2; exit 2; }
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "profile.sh: no ncu here" >&2; exit 77; }
OUT="${OUT:-out}"; mkdir -p "$OUT"
summary="$OUT/summary.txt"
metrics=gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,launch__registers_per_thread,launch__block_size,launch__grid_size,launch__shared_mem_per_block_dynamic
headline() {  # $1 = report; one summary line with the headline metrics
  "$ncu" --import "$1" --page raw --csv --metrics "$metrics" 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) < 3: sys.exit(0)
head, vals = rows[0], rows[2]
print(" ".join(f"{h}={v}" for h, v in zip(head, vals) if any(m in h for m in sys.argv[1].split(","))))
print("kernel=" + vals[head.index("Kernel Name")][:160])' "$metrics" >> "$summary"
}
if [ "${1:-}" = decode8 ]; then
  # The FP8 instantiations with fp16 Q (template arguments BF16 = false, D = 128, STAGES, FP8 = true).
  dm=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,launch__grid_size
  timeout 400 "$ncu" --clock-control none --set full --import-source no --kernel-name-base mangled \
    -k "regex:packed_kernelILb0ELi128ELi[0-9]+ELb1E" --launch-count 9 -f -o "$OUT/decode8" \
    "$BIN/hopper_bench" 1 decode8 > "$OUT/decode8.log" 2>&1
  echo "ncu decode8 rc=$?" >> "$summary"
  "$ncu" --import "$OUT/decode8.ncu-rep" --page raw --csv --metrics "$dm" 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
keys = sys.argv[1].split(",")
head = rows[0] if rows else []
for i, vals in enumerate(rows[2:]):
    # The raw page names the kernel demangled, "...packed_kernel<0, 128, 3, 1, 0>(...)": Walk is
    # the last template argument.
    walk = vals[head.index("Kernel Name")].split(">(")[0].rsplit(",", 1)[-1].strip()
    cols = [h.split("__")[-1] + "=" + v for h, v in zip(head, vals) if h in keys]
    print(f"launch {i} walk={walk} " + " ".join(cols))' "$dm" >> "$summary"
  "$ncu" --import "$OUT/decode8.ncu-rep" --page details > "$OUT/decode8.txt" 2>&1
  grep -E "^(splitkv|decode)" "$OUT/decode8.log" >> "$summary"
  exit 0
fi
for t in ${*:-192,64 128,128}; do
  name="fused-hopper-${t/,/x}"
  kernel="hopper_attention_kernelILb0ELi128ELi${t/,/ELi}ELNS0_14HopperMutationE0E"
  [ "$t" = fp8 ] && kernel="hopper_attention_kernelILb1ELi128ELi128ELi128ELNS0_14HopperMutationE0ELb0ELb1E"
  timeout 150 "$ncu" --clock-control none --set full --import-source no --kernel-name-base mangled \
    -k "regex:$kernel" --launch-count 1 -f -o "$OUT/$name" \
    "$BIN/hopper_bench" 1 hopper8192 > "$OUT/$name.log" 2>&1
  echo "ncu $name rc=$?" >> "$summary"
  headline "$OUT/$name.ncu-rep"
  "$ncu" --import "$OUT/$name.ncu-rep" --page details > "$OUT/$name.txt" 2>&1
  "$ncu" --import "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/$name-source.csv" 2>&1
  [ -f "$OUT/$name.ncu-rep" ] && rm -f "$OUT/$name.log"
done
[ "${CUDNN:-1}" = 0 ] && exit 0
cat > "$OUT/cudnn.py" <<'EOF'
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q = torch.rand(1, 32, 8192, 128, device="cuda", dtype=torch.float16) * 2 - 1
k = (torch.rand(1, 8, 8192, 128, device="cuda", dtype=torch.float16) * 2 - 1).repeat_interleave(4, dim=1)
v = (torch.rand(1, 8, 8192, 128, device="cuda", dtype=torch.float16) * 2 - 1).repeat_interleave(4, dim=1)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    F.scaled_dot_product_attention(q, k, v)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("prof")
    F.scaled_dot_product_attention(q, k, v)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
EOF
timeout 150 "$ncu" --clock-control none --set full --nvtx --nvtx-include "prof/" --launch-count 1 -f \
  -o "$OUT/cudnn" python3 "$OUT/cudnn.py" > "$OUT/cudnn.log" 2>&1
echo "ncu cudnn rc=$?" >> "$summary"
headline "$OUT/cudnn.ncu-rep"
"$ncu" --import "$OUT/cudnn.ncu-rep" --page details > "$OUT/cudnn.txt" 2>&1
rm -f "$OUT/cudnn.py" "$OUT/cudnn.log"
