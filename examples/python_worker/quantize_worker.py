"""A KV-cache quantiser in numpy, behind the worker protocol: y = FP8(x / scale), the quotient
divided in float32 (IEEE division), then rounded once to the format by
attncheck.dtypes.float_to_fp8, saturating as vLLM's cache writer does. attncheck's quantize_exact
judges every code it writes (plugin_abi.h, AC_OP_QUANTIZE):

    attncheck check --worker "python3 -m attncheck.worker examples/python_worker/quantize_worker.py" \\
        --subject quantize-np --report-dir quantize-report
"""
import numpy as np

import attncheck as ac
from attncheck.dtypes import float_to_fp8, to_float32


def quantize(call, saturate=True):
    x = to_float32(call.x, call.dtype)
    scale = np.asarray(call.scale, dtype=np.float32)
    # One scale per tensor, or one per head (broadcast over tokens and the head's elements).
    s = scale.reshape(1, -1, 1)
    return float_to_fp8(x / s, call.out_dtype, saturate=saturate)


quantize_np = ac.subject(name="quantize-np", ops="quantize", dtypes=("fp32", "fp16", "bf16"),
                         head_size_range=(1, 1024), kv_dtypes=("e4m3fn", "e5m2", "e4m3fnuz"),
                         fp8=("descale_per_kv_head", "saturate"))(quantize)
