"""Per-call overhead of the worker for a 4096 x 32 x 128 merge: the Triton merge timed alone
(CUDA events) and through `attncheck check --worker` is in the README recipe; this prints the
kernel's own time and the host-side cost of the SDK's conversions (arena -> torch CUDA tensors ->
arena) for the same shape, the part the worker adds per call.

    python3 examples/triton_merge/merge_bench.py
"""
import time

import numpy as np
import torch

from triton_merge import merge_attn_states

T, H, D = 4096, 32, 128
for dtype in (torch.float16, torch.float32):
    p = torch.randn(T, H, D, device="cuda", dtype=dtype)
    s = torch.randn(T, H, D, device="cuda", dtype=dtype)
    pl = torch.randn(H, T, device="cuda")
    sl = torch.randn(H, T, device="cuda")
    for _ in range(3):
        merge_attn_states(p, pl, s, sl)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        merge_attn_states(p, pl, s, sl)
    end.record()
    torch.cuda.synchronize()
    kernel_ms = start.elapsed_time(end) / 20
    host = [x.cpu().numpy() for x in (p, s, pl, sl)]
    t0 = time.perf_counter()
    for _ in range(5):
        dev = [torch.from_numpy(np.ascontiguousarray(x).copy()).cuda() for x in host]
        o, lse = merge_attn_states(dev[0], dev[2], dev[1], dev[3])
        o.cpu().numpy(), lse.cpu().numpy()
    torch.cuda.synchronize()
    call_ms = (time.perf_counter() - t0) / 5 * 1e3
    print(f"{str(dtype):14s} kernel {kernel_ms * 1e3:8.1f} us   SDK staging + kernel + readback {call_ms:8.2f} ms")
