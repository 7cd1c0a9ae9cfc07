"""Sequence classification (single texts or pairs): pooled logits, cross-entropy, accuracy.

Examples: {"text", "label"} or {"text_a", "text_b", "label"}; a label is a string or an
integer, one type per file. Baselines: TF-IDF logistic regression (`bow`), the most
frequent training label (`majority`).
"""
import collections

import numpy as np

from encoder.eval import metrics as metrics_lib
from encoder.model import models
from encoder.tasks import bow, files
from encoder.tasks.base import (Baseline, Export, Task, TaskDataError, check_labelled,
                                softmax_nll, weighted_mean, where_file)


def _label_type(label) -> str:
    return "bool" if isinstance(label, bool) else type(label).__name__


def featurize_sequences(examples, tokenizer, max_len: int, labels) -> dict:
    """Token arrays, plus label indices when every example has a label."""
    out = files.encode_texts(examples, tokenizer, max_len)
    if all("label" in ex for ex in examples):
        out["labels"] = np.asarray([labels.index(ex["label"], ex["_where"])
                                    for ex in examples], np.int32)
    return out


# ------------------------------------------------------------------ baselines

def _label_names(train) -> dict:
    """str(label) -> the label as the training file spells it (predictions keep its type)."""
    return {str(ex["label"]): ex["label"] for ex in train}


def majority_label(train, splits) -> list:
    counts = collections.Counter(str(ex["label"]) for ex in train)
    top = _label_names(train)[max(sorted(counts), key=counts.__getitem__)]
    return [[{"label": top}] * len(s) for s in splits]


def bow_logistic_regression(train, splits) -> list:
    from sklearn.linear_model import LogisticRegression
    y = [str(ex["label"]) for ex in train]
    if len(set(y)) < 2:  # a drawn subset with one class: that class is all it can say
        return majority_label(train, splits)
    x_train, xs = bow.bow_features(train, splits)
    clf = LogisticRegression(max_iter=2000, C=10.0).fit(x_train, y)
    names = _label_names(train)
    return [[{"label": names[p]} for p in clf.predict(x)] for x in xs]


class Classification(Task):
    name = "classification"
    primary_metric = "accuracy"
    model_cls = models.SequenceClassifier
    uses_labels = True
    fields = (("text",), ("text_a", "text_b"))
    single_label = True
    # binary_f1 is the suite's own, computed from predictions.jsonl (task.json's
    # positive_label names the class).
    metric_keys = ("accuracy", "macro_f1", "mcc", "binary_f1")
    default_metrics = ("accuracy",)
    baselines = {
        "bow": Baseline(bow_logistic_regression,
                        "TF-IDF logistic regression (pairs: [a, b, |a-b|, a*b])"),
        "majority": Baseline(majority_label, "the most frequent training label"),
    }
    export = Export("sequence", "single_label_classification")
    probe = "sentence"
    label_fields = (("labels", (), "int32"),)

    @classmethod
    def check_line(cls, example, where):
        if "label" not in example:
            return
        label = example["label"]
        if not isinstance(label, (str, int)) or isinstance(label, bool):
            raise TaskDataError(f"{where}: label is {files.json_kind(label)}; a classification "
                                "label must be a string or an integer")

    @classmethod
    def check(cls, examples, split):
        if not check_labelled(examples, split):
            return
        first = examples[0]
        for ex in examples:
            label = ex["label"]
            if _label_type(label) != _label_type(first["label"]):
                raise TaskDataError(
                    f"{ex['_where']}: label {label!r} is a {_label_type(label)}, but "
                    f"{first['_where']} has {first['label']!r}, a {_label_type(first['label'])}: "
                    "mixed label types would make one class into two")
        if split == "train" and len({ex["label"] for ex in examples}) < 2:
            raise TaskDataError(
                f"{where_file(examples)}: only one label ({first['label']!r}) in all "
                f"{len(examples)} training examples: a classifier trained on one class can "
                "only ever predict it (its training and its scores are degenerate); give a "
                "training file with at least two classes")

    def featurize(self, examples):
        return featurize_sequences(examples, self.tokenizer, self.config.data.max_seq_len,
                                   self.labels), None

    def loss(self, out, batch):
        return weighted_mean(softmax_nll(out, batch["labels"]), batch["weight"])

    @classmethod
    def has_gold(cls, examples):
        return all("label" in ex for ex in examples)

    def score(self, out, examples, arrays, meta):
        pred = np.argmax(out, -1)
        preds = [{"label": self.labels.names[p]} for p in pred]
        m = (metrics_lib.classification_metrics(arrays["labels"], pred)
             if "labels" in arrays else {})
        return m, preds

    @classmethod
    def score_predictions(cls, examples, preds):
        return metrics_lib.classification_metrics([str(ex["label"]) for ex in examples],
                                                  [str(p["label"]) for p in preds])
