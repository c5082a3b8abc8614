"""attncheck's Python SDK: declare attention / softmax / merge subjects with the C ABI's
vocabulary, serve them to the attncheck binary as a worker process
(`python3 -m attncheck.worker file.py:object`), and check them from pytest
(`attncheck.check(subject, ...)`). Importing it needs numpy only; torch and CuPy are imported
when a CUDA subject is served, never at import time."""
from ._caps import CapsError
from .calls import AttentionCall, MergeCall, QuantizeCall, SoftmaxCall
from .check import AttncheckFailure, CheckResult, check, find_binary
from .dtypes import bf16_to_float32, float32_to_bf16, float64_to_bf16, fp8_to_float64, from_float, to_float32
from .subject import DeviceError, Subject, Unsupported, subject
from . import helpers

__all__ = ["CapsError", "AttentionCall", "MergeCall", "QuantizeCall", "SoftmaxCall", "AttncheckFailure", "CheckResult", "check",
           "find_binary", "bf16_to_float32", "float32_to_bf16", "float64_to_bf16", "fp8_to_float64", "from_float",
           "to_float32",
           "DeviceError", "Subject", "Unsupported", "subject", "helpers"]
