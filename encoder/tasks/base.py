"""The Task interface: everything one task type means, in one class.

A Task reads and checks its examples (file:line errors), fixes its labels
from the training file, featurizes examples into fixed-shape arrays, builds
its model (encoder + head), computes its loss from the model output, and
scores predictions. The trainer never asks which task it runs.

Adding a task type: a subclass in a file of its own, and one line in tasks.py.
"""
import jax
import jax.numpy as jnp

from encoder.tasks import readers as tasks_lib
from encoder.tasks.readers import TaskDataError  # noqa: F401  (re-exported)


def weighted_mean(values, weight):
    """Mean over real rows: padded rows of an evaluation batch carry weight 0."""
    return jnp.sum(values * weight) / jnp.maximum(jnp.sum(weight), 1.0)


class Task:
    """Base class; subclasses set name, primary_metric and model_cls and fill the methods."""
    name = ""
    primary_metric = ""
    model_cls = None
    uses_labels = False          # True: label names are fixed from the training file

    def __init__(self, config, tokenizer, labels: list | None = None):
        self.config = config
        self.tokenizer = tokenizer
        self.labels = tasks_lib.LabelSet(list(labels)) if labels is not None else None

    # --------------------------------------------------------------- examples
    def read(self, path: str, split: str) -> list[dict]:
        """Reads a task file and checks every example; errors name file:line."""
        examples = tasks_lib.read_examples(path, self.name)
        self.check(examples, split)
        return examples

    def check(self, examples: list[dict], split: str) -> None:
        """Type checks beyond the reader's field checks (subclasses extend)."""

    def fit_labels(self, train_examples: list[dict]) -> None:
        """Fixes label names from the training file (label-free tasks keep None).

        A resumed run or a fine-tuned source passes its names in (`labels`), so
        the head's rows keep their meaning. Fewer than two labels is refused.
        """
        if not self.uses_labels:
            return
        if self.labels is None:
            self.labels = tasks_lib.LabelSet.from_examples(train_examples, self.name)
        if len(self.labels.names) < 2:
            raise TaskDataError(f"{train_examples[0]['_where'].rsplit(':', 1)[0]}: only one label "
                                f"({self.labels.names}) in the training file; a {self.name} "
                                "head needs at least two")

    @property
    def num_labels(self) -> int:
        return len(self.labels.names) if self.labels is not None else 0

    def featurize(self, examples: list[dict]):
        """(arrays: name -> [N, ...] numpy, meta or None for decoding)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ model
    def model(self, model_cfg, pooling: str):
        return self.model_cls(model_cfg, self.num_labels, pooling)

    def forward(self, model, params, batch, deterministic: bool = True, rngs=None):
        out, _ = model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                             batch["attention_mask"], deterministic=deterministic,
                             rngs=rngs or {})
        return out

    def loss(self, out, batch):
        raise NotImplementedError

    # ----------------------------------------------------------------- scores
    def has_gold(self, examples: list[dict]) -> bool:
        return True

    def score(self, out, examples, arrays, meta):
        """(metrics, per-example predictions) from the raw outputs of every row."""
        raise NotImplementedError


def softmax_nll(logits, labels):
    """-log p(label) per row (or token): float32 log-softmax."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    return -jnp.take_along_axis(logp, labels[..., None], -1)[..., 0]


def check_labelled(examples: list[dict], split: str, key: str = "label") -> bool:
    """True when every example has `key`; a split where only some do is an error.

    Training needs every label; a dev/test file is either fully labelled
    (scored) or not at all (predictions only), never silently half-scored.
    """
    missing = [ex["_where"] for ex in examples if key not in ex]
    if not missing:
        return True
    if split == "train" or len(missing) < len(examples):
        raise TaskDataError(f"{missing[0]}: no {key!r} field ({len(missing)} of "
                            f"{len(examples)} {split} examples lack one)")
    return False
