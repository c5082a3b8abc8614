#!/usr/bin/env python3
"""Seed corpora for the fuzz targets (tests/fuzz/run.sh): the repository's own files plus small
generated ones, so each target starts from valid documents and their near misses.

    make_seeds.py REPO_ROOT OUT_DIR     writes OUT_DIR/{case,report,scenario,merge,bench}/
"""
import base64
import copy
import glob
import json
import os
import struct
import sys

MAX_SEED_BYTES = 64 << 10  # run.sh passes -max_len 65536: larger seeds would only be cut


def put(out, target, name, data):
    if isinstance(data, str):
        data = data.encode()
    if len(data) > MAX_SEED_BYTES:
        return
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def small_report(full, shard_index, shard_count):
    """A report cut to two results and no tilings, as one shard of a campaign."""
    r = copy.deepcopy(full)
    r["results"] = r["results"][:2]
    for e in r["results"]:
        e["shards"] = [shard_index]
        e["stats"] = e["stats"][:1]
    # One tiling row, so the tiling reader is reached too (gate reports have none).
    stats = r["results"][0]["stats"][0] if r["results"] and r["results"][0]["stats"] else {}
    r["tilings"] = [{"subject": "fused", "backend": r.get("backend", "host"), "dtype": "fp16",
                     "rows": [{"br": 64, "bc": 64, "num_splits": 1, "fold": "", "stats": stats}]}]
    r["shard"] = {"index": shard_index, "count": shard_count}
    return r


def main():
    root, out = sys.argv[1], sys.argv[2]
    cases = sorted(glob.glob(os.path.join(root, "corpus", "*.json")))
    for path in cases:
        text = open(path, "rb").read()
        base = os.path.basename(path)
        put(out, "case", base, text)
        # Near misses: cut in half (truncation), and with the version bumped.
        put(out, "case", "cut-" + base, text[: len(text) // 2])
    # A base64 tensor (the writer switches from hex above 64 elements): softmax 2 x 40 fp32.
    xs = b"".join(struct.pack("<f", float(i % 7) - 3.0) for i in range(80))
    put(out, "case", "gen-softmax-b64.json", json.dumps({
        "format": "attncheck-case", "version": 1, "op": "softmax", "subject": "softmax", "property": "accuracy",
        "note": "", "seed": "3", "rc_reproduce": "", "conventions": {"lse_base": 2, "empty_lse_sign": 1},
        "options": {"tiling": 0, "num_splits": 1, "fold": "tree"},
        "input": {"dtype": "fp32", "rows": 2, "cols": 40, "x": "b64:" + base64.b64encode(xs).decode()}}, indent=1))
    # A split-KV case with a mask and GQA, two sequences (one with zero keys).
    half = lambda n: "hex:" + "003c" * n  # fp16 1.0
    put(out, "case", "gen-splitkv-mask.json", json.dumps({
        "format": "attncheck-case", "version": 1, "op": "splitkv", "subject": "splitkv", "property": "split_order_drift",
        "seed": "18446744073709551615", "options": {"tiling": 1, "num_splits": 3, "fold": "right"},
        "input": {"dtype": "fp16", "num_heads": 2, "num_kv_heads": 1, "head_size": 2, "seqlens_q": [2, 1],
                  "seqlens_k": [3, 0], "causal": True, "softmax_scale_bits": "0x3f3504f3", "softmax_scale": 0.7071,
                  "mask": "hex:010001010101", "q": half(3 * 2 * 2), "k": half(3 * 1 * 2), "v": half(3 * 1 * 2)}}, indent=1))

    for path in sorted(glob.glob(os.path.join(root, "corpus", "prefill", "*.json"))):
        put(out, "scenario", os.path.basename(path), open(path, "rb").read())
    put(out, "scenario", "gen-bf16.json", json.dumps({
        "format": "attncheck-prefill", "version": 1, "dtype": "bf16", "num_heads": 8, "num_kv_heads": 2, "head_size": 64,
        "chunk_size": 1, "seed": 0, "requests": [{"cached_prefix": 0, "prefix_hit": False, "new_tokens": 0},
                                                 {"cached_prefix": 3, "prefix_hit": True, "new_tokens": 2}]}))

    reports = []
    for path in sorted(glob.glob(os.path.join(root, "reports", "**", "*.json"), recursive=True)):
        try:
            doc = json.load(open(path))
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("schema") == "attncheck-report":
            reports.append(doc)
            put(out, "report", os.path.basename(path), open(path, "rb").read())
    for i, full in enumerate(reports):
        a, b = small_report(full, 0, 2), small_report(full, 1, 2)
        put(out, "report", "gen-small-%d.json" % i, json.dumps(a, indent=1))
        put(out, "merge", "gen-pair-%d" % i, json.dumps(a).encode() + b"\0" + json.dumps(b).encode())
        put(out, "merge", "gen-same-shard-%d" % i, json.dumps(a).encode() + b"\0" + json.dumps(a).encode())
    # bench.json: the repository's hand-written ones (tests/harness/data/bench_*.json).
    for path in sorted(glob.glob(os.path.join(root, "tests", "harness", "data", "bench_*.json"))):
        put(out, "bench", os.path.basename(path), open(path, "rb").read())
    for target in ("case", "report", "scenario", "merge", "bench"):
        os.makedirs(os.path.join(out, target), exist_ok=True)
        print("seeds %-8s %d files" % (target, len(os.listdir(os.path.join(out, target)))))


if __name__ == "__main__":
    main()
