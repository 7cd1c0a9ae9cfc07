"""Sequence regression (e.g. STS-B): one pooled output, squared error, Pearson/Spearman.

Examples: {"text", "label"} or {"text_a", "text_b", "label"} with a number as label.
Baseline: TF-IDF ridge regression (`bow`); a constant has no correlation, so no
`majority`.
"""
import math

import numpy as np

from encoder.eval import metrics as metrics_lib
from encoder.model import models
from encoder.tasks import bow, files
from encoder.tasks.base import (Baseline, Export, Task, TaskDataError, check_labelled,
                                weighted_mean, where_file)


def featurize_scores(examples, tokenizer, max_len: int) -> dict:
    """Token arrays, plus float labels when every example has a label."""
    out = files.encode_texts(examples, tokenizer, max_len)
    if all("label" in ex for ex in examples):
        out["labels"] = np.asarray([float(ex["label"]) for ex in examples], np.float32)
    return out


def bow_ridge_regression(train, splits) -> list:
    from sklearn.linear_model import Ridge
    x_train, xs = bow.bow_features(train, splits)
    reg = Ridge(alpha=1.0).fit(x_train, [float(ex["label"]) for ex in train])
    return [[{"label": float(v)} for v in reg.predict(x)] for x in xs]


class Regression(Task):
    name = "regression"
    primary_metric = "pearson"
    model_cls = models.SequenceClassifier
    fields = (("text",), ("text_a", "text_b"))
    numeric_labels = True
    metric_keys = ("pearson", "spearman")
    default_metrics = ("pearson", "spearman")
    baselines = {"bow": Baseline(bow_ridge_regression,
                                 "TF-IDF ridge regression (pairs: [a, b, |a-b|, a*b])")}
    # One output: num_labels 1 and one label name, as HF regression heads have.
    export = Export("sequence", "regression", labels=("score",))
    probe = "sentence"
    label_fields = (("labels", (), "float32"),)

    @property
    def num_labels(self) -> int:
        return 1

    @classmethod
    def check_line(cls, example, where):
        if "label" not in example:
            return
        label = example["label"]
        try:
            if isinstance(label, bool):
                raise ValueError
            value = float(label)
        except (TypeError, ValueError):
            raise TaskDataError(f"{where}: regression label {label!r} is not a number") from None
        if not math.isfinite(value):
            raise TaskDataError(f"{where}: regression label {label!r} is not a finite number "
                                "(a NaN or infinite target makes the loss NaN at the first "
                                "batch holding it); fix or drop that line")

    @classmethod
    def check(cls, examples, split):
        if not check_labelled(examples, split):
            return
        values = {float(ex["label"]) for ex in examples}
        if len(values) == 1:
            why = ("a regression head learns nothing from them and the dev Pearson and "
                   "Spearman are undefined" if split == "train" else
                   "Pearson and Spearman are undefined on constant labels")
            raise TaskDataError(
                f"{where_file(examples)}: all {len(examples)} {split} labels are "
                f"{values.pop():g}: {why}; give labels that vary")

    def featurize(self, examples):
        return featurize_scores(examples, self.tokenizer, self.config.data.max_seq_len), None

    def loss(self, out, batch):
        return weighted_mean((out[:, 0] - batch["labels"]) ** 2, batch["weight"])

    @classmethod
    def has_gold(cls, examples):
        return all("label" in ex for ex in examples)

    def score(self, out, examples, arrays, meta):
        preds = [{"label": float(v)} for v in out[:, 0]]
        m = (metrics_lib.regression_metrics(arrays["labels"], out[:, 0])
             if "labels" in arrays else {})
        return m, preds

    @classmethod
    def score_predictions(cls, examples, preds):
        return metrics_lib.regression_metrics([float(ex["label"]) for ex in examples],
                                              [p["label"] for p in preds])
