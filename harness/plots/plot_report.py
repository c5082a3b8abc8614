#!/usr/bin/env python3
"""Pictures of an attncheck report directory, drawn from its report.json (schema: reports/README.md).

    attncheck plot REPORT_DIR
    python3 harness/plots/plot_report.py REPORT_DIR/report.json --out REPORT_DIR/plots

Writes, as PNG and SVG:
  tiling-<subject>-<dtype>.{png,svg}   heatmaps of max and p99 ulp error per tiling (Br x Bc)
  histogram-<subject>.{png,svg}        ulp-error histogram of each subject (all properties, dtypes, outputs)
  drift-<subject>-<dtype>.{png,svg}    split-order drift: max ulp per split count, one line per fold order
Uses matplotlib (Debian: python3-matplotlib). Without it, it prints one note and exits
EXIT_NO_MATPLOTLIB, which `attncheck plot` (harness/src/plot.cpp) takes as "try the next python3 on
PATH"; the report files never depend on the pictures.
Each file is written under a temporary name and renamed, so a reader never sees half a picture.
"""
import argparse
import json
import math
import os
import re
import sys

EXIT_NO_MATPLOTLIB = 3  # kScriptNoMatplotlib in harness/src/plot.cpp


def safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def save(fig, out_dir, stem):
    for ext in ("png", "svg"):
        final = os.path.join(out_dir, f"{stem}.{ext}")
        tmp = os.path.join(out_dir, f".{stem}.tmp.{ext}")
        fig.savefig(tmp, format=ext, dpi=120, bbox_inches="tight")
        os.replace(tmp, final)


def num(x):
    if isinstance(x, str):
        return {"inf": math.inf, "-inf": -math.inf}.get(x, math.nan)
    return float(x)


def edge_label(e):
    e = num(e)
    if math.isinf(e):
        return "inf"
    return f"{e:g}"


def tiling_heatmaps(plt, report, out_dir):
    made = []
    for t in report.get("tilings", []):
        rows = [r for r in t["rows"] if r.get("num_splits", 1) == 1 and r["stats"]["output"] == "O"]
        if not rows:
            continue
        brs = sorted({r["br"] for r in rows})
        bcs = sorted({r["bc"] for r in rows})
        fig, axes = plt.subplots(1, 2, figsize=(5 + 2.4 * len(bcs), 2 + 0.8 * len(brs)), layout="constrained")
        for ax, key, title in zip(axes, ("max_ulp", "p99_ulp"), ("max ulp", "p99 ulp")):
            grid = [[math.nan] * len(bcs) for _ in brs]
            for r in rows:  # several rows per tile (fold orders at one split): keep the worst
                i, j = brs.index(r["br"]), bcs.index(r["bc"])
                v = num(r["stats"][key])
                grid[i][j] = v if math.isnan(grid[i][j]) else max(grid[i][j], v)
            im = ax.imshow(grid, cmap="viridis", aspect="auto")
            ax.set_xticks(range(len(bcs)), [str(b) for b in bcs])
            ax.set_yticks(range(len(brs)), [str(b) for b in brs])
            ax.set_xlabel("Bc (keys per tile)")
            ax.set_ylabel("Br (query rows per tile)")
            ax.set_title(f"{title}")
            for i in range(len(brs)):
                for j in range(len(bcs)):
                    if not math.isnan(grid[i][j]):
                        ax.text(j, i, f"{grid[i][j]:.2g}", ha="center", va="center", color="white", fontsize=8)
            fig.colorbar(im, ax=ax)
        fig.suptitle(f"{t['subject']} ({t.get('backend', '')}) {t['dtype']}: O error per tiling")
        stem = safe(f"tiling-{t['subject']}-{t['dtype']}")
        save(fig, out_dir, stem)
        plt.close(fig)
        made.append(stem)
    return made


def histograms(plt, report, out_dir):
    edges = report.get("histogram_edges", [])
    if len(edges) < 2:
        return []
    by_subject = {}
    for e in report.get("results", []):
        for s in e.get("stats", []):
            h = s.get("histogram") or []
            acc = by_subject.setdefault(f"{e['subject']} ({e['backend']})", [0] * (len(edges) - 1))
            for i, c in enumerate(h[: len(acc)]):
                acc[i] += c
    made = []
    labels = [f"[{edge_label(edges[i])},{edge_label(edges[i + 1])})" for i in range(len(edges) - 1)]
    for subject, counts in sorted(by_subject.items()):
        if sum(counts) == 0:
            continue
        last = max(i for i, c in enumerate(counts) if c) + 1
        fig, ax = plt.subplots(figsize=(max(5, 0.45 * last + 2), 3.2))
        ax.bar(range(last), counts[:last], color="#4477aa")
        ax.set_xticks(range(last), labels[:last], rotation=60, ha="right", fontsize=7)
        ax.set_yscale("log")
        ax.set_xlabel("ulp error of the output format")
        ax.set_ylabel("elements")
        ax.set_title(f"{subject}: ulp error histogram ({sum(counts)} elements)")
        stem = safe(f"histogram-{subject.split(' ')[0]}-{subject.split('(')[-1].rstrip(')')}")
        save(fig, out_dir, stem)
        plt.close(fig)
        made.append(stem)
    return made


def drift(plt, report, out_dir):
    made = []
    for t in report.get("tilings", []):
        rows = [r for r in t["rows"] if r.get("fold") and r["stats"]["output"] == "O"]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for fold in sorted({r["fold"] for r in rows}):
            pts = {}
            for r in rows:
                if r["fold"] == fold:
                    pts[r["num_splits"]] = max(pts.get(r["num_splits"], 0.0), num(r["stats"]["max_ulp"]))
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker="o", label=f"fold {fold}")
        ax.set_xlabel("num_splits")
        ax.set_ylabel("max ulp error (O)")
        ax.set_title(f"{t['subject']} {t['dtype']}: split-order drift")
        ax.legend()
        stem = safe(f"drift-{t['subject']}-{t['dtype']}")
        save(fig, out_dir, stem)
        plt.close(fig)
        made.append(stem)
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"plots skipped: {sys.executable} has no matplotlib (apt-get install python3-matplotlib)", file=sys.stderr)
        return EXIT_NO_MATPLOTLIB
    with open(args.report) as f:
        report = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    made = tiling_heatmaps(plt, report, args.out) + histograms(plt, report, args.out) + drift(plt, report, args.out)
    return 0 if made is not None else 1


if __name__ == "__main__":
    sys.exit(main())
