"""Subjects that die or hang on a chosen property, to prove isolation: the numpy merge of
numpy_subjects.py, except that on every call of property $ATTNCHECK_CRASH_PROPERTY (default
merge_sentinels)
    merge-np-abort  calls os.abort() (SIGABRT, as a failed CUDA assert or a C++ terminate would);
    merge-np-sleep  sleeps for an hour (a hung kernel): attncheck kills it after --call-timeout.
    merge-np-slow   the unguarded merge (NaN for two empty sides) that, once it has returned its
                    first NaN, takes 0.2 s per call and touches $ATTNCHECK_FAILED_MARKER: a
                    failure whose shrink lasts, for the Ctrl-C-mid-shrink test.
attncheck records that (subject, property) as crashed with the signal and the last stderr line,
restarts the worker, runs the other properties in the fresh worker, and exits 3; the case is in
the corpus.

    build/attncheck check --worker "python3 -m attncheck.worker examples/python_worker/crashing_subjects.py" \\
        --subject merge-np-abort --call-timeout 5
"""
import os
import sys
import time

import attncheck as ac
from numpy_subjects import merge_states

CRASH_PROPERTY = os.environ.get("ATTNCHECK_CRASH_PROPERTY", "merge_sentinels")


def _aborting(call):
    if call.property == CRASH_PROPERTY:
        print(f"merge-np-abort: aborting on case {call.case_id}", file=sys.stderr, flush=True)
        os.abort()
    return merge_states(call)


def _sleeping(call):
    if call.property == CRASH_PROPERTY:
        print(f"merge-np-sleep: hanging on case {call.case_id}", file=sys.stderr, flush=True)
        time.sleep(3600)
    return merge_states(call)


_failed_once = False


def _slow_after_failure(call):
    global _failed_once
    from unguarded_merge import _merge_without_empty_guard
    import numpy as np
    if _failed_once:
        time.sleep(0.2)
    out, lse = _merge_without_empty_guard(call)
    if not _failed_once and np.isnan(np.asarray(lse, dtype=np.float32)).any():
        _failed_once = True
        marker = os.environ.get("ATTNCHECK_FAILED_MARKER")
        if marker:
            open(marker, "w").close()
    return out, lse


CAPS = dict(ops="merge", dtypes=("fp32", "fp16"), head_size_range=(1, 512), lse_layout="heads_tokens")
merge_np_abort = ac.subject(name="merge-np-abort", description="numpy merge; os.abort() on one property", **CAPS)(_aborting)
merge_np_sleep = ac.subject(name="merge-np-sleep", description="numpy merge; hangs on one property", **CAPS)(_sleeping)
merge_np_slow = ac.subject(name="merge-np-slow", description="unguarded numpy merge; slow after its first NaN",
                           ops="merge", dtypes=("fp32", "fp16"), lse_layout="heads_tokens")(_slow_after_failure)
