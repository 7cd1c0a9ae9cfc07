"""Study curves (encoder/studies/curves.py): runs read back as points by step, curves
interpolated in FLOPs between their own checkpoints only, variants compared paired by seed
at matched compute, and the plot drawn."""
import json
import math
import os

import pytest

from encoder.studies import curves


def _run(tmp_path, name, evals, watched=None):
    d = tmp_path / "runs" / name
    d.mkdir(parents=True)
    with open(d / "metrics.jsonl", "w") as f:
        for step, v in evals:
            f.write(json.dumps({"step": step, "train/loss": 1.0}) + "\n")
            f.write(json.dumps({"step": step, "eval/acc": v}) + "\n")
    w = None
    if watched:
        w = tmp_path / "watch" / name
        w.mkdir(parents=True)
        with open(w / "curve.jsonl", "w") as f:
            for step, v in watched:
                f.write(json.dumps({"step": step, "tokens": 0, "flops": 0,
                                    "suite/average": v}) + "\n")
    return str(d), str(w) if w else None


def test_points_join_held_out_rows_and_watched_scores_by_step(tmp_path):
    d, w = _run(tmp_path, "a", [(2, 0.1), (4, 0.3)], [(4, 50.0)])
    pts = curves.run_points(d, flops_per_step=10.0, tokens_per_step=3.0, watch_dir=w)
    assert pts == [{"step": 2, "flops": 20.0, "tokens": 6.0, "eval/acc": 0.1},
                   {"step": 4, "flops": 40.0, "tokens": 12.0, "eval/acc": 0.3,
                    "suite/average": 50.0}]
    assert curves.interpolate(pts, "eval/acc", 30.0) == pytest.approx(0.2)
    assert math.isnan(curves.interpolate(pts, "eval/acc", 45.0))  # never extrapolated


def test_variants_compare_paired_by_seed_at_matched_flops(tmp_path):
    # b's checkpoints cost 1.5x a's; at each matched FLOPs b leads by 0.1 +- 0.01 per seed
    a = {s: [{"flops": f, "m": f / 100 + 0.01 * s} for f in (0.0, 100.0)] for s in range(3)}
    b = {s: [{"flops": f, "m": f / 100 + 0.01 * s + 0.1 + 0.005 * s} for f in (0.0, 150.0)]
         for s in range(3)}
    c = {"a": a, "b": b}
    xs = curves.grid(c, "m", n=3)
    assert xs == [0.0, 50.0, 100.0]  # from the latest first point to the earliest last one
    rows = curves.compare_at(c, "m", "a", "b", xs)
    for x, ia, ib, comp in rows:
        assert ia.n == ib.n == 3 and comp.paired
        assert comp.difference.mean == pytest.approx(0.105) and comp.verdict("a", "b") == "b > a"
    text = curves.markdown(c, ["m"], "a", "b", n=3)
    assert text.count("| b > a |") == 3
    curves.plot(c, ["m"], str(tmp_path / "curves.png"))
    assert os.path.getsize(tmp_path / "curves.png") > 1000


def test_declared_evaluators_are_points_of_the_curve(tmp_path):
    d, _ = _run(tmp_path, "b", [(2, 0.1)])
    with open(os.path.join(d, "metrics.jsonl"), "a") as f:
        f.write(json.dumps({"step": 4, "evals/sts/cosine_spearman": 0.25,
                            "evals/topic/best_layer": 2.0, "train/loss": 0.9}) + "\n")
    pts = curves.run_points(d, flops_per_step=1.0, tokens_per_step=1.0)
    assert pts[-1] == {"step": 4, "flops": 4.0, "tokens": 4.0,
                       "evals/sts/cosine_spearman": 0.25}  # a layer index is no score
