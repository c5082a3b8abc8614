"""numpy_subjects.merge_np called in this process, with no worker between: the in-process time
that worker_transport_bench prints beside the same merge through `python3 -m attncheck.worker`.

    PYTHONPATH=python python3 examples/python_worker/merge_inprocess.py TOKENS HEADS HEAD_SIZE CALLS

The inputs are the bench's: fp32, prefix_out 1.0, suffix_out 2.0, LSEs 1 and 2 in the subject's
layout [heads, tokens], as contiguous numpy arrays (the worker hands the subject read-only views
of its arena instead). Prints the median wall time of CALLS calls in milliseconds.
"""
import sys
import time

import numpy as np

from attncheck.calls import MergeCall
from numpy_subjects import merge_np


def main() -> None:
    t, h, d, calls = (int(a) for a in sys.argv[1:5])
    call = MergeCall({"dtype": "fp32"}, merge_np)
    call.num_tokens, call.num_heads, call.head_size = t, h, d
    call.prefix_out = np.full((t, h, d), 1.0, np.float32)
    call.suffix_out = np.full((t, h, d), 2.0, np.float32)
    call.prefix_lse = np.full((h, t), 1.0, np.float32)
    call.suffix_lse = np.full((h, t), 2.0, np.float32)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        merge_np.merge(call)
        times.append((time.perf_counter() - start) * 1e3)
    print(f"{sorted(times)[len(times) // 2]:.3f}")


if __name__ == "__main__":
    main()
