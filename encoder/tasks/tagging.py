"""Token tagging (NER, POS): a label per word on its first piece, entity F1 (BIO)."""
import jax.numpy as jnp
import numpy as np

from encoder.tasks import readers as tasks_lib
from encoder.eval import metrics as metrics_lib
from encoder.tasks.base import Task, TaskDataError, softmax_nll
from encoder.model import models


class Tagging(Task):
    name = "tagging"
    primary_metric = "entity_f1"
    model_cls = models.TokenClassifier
    uses_labels = True

    def check(self, examples, split):
        for ex in examples:
            for key in ("tokens", "tags"):
                value = ex[key]
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise TaskDataError(f"{ex['_where']}: {key!r} must be a list of strings, "
                                        f"got {type(value).__name__} {str(value)[:40]!r}")

    def featurize(self, examples):
        return tasks_lib.featurize_tagging(examples, self.tokenizer,
                                           self.config.data.max_seq_len, self.labels)

    def loss(self, out, batch):
        labels = batch["labels"]
        valid = (labels != tasks_lib.IGNORE) & (batch["weight"][:, None] > 0)
        nll = softmax_nll(out, jnp.maximum(labels, 0))
        return jnp.sum(nll * valid) / jnp.maximum(jnp.sum(valid), 1)

    def score(self, out, examples, arrays, meta):
        pred = np.argmax(out, -1)
        preds, gold = [], []
        for r, ex in enumerate(examples):
            tags = [self.labels.names[pred[r, p]] if p >= 0 else "O" for p in meta[r]]
            preds.append({"tags": tags})
            gold.append(ex["tags"])
        return metrics_lib.entity_f1(gold, [p["tags"] for p in preds]), preds
