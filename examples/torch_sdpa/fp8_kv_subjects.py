"""An FP8 KV cache read by PyTorch on the GPU, as an attncheck subject (worker protocol 4). Needs
a CUDA GPU and torch >= 2.3 (torch.float8_e4m3fn / float8_e5m2).

    build/attncheck check --worker "python3 -m attncheck.worker examples/torch_sdpa/fp8_kv_subjects.py" \\
        --subject sdpa-fp8kv --report-dir fp8-sdpa-report

sdpa-fp8kv  K and V arrive as FP8 codes in PyTorch's own FP8 dtypes, with their descales (one per
            tensor or one per KV head). Each code is converted to fp32 by torch (exact: every FP8
            value is an fp32) and multiplied by its KV head's descale (one fp32 rounding, the one
            the contract allows), Q converted to fp32, and SDPA's math backend attends in fp32,
            one sequence at a time (helpers.sequences: bottom-right causal, masks, empty rows
            zeroed); O is rounded once to the call's dtype.

PyTorch's SDPA takes no FP8 inputs (its fused backends refuse float8 tensors), so this is the
dequantise-then-attend path an engine without an FP8 attention kernel runs. Dequantising to bf16
or fp16 instead (a second rounding of every key and value) is outside the contract attncheck
judges, the exact attention of code times descale.
"""
import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attncheck as ac
from attncheck import helpers


def _dequantize(codes, descale):
    d = torch.as_tensor(descale, device=codes.device, dtype=torch.float32)
    return codes.to(torch.float32) * (d[:, None] if d.numel() > 1 else d)


def attention(call):
    if not call.kv_dtype:
        k, v = call.k.float(), call.v.float()
    else:
        k, v = _dequantize(call.k, call.k_descale), _dequantize(call.v, call.v_descale)
    q = call.q.float()
    out = torch.zeros_like(q)
    for _, qs, ks, visible in helpers.sequences(call):
        tq, tk = qs.stop - qs.start, ks.stop - ks.start
        if tq == 0 or tk == 0:
            continue  # O = 0, LSE = -inf already
        qi = q[qs].transpose(0, 1).unsqueeze(0)
        ki = helpers.expand_kv_heads(k[ks], call.num_heads).transpose(0, 1).unsqueeze(0)
        vi = helpers.expand_kv_heads(v[ks], call.num_heads).transpose(0, 1).unsqueeze(0)
        mask = None if visible is None else torch.from_numpy(np.ascontiguousarray(visible)).to(q.device)
        with sdpa_kernel([SDPBackend.MATH]):
            o = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, scale=float(call.softmax_scale))
        o = o[0].transpose(0, 1)
        if visible is not None:
            empty = torch.from_numpy(helpers.empty_rows(visible)).to(o.device)
            o = torch.where(empty[:, None, None], torch.zeros((), dtype=o.dtype, device=o.device), o)
        out[qs] = o
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[call.dtype]
    return out.to(dtype)


sdpa_fp8kv = ac.subject(
    name="sdpa-fp8kv", ops="attention", dtypes=("fp16", "bf16"), memory="cuda", framework="torch",
    head_size_range=(1, 256), features=("causal", "mask", "varlen", "gqa"),
    kv_dtypes=("e4m3fn", "e5m2"), fp8=("descale_per_kv_head",),
    description="FP8 KV cache dequantised in fp32 by torch, then SDPA's math backend in fp32")(attention)
