"""Curves of a study: every metric against FLOPs (and tokens), variants and seeds overlaid
with their 95% bands, and the comparison at matched compute.

A point is one scored checkpoint of one run: the held-out figures its metrics.jsonl has at
its evaluation steps, and (where the suite watched the run: STUDY/watch/<run>/curve.jsonl,
encoder/studies/watch.py) the downstream scores. Variants whose checkpoints fall at other
FLOPs (RTD's step costs more than MLM's) are compared on a common grid: each run's curve
is interpolated linearly in FLOPs between its own checkpoints (never extrapolated), then
the variants are compared paired by seed at each grid point (encoder/studies/stats.py).
"""
import json
import math
import os

import numpy as np

from encoder.studies import stats


def run_points(run_dir: str, flops_per_step: float, tokens_per_step: float,
               watch_dir: str | None = None) -> list[dict]:
    """[{step, flops, tokens, metric: value}] of one run, by step."""
    by_step: dict[int, dict] = {}
    path = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                held = {k: v for k, v in row.items() if k.startswith(("eval/", "evals/"))
                        and not k.endswith("/best_layer")}  # declared evaluators too
                if held:
                    by_step.setdefault(row["step"], {}).update(held)
    curve = os.path.join(watch_dir, "curve.jsonl") if watch_dir else ""
    if curve and os.path.exists(curve):
        with open(curve) as f:
            for line in f:
                row = json.loads(line)
                by_step.setdefault(row["step"], {}).update(
                    {k: v for k, v in row.items() if k.startswith(("suite/", "probe/"))})
    return [{"step": s, "flops": s * flops_per_step, "tokens": s * tokens_per_step, **m}
            for s, m in sorted(by_step.items())]


def interpolate(points: list[dict], metric: str, x: float, axis: str = "flops") -> float:
    """The run's metric at x on its axis, linear between its two nearest points (NaN
    outside the points it has)."""
    pts = [(p[axis], p[metric]) for p in points if metric in p and p[metric] is not None]
    if not pts or x < pts[0][0] or x > pts[-1][0]:
        return math.nan
    xs, ys = zip(*pts)
    return float(np.interp(x, xs, ys))


def grid(curves: dict, metric: str, n: int = 6, axis: str = "flops") -> list[float]:
    """n points from the largest first point to the smallest last point any run has."""
    firsts, lasts = [], []
    for seeds in curves.values():
        for points in seeds.values():
            have = [p[axis] for p in points if metric in p]
            if have:
                firsts.append(have[0])
                lasts.append(have[-1])
    if not firsts or max(firsts) > min(lasts):
        return []
    return list(np.linspace(max(firsts), min(lasts), n))


def compare_at(curves: dict, metric: str, a: str, b: str, xs, axis: str = "flops"):
    """[(x, interval of a, interval of b, stats.Comparison b - a)] at each x."""
    out = []
    for x in xs:
        va = {s: interpolate(p, metric, x, axis) for s, p in curves[a].items()}
        vb = {s: interpolate(p, metric, x, axis) for s, p in curves[b].items()}
        out.append((x, stats.mean_interval(list(va.values())),
                    stats.mean_interval(list(vb.values())), stats.compare(va, vb)))
    return out


def markdown(curves: dict, metrics: list[str], a: str, b: str, n: int = 6) -> str:
    """The comparison of b against a at matched compute, a table per metric."""
    lines = [f"{b} against {a} at matched FLOPs: each run interpolated between its own "
             "checkpoints, the difference paired by seed (95% t interval; `detectable`: the "
             "smallest true difference these seeds would show at 80% power).", ""]
    for metric in metrics:
        xs = grid(curves, metric, n)
        if not xs:
            continue
        lines += [f"**{metric}**", "", f"| FLOPs | {a} | {b} | {b} - {a} [95% CI] | verdict | "
                  "detectable |", "|---|---|---|---|---|---|"]
        for x, ia, ib, c in compare_at(curves, metric, a, b, xs):
            d = c.difference
            diff = (f"{d.mean:+.4f} [{d.low:+.4f}, {d.high:+.4f}]" if math.isfinite(d.low)
                    else f"{d.mean:+.4f}")
            det = f"{c.detectable:.4f}" if math.isfinite(c.detectable) else "-"
            lines.append(f"| {x:.3g} | {ia.text(4)} | {ib.text(4)} | {diff} | "
                         f"{c.verdict(a, b)} | {det} |")
        lines.append("")
    return "\n".join(lines)


def plot(curves: dict, metrics: list[str], path: str, axis: str = "flops") -> None:
    """One panel per metric: each variant's mean over seeds with its 95% band, on the grid
    where every seed of it has a point; the seeds' own points behind."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cols = min(3, len(metrics))
    rows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for i, (variant, seeds) in enumerate(curves.items()):
            color = f"C{i % 10}"
            for points in seeds.values():
                pts = [(p[axis], p[metric]) for p in points if metric in p]
                if pts:
                    ax.plot(*zip(*pts), ".", color=color, alpha=0.35, ms=4)
            sub = {variant: seeds}
            xs = grid(sub, metric, 12, axis)
            if not xs:
                continue
            ivs = [stats.mean_interval([interpolate(p, metric, x, axis) for p in seeds.values()])
                   for x in xs]
            ax.plot(xs, [iv.mean for iv in ivs], "-", color=color,
                    label=f"{variant} ({len(seeds)} seeds)")
            lows = [iv.low if math.isfinite(iv.low) else iv.mean for iv in ivs]
            highs = [iv.high if math.isfinite(iv.high) else iv.mean for iv in ivs]
            ax.fill_between(xs, lows, highs, color=color, alpha=0.18)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel(axis)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
