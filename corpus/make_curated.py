#!/usr/bin/env python3
"""Writes the curated regression cases of corpus/ (format: corpus/README.md).

Deterministic (fixed seeds, Python's correctly rounded struct 'e' for fp16), so re-running it
reproduces the committed files byte for byte. Run from anywhere: python3 corpus/make_curated.py
"""
import base64, json, math, os, random, struct

HERE = os.path.dirname(os.path.abspath(__file__))
INF = float("inf")


def enc(values, fmt):
    data = b"".join(struct.pack("<" + fmt, v) for v in values)
    n = len(values)
    return ("hex:" + data.hex()) if n <= 64 else ("b64:" + base64.b64encode(data).decode())


def f16(values):
    return enc(values, "e")


def f32(values):
    return enc(values, "f")


def f32_bits(x):
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", x))[0]


def case(name, op, inp, note, prop=""):
    doc = {"format": "attncheck-case", "version": 1, "op": op, "subject": "curated", "property": prop,
           "note": note, "seed": "0", "rc_reproduce": "",
           "conventions": {"lse_base": 0, "empty_lse_sign": -1},
           "options": {"tiling": 0, "num_splits": 1, "fold": "left"}, "input": inp}
    with open(os.path.join(HERE, name), "w") as f:
        f.write(json.dumps(doc, indent=1) + "\n")


def attention(dtype, q, k, v, d, tq, tk, scale=1.0, causal=False, heads=1, kv_heads=1):
    e = f16 if dtype == "fp16" else f32
    return {"dtype": dtype, "num_heads": heads, "num_kv_heads": kv_heads, "head_size": d,
            "seqlens_q": [tq], "seqlens_k": [tk], "causal": causal,
            "softmax_scale_bits": f32_bits(scale), "softmax_scale": scale, "mask": "",
            "q": e(q), "k": e(k), "v": e(v)}


# 1. Chunked prefill, request without a prefix hit: both states empty (-inf, -inf), next to an
#    ordinary row. The unguarded merge gives NaN (-inf - -inf); the guarded one O = 0, LSE = -inf.
rng = random.Random(1)
d = 8
po = [round(rng.uniform(-1, 1), 3) for _ in range(2 * d)]
so = [round(rng.uniform(-1, 1), 3) for _ in range(2 * d)]
for i in range(d):
    po[i] = 0.0
    so[i] = 0.0
case("merge-chunked-prefill-both-empty.json", "merge",
     {"dtype": "fp16", "num_tokens": 2, "num_heads": 1, "head_size": d,
      "prefix_out": f16(po), "suffix_out": f16(so),
      "prefix_lse": f32([-INF, 1.5]), "suffix_lse": f32([-INF, 0.25])},
     "chunked prefill, no prefix hit: merge of two empty states must give O = 0 and LSE = -inf, never NaN",
     "merge_sentinels")

# 2. FlashAttention-2's +inf empty sentinel on either side, both sides, and against -inf.
rows = [(INF, 2.0), (-3.0, INF), (INF, INF), (INF, -INF), (88.0, INF)]
po = [round(rng.uniform(-2, 2), 3) for _ in range(len(rows) * 4)]
so = [round(rng.uniform(-2, 2), 3) for _ in range(len(rows) * 4)]
case("merge-fa2-plus-inf-sentinels.json", "merge",
     {"dtype": "fp16", "num_tokens": len(rows), "num_heads": 1, "head_size": 4,
      "prefix_out": f16(po), "suffix_out": f16(so),
      "prefix_lse": f32([a for a, _ in rows]), "suffix_lse": f32([b for _, b in rows])},
     "FA2 empty sentinel +inf must be read as empty (-inf), on either or both sides",
     "merge_sentinels")

# 3. The late-outlier case: 8192 logits of sigma 3 with +40 at index 4000, one query, fp16.
#    q is one-hot on coordinate 0 and k carries the logit there (scale 1), so the subject's own
#    q.k is exactly the fp16-rounded logit. d = 8 keeps the file small.
rng = random.Random(8192)
n, d = 8192, 8
logits = [rng.gauss(0, 3) for _ in range(n)]
logits[4000] = 40.0
q = [1.0] + [0.0] * (d - 1)
k = []
for x in logits:
    k += [x] + [0.0] * (d - 1)
v = [rng.uniform(-1, 1) for _ in range(n * d)]
case("attention-late-outlier-8192.json", "attention", attention("fp16", q, k, v, d, 1, n),
     "late outlier: the running max jumps by ~30 at key 4000 of 8192; O must be rescaled with l",
     "accuracy")

# 4. The fp16 overflow band: 11.0859375 is the last fp16 logit whose exp is finite, 11.09375 the first
#    that overflows. Safe and online softmax must stay finite; naive overflows on rows 1 and 2 only.
band = [[11.0859375, 0.0, 1.0, -2.0], [11.09375, 0.0, 1.0, -2.0], [11.09375, 11.0859375, 3.0, -17.5],
        [11.078125, 11.0859375, 11.0859375, 0.0]]
case("softmax-fp16-overflow-band.json", "softmax",
     {"dtype": "fp16", "rows": len(band), "cols": 4, "x": f16([x for r in band for x in r])},
     "fp16 overflow band straddling 11.0859375 / 11.09375", "fp16_overflow")

# 5. The eight-logit worked example: eight logits in four blocks of two; the running max is 3 after two
#    blocks and jumps to 8 in the third (alpha = e^-5). fp32, q one-hot, scale 1: scores exact.
x = [1.0, 3.0, 2.0, 0.0, 8.0, 5.0, 4.0, 6.0]
d = 2
q = [1.0, 0.0]
k = []
for s in x:
    k += [s, 0.0]
v = []
for j in range(8):
    v += [float(j), (-1.0) ** j]
case("attention-seed-worked-example.json", "attention", attention("fp32", q, k, v, d, 1, 8),
     "seed worked example: blocks (1,3) (2,0) (8,5) (4,6); max 3 -> 8 in block 3, alpha = e^-5", "accuracy")
case("softmax-seed-worked-example.json", "softmax", {"dtype": "fp32", "rows": 1, "cols": 8, "x": f32(x)},
     "seed worked example as a softmax row", "accuracy")

# Prefill scenarios.
scen = {
    "miss-in-batch.json": {"format": "attncheck-prefill", "version": 1, "dtype": "fp16", "num_heads": 2,
                           "num_kv_heads": 1, "head_size": 8, "chunk_size": 4, "seed": 7,
                           "note": "request 1 misses the prefix cache while request 0 has 8 cached tokens: two context chunks, both empty for request 1",
                           "requests": [{"cached_prefix": 8, "prefix_hit": True, "new_tokens": 6},
                                        {"cached_prefix": 8, "prefix_hit": False, "new_tokens": 5}]},
    "all-hit.json": {"format": "attncheck-prefill", "version": 1, "dtype": "fp16", "num_heads": 4,
                     "num_kv_heads": 2, "head_size": 8, "chunk_size": 3, "seed": 11,
                     "note": "every request hits its cached prefix: no empty merge",
                     "requests": [{"cached_prefix": 6, "prefix_hit": True, "new_tokens": 7},
                                  {"cached_prefix": 5, "prefix_hit": True, "new_tokens": 2}]},
}
for name, doc in scen.items():
    with open(os.path.join(HERE, "prefill", name), "w") as f:
        f.write(json.dumps(doc, indent=1) + "\n")
