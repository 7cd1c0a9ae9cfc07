"""From run results to the suite's table: scores, the learning-rate choice, medians, averages.

Every metric is reported in percent (GLUE's and MTEB's habit; SQuAD's EM and
F1 already are). A run's score for a task is the mean of the task's score
metrics (GLUE: a task with two metrics is their mean). For each learning rate
the median over seeds is taken; the learning rate with the best median is
chosen; the task reports that median, the spread over its seeds (sample
standard deviation, min and max) and the per-metric medians at that rate.
The average follows the preset's rule (presets.AVERAGES) over the tasks that
have a score; the table says which are missing.

Writes OUT/suite.json (everything, read by `encoder ablate --suite`), suite.csv
(one row per task), runs.csv (one row per run), suite.md and suite.png.

Every score names what it scored: suite.json's `identity` holds the source checkpoint's
identity (step, content hash: encoder/eval/identity.py) and every task file's hash,
suite.md's header the checkpoint and its Data notes the files, runs.csv each run's
checkpoint and data. Rows that scored different checkpoints of the suite's own source
(never expected: a run of another model is rerun) are named in a warning at the top.
"""
import json
import math
import os

import numpy as np

from encoder.eval import identity, metrics as metrics_lib
from encoder.studies import report as tables
from encoder.studies.suite import presets

PERCENT_KEYS = ("exact_match", "f1")  # SQuAD's scores are percentages already


def percent(key: str, value: float) -> float:
    return float(value) if key in PERCENT_KEYS else 100.0 * float(value)


def read_labels(path: str, key: str = "label") -> list:
    with open(path) as f:
        return [str(json.loads(line)[key]) for line in f if line.strip()]


def run_metrics(task, run_dir: str, gold_files: dict) -> dict:
    """{metric name: percent} of one finished fine-tuning run (catalog.SuiteTask `task`).

    gold_files: split -> the prepared JSONL the run was scored on (binary_f1 reads
    the gold labels from it and the predicted ones from predictions.jsonl).
    """
    with open(os.path.join(run_dir, "eval.json")) as f:
        ev = json.load(f)
    preds = None
    out = {}
    for m in task.metrics:
        if m.key == "binary_f1":
            if preds is None:
                with open(os.path.join(run_dir, "predictions.jsonl")) as f:
                    preds = [json.loads(line) for line in f if line.strip()]
            pred = [str(p["label"]) for p in preds if p["split"] == m.split]
            out[m.name] = 100.0 * metrics_lib.binary_f1(read_labels(gold_files[m.split]), pred,
                                                        task.positive)
        else:
            if m.key not in ev.get(m.split, {}):
                raise KeyError(f"{run_dir}/eval.json has no {m.split}/{m.key}")
            out[m.name] = percent(m.key, ev[m.split][m.key])
    return out


MATRYOSHKA_KEY = "ndcg_at_10_dim"  # + the dimension


def score_metrics(task, rule: str) -> tuple:
    """The metric names a task's score averages under an average rule."""
    return presets.AVERAGES[rule]["metrics"].get(task.name, task.score_metrics) \
        if task.glue else task.score_metrics


def task_score(values: dict, names) -> float:
    return float(np.mean([values[n] for n in names]))


def row(task, lr, seed: int, values: dict, rule: str, where: str) -> dict:
    """One run's row {task, lr, seed, metrics, score, dir}; lr None: no learning rate
    (embedding tasks, baselines). values: {metric name: percent}."""
    return {"task": task.name, "lr": lr, "seed": seed, "metrics": values,
            "score": task_score(values, score_metrics(task, rule)), "dir": where}


def summarize(task, rows: list, rule: str) -> dict:
    """The task's line of the table from its runs' rows ({lr, seed, metrics}).

    lr is None for embedding tasks (no fine-tuning). Rows of failed runs are absent.
    """
    names = score_metrics(task, rule)
    by_lr: dict = {}
    for r in rows:
        by_lr.setdefault(r["lr"], []).append(r)
    medians = {lr: float(np.median([task_score(r["metrics"], names) for r in rs]))
               for lr, rs in by_lr.items()}
    order = list(medians)
    best = max(medians, key=lambda lr: (medians[lr] if math.isfinite(medians[lr]) else -math.inf,
                                        -order.index(lr)))  # ties: the grid's first
    chosen = by_lr[best]
    scores = np.array([task_score(r["metrics"], names) for r in chosen])
    metric_names = [m.name for m in task.metrics]
    # a retriever's nDCG@10 at each Matryoshka dim (encoder/retrieval/retriever.py), widest
    # first, where every chosen run has it
    dims = {k for r in chosen for k in r["metrics"] if k.startswith(MATRYOSHKA_KEY)}
    metric_names += sorted((k for k in dims if all(k in r["metrics"] for r in chosen)),
                           key=lambda k: -int(k[len(MATRYOSHKA_KEY):]))
    return {
        "task": task.name, "kind": task.kind, "type": task.type, "glue": task.glue,
        "score_metrics": list(names), "lr": best, "seeds": len(chosen),
        "median": float(np.median(scores)),
        "sd": float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0,
        "min": float(scores.min()), "max": float(scores.max()),
        "metrics": {n: float(np.median([r["metrics"][n] for r in chosen])) for n in metric_names},
        "per_lr": {("-" if lr is None else f"{lr:g}"): v for lr, v in medians.items()},
    }


def averages(summaries: list, rule: str) -> dict:
    """average (every task with a score), glue (GLUE tasks, the rule's way), finetune, embedding."""
    exclude = set(presets.AVERAGES[rule]["exclude"])
    used = [s for s in summaries if not (s["glue"] and s["task"] in exclude)]
    out = {}
    groups = {"average": used, "glue": [s for s in used if s["glue"]],
              "finetune": [s for s in used if s["kind"] == "finetune"],
              "embedding": [s for s in used if s["kind"] != "finetune"]}
    for name, group in groups.items():
        if group:
            # GLUE's rule: each task's score is already the mean of its metrics.
            out[name] = metrics_lib.glue_score(
                {s["task"]: {"score": s["median"]} for s in group})
            out[f"{name}_tasks"] = [s["task"] for s in group]
    return out


# -------------------------------------------------------------------------- files

def _data_cell(data: dict | None) -> str:
    return " ".join(f"{k}:{v['sha256']}" for k, v in (data or {}).items())


def write_runs_csv(path: str, rows: list) -> None:
    keys = sorted({k for r in rows for k in r["metrics"]})
    tables.write_csv(path, ["task", "lr", "seed", "score", *keys, "checkpoint", "data",
                            "dir"], [
        [r["task"], "" if r["lr"] is None else f"{r['lr']:g}", r["seed"], f"{r['score']:.4f}",
         *[r["metrics"].get(k, "") for k in keys],
         identity.short((r.get("inputs") or {}).get("source")) if "inputs" in r else "",
         _data_cell((r.get("inputs") or {}).get("data")), r.get("dir", "")] for r in rows])


def mixed_checkpoints(rows: list) -> dict:
    """{checkpoint: rows} when the rows started from the suite's own source (not an
    intermediate task's run) scored more than one checkpoint of it; {} when one."""
    seen: dict = {}
    for r in rows:
        if "inputs" not in r or r.get("via"):
            continue
        name = identity.short((r["inputs"] or {}).get("source"))
        seen.setdefault(name, []).append(f"{r['task']}/{r['lr']}/{r['seed']}")
    return seen if len(seen) > 1 else {}


def write_suite_csv(path: str, summaries: list, avg: dict) -> None:
    rows = [[s["task"], s["kind"], s["type"], "+".join(s["score_metrics"]),
             f"{s['median']:.4f}", f"{s['sd']:.4f}", f"{s['min']:.4f}", f"{s['max']:.4f}",
             s["seeds"], "" if s["lr"] is None else f"{s['lr']:g}",
             json.dumps({k: round(v, 4) for k, v in s["metrics"].items()})] for s in summaries]
    rows += [[name, "average", "", "", f"{avg[name]:.4f}", "", "", "", "", "",
              json.dumps(avg[f"{name}_tasks"])]
             for name in ("average", "glue", "finetune", "embedding") if name in avg]
    tables.write_csv(path, ["task", "kind", "type", "score_metrics", "median", "sd", "min",
                            "max", "seeds", "lr", "metrics"], rows)


AVERAGE_LABELS = {"average": "**average**", "glue": "GLUE score",
                  "finetune": "fine-tuned tasks", "embedding": "embedding tasks"}


def markdown(summaries: list, avg: dict, header: dict, failures: list, missing: list,
             data_notes: list, probe_table: dict | None = None, mixed: dict | None = None
             ) -> str:
    lines = ["# Downstream suite", ""]
    if mixed:
        lines += ["**WARNING: these rows scored different checkpoints of the source:** " +
                  "; ".join(f"{name}: {len(runs)} row(s) ({', '.join(runs[:3])}"
                            f"{', ...' if len(runs) > 3 else ''})" for name, runs in
                            mixed.items()), ""]
    lines += [f"- {k}: {v}" for k, v in header.items()]
    lines += ["", "Scores in percent. Fine-tuned tasks: dev set, median over seeds at the "
              "learning rate whose median is best; spread = sample sd and min-max over those "
              "seeds. Embedding tasks: no fine-tuning (MTEB's main score).", ""]
    lines += tables.markdown_table(
        ["task", "type", "score = mean of", "median", "sd", "min-max", "seeds", "lr",
         "per metric (median)"],
        [[s["task"], s["type"], " + ".join(s["score_metrics"]), f"{s['median']:.2f}",
          f"{s['sd']:.2f}", f"{s['min']:.1f} to {s['max']:.1f}", s["seeds"],
          "-" if s["lr"] is None else f"{s['lr']:g}",
          ", ".join(f"{k} {v:.1f}" for k, v in s["metrics"].items())] for s in summaries])
    for name in ("average", "glue", "finetune", "embedding"):
        if name in avg:
            lines.append(f"| {AVERAGE_LABELS[name]} ({len(avg[name + '_tasks'])} tasks) | | | "
                         f"**{avg[name]:.2f}** | | | | | |")
    if missing:
        lines += ["", f"No score (every run failed): {', '.join(missing)}; the averages leave "
                  "them out."]
    grid = [s for s in summaries if len(s["per_lr"]) > 1]
    if grid:
        lines += ["", "Median score per learning rate:", ""]
        lines += [f"- {s['task']}: " + ", ".join(f"{lr} {v:.2f}" for lr, v in s["per_lr"].items())
                  for s in grid]
    if failures:
        lines += ["", "Failed runs:", ""] + [f"- {f}" for f in failures]
    if data_notes:
        lines += ["", "Data:", ""] + [f"- {n}" for n in data_notes]
    if probe_table:
        depth = max(len(v["layers"]) for v in probe_table.values())
        lines += ["", "Per-layer linear probes (dev score of a linear model on each layer's "
                  "mean-pooled features, or for tagging tasks each word's first piece scored by "
                  "entity F1; emb = the embeddings; in brackets the best shuffled-label "
                  "control):", "",
                  "| task | " + " | ".join("emb" if l == 0 else str(l) for l in range(depth)) +
                  " | control |", "|---" * (depth + 2) + "|"]
        for name, v in probe_table.items():
            lines.append(f"| {name} | " + " | ".join(f"{x:.3f}" for x in v["layers"]) +
                         f" | ({max(v['control']):.3f}) |")
    return "\n".join(lines) + "\n"


def bar_chart(path: str, summaries: list, avg: dict, title: str) -> None:
    """One bar per task (median, min-max whiskers), the average last."""
    has_avg = "average" in avg
    names = [s["task"] for s in summaries] + (["average"] if has_avg else [])
    values = [s["median"] for s in summaries] + ([avg["average"]] if has_avg else [])
    low = [s["median"] - s["min"] for s in summaries] + [0.0] * has_avg
    high = [s["max"] - s["median"] for s in summaries] + [0.0] * has_avg
    colors = [("C0" if s["kind"] == "finetune" else "C2") for s in summaries] + ["C3"] * has_avg
    tables.bar_chart(path, names, values, [low, high], colors, "score (%)", title,
                     (1.2 + 0.75 * len(names), 4.5), rotation=35, label_values=True,
                     title_size=9)


def file_notes(scored: dict | None) -> list[str]:
    """One note per task: its files' sha256 (what its scores scored)."""
    return [f"{task} files (sha256): " + ", ".join(
        f"{os.path.basename(v['path'])} {v['sha256']}" for v in files.values())
        for task, files in ((scored or {}).get("data") or {}).items()]


def write_all(root: str, tasks: list, rows: list, rule: str, header: dict, failures: list,
              data_notes: list, probe_table: dict | None = None,
              scored: dict | None = None) -> dict:
    """Every report file from the runs' rows; returns suite.json's content. scored:
    {source, data}, the identity of the checkpoint and files scored (suite.json)."""
    summaries, missing = [], []
    for task in tasks:
        task_rows = [r for r in rows if r["task"] == task.name]
        if task_rows:
            summaries.append(summarize(task, task_rows, rule))
        else:
            missing.append(task.name)
    avg = averages(summaries, rule)
    mixed = mixed_checkpoints(rows)
    result = {"header": header, "tasks": summaries, "averages": avg, "missing": missing,
              "failures": [str(f) for f in failures], "probes": probe_table,
              "identity": scored, "mixed_checkpoints": mixed}
    with open(os.path.join(root, "suite.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    write_suite_csv(os.path.join(root, "suite.csv"), summaries, avg)
    write_runs_csv(os.path.join(root, "runs.csv"), rows)
    text = markdown(summaries, avg, header, [str(f) for f in failures], missing,
                    list(data_notes) + file_notes(scored), probe_table, mixed)
    with open(os.path.join(root, "suite.md"), "w") as f:
        f.write(text)
    if summaries:
        bar_chart(os.path.join(root, "suite.png"), summaries, avg,
                  f"{header.get('source', '')} ({header.get('preset', '')})")
    print(text, flush=True)
    return result
