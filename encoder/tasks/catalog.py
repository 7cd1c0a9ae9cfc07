"""Which tasks a folder holds, and each task's data prepared for the fine-tuning runs.

A tasks folder holds one folder per task (or is itself one task folder):

  * GLUE's own layout, recognised by the folder's name (glue.py): TSV files
    read by encoder/tasks/files.py's GLUE reader, GLUE's labels and metrics;
  * this codebase's JSONL tasks: train.jsonl and dev.jsonl (train.json /
    dev.json in SQuAD form for qa: a type's own `formats`) and a task.json such as
    {"type": "regression", "metrics": ["pearson", "spearman"]} (keys:
    type, metric or metrics, positive_label, max_seq_len; the metrics a type
    reports and its defaults are its class's `metric_keys` and `default_metrics`;
    without task.json a folder with train.jsonl is a task of the default type,
    classification, scored by accuracy);
  * embedding tasks, scored with no fine-tuning (embedding.py):
    {"type": "sts"} with test.jsonl pairs {text_a, text_b, label} (or dev.jsonl),
    or {"type": "retrieval"} in BEIR's layout (corpus.jsonl, queries.jsonl,
    qrels/test.tsv), which is also recognised without task.json.

Preparation writes every fine-tuned task's splits as JSONL under
OUT/data/<task>/ (GLUE's files converted, rows with missing columns skipped
and counted, limits applied), so every run reads one plain format and the
record of what was read sits beside it (data.json).
"""
import dataclasses
import json
import os

import numpy as np

from encoder.data import overlap
from encoder.tasks import files as task_files
from encoder.tasks import readers as tasks_lib
from encoder.tasks import table
from encoder.tasks.table import TASKS
from encoder.tasks import glue

# Embedding tasks: the first metric is MTEB's main score (the task's score).
EMBEDDING_KEYS = {"sts": ("cosine_spearman",),
                  "retrieval": ("ndcg_at_10", "mrr_at_10", "recall_at_1", "recall_at_10",
                                "recall_at_100", "map")}


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str    # as reported (f1, accuracy_mm, ...)
    split: str   # the eval.json split it is read from (dev, or test for MNLI-mm)
    key: str     # the eval.json key (binary_f1: computed from predictions)


@dataclasses.dataclass(frozen=True)
class SuiteTask:
    name: str
    kind: str                      # finetune | sts | retrieval
    type: str                      # a fine-tuning task type, or sts / retrieval
    folder: str
    files: dict                    # split -> source file
    metrics: tuple                 # Metric, ...
    score_metrics: tuple           # metric names whose mean is the task's score
    glue: bool = False
    pair: bool | None = None       # GLUE: the expected columns
    labels: tuple | None = None    # GLUE: the allowed labels
    positive: str | None = None    # binary_f1's positive label
    max_seq_len: int = 0           # 0: the preset's


def _read_meta(folder: str) -> dict | None:
    path = os.path.join(folder, "task.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        meta = json.load(f)
    if not isinstance(meta, dict) or "type" not in meta:
        raise tasks_lib.TaskDataError(f"{path}: expected an object with a 'type' field")
    return meta


def _glue_task(name: str, folder: str) -> SuiteTask:
    spec = glue.GLUE_TASKS[name]
    files = {split: os.path.join(folder, f) for split, f in glue.files_of(name).items()}
    metrics = tuple(Metric(*m) for m in spec["metrics"])
    return SuiteTask(name, "finetune", spec["type"], folder, files, metrics,
                     tuple(m.name for m in metrics), glue=True, pair=spec["pair"],
                     labels=spec["labels"], positive=spec.get("positive"))


def _first_existing(folder: str, names) -> str | None:
    return next((os.path.join(folder, n) for n in names
                 if os.path.exists(os.path.join(folder, n))), None)


def _jsonl_task(name: str, folder: str, meta: dict) -> SuiteTask:
    kind = meta["type"]
    where = os.path.join(folder, "task.json")
    if kind in EMBEDDING_KEYS:
        if kind == "sts":
            path = _first_existing(folder, ("test.jsonl", "dev.jsonl"))
            if path is None:
                raise tasks_lib.TaskDataError(f"{folder}: an sts task needs test.jsonl or "
                                              "dev.jsonl")
            files = {"test": path}
        else:
            files = retrieval_files(folder)
        metrics = tuple(Metric(k, "test", k) for k in EMBEDDING_KEYS[kind])
        return SuiteTask(name, kind, kind, folder, files, metrics, (metrics[0].name,),
                         max_seq_len=int(meta.get("max_seq_len", 0)))
    if kind not in TASKS:
        raise tasks_lib.TaskDataError(
            f"{where}: unknown type {kind!r}; valid: {sorted(TASKS) + sorted(EMBEDDING_KEYS)}")
    spec = TASKS[kind]
    keys = meta.get("metrics", [meta["metric"]] if "metric" in meta else spec.default_metrics)
    bad = [k for k in keys if k not in spec.metric_keys]
    if bad or not keys:
        raise tasks_lib.TaskDataError(f"{where}: metric(s) {bad or keys} are not reported for "
                                      f"{kind}; choose from {spec.metric_keys}")
    if "binary_f1" in keys and "positive_label" not in meta:
        raise tasks_lib.TaskDataError(f"{where}: binary_f1 needs 'positive_label'")
    ext = (".jsonl", *spec.formats)
    files = {}
    for split in ("train", "dev"):
        path = _first_existing(folder, [split + e for e in ext])
        if path is None:
            raise tasks_lib.TaskDataError(f"{folder}: no {split}.jsonl")
        files[split] = path
    metrics = tuple(Metric(k, "dev", k) for k in keys)
    positive = meta.get("positive_label")
    return SuiteTask(name, "finetune", kind, folder, files, metrics, tuple(keys),
                     positive=None if positive is None else str(positive),
                     max_seq_len=int(meta.get("max_seq_len", 0)))


def retrieval_files(folder: str) -> dict:
    """BEIR's layout: corpus.jsonl, queries.jsonl and qrels/test.tsv (or qrels/dev.tsv)."""
    qrels = _first_existing(os.path.join(folder, "qrels"), ("test.tsv", "dev.tsv"))
    files = {"corpus": os.path.join(folder, "corpus.jsonl"),
             "queries": os.path.join(folder, "queries.jsonl"), "qrels": qrels}
    missing = [k for k, v in files.items() if v is None or not os.path.exists(v)]
    if missing:
        raise tasks_lib.TaskDataError(f"{folder}: a retrieval task needs corpus.jsonl, "
                                      f"queries.jsonl and qrels/test.tsv; missing {missing}")
    return files


def task_of(folder: str) -> SuiteTask | None:
    """The task a folder holds, or None when it holds none (e.g. GLUE's diagnostic set)."""
    name = os.path.basename(os.path.normpath(folder))
    meta = _read_meta(folder)
    if meta is not None:
        return _jsonl_task(name, folder, meta)
    glue_name = glue.glue_name(name)
    if glue_name and os.path.exists(os.path.join(folder, "train.tsv")):
        return _glue_task(glue_name, folder)
    if all(os.path.exists(os.path.join(folder, f)) for f in ("corpus.jsonl", "queries.jsonl")):
        return _jsonl_task(name, folder, {"type": "retrieval"})
    if os.path.exists(os.path.join(folder, "train.jsonl")):
        return _jsonl_task(name, folder, {"type": table.DEFAULT})
    return None


def discover(tasks_dir: str, only: list | None = None) -> tuple[list, list]:
    """(tasks, skipped folder notes): GLUE tasks in GLUE's order, then the rest by name."""
    if not os.path.isdir(tasks_dir):
        raise FileNotFoundError(f"--tasks={tasks_dir!r} is not a folder")
    single = task_of(tasks_dir)
    if single is not None:
        found, notes = [single], []
    else:
        found, notes = [], []
        for entry in sorted(os.listdir(tasks_dir)):
            folder = os.path.join(tasks_dir, entry)
            if not os.path.isdir(folder):
                continue
            task = task_of(folder)
            if task is None:
                notes.append(f"{folder}: no task here (no task.json, GLUE name with train.tsv, "
                             "train.jsonl or BEIR files); skipped")
            else:
                found.append(task)
    order = list(glue.GLUE_TASKS)
    found.sort(key=lambda t: (order.index(t.name) if t.glue else len(order),
                              t.kind != "finetune", t.name))  # fine-tuned, then embedding
    if only:
        unknown = sorted(set(only) - {t.name for t in found})
        if unknown:
            raise ValueError(f"--only names {unknown}, not among the tasks found: "
                             f"{[t.name for t in found]}")
        found = [t for t in found if t.name in only]
    names = [t.name for t in found]
    if len(set(names)) != len(names):
        raise ValueError(f"two task folders resolve to one task name: {names}")
    if not found:
        files = sorted(e for e in os.listdir(tasks_dir)
                       if os.path.isfile(os.path.join(tasks_dir, e)))
        what = "; ".join(notes) or (
            f"it holds files ({', '.join(files[:4])}{', ...' if len(files) > 4 else ''}), no "
            "task folder: a task is a folder with train.jsonl and dev.jsonl (or task.json, "
            "GLUE's train.tsv, BEIR's corpus.jsonl + queries.jsonl); python -m encoder tasks "
            "--out DIR writes the embedded suite" if files else "empty")
        raise FileNotFoundError(f"{tasks_dir}: no tasks found ({what})")
    return found, notes


# ------------------------------------------------------------------------ reading

def _check_glue(task: SuiteTask, examples: list[dict], path: str) -> None:
    """GLUE's columns and labels, as its task defines them; errors name file:line."""
    want = ("text_a", "text_b") if task.pair else ("text",)
    shape = "a sentence pair" if task.pair else "one sentence"
    for ex in examples:
        if not all(k in ex for k in want):
            raise tasks_lib.TaskDataError(
                f"{ex['_where']}: {task.name} expects {shape}; the header of {path} gave "
                f"{sorted(k for k in ex if k != '_where')}")
        if "label" not in ex:
            continue
        if TASKS[task.type].numeric_labels:
            try:
                ex["label"] = float(ex["label"])
            except ValueError:
                raise tasks_lib.TaskDataError(f"{ex['_where']}: {task.name} score "
                                              f"{ex['label']!r} is not a number") from None
        elif task.labels is not None and ex["label"] not in task.labels:
            raise tasks_lib.TaskDataError(f"{ex['_where']}: label {ex['label']!r} is not one of "
                                          f"{task.name}'s labels {list(task.labels)}")


def read_split(task: SuiteTask, split: str) -> tuple[list[dict], list[str]]:
    """(examples, skipped rows) of one split from the task's own files."""
    path = task.files[split]
    skipped: list[str] = []
    if task.glue:
        examples = tasks_lib.read_glue_tsv(path, skipped)
        _check_glue(task, examples, path)
    else:
        examples = tasks_lib.read_examples(path, task.type)
    return examples, skipped


# ---------------------------------------------------------------------- checking

def _where(task: SuiteTask, split: str, path: str) -> str:
    """The file a check names: the task's own, and the drawn subset when one was drawn."""
    source = task.files.get(split, path)
    return source if os.path.abspath(source) == os.path.abspath(path) else (
        f"{path} (drawn from {source})")


def check_scorable(task: SuiteTask, split: str, examples: list, path: str) -> None:
    """Refuses, before the suite's first run, a split the task cannot learn from or be scored
    on: a labelled type's training rows with one label (the run would fail 30 s in), or a
    numeric score that never varies (a regression head learns nothing; Pearson and Spearman
    are undefined, so the suite's average would be NaN). One line naming task and file."""
    spec = TASKS.get(task.type)
    numeric = task.kind == "sts" or (spec is not None and spec.numeric_labels)
    labelled = [ex for ex in examples if "label" in ex]
    if numeric and labelled:
        values = {float(ex["label"]) for ex in labelled}
        if len(values) == 1:
            why = ("a regression head learns nothing from it" if split == "train" else
                   "its correlations (Pearson, Spearman) are undefined and the suite's average "
                   "would be NaN")
            raise tasks_lib.TaskDataError(
                f"task {task.name}: every {split} score in {_where(task, split, path)} is "
                f"{values.pop():g} ({len(labelled)} rows): {why}; give varied scores or leave "
                "the task out (--only=...)")
    if split == "train" and spec is not None and spec.uses_labels and examples:
        names = spec.label_names(examples)
        if len(names) < 2:
            raise tasks_lib.TaskDataError(
                f"task {task.name}: {_where(task, split, path)} has one label "
                f"({names[0]!r}) in all {len(examples)} training rows; a "
                f"{task.type} head needs at least two: add examples of another label or leave "
                "the task out (--only=...)")


# ---------------------------------------------------------------------- preparing

def subsample(examples: list, limit: int, seed: int) -> list:
    """At most `limit` examples (0: all), a seeded choice kept in file order."""
    if not limit or len(examples) <= limit:
        return list(examples)
    idx = np.sort(np.random.default_rng(seed).choice(len(examples), limit, replace=False))
    return [examples[i] for i in idx]


def per_class(examples: list, k: int, seed: int) -> list:
    """k examples of each label (all of a rarer one), a seeded choice in file order."""
    rng = np.random.default_rng(seed)
    keep = []
    for label in sorted({str(ex["label"]) for ex in examples}):
        idx = [i for i, ex in enumerate(examples) if str(ex["label"]) == label]
        keep += list(rng.permutation(idx)[:k])
    return [examples[i] for i in sorted(keep)]


def write_jsonl(path: str, examples: list) -> None:
    """Examples as JSONL, rewritten only when the content changes (a resumed run's
    files keep their bytes), atomically (a killed suite leaves no half file)."""
    text = "".join(json.dumps({k: v for k, v in ex.items() if k != "_where"}) + "\n"
                   for ex in examples)
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


@dataclasses.dataclass
class Prepared:
    """Where a fine-tuned task's runs read their data."""
    train: dict      # seed -> train file (one file for all seeds when nothing is drawn)
    dev: str
    test: str = ""   # MNLI's mismatched dev set (read back as eval.json's test)
    record: dict = dataclasses.field(default_factory=dict)


def held_out_overlap(task: SuiteTask, train: list, held: dict) -> list[str]:
    """The task's dev/test rows against its whole training file, by content (files.py's
    refuse_training_rows): refused past the share it tolerates, naming the task; below,
    said and returned for data.json."""
    try:
        lines = task_files.refuse_training_rows(train, task.files["train"], held)
    except tasks_lib.TaskDataError as e:
        raise tasks_lib.TaskDataError(f"task {task.name}: {e}; or leave the task out "
                                      "(--only=...)") from None
    for line in lines:
        overlap.say(f"task {task.name}: {line}")
    return lines


def prepare(task: SuiteTask, data_root: str, seeds: list, max_train: int = 0,
            max_eval: int = 0, train_per_class: int = 0, check=None) -> Prepared:
    """Writes the task's splits under data_root/<task>/ and says which file each run reads.

    max_train / train_per_class draw a training subset per seed (the subset's luck is
    part of what the spread over seeds measures, as in few-shot evaluation);
    max_eval draws one fixed dev subset for every run. check(task, split, examples, path),
    e.g. check_scorable, sees every split as the runs will read it, before it is written.
    """
    out = os.path.join(data_root, task.name)
    os.makedirs(out, exist_ok=True)
    record = {"task": task.name, "type": task.type, "files": task.files, "skipped": {},
              "rows": {}}
    train, skipped = read_split(task, "train")
    record["skipped"]["train"] = skipped
    record["rows"]["train"] = len(train)
    if train_per_class and not TASKS[task.type].single_label:
        train_per_class = 0  # per-class draws mean nothing without classes
    drawn = bool(max_train or train_per_class)
    train_files = {}
    for seed in (seeds if drawn else [None]):
        subset = (per_class(train, train_per_class, seed) if train_per_class
                  else subsample(train, max_train, seed) if max_train else train)
        path = os.path.join(out, "train.jsonl" if seed is None else f"train.seed{seed}.jsonl")
        if check is not None:
            check(task, "train", subset,  # a draw of fewer rows is named as the draw
                  path if len(subset) < len(train) else task.files["train"])
        write_jsonl(path, subset)
        for s in (seeds if seed is None else [seed]):
            train_files[s] = path
    files, held = {}, {}
    for split in ("dev", "test"):
        if split not in task.files:
            continue
        examples, skipped = read_split(task, split)
        held[split] = (task.files[split], examples)
        record["skipped"][split] = skipped
        record["rows"][split] = len(examples)
        drawn_eval = subsample(examples, max_eval, 0)
        files[split] = os.path.join(out, f"{split}.jsonl")
        if check is not None:
            check(task, split, drawn_eval,
                  files[split] if len(drawn_eval) < len(examples) else task.files[split])
        examples = drawn_eval
        write_jsonl(files[split], examples)
    record["held_out_overlap"] = held_out_overlap(task, train, held)
    record["used"] = {"train_per_seed": max_train or train_per_class or None,
                      "train_per_class": train_per_class or None, "max_eval": max_eval or None}
    with open(os.path.join(out, "data.json"), "w") as f:
        json.dump(record, f, indent=1)
    return Prepared(train_files, files["dev"], files.get("test", ""), record)
