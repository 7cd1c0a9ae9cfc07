"""Trivial baselines that every fine-tuning result is reported next to.

    python -m encoder.eval.baselines --task=classification --train=train.jsonl --dev=dev.jsonl

classification: the majority class, and a bag-of-words (TF-IDF) logistic
regression; sentence pairs use the features [a, b, |a - b|, a * b] of the two
texts' TF-IDF vectors. qa: always answering with the context's first word.
"""
import json

import numpy as np
from absl import app, flags

from encoder.data import tasks
from encoder.eval import metrics


def _texts(examples):
    return [ex.get("text", ex.get("text_a", "")) for ex in examples]


def majority(train, dev) -> dict:
    labels = [ex["label"] for ex in train]
    values, counts = np.unique(np.asarray(labels, dtype=object).astype(str), return_counts=True)
    top = values[np.argmax(counts)]
    return metrics.classification_metrics([str(ex["label"]) for ex in dev], [top] * len(dev))


def bow_logistic_regression(train, dev) -> dict:
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    pair = "text_b" in train[0]
    vec = TfidfVectorizer(min_df=1, ngram_range=(1, 2), max_features=50_000)
    if pair:
        vec.fit([ex["text_a"] for ex in train] + [ex["text_b"] for ex in train])

        def feats(exs):
            a = vec.transform([ex["text_a"] for ex in exs])
            b = vec.transform([ex["text_b"] for ex in exs])
            return hstack([a, b, abs(a - b), a.multiply(b)]).tocsr()
        x_train, x_dev = feats(train), feats(dev)
    else:
        x_train = vec.fit_transform(_texts(train))
        x_dev = vec.transform(_texts(dev))
    y_train = [str(ex["label"]) for ex in train]
    clf = LogisticRegression(max_iter=2000, C=10.0).fit(x_train, y_train)
    return metrics.classification_metrics([str(ex["label"]) for ex in dev], clf.predict(x_dev))


def qa_first_word(dev) -> dict:
    preds = [ex["context"].split()[0].rstrip(":") if ex["context"].split() else ""
             for ex in dev]
    return metrics.squad_scores(preds, [ex.get("answers") or [ex["answer_text"]] for ex in dev])


def run(task: str, train_path: str, dev_path: str) -> dict:
    train = tasks.read_examples(train_path, task)
    dev = tasks.read_examples(dev_path, task)
    if task == "qa":
        return {"first_word": qa_first_word(dev)}
    return {"majority": majority(train, dev), "bow_logreg": bow_logistic_regression(train, dev)}


def main(argv):
    del argv
    f = flags.FLAGS
    print(json.dumps(run(f.task, f.train, f.dev), indent=1))


if __name__ == "__main__":
    flags.DEFINE_string("task", "classification", "classification | qa")
    flags.DEFINE_string("train", None, "train file", required=True)
    flags.DEFINE_string("dev", None, "dev file", required=True)
    app.run(main)
