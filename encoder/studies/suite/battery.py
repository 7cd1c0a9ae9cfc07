"""The suite, start to finish: tasks -> data -> embeddings, probes, fine-tuning runs -> table.

`run_suite(SuiteOptions(...))` is what `python -m encoder suite` calls. Order:
find the tasks (or build the embedded ones), read the source model's width
(presets depend on it), prepare each fine-tuned task's data, score the
embedding tasks and (--probe) the per-layer probes in this process, then run
the fine-tuning grid through the study runner and its launcher (tasks that
start from another task's model, e.g. RTE from MNLI, in a second wave once
that task's learning rate is chosen), read every finished run back and write
the report. Everything finished is kept on disk and skipped by the next start.

`run_suite(SuiteOptions(baseline="bow", ...))` scores a method with no model instead
(suite/baseline.py) on the same prepared data, into the same report files.

options.py  what was asked, and its checks     data.py    the tasks and their data
plan.py     the fine-tuning grid as runs        frozen.py  embedding tasks and probes
report.py   medians, averages, report files    (the runner: encoder/studies/runner.py)
"""
import json
import math
import os
import shutil
import sys
import time

from encoder.eval import identity
from encoder.studies import launchers, runner
from encoder.studies.suite import baseline as baseline_lib
from encoder.studies.suite import data, frozen, options, plan as plan_lib, presets, report
# The names callers and tests use, where they live now.
from encoder.studies.suite.data import embedded_tasks  # noqa: F401
from encoder.studies.suite.options import (SuiteOptions, intermediate_plan,  # noqa: F401
                                           refuse_to_replace_finetuned_report)


HASHES = ".hashes.json"  # OUT/: each hashed file's sha256 by size and date (a rerun re-reads
# only what changed: identity.HashCache)


def launcher_options(opts: SuiteOptions) -> dict:
    """The launcher's options: local runs take --parallel and the children's environment."""
    if opts.launcher == "local":
        return {"parallel": opts.parallel, "env": opts.env}
    return {**(opts.launcher_options or {}), **({"env": opts.env} if opts.env else {})}


def _check(opts: SuiteOptions, root: str) -> None:
    """What the options can be refused for before any task or model is read."""
    if not opts.init_from:
        raise ValueError("the suite needs a model (--init_from) or a --baseline")
    if opts.parallel < 1:
        raise ValueError(f"--parallel must be at least 1, got {opts.parallel}")
    if opts.probe_only:
        options.refuse_to_replace_finetuned_report(root)
    bad = [kv for kv in opts.finetune_set if "=" not in kv]
    if bad:
        raise ValueError(f"--finetune_set expects field=value, got {bad}")


def _fine_tune(all_runs: list, tasks: list, prepared: dict, rule: str, opts: SuiteOptions,
               cache) -> tuple[list | None, list]:
    """The fine-tuning grid through the runner: the first wave, then the runs that start
    from another task's chosen run (RTE from MNLI). Returns (rows, failures); rows None
    when the launcher returned before its runs ended (--detach, --dry_run)."""
    by_name = {t.name: t for t in tasks}
    first = [r for r in all_runs if not r.tags["after"]]
    launcher = launchers.make(opts.launcher, **launcher_options(opts))
    _, failures = runner.execute(first, launcher)
    if launcher.detached:
        return None, failures
    second = []
    for run in [r for r in all_runs if r.tags["after"]]:
        after = run.tags["after"]
        start_runs = [r for r in all_runs if r.tags["task"] == after]
        start = plan_lib.start_for(run, by_name[after],
                                   plan_lib.collect(by_name[after], start_runs, prepared[after],
                                                    rule), start_runs, rule)
        if start is None:
            failures.append(runner.Failure(run, f"its start, {after} seed {run.tags['seed']} "
                                                "at the chosen learning rate, did not finish"))
        else:
            second.append(plan_lib.with_init_from(run, start, cache))
    _, more = runner.execute(second, launcher)
    rows = []
    for task in tasks:
        if task.kind == "finetune":
            rows += plan_lib.collect(task, [r for r in first + second
                                            if r.tags["task"] == task.name],
                                     prepared[task.name], rule)
    return rows, failures + more


def _header(opts: SuiteOptions, preset: dict, tasks: list, tasks_dir: str, source: dict,
            starts, t0: float) -> dict:
    rule = preset["average"]
    header = {"source": opts.init_from + (" (random initialisation: same architecture and "
                                          "tokenizer)" if opts.random_init else ""),
              "checkpoint": identity.describe(source),
              "tasks": tasks_dir, "preset": opts.preset,
              "seeds": preset["seeds"],
              "learning rates": ", ".join(f"{lr:g}" for lr in preset["learning_rates"]),
              "epochs": {t.name: presets.epochs_for(preset, t.name, t.type) for t in tasks
                         if t.kind == "finetune"},
              "average rule": rule, "intermediate starts": starts or "none",
              "fine-tuning pooling": preset["pooling"],
              "embedding pooling": opts.embedding_pooling,
              **data.subset_header(opts, preset),
              "wall time (this invocation)": f"{time.time() - t0:.0f} s"}
    if opts.probe_only:  # no fine-tuned task is "missing": none was asked for
        header["fine-tuning"] = "none (--probe_only)"
    return header


def _source_changed(opts: SuiteOptions, source: dict, cache, header: dict) -> str | None:
    """A failure line when the source was trained on (or replaced) while the suite ran."""
    now = identity.source_identity(opts.init_from, cache)
    if identity.same_source(now, source):
        return None
    changed = "; ".join(identity.changes({"source": source}, {"source": now}))
    header["checkpoint"] += (f"; CHANGED while the suite ran ({changed}): runs started "
                             "after the change may have loaded the new model")
    return (f"the source changed while the suite ran ({changed}): its rows may mix two "
            "models; run the same command again (the runs of the old model are moved aside "
            "and rerun)")


def run_suite(opts: SuiteOptions) -> dict:
    options.check_grid(opts)
    if opts.baseline:
        return run_baseline(opts)
    from encoder.checkpoints import sources
    from encoder.model import models
    t0, root = time.time(), os.path.abspath(opts.workdir)
    _check(opts, root)
    src = sources.load(opts.init_from)  # a wrong source is named before any task is built
    os.makedirs(root, exist_ok=True)
    tasks_dir, tasks = data.find_tasks(opts, root)
    retrieval_notes = data.check_retrieval_tasks(tasks)
    preset = options.resolve_preset(opts, src.model_cfg.hidden_size)
    models.validate_pooling(preset["pooling"])  # a typo fails here, not in every child
    models.validate_pooling(opts.embedding_pooling)
    plan_lib.check_sets(tasks, preset, opts)
    rule = preset["average"]
    prepared = data.prepare_tasks(tasks, root, preset, opts)
    # What the scores are of: the source's identity (checkpoint step, content hash),
    # recorded with every run, cached score and table; a run of another model or data at
    # the same paths is rerun, not reused.
    cache = identity.HashCache(os.path.join(root, HASHES))
    source = identity.source_identity(opts.init_from, cache)
    task_files = data.files_identity(tasks, cache)
    starts = options.intermediate_plan(opts, preset, [t.name for t in tasks])
    all_runs = [] if opts.probe_only else plan_lib.plan(tasks, prepared, preset, opts, root,
                                                        starts, source, cache)
    print(f"{len(tasks)} tasks, {len(all_runs)} fine-tuning runs "
          f"({len(preset['learning_rates'])} learning rates x {preset['seeds']} seeds); "
          f"preset {opts.preset}", flush=True)
    rows = frozen.embedding_rows(tasks, src, preset, opts, root, source, task_files)
    probes = frozen.probe_table(tasks, prepared, src, preset, opts, root, source) \
        if opts.probe or opts.probe_only else None
    del src  # the children load their own copy
    tuned, failures = _fine_tune(all_runs, tasks, prepared, rule, opts, cache)
    if tuned is None:  # --detach / --dry_run: the same command later waits and reports
        return {"detached": True, "failed": len(failures)}
    rows += tuned
    header = _header(opts, preset, tasks, tasks_dir, source, starts, t0)
    changed = _source_changed(opts, source, cache, header)
    failures += [changed] if changed else []
    cache.save()
    reported = [t for t in tasks if t.kind != "finetune"] if opts.probe_only else tasks
    return write_report(root, reported, rows, rule, header, failures,
                        retrieval_notes + data.data_notes(prepared), probes, "run(s)",
                        {"source": source, "data": task_files})


PREVIOUS = "suite.previous.json"  # OUT/: the report a rerun of another model replaced


def _model(source: dict | None, header: dict) -> str:
    """The model a report scored, as one phrase (a baseline: its method)."""
    return identity.describe(source) if source else str(header.get("source", "?"))


def report_changes(root: str, tasks: list, header: dict, scored: dict | None) -> list[str]:
    """What differs between the report in root and the one about to replace it: the model
    (its path, step and content), the method, the tasks, their files; [] when none does
    or root holds no report."""
    saved = os.path.join(root, "suite.json")
    try:
        with open(saved) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return []
    out = []
    a, b = (old.get("identity") or {}).get("source"), (scored or {}).get("source")
    was, now = _model(a, old.get("header") or {}), _model(b, header)
    if (a or b) and not identity.same_source(a, b) or not (a or b) and was != now:
        out.append(f"model: {was} -> {now}")
    before = sorted({s.get("task") for s in old.get("tasks") or []} | set(old.get("missing")
                                                                          or []))
    after = sorted(t.name for t in tasks)
    if before != after:
        gone, new = sorted(set(before) - set(after)), sorted(set(after) - set(before))
        out.append("tasks: " + ", ".join([f"+{n}" for n in new] + [f"-{n}" for n in gone]))
    out += rescored_files(saved, (scored or {}).get("data") or {})
    return out


def keep_previous(root: str, changes: list[str]) -> None:
    """A report of another model, step or task set is kept as suite.previous.json, said."""
    if not changes:
        return
    shutil.copy(os.path.join(root, "suite.json"), os.path.join(root, PREVIOUS))
    print(f"suite: {os.path.join(root, 'suite.json')} was the report of another model or "
          f"task set ({'; '.join(changes)}); it is kept as {PREVIOUS}", flush=True)


def write_report(root, tasks, rows, rule, header, failures, notes, probes, what,
                 scored=None) -> dict:
    """suite.csv/md/json/png (report.write_all); failures also to stderr; result['failed'].
    scored: {source, data}: the identity of what every score scored (suite.json). A report
    there of another model, step, task set or task files is kept (keep_previous)."""
    keep_previous(root, report_changes(root, tasks, header, scored))
    result = report.write_all(root, tasks, rows, rule, header, failures, notes, probes,
                              scored)
    if failures:
        print(f"{len(failures)} {what} failed:\n" + "\n".join(f"  {f}" for f in failures),
              file=sys.stderr, flush=True)
    result["failed"] = len(failures)
    return result


def run_baseline(opts: SuiteOptions) -> dict:
    """The suite's report for a method with no model (suite/baseline.py): the same tasks,
    prepared data (per-seed training draws included), metrics and averages."""
    t0 = time.time()
    options.check_baseline_options(opts)
    root = os.path.abspath(opts.workdir)
    saved = os.path.join(root, "suite.json")
    if os.path.exists(saved):  # never overwrite a model's report (hours of runs) with this
        with open(saved) as f:
            source = str(json.load(f).get("header", {}).get("source", ""))
        if not source.startswith("baseline:"):
            raise ValueError(f"{root} holds a model's suite ({source}); a baseline writes "
                             "suite.csv, suite.md and suite.json too: choose another --workdir")
    os.makedirs(root, exist_ok=True)
    tasks_dir, tasks = data.find_tasks(opts, root)
    retrieval_notes = data.check_retrieval_tasks(tasks)
    # The width picks only learning rates and layer decay, which no baseline uses.
    preset = options.resolve_preset(opts, hidden_size=0)
    rule = preset["average"]
    prepared = data.prepare_tasks(tasks, root, preset, opts)
    task_files = data.files_identity(tasks)
    _say_rescored(saved, task_files)
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
              **data.subset_header(opts, preset),
              "wall time (this invocation)": f"{time.time() - t0:.0f} s"}
    return write_report(root, scored, rows, rule, header, failures,
                        retrieval_notes + notes + data.data_notes(prepared), None, "task(s)",
                        {"source": None, "data": task_files})


def rescored_files(saved: str, task_files: dict) -> list[str]:
    """'TASK SPLIT: PATH changed (sha256 a -> b)' for each task file that differs from those
    the report at `saved` scored ([] when none does, or there is no report)."""
    try:
        with open(saved) as f:
            old = (json.load(f).get("identity") or {}).get("data") or {}
    except (OSError, ValueError):
        return []
    out = []
    for task, files in task_files.items():
        for split, now in files.items():
            was = (old.get(task) or {}).get(split)
            if was is not None and was.get("sha256") != now.get("sha256"):
                out.append(f"{task} {split}: {now.get('path')} changed (sha256 "
                           f"{was.get('sha256')} -> {now.get('sha256')})")
    return out


def _say_rescored(saved: str, task_files: dict) -> None:
    """A baseline is rescored whole; when the task files changed, it says which (the
    previous report is kept beside the new one: write_report)."""
    for line in rescored_files(saved, task_files):
        print(f"rescoring: {line}", flush=True)


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
