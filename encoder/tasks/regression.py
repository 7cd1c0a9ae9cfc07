"""Sequence regression (e.g. STS-B): one pooled output, squared error, Pearson/Spearman."""
from encoder.tasks import readers as tasks_lib
from encoder.eval import metrics as metrics_lib
from encoder.tasks.base import Task, TaskDataError, check_labelled, weighted_mean
from encoder.model import models


class Regression(Task):
    name = "regression"
    primary_metric = "pearson"
    model_cls = models.SequenceClassifier

    @property
    def num_labels(self) -> int:
        return 1

    def check(self, examples, split):
        if not check_labelled(examples, split):
            return
        for ex in examples:
            label = ex["label"]
            try:
                if isinstance(label, bool):
                    raise ValueError
                float(label)
            except (TypeError, ValueError):
                raise TaskDataError(f"{ex['_where']}: regression label {label!r} is not a "
                                    "number") from None

    def featurize(self, examples):
        return tasks_lib.featurize_sequences(examples, self.tokenizer,
                                             self.config.data.max_seq_len, self.name,
                                             None), None

    def loss(self, out, batch):
        return weighted_mean((out[:, 0] - batch["labels"]) ** 2, batch["weight"])

    def has_gold(self, examples):
        return all("label" in ex for ex in examples)

    def score(self, out, examples, arrays, meta):
        preds = [{"label": float(v)} for v in out[:, 0]]
        m = (metrics_lib.regression_metrics(arrays["labels"], out[:, 0])
             if "labels" in arrays else {})
        return m, preds
