"""A Triton merge of two attention states, in the style of the engines' Triton merges (vLLM's
merge_attn_states, SGLang's merge_state): one program per (token, head); read both LSEs, map
FlashAttention-2's +inf empty sentinel to -inf, subtract the max, scale then multiply, fp32 math,
one rounding to the output type at the store. Served to attncheck by the SDK:

    build/attncheck check --worker "python3 -m attncheck.worker examples/triton_merge/triton_merge.py"

triton-merge             LSE [heads, tokens] (vLLM's layout), with the both-empty guard
triton-merge-th          LSE [tokens, heads] (SGLang's layout), with the guard
triton-merge-unguarded   [heads, tokens], the guard removed: two empty states (a request with no
                         prefix hit under chunked prefill) give max = -inf, (-inf) - (-inf) = NaN:

    build/attncheck prefill --scenario corpus/prefill/miss-in-batch.json --attention textbook \\
        --merge triton-merge-unguarded --worker "python3 -m attncheck.worker examples/triton_merge/triton_merge.py"

Needs a CUDA GPU, torch and triton; importing this file without them fails (the worker's
handshake then reports it, exit 2).
"""
import torch
import triton
import triton.language as tl

import attncheck as ac


@triton.jit
def _merge_kernel(out_ptr, out_lse_ptr, p_out_ptr, p_lse_ptr, s_out_ptr, s_lse_ptr,
                  stride_tok, stride_head, lse_stride_tok, lse_stride_head,
                  HEAD_SIZE: tl.constexpr, PADDED: tl.constexpr, GUARD_BOTH_EMPTY: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    lse_at = t * lse_stride_tok + h * lse_stride_head
    p_lse = tl.load(p_lse_ptr + lse_at)
    s_lse = tl.load(s_lse_ptr + lse_at)
    # FlashAttention-2 writes +inf for an empty row; FlashAttention-3 and attncheck write -inf.
    p_lse = tl.where(p_lse == float("inf"), float("-inf"), p_lse)
    s_lse = tl.where(s_lse == float("inf"), float("-inf"), s_lse)
    m = tl.maximum(p_lse, s_lse)
    both_empty = m == float("-inf")
    if GUARD_BOTH_EMPTY:
        m = tl.where(both_empty, 0.0, m)
    p_w = tl.exp(p_lse - m)
    s_w = tl.exp(s_lse - m)
    total = p_w + s_w
    if GUARD_BOTH_EMPTY:
        total = tl.where(both_empty, 1.0, total)
    out_lse = tl.log(total) + m
    if GUARD_BOTH_EMPTY:
        out_lse = tl.where(both_empty, float("-inf"), out_lse)
    tl.store(out_lse_ptr + lse_at, out_lse)
    # Scale then multiply: weights in [0, 1] first, so p * w + s * w cannot overflow for finite O.
    p_scale = p_w / total
    s_scale = s_w / total
    d = tl.arange(0, PADDED)
    in_range = d < HEAD_SIZE
    at = t * stride_tok + h * stride_head + d
    p_o = tl.load(p_out_ptr + at, mask=in_range, other=0.0).to(tl.float32)
    s_o = tl.load(s_out_ptr + at, mask=in_range, other=0.0).to(tl.float32)
    o = p_o * p_scale + s_o * s_scale
    if GUARD_BOTH_EMPTY:
        o = tl.where(both_empty, 0.0, o)
    tl.store(out_ptr + at, o.to(out_ptr.dtype.element_ty), mask=in_range)


def merge_attn_states(prefix_out, prefix_lse, suffix_out, suffix_lse, lse_layout="heads_tokens", guard=True):
    """out, lse from two states; outputs [tokens, heads, d] and fp32 LSE in lse_layout."""
    tokens, heads, d = prefix_out.shape
    out = torch.empty_like(prefix_out)
    out_lse = torch.empty_like(prefix_lse)
    if tokens == 0 or heads == 0:
        return out, out_lse
    lse_tok, lse_head = (1, tokens) if lse_layout == "heads_tokens" else (heads, 1)
    _merge_kernel[(tokens, heads)](out, out_lse, prefix_out, prefix_lse, suffix_out, suffix_lse,
                                   prefix_out.stride(0), prefix_out.stride(1), lse_tok, lse_head,
                                   HEAD_SIZE=d, PADDED=triton.next_power_of_2(d), GUARD_BOTH_EMPTY=guard)
    return out, out_lse


def _subject(name, layout, guard, description):
    def serve(call):
        return merge_attn_states(call.prefix_out, call.prefix_lse, call.suffix_out, call.suffix_lse, layout, guard)
    return ac.subject(name=name, ops="merge", dtypes=("fp32", "fp16", "bf16"), memory="cuda", framework="torch",
                      head_size_range=(1, 512), lse_layout=layout, description=description)(serve)


triton_merge = _subject("triton-merge", "heads_tokens", True, "Triton merge, LSE [heads, tokens], both-empty guard")
triton_merge_th = _subject("triton-merge-th", "tokens_heads", True, "Triton merge, LSE [tokens, heads], both-empty guard")
triton_merge_unguarded = _subject("triton-merge-unguarded", "heads_tokens", False,
                                  "Triton merge without the both-empty guard (chunked-prefill NaN)")
