"""Ablation studies: one command sweeps variants and writes the comparison.

    python -m encoder.ablate --config=experiments/pretrain.py:size=tiny \\
        --sweep=model.position=learned,sinusoidal,rope,alibi,t5_bias --sweep=objective=mlm,rtd \\
        --seeds=3 --workdir=DIR [--zip] [--parallel=2] [--equal_flops] \\
        [--finetune=experiments/finetune.py:task=classification --finetune_data=TASK_DIR
         --finetune_set=train.learning_rate=1e-3]
        [--suite=TASKS_DIR|embedded --suite_arg=--preset=runlocal ...]

Each sweep is `field=v1,v2,...`, the field an experiment option (objective,
position, ...) or a dotted config path (model.position, train.learning_rate).
Sweeps combine as a cartesian product (or zipped with --zip). Every variant
runs once per seed index with config.seed = seed index, so variants share the
data order and initialisation seed. Each run lives in
DIR/runs/<variant>__seed<k>/ with its resolved config beside it, runs as its
own `encoder.main` process (at most --parallel at once), and is skipped when
finished; an interrupted run resumes from its checkpoint. --equal_flops gives
every variant the first variant's compute budget (steps = budget / FLOPs per
step), as the ELECTRA paper compares MLM and RTD.

Outputs: DIR/runs.csv (one row per run), DIR/results.csv and DIR/results.md
(one row per variant: mean ± std over seeds, and the gap to the best variant
in units of its standard error), DIR/loss_curves.png, DIR/final_metric.png.
--suite runs the downstream suite (`python -m encoder.suite`, encoder/eval/suite/)
on every pretraining run, in <run>/suite/, and adds its average (and each task's
median) as suite/* columns; the suite average is then the primary metric.
"""
import csv
import itertools
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
from absl import app, flags, logging
from ml_collections import config_flags

from encoder.train import flops

config_flags.DEFINE_config_file("config", None, "the base experiment file[:arg]",
                                lock_config=True)
flags.DEFINE_multi_string("sweep", [], "field=v1,v2,... (repeatable)")
flags.DEFINE_bool("zip", False, "zip the sweeps instead of taking their product")
flags.DEFINE_integer("seeds", 1, "seed indices per variant")
flags.DEFINE_integer("parallel", 1, "runs at once")
flags.DEFINE_bool("equal_flops", False, "equal compute: steps = budget / FLOPs per step")
flags.DEFINE_string("finetune", "", "fine-tuning experiment file[:arg] run on each variant")
flags.DEFINE_string("finetune_data", "", "folder with train.jsonl and dev.jsonl")
flags.DEFINE_multi_string("finetune_set", [], "field=value overrides for fine-tuning, e.g. "
                          "train.learning_rate=1e-3 (repeatable)")
flags.DEFINE_string("suite", "", "run encoder.suite on each run: a tasks folder, or "
                    "'embedded' for the default suite built from the standard library")
flags.DEFINE_multi_string("suite_arg", [], "an encoder.suite flag for every suite, e.g. "
                          "--suite_arg=--preset=runlocal (repeatable)")
flags.DEFINE_string("workdir", None, "the study's folder", required=True)
FLAGS = flags.FLAGS

DONE = "DONE"


def parse_sweep(spec: str) -> tuple[str, list]:
    from encoder.config import _coerce
    field, sep, values = spec.partition("=")
    if not sep or not values:
        raise ValueError(f"--sweep={spec!r}: expected field=v1,v2,...")
    return field.strip(), [_coerce(v.strip()) for v in values.split(",") if v.strip()]


def expand(sweeps: list[tuple[str, list]], zipped: bool) -> list[dict]:
    """Variants as {field: value} dicts, in a stable order."""
    if not sweeps:
        return [{}]
    fields = [f for f, _ in sweeps]
    if zipped:
        lengths = {len(v) for _, v in sweeps}
        if len(lengths) != 1:
            raise ValueError(f"--zip needs sweeps of equal length, got {sorted(lengths)}")
        combos = zip(*[v for _, v in sweeps])
    else:
        combos = itertools.product(*[v for _, v in sweeps])
    return [dict(zip(fields, c)) for c in combos]


def apply_variant(config, variant: dict):
    """Sets each field: an experiment option name, or a dotted config path."""
    from encoder import config as config_lib
    config = config.copy_and_resolve_references()
    for field, value in variant.items():
        if field in config_lib.OPTIONS:
            config_lib.OPTIONS[field](config, value)
            continue
        node, *path = field.split(".")
        target = config
        for part in [node] + path[:-1]:
            if part not in target:
                raise ValueError(f"--sweep field {field!r}: no {part!r} in the config")
            target = target[part]
        leaf = path[-1] if path else node
        if leaf not in target:
            raise ValueError(f"--sweep field {field!r}: no {leaf!r} in the config")
        current = target[leaf]
        target[leaf] = type(current)(value) if current is not None and not isinstance(
            current, bool) else value
    return config


def variant_name(variant: dict) -> str:
    return ",".join(f"{k.split('.')[-1]}={v}" for k, v in variant.items()) or "base"


def plan(base, variants: list[dict], seeds: int, equal_flops: bool) -> list[dict]:
    """One entry per run: name, seed, resolved config."""
    from encoder.jobs import pretrain
    runs, budget = [], None
    for variant in variants:
        config = apply_variant(base, variant)
        fps = flops.config_train_flops_per_step(config)
        if equal_flops:
            budget = budget or config.train.num_steps * fps
            config.train.num_steps = max(1, int(round(budget / fps)))
        for seed in range(seeds):
            c = config.copy_and_resolve_references()
            c.seed = seed
            pretrain.validate(c)
            runs.append({"variant": variant_name(variant), "seed": seed, "config": c,
                         "flops_per_step": fps,
                         "dir": f"{variant_name(variant).replace('/', '_')}__seed{seed}"})
    return runs


def changed_fields(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted paths whose values differ between two config dicts."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k, "<absent>"), new.get(k, "<absent>")
        path = f"{prefix}{k}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += changed_fields(a, b, path + ".")
        elif a != b:
            out.append(f"{path}: {a!r} -> {b!r}")
    return out


def stale_reason(run: dict, d: str) -> list[str]:
    """Why a run folder cannot be reused for this run: the config fields that differ."""
    path = os.path.join(d, "resolved_config.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        old = json.load(f)
    return changed_fields(old, json.loads(run["config"].to_json()))


def launch(run: dict, root: str) -> subprocess.Popen | None:
    """Starts the run's process, or returns None when it has already finished.

    A folder is reused (finished: skipped; interrupted: resumed) only when its
    resolved configuration is this run's; otherwise it is moved aside
    (<dir>.stale-<time>, nothing deleted) and the run starts afresh.
    """
    d = os.path.join(root, "runs", run["dir"])
    changed = stale_reason(run, d)
    if changed:
        aside = f"{d}.stale-{time.strftime('%Y%m%d-%H%M%S')}"
        os.replace(d, aside)
        print(f"rerunning {run['dir']}: its configuration changed ({'; '.join(changed[:5])}); "
              f"the old run is kept in {aside}", flush=True)
    if os.path.exists(os.path.join(d, DONE)):
        logging.info("skip %s (finished)", run["dir"])
        return None
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "resolved_config.json")
    with open(path, "w") as f:
        f.write(run["config"].to_json(indent=2))
    cmd = [sys.executable, "-m", "encoder.main",
           f"--config={os.path.join(os.path.dirname(__file__), 'json_config.py')}:{path}",
           f"--workdir={d}"]
    with open(os.path.join(d, "run.log"), "a") as log:  # the child keeps its own handle
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def finetune_run(run: dict, root: str) -> None:
    """Fine-tunes the pretrained run on --finetune_data; writes finetune/eval.json."""
    d = os.path.join(root, "runs", run["dir"])
    out = os.path.join(d, "finetune")
    args = [f"--config={FLAGS.finetune}", f"--config.init_from={d}",
            f"--config.data.train_file={os.path.join(FLAGS.finetune_data, 'train.jsonl')}",
            f"--config.data.dev_file={os.path.join(FLAGS.finetune_data, 'dev.jsonl')}",
            f"--config.seed={run['seed']}"] + [f"--config.{kv}" for kv in FLAGS.finetune_set]
    record = os.path.join(out, "ablate_args.json")
    if os.path.exists(out):
        old = None
        if os.path.exists(record):
            with open(record) as f:
                old = json.load(f)
        if old == args and os.path.exists(os.path.join(out, "eval.json")):
            return  # finished with these very settings
        if old != args:  # other settings: keep it aside, never report it under these
            aside = f"{out}.stale-{time.strftime('%Y%m%d-%H%M%S')}"
            os.replace(out, aside)
            print(f"re-fine-tuning {run['dir']}: its settings changed; old one in {aside}",
                  flush=True)
    os.makedirs(out, exist_ok=True)
    with open(record, "w") as f:
        json.dump(args, f)
    cmd = [sys.executable, "-m", "encoder.main", *args, f"--workdir={out}"]
    with open(os.path.join(d, "finetune.log"), "a") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)


def suite_command(run: dict, root: str, tasks: str, extra: list) -> list[str]:
    """The encoder.suite command for one pretraining run (its suite lives in <run>/suite)."""
    d = os.path.join(root, "runs", run["dir"])
    cmd = [sys.executable, "-m", "encoder.suite", f"--init_from={d}",
           f"--workdir={os.path.join(d, 'suite')}"]
    return cmd + ([f"--tasks={tasks}"] if tasks and tasks != "embedded" else []) + list(extra)


def suite_run(run: dict, root: str) -> None:
    """Runs (or resumes: finished fine-tuning runs are skipped) the suite on one run."""
    d = os.path.join(root, "runs", run["dir"])
    with open(os.path.join(d, "suite.log"), "a") as log:
        rc = subprocess.run(suite_command(run, root, FLAGS.suite, FLAGS.suite_arg), stdout=log,
                            stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise RuntimeError(f"the suite on {run['dir']} failed (exit {rc}); see "
                           f"{os.path.join(d, 'suite.log')}")


def execute(runs: list[dict], root: str, parallel: int) -> None:
    """Runs everything, at most `parallel` at once; a failure stops the others first."""
    pending, active = list(runs), []
    try:
        _execute(pending, active, root, parallel)
    finally:  # never leave orphans: a failure or Ctrl-C stops the siblings
        from encoder.studies.suite import runs as suite_runs
        suite_runs.stop_children([proc for _, proc in active], timeout=60)


def _execute(pending: list, active: list, root: str, parallel: int) -> None:
    while pending or active:
        while pending and len(active) < max(1, parallel):
            run = pending.pop(0)
            proc = launch(run, root)
            if proc is not None:
                active.append((run, proc))
                print(f"started {run['dir']}", flush=True)
        for run, proc in list(active):
            rc = proc.poll()
            if rc is None:
                continue
            active.remove((run, proc))
            if rc != 0:
                raise RuntimeError(f"run {run['dir']} failed (exit {rc}); see "
                                   f"{os.path.join(root, 'runs', run['dir'], 'run.log')}")
            open(os.path.join(root, "runs", run["dir"], DONE), "w").close()
            print(f"finished {run['dir']}", flush=True)
        time.sleep(0.2)


# ----------------------------------------------------------------------------- results

def read_run(run: dict, root: str) -> dict:
    from encoder.train import metrics_io
    d = os.path.join(root, "runs", run["dir"])
    rows = metrics_io.read_metrics(d)
    train = [r for r in rows if "train/loss" in r]
    evals = [r for r in rows if any(k.startswith("eval/") for k in r)]
    steps = run["config"].train.num_steps
    tps = [r["train/tokens_per_s"] for r in train[1:]] or [r["train/tokens_per_s"] for r in train]
    out = {"variant": run["variant"], "seed": run["seed"], "steps": steps,
           "final_train_loss": train[-1]["train/loss"] if train else float("nan"),
           "tokens_per_s": float(np.mean(tps)) if tps else float("nan"),
           "flops": run["flops_per_step"] * steps,
           "curve": [(r["step"], r["train/loss"]) for r in train]}
    if evals:
        out.update({k: v for k, v in evals[-1].items() if k.startswith("eval/")})
    ft = os.path.join(d, "finetune", "eval.json")
    if os.path.exists(ft):
        with open(ft) as f:
            for k, v in json.load(f).get("dev", {}).items():
                out[f"finetune/{k}"] = v
    if os.path.exists(os.path.join(d, "suite", "suite.json")):
        from encoder.studies.suite import battery
        out.update(battery.suite_average(os.path.join(d, "suite")))
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    from encoder.objectives import objectives
    import ml_collections
    out["parameters"] = objectives.parameter_count(ml_collections.ConfigDict(cfg))[1]
    return out


def primary_metric(rows: list[dict]) -> str:
    for key in ("suite/average", "finetune/accuracy", "finetune/f1", "finetune/pearson",
                "eval/mlm_accuracy", "eval/rtd_accuracy", "eval/loss"):
        if all(key in r for r in rows):
            return key
    return "final_train_loss"


def aggregate(rows: list[dict]) -> tuple[list[dict], list[str]]:
    keys = ["final_train_loss"] + sorted({k for r in rows for k in r if k.startswith(
        ("eval/", "finetune/", "suite/"))}) + ["tokens_per_s", "flops", "parameters", "steps"]
    table = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        group = [r for r in rows if r["variant"] == variant]
        entry = {"variant": variant, "seeds": len(group)}
        for k in keys:
            vals = np.asarray([r[k] for r in group if k in r], float)
            if len(vals):
                entry[k] = float(vals.mean())
                entry[f"{k}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
        table.append(entry)
    return table, keys


def separation(table, metric: str) -> None:
    """Adds each variant's gap to the best, in standard errors of the difference."""
    higher_better = "loss" not in metric
    best = (max if higher_better else min)(table, key=lambda e: e.get(metric, float("nan")))
    for e in table:
        gap = e[metric] - best[metric]
        se = math.sqrt(e[f"{metric}_std"] ** 2 / e["seeds"] + best[f"{metric}_std"] ** 2 /
                       best["seeds"])
        e["gap_to_best"] = gap
        e["gap_z"] = abs(gap) / se if se > 0 else (0.0 if gap == 0 else float("inf"))


def write_results(rows: list[dict], root: str) -> list[dict]:
    table, keys = aggregate(rows)
    metric = primary_metric(rows)
    separation(table, metric)
    with open(os.path.join(root, "runs.csv"), "w", newline="") as f:
        cols = ["variant", "seed"] + keys
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    cols = ["variant", "seeds"] + [c for k in keys for c in (k, f"{k}_std")] + [
        "gap_to_best", "gap_z"]
    with open(os.path.join(root, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(table)
    extra = [k for k in keys if k.startswith(("eval/", "finetune/", "suite/"))
             and k not in ("eval/mlm_loss", "eval/gen_loss", metric)]
    show = list(dict.fromkeys(["final_train_loss", metric] + extra[:5])) + [
        "tokens_per_s", "flops", "parameters"]
    lines = [f"Primary metric: `{metric}`; `gap (z)` is the gap to the best variant in "
             "standard errors of the difference (z < 2: within the seed spread).", "",
             "| variant | seeds | " + " | ".join(show) + " | gap (z) |",
             "|---" * (len(show) + 3) + "|"]
    for e in table:
        cells = []
        for k in show:
            if k not in e:
                cells.append("")
            elif k in ("flops", "parameters"):
                cells.append(f"{e[k]:.3g}")
            elif k == "tokens_per_s":
                cells.append(f"{e[k]:,.0f}")
            else:
                cells.append(f"{e[k]:.4f} ± {e[k + '_std']:.4f}")
        lines.append(f"| {e['variant']} | {e['seeds']} | " + " | ".join(cells) +
                     f" | {e['gap_to_best']:+.4f} ({e['gap_z']:.1f}) |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(root, "results.md"), "w") as f:
        f.write(text)
    plot(rows, table, metric, root)
    print(text)
    return table


def plot(rows, table, metric, root) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, variant in enumerate(dict.fromkeys(r["variant"] for r in rows)):
        color = f"C{i % 10}"
        for j, r in enumerate(x for x in rows if x["variant"] == variant):
            if r["curve"]:
                s, loss = zip(*r["curve"])
                ax.plot(s, loss, color=color, alpha=0.8, label=variant if j == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.set_title("Training loss per variant (one line per seed)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(root, "loss_curves.png"), dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = [e["variant"] for e in table]
    ax.bar(range(len(names)), [e[metric] for e in table],
           yerr=[e[f"{metric}_std"] for e in table], capsize=4,
           color=[f"C{i % 10}" for i in range(len(names))])
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} per variant (mean ± std over seeds)")
    fig.tight_layout()
    fig.savefig(os.path.join(root, "final_metric.png"), dpi=120)
    plt.close(fig)


def main(argv):
    del argv
    root = os.path.abspath(FLAGS.workdir)
    os.makedirs(root, exist_ok=True)
    if FLAGS.seeds < 1 or FLAGS.parallel < 1:
        raise app.UsageError(f"--seeds and --parallel must be at least 1, got {FLAGS.seeds} "
                             f"and {FLAGS.parallel}")
    sweeps = [parse_sweep(s) for s in FLAGS.sweep]
    runs = plan(FLAGS.config, expand(sweeps, FLAGS.zip), FLAGS.seeds, FLAGS.equal_flops)
    print(f"{len(runs)} runs: " + ", ".join(r["dir"] for r in runs), flush=True)
    execute(runs, root, FLAGS.parallel)
    if FLAGS.finetune:
        if not FLAGS.finetune_data:
            raise app.UsageError("--finetune needs --finetune_data")
        for run in runs:
            finetune_run(run, root)
    if FLAGS.suite:
        for run in runs:
            suite_run(run, root)
    write_results([read_run(r, root) for r in runs], root)


if __name__ == "__main__":
    app.run(main)
