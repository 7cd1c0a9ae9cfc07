"""The suite's fine-tuning grid as runs for the study runner: task x learning rate x seed.

Every run is an ordinary fine-tuning workdir, OUT/runs/<task>/<lr>/<seed>/
(itself a valid init_from), whose whole configuration is the fine-tuning
experiment (experiments/finetune.py) with the preset's settings as overrides,
kept as data in the run's job_config.py (encoder/studies/jobconfig.py), and the
identity of what it reads beside it (inputs.json: the source checkpoint's step and
content hash, its data files' hashes; encoder/eval/identity.py). The runner skips a
done run, resumes a stopped one and moves aside one whose configuration changed
(another preset, epochs, data) or whose model or data changed at the same path (the
source trained on, a task file edited).
"""
import dataclasses
import functools
import os

from encoder import ranges
from encoder.eval import identity
from encoder.studies import jobconfig, records, runner
from encoder.studies.suite import presets, report
from encoder.studies.suite.options import SuiteOptions

FINETUNE_EXPERIMENT = os.path.join(runner.REPO, "experiments", "finetune.py")


def lr_name(lr: float) -> str:
    return f"{lr:g}"


def run_dir(root: str, task: str, lr: float, seed: int) -> str:
    return os.path.join(root, "runs", task, lr_name(lr), str(seed))


@functools.lru_cache(maxsize=None)
def _experiment(spec: str):
    return jobconfig.load_experiment(spec)


def finetune_config(task_type: str, init_from: str, files: dict, settings: dict,
                    sets: dict | None = None) -> dict:
    """The whole configuration of one fine-tuning run, as data.

    files: train, dev and (optional) test paths. settings: lr, seed, epochs,
    batch_size, warmup_fraction, weight_decay, layer_decay, dropout,
    max_seq_len, pooling, random_init. sets: extra {field: value} overrides.
    """
    s = settings
    overrides = {
        "init_from": init_from,
        "data.train_file": files["train"], "data.dev_file": files["dev"],
        "data.max_seq_len": s["max_seq_len"],
        "train.learning_rate": s["lr"], "train.num_epochs": s["epochs"],
        "train.batch_size": s["batch_size"], "train.weight_decay": s["weight_decay"],
        "finetune.warmup_fraction": s["warmup_fraction"],
        "finetune.layer_decay": s["layer_decay"], "finetune.dropout": s["dropout"],
        "seed": s["seed"]}
    if files.get("test"):
        overrides["data.test_file"] = files["test"]
    if s.get("random_init"):
        overrides["finetune.random_init"] = True
    base = _experiment(f"{FINETUNE_EXPERIMENT}:task={task_type},pooling={s['pooling']}")
    return jobconfig.as_data(jobconfig.override(base, {**overrides, **(sets or {})}))


def with_init_from(run: runner.Run, init_from: str,
                   cache: identity.HashCache | None = None) -> runner.Run:
    """The run started from another model (an intermediate task's workdir): that
    model's weights are the start, so the random-init switch is dropped; its inputs name
    that model (a rerun of the start makes this run stale too)."""
    config = jobconfig.as_data(run.config)  # a copy
    config["init_from"] = init_from
    config["finetune"]["random_init"] = False
    inputs = None if run.inputs is None else {
        **run.inputs, "source": identity.source_identity(init_from, cache)}
    return dataclasses.replace(run, config=config, inputs=inputs)


def run_inputs(source: dict | None, files: dict, cache=None) -> dict | None:
    """A fine-tuning run's inputs.json: its source's identity and its data files' hashes."""
    if source is None:
        return None
    return {"source": source, "data": identity.files_identity(
        {k: files.get(k) for k in ("train", "dev", "test")}, cache)}


def done(run: runner.Run) -> bool:
    return run.status().state == "done"


def run_settings(task, preset: dict, opts: SuiteOptions, lr: float, seed: int) -> dict:
    return dict(lr=lr, seed=seed, epochs=presets.epochs_for(preset, task.name, task.type),
                batch_size=preset["batch_size"], warmup_fraction=preset["warmup_fraction"],
                weight_decay=preset["weight_decay"], layer_decay=preset["layer_decay"],
                dropout=preset["dropout"],
                max_seq_len=presets.seq_len_for(preset, task.type, task.max_seq_len),
                pooling=preset["pooling"], random_init=opts.random_init)


def check_sets(tasks: list, preset: dict, opts: SuiteOptions) -> None:
    """--finetune_set's fields and values against each task type's fine-tuning config,
    before any data is prepared (a typo is refused with nothing written)."""
    sets = jobconfig.parse_sets(opts.finetune_set)
    if not sets:
        return
    for task_type in sorted({t.type for t in tasks if t.kind == "finetune"}):
        config = jobconfig.override(_experiment(f"{FINETUNE_EXPERIMENT}:task={task_type},"
                                                f"pooling={preset['pooling']}"), sets)
        # the values' ranges too, once here, not once per run as each run fails on them
        ranges.check(config, where="--finetune_set")


def plan(tasks: list, prepared: dict, preset: dict, opts: SuiteOptions, root: str,
         starts: dict, source: dict | None = None, cache=None) -> list:
    """Every fine-tuning run, task x learning rate x seed (runner.Run); source: the
    identity of opts.init_from (encoder/eval/identity.py), recorded with each run."""
    out = []
    for task in tasks:
        if task.kind != "finetune":
            continue
        p = prepared[task.name]
        for lr in preset["learning_rates"]:
            for seed in range(preset["seeds"]):
                files = {"train": p.train[seed], "dev": p.dev, "test": p.test}
                config = finetune_config(task.type, opts.init_from, files,
                                         run_settings(task, preset, opts, lr, seed),
                                         jobconfig.parse_sets(opts.finetune_set))
                out.append(runner.make_run(f"{task.name}/{lr_name(lr)}/{seed}",
                                           run_dir(root, task.name, lr, seed), config,
                                           run_inputs(source, files, cache),
                                           task=task.name, lr=lr, seed=seed,
                                           after=starts.get(task.name, "")))
    return out


def collect(task, task_runs: list, prepared, rule: str) -> list:
    """Rows {task, lr, seed, metrics, score, dir, inputs, via} of a task's finished runs;
    inputs: what the run recorded it read (its inputs.json), via: the task it started
    from ("" for the suite's own source)."""
    gold = {"dev": prepared.dev, "test": prepared.test}
    return [{**report.row(task, run.tags["lr"], run.tags["seed"],
                          report.run_metrics(task, run.workdir, gold), rule, run.workdir),
             "inputs": records.read_inputs(run.workdir), "via": run.tags.get("after", "")}
            for run in task_runs if done(run)]


def start_for(run, start_task, start_rows: list, start_runs: list, rule: str):
    """The start task's workdir for this run (best median learning rate, same seed), or None."""
    if not start_rows:
        return None
    best = report.summarize(start_task, start_rows, rule)["lr"]
    match = [r for r in start_runs if r.tags["lr"] == best and
             r.tags["seed"] == run.tags["seed"] and done(r)]
    return match[0].workdir if match else None
