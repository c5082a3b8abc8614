"""merge-np without its both-empty guard: the chunked-prefill NaN, in numpy. Two empty states
(LSE -inf on both sides, a request with no prefix hit) give weights e^(-inf - (-inf)) = NaN.

    build/attncheck prefill --scenario corpus/prefill/miss-in-batch.json --backend host \\
        --attention textbook --merge merge-np-unguarded \\
        --worker "python3 -m attncheck.worker examples/python_worker/unguarded_merge.py"
"""
import numpy as np

import attncheck as ac
from attncheck import helpers
from numpy_subjects import merge_states


def _merge_without_empty_guard(call):
    out, lse = merge_states(call)
    pl = helpers.lse_from_layout(np.asarray(call.prefix_lse), call.lse_layout)
    sl = helpers.lse_from_layout(np.asarray(call.suffix_lse), call.lse_layout)
    both = (pl == -np.inf) & (sl == -np.inf)
    nan = np.full((), np.nan, np.float32)
    out = np.where(both[..., None], ac.from_float(nan, call.dtype), out)
    lse = helpers.lse_to_layout(np.where(both, nan, helpers.lse_from_layout(lse, call.lse_layout)), call.lse_layout)
    return out, lse


merge_np_unguarded = ac.subject(name="merge-np-unguarded", ops="merge", dtypes=("fp32", "fp16", "bf16"),
                                lse_layout="heads_tokens", description="numpy merge without the both-empty guard")(
    _merge_without_empty_guard)
