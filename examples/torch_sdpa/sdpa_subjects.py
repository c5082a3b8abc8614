"""torch.nn.functional.scaled_dot_product_attention with one chosen backend, as attncheck subjects
(the README's recipe). Needs a CUDA GPU and torch >= 2.3.

    build/attncheck check --worker "python3 -m attncheck.worker examples/torch_sdpa/sdpa_subjects.py" \\
        --subject sdpa-flash,sdpa-efficient,sdpa-math,flash-varlen --report-dir sdpa-report

The three sdpa-* subjects call SDPA once per sequence, so no kernel ever sees the batch;
flash-varlen calls the flash kernel's varlen op once over the whole batch (cu_seqlens), as engines
do, which is what batch_invariance measures.

What an SDPA adapter must take care of, and where this file does it:
- LSE: SDPA returns none. The flash backend's aten op returns its logsumexp (base e,
  [batch, heads, tokens]); sdpa-flash declares "lse" and returns it. The other two do not.
- Causal alignment: is_causal=True is top-left; attncheck's (and chunked prefill's) is
  bottom-right. sdpa-efficient / sdpa-math pass helpers' bottom-right mask; sdpa-flash takes no
  mask: it uses is_causal where Tq == Tk (the two agree), front-pads the queries to Tk where
  Tq < Tk (the last Tq rows of a square causal call), and refuses Tq > Tk.
- Masks: SDPA's boolean attn_mask is True = take part, attncheck's mask nonzero = visible (the
  same sense). Rows with no visible key come back NaN or garbage from SDPA; attncheck requires
  O = 0 and LSE = -inf: they are zeroed here (helpers.empty_rows).
- GQA: helpers.expand_kv_heads (repeat_interleave), so it also works before enable_gqa.
- Layout: attncheck packs [tokens, heads, d] with cu_seqlens; SDPA wants [batch, heads, tokens, d]:
  one SDPA call per sequence (helpers.sequences).
- One backend: sdpa_kernel([backend]) turns "this backend cannot run this input" into an error,
  reported as ac.Unsupported instead of a silent fallback to another backend.
"""
import itertools

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attncheck as ac
from attncheck import helpers


def _bhtd(x, num_heads=None):
    if num_heads is not None:
        x = helpers.expand_kv_heads(x, num_heads)
    return x.transpose(0, 1).unsqueeze(0)  # [T, H, D] -> [1, H, T, D]


def _run(call, attend):
    out = torch.zeros_like(call.q)
    lse = torch.full((call.q.shape[0], call.num_heads), float("-inf"), device=call.q.device, dtype=torch.float32)
    for _, qs, ks, visible in helpers.sequences(call):
        tq, tk = qs.stop - qs.start, ks.stop - ks.start
        if tq == 0 or tk == 0:
            continue  # no queries, or every row empty: O = 0, LSE = -inf already
        q, k, v = _bhtd(call.q[qs]), _bhtd(call.k[ks], call.num_heads), _bhtd(call.v[ks], call.num_heads)
        try:
            o, l = attend(q, k, v, visible, tq, tk, float(call.softmax_scale))
        except RuntimeError as e:
            if "No available kernel" in str(e) or "not supported" in str(e).lower():
                raise ac.Unsupported(str(e).splitlines()[0]) from None
            raise
        o = o[0].transpose(0, 1)  # [Tq, H, D]
        if visible is not None:
            empty = torch.from_numpy(helpers.empty_rows(visible)).to(o.device)
            o = torch.where(empty[:, None, None], torch.zeros((), dtype=o.dtype, device=o.device), o)
        out[qs] = o
        if l is not None:
            l = l[0].transpose(0, 1).float()  # [Tq, H]
            if visible is not None:
                l = torch.where(empty[:, None], torch.tensor(float("-inf"), device=l.device), l)
            lse[qs] = l
    return out, helpers.lse_to_layout(lse, call.lse_layout)


def _sdpa(backend):
    def attend(q, k, v, visible, tq, tk, scale):
        mask = None if visible is None else torch.from_numpy(np.ascontiguousarray(visible)).to(q.device)
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale), None
    return attend


def _flash(q, k, v, visible, tq, tk, scale):
    # Bottom-right causal with Tq < Tk (a chunk over its cached prefix) is the last Tq rows of a
    # square top-left causal call: the queries are front-padded with Tk - Tq zero rows, whose
    # outputs are dropped (each row of the kernel is computed alone).
    pad = 0
    if visible is not None:
        if tq > tk or not np.array_equal(visible, helpers.causal_mask(tq, tk, "bottom_right")):
            raise ac.Unsupported("the flash backend takes no mask: only causal with Tq <= Tk (front-padded queries)")
        pad = tk - tq
        if pad:
            q = torch.cat([torch.zeros_like(q[:, :, :1, :]).expand(-1, -1, pad, -1), q], dim=2)
    r = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, visible is not None, False, scale=scale)
    return r[0][:, :, pad:, :], r[1][:, :, pad:]


COMMON = dict(ops="attention", memory="cuda", framework="torch", head_sizes=[64, 128], lse_layout="heads_tokens",
              tilings=[(64, 64)])


@ac.subject(name="sdpa-flash", dtypes=("fp16", "bf16"), features=("causal", "varlen", "gqa", "lse"),
            description="SDPA flash backend (aten flash op, with its LSE)", **COMMON)
def sdpa_flash(call):
    return _run(call, _flash)


# The memory-efficient kernel flushes fp32 subnormals (its inputs and intermediates: an output
# near 1e-43 comes back 0 on the H200), so it declares FTZ / DAZ arithmetic.
@ac.subject(name="sdpa-efficient", dtypes=("fp32", "fp16", "bf16"), features=("causal", "mask", "varlen", "gqa"),
            ftz_arithmetic=True,
            description="SDPA memory-efficient backend, bottom-right causal as a mask, FTZ arithmetic", **COMMON)
def sdpa_efficient(call):
    return _run(call, _sdpa(SDPBackend.EFFICIENT_ATTENTION))[0]


@ac.subject(name="sdpa-math", dtypes=("fp32", "fp16", "bf16"), features=("causal", "mask", "varlen", "gqa"),
            description="SDPA math backend, bottom-right causal as a mask", **COMMON)
def sdpa_math(call):
    return _run(call, _sdpa(SDPBackend.MATH))[0]


def _flash_varlen(call):
    cq, ck = call.cu_seqlens_q_host, call.cu_seqlens_k_host
    if cq[-1] == 0:  # no query row: nothing to compute (the op refuses empty tensors)
        return torch.zeros_like(call.q), torch.empty((call.num_heads, 0), dtype=torch.float32, device=call.q.device)
    # Sequences without query rows have no output, and the op refuses them: left out (their keys too).
    keep = [i for i in range(len(cq) - 1) if cq[i + 1] > cq[i]]
    k, v = call.k, call.v
    if len(keep) < len(cq) - 1:
        k = torch.cat([call.k[ck[i]:ck[i + 1]] for i in keep])
        v = torch.cat([call.v[ck[i]:ck[i + 1]] for i in keep])
        ck = [0] + list(itertools.accumulate(ck[i + 1] - ck[i] for i in keep))
        cq = [0] + list(itertools.accumulate(cq[i + 1] - cq[i] for i in keep))
    max_q = max(cq[i + 1] - cq[i] for i in range(len(cq) - 1))
    max_k = max(ck[i + 1] - ck[i] for i in range(len(ck) - 1))
    dev = call.q.device
    cu_q = torch.as_tensor(cq, dtype=torch.int32, device=dev)
    cu_k = torch.as_tensor(ck, dtype=torch.int32, device=dev)
    r = torch.ops.aten._flash_attention_forward(call.q, k, v, cu_q, cu_k, max_q, max_k, 0.0, False,
                                                False, scale=float(call.softmax_scale))
    out, lse = r[0], r[1]
    if tuple(lse.shape) != (call.num_heads, call.q.shape[0]):
        raise ac.Unsupported(f"flash varlen returned an LSE of shape {tuple(lse.shape)}, not [heads, total_q]")
    return out, lse.float().contiguous()


@ac.subject(name="flash-varlen", dtypes=("fp16", "bf16"), features=("varlen", "gqa", "lse"), refuses_zero_keys=True,
            description="the flash kernel's varlen op over the whole batch (aten _flash_attention_forward)",
            **COMMON)
def flash_varlen(call):
    return _flash_varlen(call)
