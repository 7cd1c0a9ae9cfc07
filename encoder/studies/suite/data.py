"""The suite's inputs: which tasks, the embedded default battery, each task's prepared data."""
import os
import shutil
import sys

from encoder.tasks import catalog, embedding
from encoder.studies.suite.options import SuiteOptions

EMBEDDED = "tasks"  # OUT/tasks: the embedded default suite, built once


def embedded_tasks(root: str) -> str:
    """OUT/tasks, built from the standard library once per Python version (deterministic)."""
    from encoder.data import embedded_tasks
    return embedded_tasks.build_once(os.path.join(root, EMBEDDED))


def find_tasks(opts: SuiteOptions, root: str) -> tuple[str, list]:
    """(the tasks folder, its tasks after --only); skipped folders are printed."""
    tasks_dir = os.path.abspath(opts.tasks) if opts.tasks else embedded_tasks(root)
    tasks, notes = catalog.discover(tasks_dir, list(opts.only))
    for n in notes:
        print(n, flush=True)
    return tasks_dir, tasks


def prepare_tasks(tasks: list, root: str, preset: dict, opts: SuiteOptions) -> dict:
    """task name -> catalog.Prepared, for every fine-tuned task (OUT/data/<task>/).

    A model's suite checks every split as its runs will read it, and the STS tasks' pairs
    (catalog.check_scorable): a task that cannot be learnt or scored is refused before the
    first run starts. A baseline scores in this process and reports such a task as failed
    (exit 1) beside the others."""
    check = None if opts.baseline else catalog.check_scorable
    for t in tasks:
        if t.kind == "sts" and check is not None:
            check(t, "test", embedding.read_sts(t.files["test"], preset["max_eval"]),
                  t.files["test"])
    data_root = os.path.join(root, "data")
    fresh = not os.path.exists(data_root)
    try:
        return {t.name: catalog.prepare(t, data_root, list(range(preset["seeds"])),
                                        preset["max_train"], preset["max_eval"],
                                        opts.train_per_class, check)
                for t in tasks if t.kind == "finetune"}
    except Exception:
        if fresh:  # refused (or a file failed to read): what this call began writing goes
            shutil.rmtree(data_root, ignore_errors=True)
        raise


def check_retrieval_tasks(tasks: list) -> list[str]:
    """Every retrieval task's BEIR files checked before anything is scored (ids across the
    files, grades: encoder/retrieval/beir.py check_ids); a refusal raises, naming file:line.
    Returns the warnings (printed now, repeated in the report's data notes)."""
    notes = []
    for t in tasks:
        if t.kind == "retrieval":
            notes += embedding.check_retrieval(t)
    for n in notes:
        print(f"warning: {n}", file=sys.stderr, flush=True)
    return notes


def files_identity(tasks: list, cache=None) -> dict:
    """task -> {split: {path, sha256}} of every task's own files (what its scores scored;
    a fine-tuned task's runs also record the prepared files they read)."""
    from encoder.eval import identity
    return {t.name: identity.files_identity(t.files, cache) for t in tasks}


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


def subset_header(opts: SuiteOptions, preset: dict) -> dict:
    return {"train subset": (f"{opts.train_per_class} per class and seed"
                             if opts.train_per_class else preset["max_train"] or "all"),
            "dev subset": preset["max_eval"] or "all"}
