#!/usr/bin/env python3
"""Pictures of an attncheck report directory, drawn from its report.json (schema: reports/README.md).

    attncheck plot REPORT_DIR
    python3 harness/plots/plot_report.py REPORT_DIR/report.json --out REPORT_DIR/plots

Writes, as PNG and SVG:
  summary.{png,svg}                    the run at a glance: one cell per subject x property, coloured by
                                       status, holding the max error / budget the property judged
                                       ("-" where it judges no budget: non-finite values, sentinels)
  budget-<dtype>.{png,svg}             error / budget per property, one dtype: max (dot) and p99 (bar end)
                                       of each subject, log scale, the pass line 1 in red; a property
                                       that judges no budget is left out, one that judges the LSE only
                                       shows its LSE
  tiling-<subject>-<dtype>.{png,svg}   heatmaps of error / budget per tiling (Br x Bc), O at num_splits = 1:
                                       p50, p99 and max over the outputs; the verdict passes an output
                                       at <= 1, so the colour scale runs from 0 to max(1, largest value)
  splits-<subject>-<dtype>.{png,svg}   split-KV subjects: p50, p99 and max of error / budget (O) per
                                       split count, one line per fold order (worst over tilings), y from 0
  histogram-<subject>-<backend>.{png,svg} plain ulp-error histogram of each subject (all properties, dtypes,
                                       outputs): what the format's ulps say, not what the verdict reads
                                       (outputs that cancel to near zero have huge plain ulp errors
                                       within budget)
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


STATUS_COLOURS = {"passed": "#cfe8c9", "failed": "#f4a6a0", "crashed": "#8c2d2d", "interrupted": "#ffe08a",
                  "not_applicable": "#eeeeee"}


def judged_stats(e, stats=None):
    """The stats of a result its property judges against the budget (report.json's budget_use;
    attncheck's JudgedStats): None when it judges none."""
    use = e.get("budget_use", "every_output")
    if use == "none":
        return None
    stats = e.get("stats", []) if stats is None else stats
    return [s for s in stats if use != "lse_only" or s["output"] == "LSE"]


def judged_max(e):
    """Max error / budget of a result as the report table gives it (the quoted element of a failure
    included); None when the property judges no budget."""
    stats = judged_stats(e)
    if stats is None:
        return None
    values = [num(s.get("max_ratio", 0)) for s in stats if s.get("count", 0) > 0]
    w = e.get("worst_element")
    if e.get("status") == "failed" and w:
        values.append(num(w.get("err_budget", 0)))
    return max(values) if values else math.nan  # nan: nothing measured (split_equals_whole, run_to_run)


def summary(plt, report, out_dir):
    results = report.get("results", [])
    if not results:
        return []
    subjects = list(dict.fromkeys(f"{e['subject']} ({e['backend']})" for e in results))
    props = list(dict.fromkeys(e["property"] for e in results))
    cell = {(f"{e['subject']} ({e['backend']})", e["property"]): e for e in results}
    fig, ax = plt.subplots(figsize=(2.2 + 1.05 * len(props), 1.2 + 0.36 * len(subjects)), layout="constrained")
    from matplotlib.patches import Rectangle
    for i, subject in enumerate(subjects):
        for j, prop in enumerate(props):
            e = cell.get((subject, prop))
            if e is None:
                continue
            status = e.get("status", "passed")
            ax.add_patch(Rectangle((j, i), 1, 1, facecolor=STATUS_COLOURS.get(status, "#ffffff"), edgecolor="white"))
            m = judged_max(e)
            text = "-" if m is None else "" if math.isnan(m) else f"{m:.2g}"
            if status not in ("passed", "not_applicable"):
                text = status.upper() if m is None else f"{status.upper()}\n{text}"
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=7,
                    color="white" if status == "crashed" else "black")
    ax.set_xlim(0, len(props))
    ax.set_ylim(len(subjects), 0)
    ax.set_xticks([j + 0.5 for j in range(len(props))], props, rotation=35, ha="right", fontsize=8)
    ax.set_yticks([i + 0.5 for i in range(len(subjects))], subjects, fontsize=8)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    counts = {}
    for e in results:
        counts[e.get("status", "passed")] = counts.get(e.get("status", "passed"), 0) + 1
    told = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(counts.items()))
    ax.set_title(f"{report.get('verdict', '').upper()}: {told}; cells: max error / budget (passes at <= 1; "
                 f"'-': judges no budget; empty: no per-output statistics)", fontsize=9)
    made = []
    save(fig, out_dir, "summary", made)
    return made


def budget_by_property(plt, report, out_dir):
    """Per dtype: for each property (x), each subject's p99 (bar) and max (dot) error / budget."""
    series = {}  # dtype -> property -> [(subject, p99, max, failed)]
    for e in report.get("results", []):
        stats = judged_stats(e)
        if not stats:
            continue
        by_dtype = {}
        for s in stats:
            if "max_ratio" not in s or s.get("count", 0) == 0:
                continue
            p99, mx = by_dtype.get(s["dtype"], (0.0, 0.0))
            by_dtype[s["dtype"]] = (max(p99, num(s["p99_ratio"])), max(mx, num(s["max_ratio"])))
        w = e.get("worst_element")
        quoted = num(w.get("err_budget", 0)) if e.get("status") == "failed" and w else 0.0
        for dtype, (p99, mx) in by_dtype.items():
            # A failure's quoted element is the run's worst: the stats stop before it.
            mx = max(mx, quoted) if not math.isnan(quoted) else mx
            series.setdefault(dtype, {}).setdefault(e["property"], []).append(
                (f"{e['subject']} ({e['backend']})", p99, mx, e.get("status") != "passed"))
    made = []
    for dtype, props in sorted(series.items()):
        names = list(props)
        fig, ax = plt.subplots(figsize=(max(5.5, 2.5 + 1.2 * len(names)), 3.8), layout="constrained")
        floor = 1e-4  # log scale: a zero error sits on the floor
        for j, prop in enumerate(names):
            points = props[prop]
            for k, (subject, p99, mx, failed) in enumerate(points):
                x = j + (k + 0.5) / (len(points) + 0.5) - 0.5
                finite = not (math.isinf(mx) or math.isnan(mx))
                top = mx if finite else 1e6  # an infinite ratio (a NaN output) is drawn high, marked inf
                ax.plot([x, x], [floor, max(floor, min(p99, top))], color="#4477aa", linewidth=2, alpha=0.6)
                ax.plot([x], [max(floor, top)], marker="o" if finite else "^", markersize=4 if finite else 7,
                        color="#cc3311" if failed or mx > 1 else "#4477aa")
                if not finite:
                    ax.annotate("inf", (x, top), textcoords="offset points", xytext=(4, 0), fontsize=7, color="#cc3311")
        ax.axhline(1.0, color="red", linewidth=1.2, linestyle="--", label="budget: passes at <= 1")
        ax.set_yscale("log")
        any_inf = any(not math.isfinite(mx) for pts in props.values() for (_, _, mx, _) in pts)
        ax.set_ylim(floor * 0.8, 1e7 if any_inf else None)
        ax.set_xlim(-0.6, len(names) - 0.4)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("error / budget")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # outside: no point hidden
        ax.set_title(f"{dtype}: error / budget per property, each subject's p99 (bar) and max (dot)", fontsize=9)
        save(fig, out_dir, safe(f"budget-{dtype}"), made)
    return made


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
        ax.set_xlabel("plain ulp error of the output format (not what the verdict reads)")
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
    jobs = [(summary, {"results": report.get("results", []), "verdict": report.get("verdict", "")}),
            (budget_by_property, {"results": report.get("results", [])})]
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
        # Text stays text in the SVGs: report.html embeds them, and a search finds a subject's name.
        matplotlib.rcParams["svg.fonttype"] = "none"
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
