"""PyTorch's own cast to FP8 as a KV-cache quantiser (worker protocol 4's quantize call). Needs a
CUDA GPU and torch >= 2.3 (torch.float8_e4m3fn, float8_e5m2, float8_e4m3fnuz).

    build/attncheck check --worker "python3 -m attncheck.worker examples/torch_sdpa/fp8_cast_subjects.py" \\
        --subject torch-cast-fp8,torch-cast-fp8-clamped --report-dir fp8-cast-report

torch-cast-fp8          x / scale divided in fp32 on the GPU, then `.to(float8 dtype)`: torch's
                        conversion rounds to nearest even and does not saturate (declared so: past
                        the largest value it gives NaN, or e5m2's infinity).
torch-cast-fp8-clamped  the same with the quotient clamped to the format's largest value first, as
                        the engines' cache writers do: declared saturating.
"""
import torch

import attncheck as ac

_DTYPES = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e4m3fnuz": torch.float8_e4m3fnuz}


def _quotient(call):
    scale = torch.as_tensor(call.scale, device=call.x.device, dtype=torch.float32).view(1, -1, 1)
    return call.x.to(torch.float32) / scale


def cast(call):
    return _quotient(call).to(_DTYPES[call.out_dtype])


def clamped(call):
    big = torch.finfo(_DTYPES[call.out_dtype]).max
    return _quotient(call).clamp(-big, big).to(_DTYPES[call.out_dtype])


_CAPS = dict(ops="quantize", dtypes=("fp32", "fp16", "bf16"), head_size_range=(1, 1024), memory="cuda",
             framework="torch", kv_dtypes=("e4m3fn", "e5m2", "e4m3fnuz"))
torch_cast = ac.subject(name="torch-cast-fp8", fp8=("descale_per_kv_head",), **_CAPS)(cast)
torch_cast_clamped = ac.subject(name="torch-cast-fp8-clamped", fp8=("descale_per_kv_head", "saturate"),
                                **_CAPS)(clamped)
