#!/usr/bin/env python3
"""The peak-memory model (properties/src/memory.cpp) against the measured peak resident set.

For replays and prefill scenarios of several shapes (the terms of the model each dominate one:
judged elements, row bases, decoded K/V, materialised scores, a long cached prefix), attncheck's
own peak RSS, as GNU time measures it (/usr/bin/time -f %M), must stay below the estimate it prints with
--estimate-memory: the model is an upper bound where it is measured. Then the largest inputs the
stated bounds allow are refused with exit 2 and one line naming the estimate and the limit: a
case file of the 1 GiB size bound, a case of 4096 rows with d = 1024 (just past 4 GiB), a
scenario of 2^20 cached keys, check with rows of 65536 keys or 64 pairs at once, tiling over 10000
cases; a case past a lower --max-memory is refused the same way. check and tiling are measured on
runs with long rows, against the estimate of the largest case their generators can draw.

    memory_bounds.py ATTNCHECK SOURCE_DIR SCRATCH
"""
import base64
import json
import os
import random
import struct
import subprocess
import sys

AC, SRC, S = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(S, exist_ok=True)
GIB = 1024.0**3
TIME = "/usr/bin/time"
if not os.access(TIME, os.X_OK):
    print("GNU time (/usr/bin/time) is needed to measure the peak RSS: skipped")
    sys.exit(77)
failures = []


def fail(msg):
    print("FAIL:", msg)
    failures.append(msg)


def case(name, tq, tk, heads, d, prop="accuracy"):
    """An fp16 attention case file of random normal q, k, v (one sequence, no mask)."""
    path = os.path.join(S, name + ".json")
    c = json.load(open(os.path.join(SRC, "corpus", "attention-seed-worked-example.json")))
    rnd = random.Random(tq * 1000003 + tk * 101 + heads * 7 + d)

    def tensor(n):
        return "b64:" + base64.b64encode(b"".join(struct.pack("<e", rnd.gauss(0, 1)) for _ in range(n))).decode()

    c["subject"], c["property"] = "fused", prop
    c["input"].update(dtype="fp16", num_heads=heads, num_kv_heads=heads, head_size=d, seqlens_q=[tq],
                      seqlens_k=[tk], causal=False, mask="", q=tensor(tq * heads * d),
                      k=tensor(tk * heads * d), v=tensor(tk * heads * d))
    json.dump(c, open(path, "w"))
    return path


def scenario(name, heads, kv_heads, d, chunk, cached, new):
    path = os.path.join(S, name + ".json")
    json.dump({"format": "attncheck-prefill", "version": 1, "dtype": "fp16", "num_heads": heads,
               "num_kv_heads": kv_heads, "head_size": d, "chunk_size": chunk, "seed": 1,
               "requests": [{"cached_prefix": cached, "prefix_hit": True, "new_tokens": new}]}, open(path, "w"))
    return path


def run(args):
    """(exit status, stdout + stderr, peak RSS in bytes) of attncheck ARGS, the RSS as GNU time
    reads it from wait4 (this process's own rusage of a child would count the memory of the
    process it was forked from)."""
    rss_file = os.path.join(S, "rss")
    p = subprocess.run([TIME, "-f", "%M", "-o", rss_file, AC] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    return p.returncode, p.stdout.decode(errors="replace"), int(open(rss_file).read().split()[-1]) * 1024


def estimate(args):
    rc, out, _ = run(args + ["--estimate-memory"])
    if rc != 0 or not out.startswith("estimated peak memory: "):
        fail(f"--estimate-memory on {args} exited {rc}: {out.strip()}")
        return 0.0
    return float(out.split()[3])


# Shapes that each load one term of the model most.
measured = [
    ("replay 256x256 d64", ["replay", case("a256", 256, 256, 1, 64), "--subject", "fused"]),
    ("replay 256x256 16 heads (4096 rows judged)", ["replay", case("h16", 256, 256, 16, 64), "--subject", "fused"]),
    ("replay 512x512 16 heads (sampled rows)", ["replay", case("s16", 512, 512, 16, 64), "--subject", "fused"]),
    ("replay 64x16384 d64 (long rows)", ["replay", case("long", 64, 16384, 1, 64), "--subject", "fused"]),
    ("replay 4096x64 d256 textbook (judged elements)",
     ["replay", case("d256", 4096, 64, 1, 256), "--subject", "textbook"]),
    ("replay 32x256 splitkv split_order_drift",
     ["replay", case("drift", 32, 256, 2, 64, "split_order_drift"), "--subject", "splitkv"]),
    ("prefill 65536 cached keys, 8 heads, d128",
     ["prefill", "--scenario", scenario("p-cached", 8, 1, 128, 65536, 65536, 1)]),
    ("prefill 2048 new tokens textbook",
     ["prefill", "--scenario", scenario("p-new", 1, 1, 128, 2048, 0, 2048), "--attention", "textbook"]),
]
# check and tiling draw their own cases: the estimate bounds the largest case the generators can
# draw under the options, so the measured runs use long rows (--max-keys past 256) to come near it.
def report_dir(name):
    return ["--no-plots", "--report-dir", os.path.join(S, name)]


measured += [
    ("check textbook accuracy, --max-keys 2048",
     ["check", "--subject", "textbook", "--property", "accuracy", "--cases", "30", "--max-keys", "2048",
      "--jobs", "1"] + report_dir("c-textbook")),
    ("check splitkv split_order_drift, --max-keys 1024",
     ["check", "--subject", "splitkv", "--property", "split_order_drift", "--cases", "6", "--max-keys", "1024",
      "--jobs", "1"] + report_dir("c-drift")),
    ("check, the default gate's subjects on merge_sentinels and accuracy, --jobs 2",
     ["check", "--property", "merge_sentinels,accuracy", "--cases", "10", "--jobs", "2"] + report_dir("c-gate")),
    ("tiling splitkv, 30 cases", ["tiling", "--subject", "splitkv", "--cases", "30"] + report_dir("t-splitkv")),
]
for what, args in measured:
    args = args + ["--backend", "host"]
    est = estimate(args)
    rc, out, rss = run(args)
    print(f"{what}: estimate {est / 1e6:.0f} MB, peak RSS {rss / 1e6:.0f} MB, exit {rc}")
    if rc not in (0, 1):
        fail(f"{what} exited {rc}: {out.strip()[-300:]}")
    if not rss < est:
        fail(f"{what}: peak RSS {rss:.0f} B is not below the estimate {est:.0f} B")


def refused(what, args, limit_gib):
    # The limit is given: the default is 4 GiB or half the machine's memory, whichever is more.
    if "--max-memory" not in args:
        args = args + ["--max-memory", str(limit_gib)]
    rc, out, rss = run(args + ["--backend", "host"])
    lines = out.strip().splitlines()
    print(f"{what}: exit {rc}, peak RSS {rss / 1e6:.0f} MB: {out.strip()}")
    if rc != 2 or len(lines) != 1 or "needs an estimated" not in out or f"limit of {limit_gib:.2f} GiB" not in out:
        fail(f"{what} was not refused with exit 2 and one line naming the estimate and the limit")
    if rss > 256e6:
        fail(f"{what}: refused only after {rss / 1e6:.0f} MB")


# The case file size bound (1 GiB): refused from its size, before it is read (a sparse file).
big = os.path.join(S, "size-bound.json")
with open(big, "wb") as f:
    f.truncate(1 << 30)
refused("a 1 GiB case file", ["replay", big], 4)
# Just past 4 GiB: 4096 judged rows of d = 1024.
refused("4096x1 d1024 case", ["replay", case("wide", 4096, 1, 1, 1024), "--subject", "textbook"], 4)
# A lower limit refuses a case the default lets through.
refused("4096x64 d256 case under --max-memory 0.5",
        ["replay", os.path.join(S, "d256.json"), "--subject", "textbook", "--max-memory", "0.5"], 0.5)
# The largest scenario the stated bounds allow: 2^20 cached keys of d = 256, one new token.
refused("scenario of 2^20 - 1 cached keys",
        ["prefill", "--scenario", scenario("p-largest", 1, 1, 256, 1 << 20, (1 << 20) - 1, 1)], 4)

# check past the limit: rows of 65536 keys (the --max-keys bound) on one pair, refused before any
# directory is made; a --jobs whose pairs together pass it, though each fits alone; tiling holding
# its largest number of cases (10000).
refused("check --max-keys 65536", ["check", "--subject", "textbook", "--max-keys", "65536"] + report_dir("r-keys"), 4)
if os.path.exists(os.path.join(S, "r-keys")):
    fail("a refused check made its report directory")
refused("check --max-keys 2048 --jobs 64",
        ["check", "--max-keys", "2048", "--jobs", "64"] + report_dir("r-jobs"), 4)
refused("tiling --cases 10000", ["tiling", "--subject", "fused", "--cases", "10000"], 4)
# Without --jobs, check runs fewer pairs at once where every core's would pass the limit: the
# estimate it prints is then within it (the largest pair alone, textbook at d = 256 with rows of
# 2048 keys, needs 1.35 GiB; two such pairs at once would pass 2 GiB).
est = estimate(["check", "--max-keys", "2048", "--max-memory", "2", "--backend", "host"])
if not 0 < est <= 2 * GIB:
    fail(f"check --max-keys 2048 --max-memory 2 without --jobs: estimate {est:.0f} B, not within 2 GiB")

sys.exit(1 if failures else 0)
