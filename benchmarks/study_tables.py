"""The tables of benchmarks/device_study.sh's two studies, from the folder it leaves:

    python benchmarks/study_tables.py STUDY [--plot=PNG]

1. MLM against RTD at matched FLOPs (STUDY/mlm_rtd/runs/objective=*__seed*): every metric
   the runs' declared evaluators and held-out evaluations recorded, each run interpolated
   between its own checkpoints, paired by seed (encoder/studies/curves.py), and the
   per-checkpoint figures of each run.
2. Pretrained against random initialisation (STUDY/pays/pretrained_seed*/suite.json against
   STUDY/pays/random: its per-seed embedding rows and fine-tuning eval.json files, so an
   interrupted random suite still gives the seeds it finished): Welch intervals, since the
   arms are not paired.
Prints markdown; reads only what the study wrote.
"""
import argparse
import glob
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from encoder.studies import curves, stats, watch  # noqa: E402

CURVE_METRICS = ["evals/sts_relatedness/cosine_spearman", "evals/api_retrieval/ndcg_at_10",
                 "evals/topic/score", "evals/arg_mentions/score"]
SUITE_TASKS = {"topic": "accuracy", "arg_mentions": "entity_f1",
               "sts_relatedness": "cosine_spearman", "api_retrieval": "ndcg_at_10"}


RUN = re.compile(r"^(?P<variant>.+)__seed(?P<seed>\d+)$")  # not the .stale-* runs moved aside


def study_curves(root: str) -> dict:
    """{variant: {seed: points}} of the ablation under root: the runs ablate names
    VARIANT__seedN, each from its resolved config; a run that has not written one yet
    (a study stopped at its start) is left out and named."""
    out: dict = {}
    for run in sorted(glob.glob(os.path.join(root, "runs", "*__seed*"))):
        m = RUN.match(os.path.basename(run))
        if m is None:
            continue
        if not os.path.exists(os.path.join(run, "config.json")):
            print(f"(left out: {run} has no config.json yet: it never started)",
                  file=sys.stderr)
            continue
        tokens, fps = watch.per_step(run)
        out.setdefault(m["variant"], {})[int(m["seed"])] = curves.run_points(run, fps, tokens)
    return out


def per_checkpoint(curve: dict, metrics: list[str]) -> list[str]:
    lines = ["| run | step | FLOPs | " + " | ".join(m.split("/")[1] for m in metrics) + " |",
             "|---|---|---|" + "---|" * len(metrics)]
    for variant, seeds in curve.items():
        for seed, points in seeds.items():
            for p in points:
                if any(m in p for m in metrics):
                    cells = [f"{p[m]:.4f}" if m in p else "" for m in metrics]
                    lines.append(f"| {variant} s{seed} | {p['step']} | {p['flops']:.3g} | "
                                 + " | ".join(cells) + " |")
    return lines


def _suite_scores(path: str) -> dict:
    with open(path) as f:
        suite = json.load(f)
    return {t["task"]: t["median"] for t in suite["tasks"] if t["task"] in SUITE_TASKS}


def _random_scores(root: str) -> dict:
    """{task: {seed: score x 100}} of a random-init suite folder, finished or not."""
    out: dict = {}
    for task in ("sts_relatedness", "api_retrieval"):
        for path in glob.glob(os.path.join(root, "embeddings", task, "*.json")):
            with open(path) as f:
                value = json.load(f)
            metrics = value.get("metrics", value)
            metric = SUITE_TASKS[task]
            if isinstance(metrics, dict) and metric in metrics:
                seed = int(os.path.basename(path).split(".")[0])
                out.setdefault(task, {})[seed] = 100 * float(metrics[metric])
    for task in ("topic", "arg_mentions"):
        for path in glob.glob(os.path.join(root, "runs", task, "*", "*", "eval.json")):
            with open(path) as f:
                dev = json.load(f).get("dev", {})
            if SUITE_TASKS[task] in dev:
                seed = int(os.path.basename(os.path.dirname(path)))
                out.setdefault(task, {})[seed] = 100 * float(dev[SUITE_TASKS[task]])
    return out


def pays_table(root: str) -> list[str]:
    pre: dict = {}
    for path in sorted(glob.glob(os.path.join(root, "pretrained_seed*", "suite.json"))):
        seed = int(path.split("pretrained_seed")[1].split(os.sep)[0])
        for task, score in _suite_scores(path).items():
            pre.setdefault(task, {})[seed] = score
    rnd = _random_scores(os.path.join(root, "random"))
    lines = ["| task (score x 100) | pretrained | random init | pretrained - random [95% CI] "
             "| verdict | detectable |", "|---|---|---|---|---|---|"]
    for task in SUITE_TASKS:
        a, b = rnd.get(task, {}), pre.get(task, {})
        if not a or not b:
            lines.append(f"| {task} | {len(b)} seeds | {len(a)} seeds | not run in both arms "
                         "| - | - |")
            continue
        ia, ib = stats.mean_interval(list(a.values())), stats.mean_interval(list(b.values()))
        # Welch: the arms are not paired (seed s of each is another draw of another thing)
        c = stats.compare({("r", k): v for k, v in a.items()}, {("p", k): v for k, v in b.items()})
        d = c.difference
        diff = (f"{d.mean:+.2f} [{d.low:+.2f}, {d.high:+.2f}]" if math.isfinite(d.low)
                else (f"{d.mean:+.2f}" if math.isfinite(d.mean) else "-"))
        det = f"{c.detectable:.2f}" if math.isfinite(c.detectable) else "-"
        lines.append(f"| {task} | {ib.text(2)} ({len(b)}) | {ia.text(2)} ({len(a)}) | {diff} | "
                     f"{c.verdict('random', 'pretrained')} | {det} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study")
    ap.add_argument("--plot", default="")
    ap.add_argument("--points", type=int, default=4)
    args = ap.parse_args()
    if not os.path.exists(args.study):
        raise SystemExit(f"error: {args.study} does not exist")
    if not os.path.isdir(args.study):
        raise SystemExit(f"error: {args.study} is a file: give the study's folder")
    if args.plot:
        folder = os.path.dirname(os.path.abspath(args.plot))
        if os.path.isdir(args.plot) or not args.plot.endswith(".png"):
            raise SystemExit(f"error: --plot={args.plot}: give a .png file's path")
        if not os.path.isdir(folder):
            raise SystemExit(f"error: --plot={args.plot}: no folder {folder}")
    # the study folder of device_study.sh, or an MLM/RTD ablation folder itself
    ablation = args.study if os.path.isdir(os.path.join(args.study, "runs")) \
        else os.path.join(args.study, "mlm_rtd")
    pays = os.path.join(args.study, "pays")
    if not glob.glob(os.path.join(ablation, "runs", "objective=*__seed*")) \
            and not os.path.isdir(pays):
        raise SystemExit(f"error: {args.study} holds neither an MLM/RTD ablation (runs/"
                         "objective=*__seed*, or mlm_rtd/ with them) nor pays/: give the folder "
                         "benchmarks/device_study.sh wrote (its STUDY)")
    if os.path.isdir(ablation):
        curve = study_curves(ablation)
        if not curve:
            raise SystemExit(f"error: {ablation}: none of its runs has started (no "
                             "config.json); start the study, then read its tables")
        metrics = [m for m in CURVE_METRICS + ["eval/mlm_accuracy"]
                   if any(m in p for s in curve.values() for ps in s.values() for p in ps)]
        print("## MLM against RTD\n")
        print(curves.markdown(curve, metrics, "objective=mlm", "objective=rtd", args.points))
        if "eval/mlm_accuracy" in metrics:
            print("(eval/mlm_accuracy of an RTD run is its generator's, a smaller model: a "
                  "description, not a like-for-like comparison)\n")
        print("\n".join(per_checkpoint(curve, metrics)) + "\n")
        if args.plot:
            curves.plot(curve, metrics, args.plot)
    if os.path.isdir(pays):
        print("## Pretrained against random initialisation\n")
        print("\n".join(pays_table(pays)))


if __name__ == "__main__":
    main()
