"""The suite, start to finish: tasks -> data -> embeddings, probes, fine-tuning runs -> table.

`run_suite(SuiteOptions(...))` is what `python -m encoder.suite` calls. Order:
find the tasks (or build the embedded ones), read the source model's width
(presets depend on it), prepare each fine-tuned task's data, score the
embedding tasks and (--probe) the per-layer probes in this process, then run
the fine-tuning grid as subprocesses (tasks that start from another task's
model, e.g. RTE from MNLI, in a second wave once that task's learning rate is
chosen), read every finished run back and write the report. Everything
finished is kept on disk and skipped by the next start.

`run_suite(SuiteOptions(baseline="bow", ...))` scores a method with no model instead
(suite/baseline.py) on the same prepared data, into the same report files.
"""
import dataclasses
import json
import math
import os
import sys
import time

from encoder.studies.suite import baseline as baseline_lib
from encoder.studies.suite import catalog, embedding, presets, report, runs as runs_lib

EMBEDDED = "tasks"  # OUT/tasks: the embedded default suite, built once


@dataclasses.dataclass
class SuiteOptions:
    init_from: str
    workdir: str
    tasks: str = ""                # "" : the embedded default suite
    preset: str = "default"
    seeds: int = 0                 # 0: the preset's
    learning_rates: tuple = ()     # (): the preset's grid at the model's width
    epochs: int = -1               # -1: the preset's (0: by the model's width)
    parallel: int = 1
    probe: bool = False
    probe_only: bool = False       # probes and embedding tasks, no fine-tuning
    random_init: bool = False
    pooling: str = ""              # fine-tuning pooling; "": the preset's
    embedding_pooling: str = "mean"
    max_train: int = -1            # -1: the preset's; 0: all
    max_eval: int = -1
    train_per_class: int = 0       # few-shot regime: k training examples per class and seed
    intermediate: str = "preset"   # preset | on | off
    only: tuple = ()
    finetune_set: tuple = ()       # field=value overrides for every fine-tuning run
    probe_max_train: int = 2000
    env: dict | None = None        # the fine-tuning subprocesses' environment
    baseline: str = ""             # a method with no model instead (suite/baseline.py)


# Options that only mean something for a model: a baseline run refuses them.
MODEL_ONLY = ("init_from", "learning_rates", "epochs", "parallel", "probe", "random_init",
              "pooling", "embedding_pooling", "intermediate", "finetune_set",
              "probe_max_train", "probe_only")


def embedded_tasks(root: str) -> str:
    """OUT/tasks, built from the standard library once per Python version (deterministic)."""
    from encoder.data import stdlib_tasks
    folder = os.path.join(root, EMBEDDED)
    stamp = os.path.join(folder, "built.json")
    version = {"python": sys.version, "tasks": sorted(stdlib_tasks.TASK_META)}
    if os.path.exists(stamp):
        with open(stamp) as f:
            if json.load(f) == version:
                return folder
    counts = stdlib_tasks.build_all(folder)
    print(f"embedded tasks built in {folder}: {json.dumps(counts)}", flush=True)
    with open(stamp, "w") as f:
        json.dump(version, f)
    return folder


def resolve_preset(opts: SuiteOptions, hidden_size: int) -> dict:
    return presets.resolve(opts.preset, hidden_size, {
        "seeds": opts.seeds or None,
        "learning_rates": tuple(opts.learning_rates) or None,
        "epochs": None if opts.epochs < 0 else opts.epochs,
        "max_train": None if opts.max_train < 0 else opts.max_train,
        "max_eval": None if opts.max_eval < 0 else opts.max_eval,
        "pooling": opts.pooling or None})


def intermediate_plan(opts: SuiteOptions, preset: dict, names: list) -> dict:
    """task -> the task whose fine-tuned model it starts from (both must be in the suite)."""
    if opts.intermediate not in ("preset", "on", "off"):
        raise ValueError(f"--intermediate must be preset, on or off, got {opts.intermediate!r}")
    table = {"preset": preset["intermediate"], "off": {},
             "on": preset["intermediate"] or presets.GLUE_INTERMEDIATE}[opts.intermediate]
    return {t: start for t, start in table.items() if t in names and start in names}


def run_settings(task, preset: dict, opts: SuiteOptions, lr: float, seed: int) -> dict:
    return dict(lr=lr, seed=seed, epochs=presets.epochs_for(preset, task.name, task.type),
                batch_size=preset["batch_size"], warmup_fraction=preset["warmup_fraction"],
                weight_decay=preset["weight_decay"], layer_decay=preset["layer_decay"],
                dropout=preset["dropout"],
                max_seq_len=presets.seq_len_for(preset, task.type, task.max_seq_len),
                pooling=preset["pooling"], random_init=opts.random_init)


def plan(tasks: list, prepared: dict, preset: dict, opts: SuiteOptions, root: str,
         starts: dict) -> list:
    """Every fine-tuning run, task x learning rate x seed (runs_lib.Run)."""
    out = []
    for task in tasks:
        if task.kind != "finetune":
            continue
        p = prepared[task.name]
        for lr in preset["learning_rates"]:
            for seed in range(preset["seeds"]):
                files = {"train": p.train[seed], "dev": p.dev, "test": p.test}
                args = runs_lib.finetune_args(task.type, opts.init_from, files,
                                              run_settings(task, preset, opts, lr, seed),
                                              list(opts.finetune_set))
                out.append(runs_lib.Run(task.name, lr, seed,
                                        runs_lib.run_dir(root, task.name, lr, seed), args,
                                        after=starts.get(task.name, "")))
    return out


def collect(task, task_runs: list, prepared, rule: str) -> list:
    """Rows {task, lr, seed, metrics, score, dir} of a task's finished runs."""
    gold = {"dev": prepared.dev, "test": prepared.test}
    return [report.row(task, run.lr, run.seed, report.run_metrics(task, run.dir, gold), rule,
                       run.dir) for run in task_runs if runs_lib.finished(run)]


def start_for(run, start_task, start_rows: list, start_runs: list, rule: str):
    """The start task's workdir for this run (best median learning rate, same seed), or None."""
    if not start_rows:
        return None
    best = report.summarize(start_task, start_rows, rule)["lr"]
    match = [r for r in start_runs if r.lr == best and r.seed == run.seed and
             runs_lib.finished(r)]
    return match[0].dir if match else None


def embedding_rows(tasks: list, src, preset: dict, opts: SuiteOptions, root: str) -> list:
    """Rows of the embedding tasks: one per seed with --random_init, else one."""
    from encoder.jobs import probe
    rows = []
    seeds = range(preset["seeds"]) if opts.random_init else [0]
    for task in [t for t in tasks if t.kind != "finetune"]:
        max_len = presets.seq_len_for(preset, "sequence", task.max_seq_len)
        for seed in seeds:
            key = {"init_from": opts.init_from, "random_init": opts.random_init, "seed": seed,
                   "pooling": opts.embedding_pooling, "max_len": max_len,
                   "max_eval": preset["max_eval"], "files": task.files}

            def compute(task=task, seed=seed, max_len=max_len):
                params = probe.random_params(src.model_cfg, seed) if opts.random_init \
                    else src.params
                encode = embedding.encoder_fn(src.model_cfg, params, src.tokenizer,
                                              opts.embedding_pooling, max_len)
                return embedding.evaluate(task, encode, preset["max_eval"])
            raw = embedding.cached(os.path.join(root, "embeddings", task.name, f"{seed}.json"),
                                   key, compute)
            rows.append(report.row(task, None, seed,
                                   {k: report.percent(k, v) for k, v in raw.items()},
                                   preset["average"], os.path.join(root, "embeddings", task.name)))
    return rows


PROBE_MAX_TOKENS = 20000  # training words per tagging probe (a seeded draw)


def probe_table(tasks: list, prepared: dict, src, preset: dict, opts: SuiteOptions,
                root: str) -> dict:
    """Per-layer probes of the classification, regression and tagging tasks
    (encoder/eval/probe.py; tagging per word, by entity F1)."""
    from encoder.tasks import readers as tasks_lib
    from encoder.jobs import probe
    out_dir = os.path.join(root, "probes")
    table = {}
    for task in [t for t in tasks if t.kind == "finetune" and
                 t.type in ("classification", "regression", "tagging")]:
        p = prepared[task.name]
        max_len = presets.seq_len_for(preset, task.type, task.max_seq_len)
        key = {"init_from": opts.init_from, "random_init": opts.random_init,
               "train": p.train[0], "dev": p.dev, "max_train": opts.probe_max_train,
               "max_len": max_len}
        if task.type == "tagging":
            key["max_tokens"] = PROBE_MAX_TOKENS

        def compute(task=task, p=p, max_len=max_len):
            train = catalog.subsample(tasks_lib.read_jsonl(p.train[0], task.type),
                                      opts.probe_max_train, 0)
            dev = tasks_lib.read_jsonl(p.dev, task.type)
            params = probe.random_params(src.model_cfg, 0) if opts.random_init else src.params
            if task.type == "tagging":
                return probe.probe_tagging_task(src.model_cfg, params, src.tokenizer, train,
                                                dev, max_len, 0, PROBE_MAX_TOKENS)
            return probe.probe_task(src.model_cfg, params, src.tokenizer, train, dev,
                                    task.type, max_len)
        table[task.name] = embedding.cached(os.path.join(out_dir, f"{task.name}.json"), key,
                                            compute)
    if table:
        with open(os.path.join(out_dir, "probes.json"), "w") as f:
            json.dump(table, f, indent=1)
        probe.heatmap(table, os.path.join(out_dir, "probes.png"))
    return table


def data_notes(prepared: dict) -> list:
    notes = []
    for name, p in prepared.items():
        rows, skipped = p.record["rows"], p.record["skipped"]
        used = ", ".join(f"{k} {v}" for k, v in rows.items())
        bad = {k: len(v) for k, v in skipped.items() if v}
        notes.append(f"{name}: rows read {used}" + (
            f"; rows with missing columns skipped {bad} (first: "
            f"{next(v[0] for v in skipped.values() if v)})" if bad else ""))
    return notes


def find_tasks(opts: SuiteOptions, root: str) -> tuple[str, list]:
    """(the tasks folder, its tasks after --only); skipped folders are printed."""
    tasks_dir = os.path.abspath(opts.tasks) if opts.tasks else embedded_tasks(root)
    tasks, notes = catalog.discover(tasks_dir, list(opts.only))
    for n in notes:
        print(n, flush=True)
    return tasks_dir, tasks


def prepare_tasks(tasks: list, root: str, preset: dict, opts: SuiteOptions) -> dict:
    """task name -> catalog.Prepared, for every fine-tuned task (OUT/data/<task>/)."""
    return {t.name: catalog.prepare(t, os.path.join(root, "data"), list(range(preset["seeds"])),
                                    preset["max_train"], preset["max_eval"],
                                    opts.train_per_class)
            for t in tasks if t.kind == "finetune"}


def subset_header(opts: SuiteOptions, preset: dict) -> dict:
    return {"train subset": (f"{opts.train_per_class} per class and seed"
                             if opts.train_per_class else preset["max_train"] or "all"),
            "dev subset": preset["max_eval"] or "all"}


def run_suite(opts: SuiteOptions) -> dict:
    if opts.baseline:
        return run_baseline(opts)
    if not opts.init_from:
        raise ValueError("the suite needs a model (--init_from) or a --baseline")
    from encoder.checkpoints import sources
    from encoder.model import models
    t0 = time.time()
    root = os.path.abspath(opts.workdir)
    os.makedirs(root, exist_ok=True)
    if opts.parallel < 1:
        raise ValueError(f"--parallel must be at least 1, got {opts.parallel}")
    if opts.probe_only:
        refuse_to_replace_finetuned_report(root)
    tasks_dir, tasks = find_tasks(opts, root)
    src = sources.load(opts.init_from)
    preset = resolve_preset(opts, src.model_cfg.hidden_size)
    models.validate_pooling(preset["pooling"])  # a typo fails here, not in every child
    models.validate_pooling(opts.embedding_pooling)
    bad = [kv for kv in opts.finetune_set if "=" not in kv]
    if bad:
        raise ValueError(f"--finetune_set expects field=value, got {bad}")
    rule = preset["average"]
    seeds = list(range(preset["seeds"]))
    prepared = prepare_tasks(tasks, root, preset, opts)
    starts = intermediate_plan(opts, preset, [t.name for t in tasks])
    all_runs = [] if opts.probe_only else plan(tasks, prepared, preset, opts, root, starts)
    print(f"{len(tasks)} tasks, {len(all_runs)} fine-tuning runs "
          f"({len(preset['learning_rates'])} learning rates x {len(seeds)} seeds); "
          f"preset {opts.preset}", flush=True)

    rows = embedding_rows(tasks, src, preset, opts, root)
    probes = probe_table(tasks, prepared, src, preset, opts, root) \
        if opts.probe or opts.probe_only else None
    del src  # the children load their own copy

    by_name = {t.name: t for t in tasks}
    first = [r for r in all_runs if not r.after]
    _, failures = runs_lib.execute(first, opts.parallel, opts.env)
    second = []
    for run in [r for r in all_runs if r.after]:
        start_runs = [r for r in all_runs if r.task == run.after]
        start = start_for(run, by_name[run.after],
                          collect(by_name[run.after], start_runs, prepared[run.after], rule),
                          start_runs, rule)
        if start is None:
            failures.append(runs_lib.Failure(run, f"its start, {run.after} seed {run.seed} at "
                                                  "the chosen learning rate, did not finish"))
        else:
            second.append(runs_lib.with_init_from(run, start))
    _, more = runs_lib.execute(second, opts.parallel, opts.env)
    failures += more
    final_runs = first + second
    for task in tasks:
        if task.kind == "finetune":
            rows += collect(task, [r for r in final_runs if r.task == task.name],
                            prepared[task.name], rule)

    header = {"source": opts.init_from + (" (random initialisation: same architecture and "
                                          "tokenizer)" if opts.random_init else ""),
              "tasks": tasks_dir, "preset": opts.preset,
              "seeds": preset["seeds"],
              "learning rates": ", ".join(f"{lr:g}" for lr in preset["learning_rates"]),
              "epochs": {t.name: presets.epochs_for(preset, t.name, t.type) for t in tasks
                         if t.kind == "finetune"},
              "average rule": rule, "intermediate starts": starts or "none",
              "fine-tuning pooling": preset["pooling"],
              "embedding pooling": opts.embedding_pooling,
              **subset_header(opts, preset),
              "wall time (this invocation)": f"{time.time() - t0:.0f} s"}
    if opts.probe_only:  # no fine-tuned task is "missing": none was asked for
        header["fine-tuning"] = "none (--probe_only)"
    reported = [t for t in tasks if t.kind != "finetune"] if opts.probe_only else tasks
    return write_report(root, reported, rows, rule, header, failures, data_notes(prepared),
                        probes, "run(s)")


def write_report(root, tasks, rows, rule, header, failures, notes, probes, what) -> dict:
    """suite.csv/md/json/png (report.write_all); failures also to stderr; result['failed']."""
    result = report.write_all(root, tasks, rows, rule, header, failures, notes, probes)
    if failures:
        print(f"{len(failures)} {what} failed:\n" + "\n".join(f"  {f}" for f in failures),
              file=sys.stderr, flush=True)
    result["failed"] = len(failures)
    return result


def check_baseline_options(opts: SuiteOptions) -> None:
    """A baseline scores no model: a model's option beside it is an error, not ignored."""
    baseline_lib.check(opts.baseline)
    if opts.init_from:
        raise ValueError(f"--baseline={opts.baseline} scores no model, so --init_from="
                         f"{opts.init_from} has no meaning beside it: run the model's suite "
                         "and the baseline into two workdirs and put their suite.csv rows "
                         "side by side")
    default = SuiteOptions(init_from="", workdir="")
    given = [k for k in MODEL_ONLY if getattr(opts, k) != getattr(default, k)]
    if given:
        raise ValueError(f"--baseline={opts.baseline} scores no model; these options only "
                         f"apply to a model's suite: {', '.join('--' + k for k in given)}")


def refuse_to_replace_finetuned_report(root: str) -> None:
    """--probe_only writes suite.json without fine-tuned tasks: never over a report with them
    (ablate's suite columns would silently become an embedding-only average)."""
    saved = os.path.join(root, "suite.json")
    if not os.path.exists(saved):
        return
    with open(saved) as f:
        header = json.load(f).get("header", {})
    if header.get("fine-tuning") != "none (--probe_only)":
        raise ValueError(f"{root} holds a suite report with fine-tuned tasks; --probe_only "
                         "would replace it with an embedding-only one: run the full suite "
                         "again there (finished runs are skipped) with --probe, or choose "
                         "another --workdir")


def run_baseline(opts: SuiteOptions) -> dict:
    """The suite's report for a method with no model (suite/baseline.py): the same tasks,
    prepared data (per-seed training draws included), metrics and averages."""
    t0 = time.time()
    check_baseline_options(opts)
    root = os.path.abspath(opts.workdir)
    saved = os.path.join(root, "suite.json")
    if os.path.exists(saved):  # never overwrite a model's report (hours of runs) with this
        with open(saved) as f:
            source = str(json.load(f).get("header", {}).get("source", ""))
        if not source.startswith("baseline:"):
            raise ValueError(f"{root} holds a model's suite ({source}); a baseline writes "
                             "suite.csv, suite.md and suite.json too: choose another --workdir")
    os.makedirs(root, exist_ok=True)
    tasks_dir, tasks = find_tasks(opts, root)
    # The width picks only learning rates and layer decay, which no baseline uses.
    preset = resolve_preset(opts, hidden_size=0)
    rule = preset["average"]
    prepared = prepare_tasks(tasks, root, preset, opts)
    scored, rows, notes, failures = baseline_lib.score_tasks(
        opts.baseline, tasks, prepared, list(range(preset["seeds"])), preset["max_eval"],
        root, rule)
    described = baseline_lib.DESCRIPTIONS[opts.baseline]
    header = {"source": f"baseline:{opts.baseline} (no model)", "tasks": tasks_dir,
              "preset": opts.preset,
              "method": {t: described[t] for t in dict.fromkeys(x.type for x in scored)},
              "seeds": f"{preset['seeds']}: one run per distinct training file (the "
                       "methods are deterministic; a task trained on all of its data runs once)",
              "average rule": rule,
              **({"fitted on": baseline_lib.FITTED_ON[opts.baseline]}
                 if opts.baseline in baseline_lib.FITTED_ON else {}),
              **subset_header(opts, preset),
              "wall time (this invocation)": f"{time.time() - t0:.0f} s"}
    return write_report(root, scored, rows, rule, header, failures,
                        notes + data_notes(prepared), None, "task(s)")


def suite_average(suite_dir: str) -> dict:
    """{'suite/average': x, 'suite/<task>': median, ...} of a finished suite (for ablate)."""
    with open(os.path.join(suite_dir, "suite.json")) as f:
        saved = json.load(f)
    out = {f"suite/{s['task']}": s["median"] for s in saved["tasks"]}
    for name, value in saved["averages"].items():
        if not name.endswith("_tasks") and isinstance(value, (int, float)) and math.isfinite(
                value):
            out["suite/" + name] = float(value)
    return out

