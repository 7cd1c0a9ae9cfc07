"""Sequence classification (single texts or pairs): pooled logits, cross-entropy, accuracy."""
import numpy as np

from encoder.tasks import readers as tasks_lib
from encoder.eval import metrics as metrics_lib
from encoder.tasks.base import Task, TaskDataError, check_labelled, softmax_nll, weighted_mean
from encoder.model import models


def _label_type(label) -> str:
    return "bool" if isinstance(label, bool) else type(label).__name__


class Classification(Task):
    name = "classification"
    primary_metric = "accuracy"
    model_cls = models.SequenceClassifier
    uses_labels = True

    def check(self, examples, split):
        if not check_labelled(examples, split):
            return
        first = examples[0]
        for ex in examples:
            label = ex["label"]
            if not isinstance(label, (str, int)) or isinstance(label, bool):
                raise TaskDataError(f"{ex['_where']}: label {label!r} must be a string or an "
                                    "integer")
            if _label_type(label) != _label_type(first["label"]):
                raise TaskDataError(
                    f"{ex['_where']}: label {label!r} is a {_label_type(label)}, but "
                    f"{first['_where']} has {first['label']!r}, a {_label_type(first['label'])}: "
                    "mixed label types would make one class into two")

    def featurize(self, examples):
        return tasks_lib.featurize_sequences(examples, self.tokenizer,
                                             self.config.data.max_seq_len, self.name,
                                             self.labels), None

    def loss(self, out, batch):
        return weighted_mean(softmax_nll(out, batch["labels"]), batch["weight"])

    def has_gold(self, examples):
        return all("label" in ex for ex in examples)

    def score(self, out, examples, arrays, meta):
        pred = np.argmax(out, -1)
        preds = [{"label": self.labels.names[p]} for p in pred]
        m = (metrics_lib.classification_metrics(arrays["labels"], pred)
             if "labels" in arrays else {})
        return m, preds
