"""What every attention adapter otherwise writes by hand, written once and checked against the
exact reference (python/tests/test_helpers.py runs a numpy subject built from these helpers
through `attncheck check`).

Conventions of attncheck's calls (the C ABI's): packed sequences delimited by cu_seqlens; query
head h reads KV head h // (num_heads // num_kv_heads); causal is bottom-right aligned (query t of
a sequence with Tq queries and Tk keys sees keys 0 .. t + Tk - Tq, chunked prefill's convention);
a boolean mask is nonzero = visible and combines with causal by logical and. Libraries differ:
torch.nn.functional.scaled_dot_product_attention's is_causal=True is top-left aligned (query t
sees keys 0 .. t) and its boolean attn_mask is True = take part; FlashAttention >= 2.1 is
bottom-right. These helpers build the mask a library needs from attncheck's call.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Tuple, cast

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .calls import AttentionCall


def causal_mask(tq: int, tk: int, align: str = "bottom_right") -> NDArray[np.bool_]:
    """[tq, tk] boolean, True = visible. bottom_right: query t sees keys 0 .. t + tk - tq
    (attncheck, FlashAttention >= 2.1, chunked prefill); top_left: keys 0 .. t (torch SDPA's
    is_causal=True, FlashAttention < 2.1). They agree only when tq == tk."""
    if align not in ("bottom_right", "top_left"):
        raise ValueError(f"align must be 'bottom_right' or 'top_left', not {align!r}")
    t = np.arange(tq)[:, None]
    j = np.arange(tk)[None, :]
    offset = tk - tq if align == "bottom_right" else 0
    return j <= t + offset


def mask_to_bias(mask: Any, dtype: Any = np.float32) -> NDArray[Any]:
    """Boolean visibility (True = visible) -> additive bias: 0 where visible, -inf where not.
    -inf, never a large finite negative: a finite sentinel such as -1e4 or finfo.min leaks weight
    into rows whose every key is masked (they then average V instead of being empty) and can
    overflow when added to a large score."""
    mask = np.asarray(mask, dtype=bool)
    return np.where(mask, np.zeros((), dtype), np.array(-np.inf, dtype))


def expand_kv_heads(kv: Any, num_heads: int) -> Any:
    """[tokens, num_kv_heads, d] -> [tokens, num_heads, d] for grouped-query attention: query head h
    reads KV head h // (num_heads // num_kv_heads) (groups of consecutive query heads share one
    KV head; repeat_interleave, not tile). Works on numpy arrays and torch tensors."""
    hk = kv.shape[1]
    if num_heads % hk:
        raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {hk}")
    group = num_heads // hk
    if group == 1:
        return kv
    if isinstance(kv, np.ndarray):
        return np.repeat(kv, group, axis=1)
    return kv.repeat_interleave(group, dim=1)  # torch


def sequences(call: AttentionCall) -> Iterator[Tuple[int, slice, slice, Optional[NDArray[np.bool_]]]]:
    """Yields (i, q_slice, k_slice, mask_block) for each packed sequence of an AttentionCall: the
    varlen loop. mask_block is the sequence's [Tq_i, Tk_i] boolean visibility (explicit mask and
    bottom-right causal combined), or None when neither applies."""
    cq, ck, cm = call.cu_seqlens_q_host, call.cu_seqlens_k_host, call.cu_mask_host
    for i in range(len(cq) - 1):
        tq, tk = cq[i + 1] - cq[i], ck[i + 1] - ck[i]
        vis = None
        if call.mask is not None:
            m = call.mask if isinstance(call.mask, np.ndarray) else call.mask.cpu().numpy()
            at = cast(List[int], cm)[i]  # a call with a mask has its offsets
            vis = m[at:at + tq * tk].reshape(tq, tk) != 0
        if call.causal:
            c = causal_mask(tq, tk, "bottom_right")
            vis = c if vis is None else (vis & c)
        yield i, slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1]), vis


def empty_rows(visible: Any) -> NDArray[np.bool_]:
    """Rows of a [.., tq, tk] boolean visibility with no visible key: attncheck requires O = 0
    and the declared LSE sentinel there, where a softmax over an all -inf row gives NaN."""
    return cast("NDArray[np.bool_]", ~np.asarray(visible, dtype=bool).any(axis=-1))


def lse_to_layout(lse_tokens_heads: Any, layout: str) -> Any:
    """[tokens, heads] -> the declared layout ("heads_tokens" transposes), contiguous."""
    a = lse_tokens_heads
    if layout == "heads_tokens":
        a = a.T if isinstance(a, np.ndarray) else a.transpose(0, 1)
    return np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a.contiguous()


def lse_from_layout(lse: Any, layout: str) -> Any:
    """The declared layout -> [tokens, heads]."""
    return lse_to_layout(lse, layout)  # a transpose is its own inverse
