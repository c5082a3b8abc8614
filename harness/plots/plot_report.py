#!/usr/bin/env python3
"""Pictures of an attncheck report directory, drawn from its report.json (schema: reports/README.md).

    attncheck plot REPORT_DIR
    python3 harness/plots/plot_report.py REPORT_DIR/report.json --out REPORT_DIR/plots

Writes, as PNG and SVG:
  tiling-<subject>-<dtype>.{png,svg}   heatmaps of error / budget per tiling (Br x Bc), O at num_splits = 1:
                                       p50, p99 and max over the outputs; the verdict passes an output
                                       at <= 1, so the colour scale runs from 0 to max(1, largest value)
  splits-<subject>-<dtype>.{png,svg}   split-KV subjects: p50, p99 and max of error / budget (O) per
                                       split count, one line per fold order (worst over tilings), y from 0
  histogram-<subject>-<backend>.{png,svg} ulp-error histogram of each subject (all properties, dtypes, outputs)
  drift-<subject>-<backend>.{png,svg}  split_order_drift: per split count, the fraction of O outputs whose
                                       bits differ between fold orders and against num_splits = 1 (same
                                       fold order), and the largest such difference in ulps of the scale
                                       S = sum p|v| the output is computed at (the unit of cancel ulp); y from 0
The error / budget pictures need report.json's p50_ratio / p99_ratio / max_ratio and the drift picture
its drift_by_splits; a report written before those fields has none of them drawn.
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


def save(fig, out_dir, stem, made):
    """Writes the figure as STEM.png and STEM.svg, closes it and records the stem in `made`."""
    import matplotlib.pyplot as plt
    for ext in ("png", "svg"):
        final = os.path.join(out_dir, f"{stem}.{ext}")
        tmp = os.path.join(out_dir, f".{stem}.tmp.{ext}")
        fig.savefig(tmp, format=ext, dpi=120, bbox_inches="tight")
        os.replace(tmp, final)
    plt.close(fig)
    made.append(stem)


def num(x):
    if isinstance(x, str):
        return {"inf": math.inf, "-inf": -math.inf}.get(x, math.nan)
    return float(x)


def edge_label(e):
    e = num(e)
    if math.isinf(e):
        return "inf"
    return f"{e:g}"


RATIO_KEYS = (("p50_ratio", "p50"), ("p99_ratio", "p99"), ("max_ratio", "max"))


def ratio_rows(t):
    """The O rows of a tiling entry that carry the error / budget quantiles."""
    return [r for r in t["rows"] if r["stats"]["output"] == "O" and "max_ratio" in r["stats"]]


def ratio_top(values):
    """Top of an error / budget scale: at least the pass line 1, else the largest finite value."""
    finite = [v for v in values if not math.isnan(v) and not math.isinf(v)]
    return max([1.0] + finite)


def tiling_heatmaps(plt, report, out_dir):
    made = []
    for t in report.get("tilings", []):
        rows = [r for r in ratio_rows(t) if r.get("num_splits", 1) == 1]
        if not rows:
            continue
        brs = sorted({r["br"] for r in rows})
        bcs = sorted({r["bc"] for r in rows})
        grids = {}
        for key, _ in RATIO_KEYS:
            grid = [[math.nan] * len(bcs) for _ in brs]
            for r in rows:  # several rows per tile (fold orders at one split): keep the worst
                i, j = brs.index(r["br"]), bcs.index(r["bc"])
                v = num(r["stats"][key])
                grid[i][j] = v if math.isnan(grid[i][j]) else max(grid[i][j], v)
            grids[key] = grid
        # One scale for the three panels, from 0, reaching the pass line 1 at least.
        top = ratio_top([v for g in grids.values() for row in g for v in row])
        fig, axes = plt.subplots(1, 3, figsize=(6 + 3.0 * len(bcs), 2 + 0.8 * len(brs)), layout="constrained")
        for ax, (key, title) in zip(axes, RATIO_KEYS):
            grid = grids[key]
            shown = [[min(v, top) for v in row] for row in grid]  # an infinite ratio shows at the top
            im = ax.imshow(shown, cmap="viridis", vmin=0, vmax=top, aspect="auto")
            ax.set_xticks(range(len(bcs)), [str(b) for b in bcs])
            ax.set_yticks(range(len(brs)), [str(b) for b in brs])
            ax.set_xlabel("Bc (keys per tile)")
            ax.set_ylabel("Br (query rows per tile)")
            ax.set_title(f"{title} error / budget")
            for i in range(len(brs)):
                for j in range(len(bcs)):
                    v = grid[i][j]
                    if not math.isnan(v):
                        ax.text(j, i, f"{v:.3g}" + (" FAIL" if v > 1 else ""), ha="center", va="center",
                                color="white" if min(v, top) < 0.6 * top else "black", fontsize=8)
            bar = fig.colorbar(im, ax=ax)
            bar.ax.axhline(1.0, color="red", linewidth=1.5)  # the verdict's pass line
        fig.suptitle(f"{t['subject']} ({t.get('backend', '')}) {t['dtype']}: O error / budget per tiling "
                     f"(passes at <= 1, red line)")
        stem = safe(f"tiling-{t['subject']}-{t['dtype']}")
        save(fig, out_dir, stem, made)
    return made


def splits(plt, report, out_dir):
    made = []
    for t in report.get("tilings", []):
        rows = [r for r in ratio_rows(t) if r.get("fold")]
        if not rows:
            continue
        folds = sorted({r["fold"] for r in rows})
        worst = {}  # (key, fold, num_splits) -> worst over tilings
        for r in rows:
            for key, _ in RATIO_KEYS:
                k = (key, r["fold"], r["num_splits"])
                worst[k] = max(worst.get(k, 0.0), num(r["stats"][key]))
        top = ratio_top(worst.values())
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.4), layout="constrained")
        for ax, (key, title) in zip(axes, RATIO_KEYS):
            for fold in folds:
                xs = sorted(n for (k, f, n) in worst if k == key and f == fold)
                ax.plot(xs, [min(worst[(key, fold, x)], top) for x in xs], marker="o", label=f"fold {fold}")
            ax.axhline(1.0, color="red", linestyle="--", linewidth=1, label="budget")
            ax.set_ylim(0, 1.05 * top)
            ax.set_xticks(sorted({n for (_, _, n) in worst}))
            ax.set_xlabel("num_splits")
            ax.set_ylabel("error / budget (O)")
            ax.set_title(f"{title} error / budget")
        axes[0].legend(fontsize=8)
        fig.suptitle(f"{t['subject']} ({t.get('backend', '')}) {t['dtype']}: O error / budget per split count "
                     f"(worst over tilings)")
        stem = safe(f"splits-{t['subject']}-{t['dtype']}")
        save(fig, out_dir, stem, made)
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
        save(fig, out_dir, stem, made)
    return made


def drift(plt, report, out_dir):
    made = []
    for e in report.get("results", []):
        by = e.get("drift_by_splits") or []
        if not by:
            continue
        xs = [d["num_splits"] for d in by]

        def fraction(d, what):
            n = d[f"{what}_outputs"]
            return d[f"{what}_differ"] / n if n else math.nan

        def finite_ulp(d, what):  # a non-finite output is a failure the verdict reports; not drawn
            v = num(d[f"{what}_max_ulp"])
            return v if not math.isinf(v) else math.nan

        fig, (ax_frac, ax_ulp) = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
        series = (("fold", "between fold orders"), ("splits", "against num_splits = 1, same fold"))
        for what, label in series:
            ax_frac.plot(xs, [fraction(d, what) for d in by], marker="o", label=label)
            ax_ulp.plot(xs, [finite_ulp(d, what) for d in by], marker="o", label=label)
        for ax in (ax_frac, ax_ulp):
            ax.set_ylim(bottom=0)
            ax.set_xlabel("num_splits")
            ax.set_xticks(xs)
            ax.legend(fontsize=8)
        ax_frac.set_ylabel("fraction of O outputs")
        ax_frac.set_title("outputs whose bits differ")
        ax_ulp.set_ylabel("ulps of S = sum p|v|")
        ax_ulp.set_title("largest difference")
        fold = e.get("drift_fold_differ_fraction", 0.0)
        split = e.get("drift_splits_differ_fraction", 0.0)
        fig.suptitle(f"{e['subject']} ({e['backend']}): split-order drift, {e['cases_run']} cases "
                     f"(differ: {fold:.3%} across fold orders, {split:.3%} across split counts)")
        stem = safe(f"drift-{e['subject']}-{e['backend']}")
        save(fig, out_dir, stem, made)
    return made


def jobs_of(report):
    """The pictures as independent jobs: (family, a report holding only what that picture reads).
    Every family draws the same files from its part as from the whole report."""
    jobs = []
    for t in report.get("tilings", []):
        jobs.append((tiling_heatmaps, {"tilings": [t]}))
        jobs.append((splits, {"tilings": [t]}))
    by_subject = {}
    for e in report.get("results", []):
        by_subject.setdefault((e["subject"], e["backend"]), []).append(e)
    edges = report.get("histogram_edges", [])
    for key in sorted(by_subject):
        jobs.append((histograms, {"histogram_edges": edges, "results": by_subject[key]}))
    for e in report.get("results", []):
        if e.get("drift_by_splits"):
            jobs.append((drift, {"results": [e]}))
    return jobs


_JOBS = []  # set before the worker processes fork, so a job is passed as its index


def _run_job(i):
    import matplotlib.pyplot as plt
    fn, part, out_dir = _JOBS[i]
    return fn(plt, part, out_dir)


def draw_all(plt, report, out_dir):
    """Draws every picture, in worker processes when there are several cores (savefig is most of
    the time: about 0.4 s a picture); returns the stems drawn."""
    global _JOBS
    _JOBS = [(fn, part, out_dir) for fn, part in jobs_of(report)]
    workers = min(len(_JOBS), os.cpu_count() or 1)
    if workers > 1:
        try:
            import multiprocessing
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                return [stem for made in pool.map(_run_job, range(len(_JOBS))) for stem in made]
        except (ImportError, ValueError, OSError):
            pass  # no fork here: draw them one after another
    return [stem for i in range(len(_JOBS)) for stem in _run_job(i)]


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
    made = draw_all(plt, report, args.out)
    return 0 if made is not None else 1


if __name__ == "__main__":
    sys.exit(main())
