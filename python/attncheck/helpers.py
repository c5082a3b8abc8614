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

The variants (protocol 4; AttentionCall states each): gather_pages reads paged K / V into the
contiguous layout, window_mask is the sliding window's visibility, softcap_scores caps scores.
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
    varlen loop. mask_block is the sequence's [Tq_i, Tk_i] boolean visibility (explicit mask,
    bottom-right causal and the sliding window combined), or None when none applies. k_slice
    indexes contiguous K / V: a paged call's pools are gathered first (gather_pages)."""
    cq, ck, cm = call.cu_seqlens_q_host, call.cu_seqlens_k_host, call.cu_mask_host
    left, right = getattr(call, "window_left", -1), getattr(call, "window_right", -1)
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
        if left != -1 or right != -1:
            w = window_mask(tq, tk, left, right)
            vis = w if vis is None else (vis & w)
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


def gather_pages(k_pool: Any, v_pool: Any, block_table: Any, seqlens_k: Any, page_size: int) -> Tuple[Any, Any]:
    """Paged K / V -> contiguous (K [total_k, num_kv_heads, d], V [total_k, num_kv_heads, d_v]), the
    layout of an unpaged call (sequences packed back to back, as cu_seqlens_k delimits them).

    k_pool / v_pool: [num_pages, page_size, num_kv_heads, d] (d_v for V); block_table:
    [num_seqs, max_blocks] integers (call.block_table_host); seqlens_k: each sequence's key count
    (np.diff(call.cu_seqlens_k_host)). Key j of sequence s is slot j % page_size of page
    block_table[s, j // page_size]; table entries past a sequence's last page and slots past its last
    key are never read (attncheck fills them with garbage). Works on numpy arrays and torch tensors."""
    if page_size <= 0:
        raise ValueError(f"page_size must be positive, not {page_size}")
    table = np.asarray(block_table, dtype=np.int64)
    lens = [int(t) for t in seqlens_k]
    if table.ndim == 1:
        table = table.reshape(len(lens), -1)
    rows = []
    for s, tk in enumerate(lens):
        j = np.arange(tk)
        if tk > table.shape[1] * page_size:
            raise ValueError(f"sequence {s} has {tk} keys, more than {table.shape[1]} pages of {page_size} hold")
        rows.append(table[s, j // page_size] * page_size + j % page_size)
    idx = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    k = k_pool.reshape(-1, *k_pool.shape[2:])
    v = v_pool.reshape(-1, *v_pool.shape[2:])
    if not isinstance(k, np.ndarray):  # torch: index with a tensor on the pool's device
        import torch
        t = torch.as_tensor(idx, device=k.device)
        return k[t], v[t]
    return k[idx], v[idx]


def window_mask(tq: int, tk: int, left: int, right: int, causal: bool = False) -> NDArray[np.bool_]:
    """[tq, tk] boolean, True = visible: the sliding window around the bottom-right aligned diagonal.
    Query t sees key j only when t + tk - tq - left <= j <= t + tk - tq + right; -1 leaves a side
    unbounded (left = right = -1: every key). causal=True also requires j <= t + tk - tq (the
    window's right side 0). A row with no visible key is empty (see empty_rows)."""
    t = np.arange(tq)[:, None]
    j = np.arange(tk)[None, :]
    diag = t + (tk - tq)
    vis = np.ones((tq, tk), dtype=bool)
    if left != -1:
        vis &= j >= diag - left
    if right != -1:
        vis &= j <= diag + right
    if causal:
        vis &= j <= diag
    return vis


def softcap_scores(s: Any, cap: float) -> Any:
    """The logit softcap as a score function: cap * tanh(s / cap), applied to scores that already
    carry softmax_scale (s = softmax_scale * q.k); cap 0 (none) returns s unchanged. Computed in s's
    own precision (pass float64 scores for a reference). Works on numpy arrays and torch tensors."""
    if cap == 0:
        return s
    if cap < 0:
        raise ValueError(f"softcap must be 0 (none) or positive, not {cap}")
    if isinstance(s, (np.ndarray, np.generic, float, int)):
        return cap * np.tanh(np.asarray(s) / cap)
    return cap * (s / cap).tanh()  # torch


def dequantize_kv(k: Any, v: Any, kv_dtype: str, k_descale: Any, v_descale: Any,
                  cu_seqlens_k: Any = None) -> Tuple[Any, Any]:
    """An FP8 KV cache's values: each code decoded exactly and times its descale, in float64
    (numpy, host) -> (K, V) of the codes' shapes, [..., num_kv_heads, d]. k / v: the call's uint8
    codes (call.k, call.v: contiguous or page pools alike); k_descale / v_descale: one value (per
    tensor), one per KV head, or one per (sequence, KV head) (fp8 "descale_per_sequence",
    [num_seqs * num_kv_heads]: then k / v contiguous [total_k, num_kv_heads, d], gathered first if
    paged, and cu_seqlens_k (call.cu_seqlens_k_host) names each key's sequence)."""
    from .dtypes import fp8_to_float64

    def one(codes: Any, descale: Any) -> Any:
        x = fp8_to_float64(np.asarray(codes), kv_dtype)
        d = np.asarray(descale, dtype=np.float32).astype(np.float64)
        heads = x.shape[-2]
        if d.size == 1:
            return x * d[0]
        if d.size == heads:
            return x * d[:, None]
        if cu_seqlens_k is None or x.ndim != 3:
            raise ValueError("descales per (sequence, KV head) need contiguous K / V and cu_seqlens_k")
        cu = np.asarray(cu_seqlens_k, dtype=np.int64)
        seq = np.searchsorted(cu, np.arange(x.shape[0]), side="right") - 1  # each key's sequence
        return x * d.reshape(len(cu) - 1, heads)[seq][..., None]

    return one(k, k_descale), one(v, v_descale)


def dequantize_q(q: Any, kv_dtype: str, q_descale: Any, num_kv_heads: int, cu_seqlens_q: Any = None) -> Any:
    """An FP8 Q's values (fp8 "fp8_q"): each code decoded exactly and times its descale, in float64
    (numpy, host) -> Q of the codes' shape [tokens, num_heads, d]. q: the call's uint8 codes;
    q_descale: one value (per tensor), one per KV head (call.q_descale), query head i reading the
    one of KV head i // (num_heads // num_kv_heads), or one per (sequence, KV head) with
    cu_seqlens_q (call.cu_seqlens_q_host) naming each token's sequence."""
    from .dtypes import fp8_to_float64

    x = fp8_to_float64(np.asarray(q), kv_dtype)
    d = np.asarray(q_descale, dtype=np.float32).astype(np.float64)
    if d.size == 1:
        return x * d[0]
    group = x.shape[-2] // num_kv_heads
    if d.size == num_kv_heads:
        return x * np.repeat(d, group)[:, None]
    if cu_seqlens_q is None:
        raise ValueError("descales per (sequence, KV head) need cu_seqlens_q")
    cu = np.asarray(cu_seqlens_q, dtype=np.int64)
    seq = np.searchsorted(cu, np.arange(x.shape[0]), side="right") - 1  # each token's sequence
    return x * np.repeat(d.reshape(len(cu) - 1, num_kv_heads), group, axis=1)[seq][..., None]