"""How a report directory stands, read from its files alone (not through attncheck):
    python3 report_set.py DIR   ->  complete | incomplete | empty
complete: every file the manifest lists matches its FNV-1a hash, and report.json and report.md name
the same seed (one run's files); empty: no manifest and no report.json; else incomplete."""
import json
import os
import re
import sys


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def state(d):
    mpath = os.path.join(d, "manifest.json")
    if not os.path.exists(mpath):
        return "empty" if not os.path.exists(os.path.join(d, "report.json")) else "incomplete"
    try:
        m = json.load(open(mpath))
        ok = all(fnv1a64(open(os.path.join(d, n), "rb").read()) == h for n, h in m["files"].items())
        seed_json = json.load(open(os.path.join(d, "report.json")))["seed"]
        seed_md = re.search(r"seed (\d+)", open(os.path.join(d, "report.md")).read()).group(1)
        ok = ok and str(seed_json) == seed_md
    except (OSError, ValueError, KeyError, AttributeError):
        ok = False
    return "complete" if ok else "incomplete"


if __name__ == "__main__":
    print(state(sys.argv[1]))
