"""The suite's rows for a method with no model: `python -m encoder suite --baseline=bow`.

Every task goes through the same files and report as a model's runs, so the two tables
line up row for row. A fine-tuned task's predictor (its type's `baselines`, gathered in
encoder/tasks/baselines.py) is fitted
on the prepared training file of each seed (OUT/data/<task>/train.seed<k>.jsonl under
--train_per_class / --max_train: the very draw the model's run of that seed trains on; a
task whose seeds all read one file is scored once, as seed 0, since the methods are
deterministic), predicts the prepared dev (and MNLI's test) file and writes
OUT/runs/<task>/<method>/<seed>/eval.json and predictions.jsonl in the fine-tuning job's
form. Embedding tasks write eval.json {"test": ...}: bow from embedding.py's STS and
retrieval scoring of TF-IDF vectors; bm25 (`--baseline=bm25`, retrieval tasks only: the
row beside a retriever's) from encoder/retrieval/bm25.py's ranking, scored by the same
metrics as a model's embeddings. report.run_metrics reads every run back (GLUE's F1
from predictions.jsonl, percent), so metric names, medians, spreads and averages are the
suite's own.

No leakage: a fine-tuned task's TF-IDF is fitted on its training file alone. Embedding
tasks have no training split, so their IDF comes from the unlabelled texts being scored,
as a search engine indexes its collection: the retrieval corpus (queries not included)
and the STS pairs' texts; never the gold scores or the relevance judgements.
"""
import json
import os

from encoder import registry
from encoder.tasks import baselines, bow
from encoder.tasks.table import TASKS, lookup
from encoder.studies.suite import report
from encoder.tasks import embedding

# What each method does for the embedding tasks (the fine-tuned types say theirs).
EMBEDDING_DESCRIPTIONS = {"bow": {"sts": "cosine of TF-IDF vectors",
                                  "retrieval": "TF-IDF cosine ranking"},
                          "bm25": {"retrieval": "BM25 ranking (Lucene's, k1 1.5, b 0.75)"}}


def descriptions(tasks: dict = TASKS) -> dict:
    """method -> task type -> what it does, for suite.md's header."""
    out: dict = {}
    for name, cls in tasks.items():
        for method, baseline in cls.baselines.items():
            out.setdefault(method, {})[name] = baseline.description
    for method, rows in EMBEDDING_DESCRIPTIONS.items():
        out.setdefault(method, {}).update(rows)
    return out


DESCRIPTIONS = descriptions()

# What each method's statistics are fitted on, for the header (a method with none: absent).
FITTED_ON = {"bow": "TF-IDF on each task's training file; embedding tasks: on the unlabelled "
                    "texts scored (retrieval corpus, STS pairs)",
             "bm25": "term statistics of each retrieval corpus (queries not included)"}


def bow_sts_scores(task, max_eval: int = 0) -> dict:
    """Raw metrics of an STS task on TF-IDF vectors (IDF: module docstring)."""
    examples = embedding.read_sts(task.files["test"], max_eval)
    encode = bow.tfidf_encoder([ex["text_a"] for ex in examples] +
                               [ex["text_b"] for ex in examples])
    return embedding.sts_scores(encode, examples)


def bow_retrieval_scores(task, max_eval: int = 0) -> dict:
    corpus, queries, qrels = embedding.read_retrieval(task.files, max_eval)
    encode = bow.tfidf_encoder(embedding.document_texts(corpus))
    return embedding.retrieval_scores(encode, corpus, queries, qrels)


def bm25_retrieval_scores(task, max_eval: int = 0) -> dict:
    """Raw metrics of a retrieval task ranked by BM25 (ties: corpus order, as a model's)."""
    from encoder.retrieval import bm25
    corpus, queries, qrels = embedding.read_retrieval(task.files, max_eval)
    _, rows = bm25.BM25(embedding.document_texts(corpus)).topk(
        [q["text"] for q in queries], max(embedding.RECALL_AT))
    ids = [d["_id"] for d in corpus]
    rankings = {q["_id"]: [ids[j] for j in r] for q, r in zip(queries, rows)}
    return embedding.ranking_scores(rankings, qrels)


# method -> embedding task kind -> (task, max_eval) -> raw metrics
EMBEDDING = {"bow": {"sts": bow_sts_scores, "retrieval": bow_retrieval_scores},
             "bm25": {"retrieval": bm25_retrieval_scores}}


def check(method: str) -> None:
    registry.lookup({**baselines.METHODS, **EMBEDDING}, method, "baseline")


def _scores(method: str, task) -> bool:
    """Whether the method has a rule for this task (its type's, or its embedding kind's)."""
    if task.kind == "finetune":
        return task.type in baselines.METHODS.get(method, {})
    return task.kind in EMBEDDING.get(method, {})


def run_dir(root: str, task: str, method: str, seed: int) -> str:
    return os.path.join(root, "runs", task, method, str(seed))


def write_run(out_dir: str, results: dict, predictions: list) -> None:
    """eval.json and predictions.jsonl as the fine-tuning job writes them (an undefined
    correlation stays NaN: the report shows it rather than hiding the task)."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "eval.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out_dir, "predictions.jsonl"), "w") as f:
        for p in predictions:
            f.write(json.dumps(p) + "\n")


def score_finetune_task(task, predict, train_path: str, eval_paths: dict, out_dir: str) -> None:
    """Fits `predict` on train_path, scores every eval split (dev, test) into out_dir.

    Read as fine-tuning reads them (the type's checks: a training file of one class is
    refused as the model's run and `baselines` refuse it, not scored as 100)."""
    cls = lookup(task.type)
    train = cls.read(train_path, "train")
    splits = {name: cls.read(path, name) for name, path in eval_paths.items() if path}
    results, lines = {}, []
    for (name, examples), preds in zip(splits.items(), predict(train, list(splits.values()))):
        results[name] = baselines.score(task.type, examples, preds)
        lines += [{"split": name, "index": i, **p} for i, p in enumerate(preds)]
    write_run(out_dir, results, lines)


def _score_task(method: str, task, prepared: dict, seeds: list, max_eval: int, root: str,
                rule: str) -> list:
    """The task's rows: one per distinct training file, or one for an embedding task."""
    if task.kind != "finetune":
        d = run_dir(root, task.name, method, 0)
        write_run(d, {"test": EMBEDDING[method][task.kind](task, max_eval)}, [])
        return [report.row(task, None, 0, report.run_metrics(task, d, {}), rule, d)]
    p = prepared[task.name]
    gold = {"dev": p.dev, "test": p.test}
    rows, done = [], set()
    for seed in seeds:
        if p.train[seed] in done:
            continue
        done.add(p.train[seed])
        d = run_dir(root, task.name, method, seed)
        score_finetune_task(task, baselines.METHODS[method][task.type], p.train[seed], gold, d)
        rows.append(report.row(task, None, seed, report.run_metrics(task, d, gold), rule, d))
    return rows


def score_tasks(method: str, tasks: list, prepared: dict, seeds: list, max_eval: int,
                root: str, rule: str) -> tuple[list, list, list, list]:
    """(the tasks scored, their rows, notes, failures). A task the method has no rule for
    is left out with a note; a task whose scoring raises (e.g. a correlation over one dev
    row) is a failure, reported as a model's failed run is, and the others go on."""
    check(method)
    scored, rows, notes, failures = [], [], [], []
    for task in tasks:
        if not _scores(method, task):
            notes.append(f"{task.name}: no {method} baseline for {task.type} tasks; left out")
            continue
        scored.append(task)
        try:
            rows += _score_task(method, task, prepared, seeds, max_eval, root, rule)
        except Exception as e:  # noqa: BLE001 (reported with its message, exit 1)
            failures.append(f"{task.name}/{method}: {type(e).__name__}: {e}")
    return scored, rows, notes, failures
