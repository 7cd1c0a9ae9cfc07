"""Downstream scores on every checkpoint of a pretraining run: the curve, not only the end.

    python -m encoder suite --watch=WORKDIR --workdir=OUT [--probe_only] [suite flags]
        [--watch_poll=60] [--watch_once] [--watch_follow_job]

(`encoder ablate --watch` starts one beside each of its runs, as a run of the study:
--watch_follow_job waits for the run to start and ends when its job has ended.)

Follows WORKDIR (a pretraining run, running or finished) and runs the suite once on each
checkpoint it keeps, into OUT/step_NNNNNNN/ (a suite folder of its own, as
`encoder suite --init_from=WORKDIR@STEP` writes). OUT/curve.jsonl gets one row a scored
checkpoint: its step, the tokens and FLOPs trained to it, every task's score and the
averages; OUT/watch.json records the steps scored, so a restarted watcher scores each
checkpoint exactly once. It ends when the run has finished and its last checkpoint is
scored (--watch_once: after scoring what is there now). A checkpoint the run's
keep_checkpoints deleted before the watcher reached it is counted and named as missed.
"""
import dataclasses
import json
import os
import time

from encoder.eval.identity import checkpoint_steps
from encoder.train import metrics_io
from encoder.train import workdir as workdir_lib

STATE = "watch.json"
CURVE = "curve.jsonl"


def finished(workdir: str) -> bool:
    """The run recorded that it ran to its end (run.json's `finished`)."""
    return workdir_lib.finished(workdir)


def per_step(workdir: str) -> tuple[float, float]:
    """(tokens, FLOPs) a step trains, from the run's resolved config (one phase)."""
    import ml_collections
    from encoder.train import flops
    with open(os.path.join(workdir, "config.json")) as f:
        cfg = ml_collections.ConfigDict(json.load(f))
    return (float(cfg.train.batch_size * cfg.data.seq_len),
            float(flops.config_train_flops_per_step(cfg)))


SETTINGS = ("tasks", "preset", "only", "probe", "probe_only", "max_train", "max_eval",
            "train_per_class", "embedding_pooling", "pooling", "seeds", "learning_rates",
            "epochs", "random_init", "probe_max_train", "finetune_set")


def check_settings(out: str, opts) -> None:
    """A curve is one protocol: a watch folder refuses other suite settings than its own
    (its rows would mix task sets), and records them on its first use."""
    mine = {k: list(v) if isinstance(v, tuple) else v
            for k, v in dataclasses.asdict(opts).items() if k in SETTINGS}
    state = read_state(out)
    old = state.get("settings")
    if old is not None and old != mine:
        diff = [f"{k}: {old.get(k)!r} -> {mine.get(k)!r}" for k in SETTINGS
                if old.get(k) != mine.get(k)]
        raise ValueError(f"--workdir={out} holds a curve of other suite settings ("
                         + "; ".join(diff) + "): a curve mixing them would compare unlike "
                         "rows; give another --workdir")
    if old is None:
        state["settings"] = mine
        metrics_io.write_json(os.path.join(out, STATE), state)


def read_state(out: str) -> dict:
    try:
        with open(os.path.join(out, STATE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"scored": [], "missed": []}


def curve_row(step: int, tokens: float, flops_: float, suite: dict) -> dict:
    """One point of the curve: the suite's per-task medians, averages and probe layers."""
    row = {"step": step, "tokens": step * tokens, "flops": step * flops_}
    for task in suite.get("tasks", []):
        row[f"suite/{task['task']}"] = task["median"]
    for name, value in (suite.get("averages") or {}).items():
        if isinstance(value, (int, float)):
            row[f"suite/{name}"] = value
    for task, probe in (suite.get("probes") or {}).items():
        if probe.get("layers"):
            row[f"probe/{task}/best"] = max(probe["layers"])
            row[f"probe/{task}/last"] = probe["layers"][-1]
    return row


def score_new(workdir: str, out: str, opts, run_suite, steps=None) -> list[dict]:
    """Scores every checkpoint of workdir not scored yet (of `steps`, where given); returns
    the new curve rows."""
    state = read_state(out)
    tokens, flops_ = per_step(workdir)
    rows = []
    for step in checkpoint_steps(workdir):
        if step in state["scored"] or (steps is not None and step not in steps):
            continue
        folder = os.path.join(out, f"step_{step:07d}")
        suite = run_suite(dataclasses.replace(opts, init_from=f"{workdir}@{step}",
                                              workdir=folder))
        if suite.get("failed"):
            raise RuntimeError(f"the suite on {workdir}@{step} failed; see {folder}")
        row = curve_row(step, tokens, flops_, suite)
        with open(os.path.join(out, CURVE), "a") as f:
            f.write(json.dumps(row) + "\n")
        state["scored"].append(step)
        metrics_io.write_json(os.path.join(out, STATE), state)  # after the row: once each
        print(f"scored {workdir}@{step}: {summary(row)}", flush=True)
        rows.append(row)
    return rows


def summary(row: dict, most: int = 6) -> str:
    """A curve row's scores in one line: the suite's average where there is one, else each
    task's score (a probe's best layer), never an empty line."""
    keys = [k for k in row if k.startswith("suite/average")] or [
        k for k in row if k.startswith("suite/") or k.endswith("/best")]
    if not keys:
        return "no score (see the step's suite.md)"
    more = f" (+{len(keys) - most} more)" if len(keys) > most else ""
    return ", ".join(f"{k}={row[k]:.4g}" for k in keys[:most]) + more


def note_missed(workdir: str, out: str) -> list[int]:
    """Steps the run checkpointed (its metrics rows at checkpoint cadence) that are gone
    and were never scored: the run keeps fewer checkpoints than the watcher needed."""
    state = read_state(out)
    kept = set(checkpoint_steps(workdir))
    try:
        with open(os.path.join(workdir, "config.json")) as f:
            every = json.load(f)["train"]["checkpoint_every"]
    except (OSError, ValueError, KeyError):
        return []
    last = max(kept, default=0)
    missed = [s for s in range(every, last + 1, every)
              if s not in kept and s not in state["scored"]]
    if missed != state.get("missed"):
        state["missed"] = missed
        metrics_io.write_json(os.path.join(out, STATE), state)
    return missed


def job_ended(workdir: str) -> bool:
    """The run's job has exited, however (its launcher's exit record): a failed or stopped
    run writes no more checkpoints until something starts it again."""
    from encoder.studies import records
    return records.read_exit(workdir) is not None


def watch(workdir: str, out: str, opts, run_suite, poll_s: float = 60.0,
          once: bool = False, sleep=time.sleep, follow_job: bool = False) -> dict:
    """Scores each checkpoint of workdir once, until the run has finished (or once).
    follow_job (a watcher a study started beside its run): waits for the run to start, and
    ends when its job has ended, finished or not."""
    while follow_job and not os.path.isfile(os.path.join(workdir, "config.json")):
        if job_ended(workdir):
            return {"scored": [], "missed": [], "finished": False}
        sleep(poll_s)
    if not os.path.isfile(os.path.join(workdir, "config.json")):
        raise FileNotFoundError(f"--watch={workdir}: not a pretraining workdir (no "
                                "config.json yet: start the run first)")
    with open(os.path.join(workdir, "config.json")) as f:
        cfg = json.load(f)
    if "model" not in cfg or cfg.get("mode", "pretrain") != "pretrain":
        raise ValueError(f"--watch={workdir}: not a pretraining workdir (a fine-tuning run or "
                         "a HuggingFace folder has no checkpoints to follow; score it with "
                         "--init_from)")
    os.makedirs(out, exist_ok=True)
    check_settings(out, opts)
    if not opts.tasks:  # the embedded suite: built once for every checkpoint, not once each
        from encoder.data import embedded_tasks
        opts = dataclasses.replace(opts, tasks=embedded_tasks.build_once(
            os.path.join(out, "tasks")))
    while True:
        # read before scoring: a checkpoint after it is the last
        done = finished(workdir) or (follow_job and job_ended(workdir))
        score_new(workdir, out, opts, run_suite)
        missed = note_missed(workdir, out)
        if once or done:
            state = read_state(out)
            if missed:
                print(f"missed {len(missed)} checkpoints deleted before they were scored "
                      f"(steps {missed}): raise the run's train.keep_checkpoints", flush=True)
            return {"scored": sorted(state["scored"]), "missed": missed,
                    "finished": finished(workdir)}
        sleep(poll_s)
