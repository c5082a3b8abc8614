"""Two subjects in plain numpy, served by the attncheck SDK: no GPU, no torch.

    build/attncheck check --worker "python3 -m attncheck.worker examples/python_worker/numpy_subjects.py"

merge-np      merge of two attention states: scale-then-multiply with weights e^(lse - max),
              +inf read as FlashAttention-2's empty sentinel, both empty -> O = 0, LSE = -inf.
attention-np  attention forward built from attncheck.helpers (varlen loop, GQA expansion,
              bottom-right causal and the boolean mask as an additive -inf bias): the test that
              those helpers agree with the exact reference.
Both compute in float64 and round once to the output format (numpy's float64 -> float16 cast and
attncheck.float64_to_bf16 round to nearest even), LSE natural, layout [heads, tokens].
"""
import numpy as np

import attncheck as ac
from attncheck import helpers


def merge_states(call):
    out, lse = merged(call)
    return ac.from_float(out, call.dtype), lse


def merged(call):
    """The merge in float64, before any rounding of out: (out [tokens, heads, d], lse in the layout)."""
    d = call.dtype
    with np.errstate(all="ignore"):
        po = ac.to_float32(call.prefix_out, d).astype(np.float64)
        so = ac.to_float32(call.suffix_out, d).astype(np.float64)
        # LSEs arrive in the declared layout [heads, tokens]; work in [tokens, heads].
        pl = helpers.lse_from_layout(np.asarray(call.prefix_lse, np.float64), call.lse_layout)
        sl = helpers.lse_from_layout(np.asarray(call.suffix_lse, np.float64), call.lse_layout)
        pl = np.where(pl == np.inf, -np.inf, pl)  # FA2's +inf empty sentinel is an empty state
        sl = np.where(sl == np.inf, -np.inf, sl)
        m = np.maximum(pl, sl)
        both_empty = m == -np.inf
        m_safe = np.where(both_empty, 0.0, m)
        wp, ws = np.exp(pl - m_safe), np.exp(sl - m_safe)
        total = wp + ws
        total_safe = np.where(both_empty, 1.0, total)
        out = po * (wp / total_safe)[..., None] + so * (ws / total_safe)[..., None]
        out = np.where(both_empty[..., None], 0.0, out)
        lse = np.where(both_empty, -np.inf, m_safe + np.log(total_safe))
    return out, helpers.lse_to_layout(lse.astype(np.float32), call.lse_layout)


merge_np = ac.subject(name="merge-np", ops="merge", dtypes=("fp32", "fp16", "bf16"), head_size_range=(1, 512),
                      lse_layout="heads_tokens", description="numpy merge of two attention states (float64, one rounding)")(merge_states)


def scores(call, qi, ki, visible):
    """One sequence's scaled, masked logits [H, T, K], their row maxima [H, T, 1] and its empty rows
    [H, T] (no visible key)."""
    s = np.einsum("thd,khd->htk", qi, ki) * call.softmax_scale
    if visible is not None:
        s = s + helpers.mask_to_bias(visible, np.float64)[None]
    mx = s.max(axis=-1, keepdims=True)
    return s, mx, mx[..., 0] == -np.inf


def attention(call):
    d = call.dtype
    tq_total, h = call.q.shape[0], call.num_heads
    out = np.zeros((tq_total, h, call.head_size), np.float64)
    lse = np.full((tq_total, h), -np.inf, np.float64)
    q = ac.to_float32(call.q, d).astype(np.float64)
    k = helpers.expand_kv_heads(ac.to_float32(call.k, d).astype(np.float64), h)
    v = helpers.expand_kv_heads(ac.to_float32(call.v, d).astype(np.float64), h)
    with np.errstate(all="ignore"):
        for _, qs, ks, visible in helpers.sequences(call):
            qi, ki, vi = q[qs], k[ks], v[ks]  # [T, H, D]
            if ki.shape[0] == 0:
                continue  # no keys: every row is empty (O = 0, LSE = -inf)
            s, mx, empty = scores(call, qi, ki, visible)
            p = np.exp(s - np.where(empty[..., None], 0.0, mx))
            total = p.sum(axis=-1)
            o = np.einsum("htk,khd->thd", p, vi) / np.where(empty, 1.0, total).T[..., None]
            out[qs] = np.where(empty.T[..., None], 0.0, o)
            lse[qs] = np.where(empty, -np.inf, mx[..., 0] + np.log(np.where(empty, 1.0, total))).T
    return ac.from_float(out, d), helpers.lse_to_layout(lse.astype(np.float32), call.lse_layout)


attention_np = ac.subject(name="attention-np", ops="attention", dtypes=("fp32", "fp16", "bf16"), head_size_range=(1, 256),
                          features=("causal", "mask", "varlen", "gqa", "lse"), tilings=[(64, 64)],
                          description="numpy attention from attncheck.helpers (float64, one rounding)")(attention)
