"""Baselines with no model, that every fine-tuning result is reported next to.

    python -m encoder baselines --task=classification --train=train.jsonl --dev=dev.jsonl
    python -m encoder suite --baseline=bow --workdir=OUT     (a whole suite: the same rows)

A predictor is `predict(train, splits) -> one list of predictions per split`, each
prediction in the fine-tuning job's predictions.jsonl form ({"label"}, {"tags"},
{"answer"}); the type's `score_predictions` turns them into the metrics its fine-tuning
task writes to eval.json (encoder/eval/metrics.py), so a baseline's number and a model's
number on the same file are the same computation.

Each type declares its methods (`Task.baselines`, in encoder/tasks/<type>.py); the
shared TF-IDF machinery is encoder/tasks/bow.py. The methods:
  bow       the lexical row: TF-IDF (unigrams and bigrams, fitted on the training split
            only) -> logistic regression (classification) or ridge (regression), a
            pair's features [a, b, |a - b|, a * b]; tagging: each word's most frequent
            training tag (unseen: O); qa: the best sentence minus the question. STS and
            retrieval: cosine of TF-IDF vectors (`bow.tfidf_encoder`, scored in
            encoder/studies/suite/baseline.py, which says what their IDF is fitted on).
  majority  the constant row: the most frequent training label or tag, qa the context's
            first word. Regression, STS and retrieval have none (a constant has no
            correlation and no ranking).
"""
from encoder.data import overlap
from encoder.tasks.files import LabelSet, TaskDataError
from encoder.tasks import files
from encoder.tasks.table import TASKS, lookup


def methods(tasks: dict = TASKS) -> dict:
    """baseline name -> task type -> predictor, from every type's `baselines`."""
    out: dict = {}
    for name, cls in tasks.items():
        for method, baseline in cls.baselines.items():
            out.setdefault(method, {})[name] = baseline.predict
    return out


METHODS = methods()


def score(task_type: str, examples: list, preds: list, tasks: dict = TASKS) -> dict:
    """eval.json's metrics for one split, as the fine-tuning task of this type computes them."""
    if task_type not in tasks:
        raise ValueError(f"no baseline score for task type {task_type!r}")
    return tasks[task_type].score_predictions(examples, preds)


def read(task: str, train_path: str, dev_path: str, tasks: dict = TASKS,
         max_overlap: float = overlap.MAX_SHARE) -> tuple[list, list]:
    """(train, dev) examples, read and checked as fine-tuning reads them (Task.read: the line
    checks, one class, constant scores; a dev label the training file lacks), and a dev file
    with gold to score against: a baseline scores what a fine-tuning run would, no more."""
    cls = lookup(task, tasks)
    train = cls.read(train_path, "train")
    dev = cls.read(dev_path, "dev")
    if not cls.has_gold(dev):
        raise TaskDataError(f"{dev_path}: no labels: a baseline is scored against the dev "
                            "file's gold labels")
    if cls.uses_labels:  # as the fine-tuning featurizer indexes them (LabelSet.index)
        known = LabelSet(cls.label_names(train))
        for ex in dev:
            for label in cls.labels_of(ex):
                known.index(label, ex["_where"])
    for line in files.refuse_training_rows(train, train_path, {"--dev": (dev_path, dev)},
                                           max_overlap, "--max_held_out_overlap"):
        overlap.say(line)
    return train, dev


def run(task: str, train_path: str, dev_path: str, tasks: dict = TASKS,
        max_overlap: float = overlap.MAX_SHARE) -> dict:
    """{method: dev metrics} of every method with a predictor for this task type."""
    files.refuse_training_files_as_held_out(train_path, **{"--dev": dev_path})
    train, dev = read(task, train_path, dev_path, tasks, max_overlap)
    return {name: score(task, dev, table[task](train, [dev])[0], tasks)
            for name, table in methods(tasks).items() if task in table}
