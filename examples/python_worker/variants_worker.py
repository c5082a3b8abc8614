"""An attention subject in plain numpy that declares the engines' variants (worker protocol 4):
paged K / V, V head sizes of their own (64 / 32 and MLA's 192 / 128), a logit softcap, a sliding
window and attention sinks; and the same attention over an FP8 KV cache.

    build/attncheck check --worker "python3 -m attncheck.worker examples/python_worker/variants_worker.py"

attention-np-variants  attention forward built from attncheck.helpers: gather_pages for paged
                       K / V, softcap_scores for the cap, the varlen loop (whose visibility holds
                       the mask, bottom-right causal and the window), GQA expansion; V inside K
                       (v_in_k: call.v is a view of K's first head_size_v columns, read as any v). Sinks join
                       each row's denominator only: O = sum e^s v / (e^sink + sum e^s),
                       LSE = log(e^sink + sum e^s); a row with no visible key has O = 0 and
                       LSE = its sink (-inf without sinks).
attention-np-fp8kv     the same attention with K and V from an FP8 KV cache (e4m3fn, e5m2, and AMD's
                       e4m3fnuz; descales per tensor or per KV head), decoded by
                       helpers.dequantize_kv, and paged.
attention-np-fp8       the same, Q in FP8 as well (fp8_q: helpers.dequantize_q), descales per (sequence,
                       KV head) too (FlashAttention-3's descale shape).
attention-np-fp8-scaled
                       attention-np-fp8 with P held in e4m3fn times the call's p_scale (cuDNN's scale_s,
                       fp8 "p_e4m3" and "p_scale"; 2^8 without one) and read over it; the row sum
                       adds the weights before that rounding. O in e4m3fn when a call asks for it
                       (fp8 "fp8_out", cuDNN's scale_o): the codes of O / output_scale, saturating.
                       The maxima where asked (fp8 "amax", cuDNN's Amax_S and Amax_O): the largest
                       normalised weight before P's rounding, the largest |O| before the cast.
Computed in float64 and rounded once to the output format, LSE natural, layout [heads, tokens].
"""
import numpy as np

import attncheck as ac
from attncheck import dtypes, helpers


def attention(call, p_e4m3=False):
    d = call.dtype
    tq_total, h = call.q.shape[0], call.num_heads
    out = np.zeros((tq_total, h, call.head_size_v), np.float64)
    top_weight = 0.0  # fp8 "amax": the largest normalised weight, before P's scale
    lse = np.full((tq_total, h), -np.inf, np.float64)
    k, v = call.k, call.v
    if call.page_size > 0:
        k, v = helpers.gather_pages(k, v, call.block_table_host, np.diff(call.cu_seqlens_k_host), call.page_size)
    if getattr(call, "q_descale", None) is not None:  # Q in FP8: codes times their KV head's descale
        q = helpers.dequantize_q(call.q, call.kv_dtype, call.q_descale, call.num_kv_heads, call.cu_seqlens_q_host)
    else:
        q = ac.to_float32(call.q, d).astype(np.float64)
    if getattr(call, "kv_dtype", None):  # an FP8 KV cache: codes times their KV head's descale
        k, v = helpers.dequantize_kv(k, v, call.kv_dtype, call.k_descale, call.v_descale, call.cu_seqlens_k_host)
    else:
        k, v = ac.to_float32(k, d).astype(np.float64), ac.to_float32(v, d).astype(np.float64)
    k = helpers.expand_kv_heads(k, h)
    v = helpers.expand_kv_heads(v, h)
    # One logit per query head, [H, 1] against a row's [H, T] maxima; None without sinks.
    sink = None if call.sinks is None else np.asarray(call.sinks, np.float64)[:, None]
    with np.errstate(all="ignore"):
        for _, qs, ks, visible in helpers.sequences(call):
            qi, ki, vi = q[qs], k[ks], v[ks]  # [T, H, D], [K, H, D], [K, H, Dv]
            tq = qi.shape[0]
            s = helpers.softcap_scores(np.einsum("thd,khd->htk", qi, ki) * call.softmax_scale, call.softcap)
            if visible is not None:
                s = np.where(visible[None], s, -np.inf)
            mx = s.max(axis=-1) if s.shape[-1] else np.full((h, tq), -np.inf)  # [H, T]
            if sink is not None:
                mx = np.maximum(mx, sink)  # the sink is finite: every row has a finite maximum
            empty = mx == -np.inf  # only without sinks: no visible key and no sink
            m = np.where(empty, 0.0, mx)
            p = np.exp(s - m[..., None])  # masked keys: e^-inf = 0
            total = p.sum(axis=-1)
            if sink is not None:
                total = total + np.exp(sink - m)
            if p.size:  # before P's rounding: the weights the row's sum normalises
                top_weight = max(top_weight, float(np.max(np.where(empty[..., None], 0.0, p / total[..., None]))))
            if p_e4m3 and call.kv_dtype:  # FP8 calls: P V reads e4m3fn(p s) / s; total the unrounded weights
                ps = 256.0 if call.p_scale is None else float(np.asarray(call.p_scale).reshape(-1)[0])
                p = dtypes.fp8_to_float64(dtypes.float_to_fp8(p * ps, "e4m3fn", saturate=True), "e4m3fn") / ps
            o = np.einsum("htk,khd->thd", p, vi) / np.where(empty, 1.0, total).T[..., None]
            out[qs] = np.where(empty.T[..., None], 0.0, o)
            lse[qs] = np.where(empty, -np.inf, m + np.log(np.where(empty, 1.0, total))).T
    lse = helpers.lse_to_layout(lse.astype(np.float32), call.lse_layout)
    if getattr(call, "amax", None) is not None:  # fp8 "amax" (cuDNN's Amax_S, Amax_O): written in place
        call.amax[...] = np.array([top_weight, np.abs(out).max(initial=0.0)], np.float32)
    if getattr(call, "out_dtype", None):  # O in FP8 (fp8 "fp8_out"): the codes of O / output_scale, saturating
        scale = float(np.asarray(call.output_scale).reshape(-1)[0])
        return dtypes.float_to_fp8(out / scale, call.out_dtype, saturate=True), lse
    return ac.from_float(out, d), lse


attention_np_variants = ac.subject(
    name="attention-np-variants", ops="attention", dtypes=("fp32", "fp16", "bf16"), head_size_range=(1, 256),
    features=("causal", "mask", "varlen", "gqa", "lse"), tilings=[(64, 64)],
    variants=("paged_kv", "head_size_v", "softcap", "window", "sinks", "v_in_k"), page_sizes=[1, 3, 16],
    head_pairs=[(64, 32), (192, 128)],
    description="numpy attention with paged K / V, softcap, window and sinks (float64, one rounding)")(attention)


attention_np_fp8kv = ac.subject(
    name="attention-np-fp8kv", ops="attention", dtypes=("fp32", "fp16", "bf16"), head_size_range=(1, 256),
    features=("causal", "mask", "varlen", "gqa", "lse"), tilings=[(64, 64)], variants=("paged_kv",),
    page_sizes=[1, 16], kv_dtypes=("e4m3fn", "e5m2", "e4m3fnuz"), fp8=("descale_per_kv_head",),
    description="numpy attention over an FP8 KV cache (helpers.dequantize_kv; float64, one rounding)")(attention)


attention_np_fp8 = ac.subject(
    name="attention-np-fp8", ops="attention", dtypes=("fp32", "fp16", "bf16"), head_size_range=(1, 256),
    features=("causal", "mask", "varlen", "gqa", "lse"), tilings=[(64, 64)], variants=("paged_kv",),
    page_sizes=[1, 16], kv_dtypes=("e4m3fn", "e5m2"), fp8=("descale_per_kv_head", "fp8_q", "descale_per_sequence"),
    description="numpy attention with Q, K and V in FP8 (helpers.dequantize_q / dequantize_kv; float64, one "
                "rounding)")(attention)


attention_np_fp8_scaled = ac.subject(
    name="attention-np-fp8-scaled", ops="attention", dtypes=("fp32", "fp16", "bf16"), head_size_range=(1, 256),
    features=("causal", "mask", "varlen", "gqa", "lse"), tilings=[(64, 64)], variants=("paged_kv",),
    page_sizes=[1, 16], kv_dtypes=("e4m3fn",),
    fp8=("descale_per_kv_head", "fp8_q", "p_e4m3", "p_scale", "fp8_out", "saturate", "amax"),
    description="numpy attention in FP8 with P in e4m3fn times the call's p_scale (cuDNN's scale_s), O in "
                "e4m3fn over output_scale where asked (scale_o, saturating) and the maxima of P and O "
                "(Amax_S, Amax_O); float64 otherwise, one rounding")(
    lambda call: attention(call, p_e4m3=True))
