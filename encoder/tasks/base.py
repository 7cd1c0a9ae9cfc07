"""The Task interface: everything one task type means, in one class.

A Task reads and checks its examples (file:line errors), fixes its labels
from the training file, featurizes examples into fixed-shape arrays, builds
its model (encoder + head), computes its loss from the model output, and
scores predictions. The trainer never asks which task it runs.

Beside those methods a type declares, as class attributes, what the rest of the
codebase asks of it: its metric keys (the suite's task.json), its bag-of-words
baselines (encoder/tasks/baselines.py), its HuggingFace head (encoder/jobs/export.py),
its suite defaults (encoder/studies/suite/presets.py) and how it is probed
(encoder/jobs/probe.py). Those modules read the attributes through TASKS and never
name a type.

Adding a task type: a subclass in a file of its own, and one line in table.py.
"""
import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from encoder.tasks import files
from encoder.tasks.files import IGNORE, LabelSet, TaskDataError  # noqa: F401  (re-exported)


class Baseline(NamedTuple):
    """A method with no model for one type (encoder/tasks/baselines.py)."""
    predict: Callable  # (train, splits) -> one list of predictions per split
    description: str   # what it does, for the suite's report header


@dataclasses.dataclass(frozen=True)
class Export:
    """The HuggingFace head a fine-tuned model of the type is exported as."""
    kind: str = "base"           # sequence | token | span | base (encoder/interop/hf.py)
    problem: str = ""            # config.json's problem_type of a sequence head
    labels: tuple | None = None  # label names written instead of the run's


def weighted_mean(values, weight):
    """Mean over real rows: padded rows of an evaluation batch carry weight 0."""
    return jnp.sum(values * weight) / jnp.maximum(jnp.sum(weight), 1.0)


class Task:
    """Base class; subclasses set name, primary_metric and model_cls and fill the methods."""
    name = ""
    primary_metric = ""
    model_cls = None
    uses_labels = False          # True: label names are fixed from the training file

    # ---------------------------------------- what the rest of the codebase reads
    fields: tuple = ()           # the field sets an example may hold (a JSONL line: one)
    formats: dict = {}           # file ending -> reader(path), beside JSONL and GLUE TSV
    numeric_labels = False       # a label is a number (GLUE's STS-B scores are parsed)
    single_label = False         # one class per example: the suite may draw k per class
    metric_keys: tuple = ()      # eval.json keys the type reports (task.json may name them)
    default_metrics: tuple = ()  # the suite's metrics when task.json names none
    baselines: dict = {}         # method name -> Baseline
    export = Export()
    seq_len_field = "max_seq_len"  # the suite preset's field that sets the input length
    recipe_epochs = 0            # epochs every published recipe fixes for the type (0: none)
    probe = ""                   # "sentence" | "token": jobs/probe.py's probe; "": none
    label_fields: tuple = ()     # featurize's label arrays: (name, row shape, "T" = tokens, dtype)

    def __init__(self, config, tokenizer, labels: list | None = None):
        self.config = config
        self.tokenizer = tokenizer
        self.labels = LabelSet(list(labels)) if labels is not None else None

    # --------------------------------------------------------------- examples
    @classmethod
    def read_file(cls, path: str) -> list[dict]:
        """Examples of a file (GLUE TSV, a format of the type's own, else JSON lines);
        field and line checks (`check_line`, whatever the format), errors naming file:line."""
        if path.endswith(".tsv"):
            examples = files.read_glue_tsv(path)
        else:
            reader = next((r for ending, r in cls.formats.items() if path.endswith(ending)),
                          None)
            if reader is None:
                return files.read_jsonl(path, cls.fields, cls.check_line)
            examples = reader(path)
        for ex in examples:
            files.check_texts(ex, ex["_where"])
            cls.check_line(ex, ex["_where"])
        return examples

    @classmethod
    def check_line(cls, example: dict, where: str) -> None:
        """One example's checks beyond its fields and texts (subclasses extend); raise
        TaskDataError naming `where` (file:line)."""

    @classmethod
    def label_names(cls, examples: list[dict]) -> list:
        """The label names a training file fixes, in head-row order."""
        return sorted({ex["label"] for ex in examples}, key=str)

    @classmethod
    def labels_of(cls, example: dict) -> list:
        """The label names one example uses (a tagged example: its tags)."""
        return [example["label"]] if "label" in example else []

    @classmethod
    def read(cls, path: str, split: str) -> list[dict]:
        """Reads a task file and checks every example and the split as a whole (what the
        metric assumes); errors name file:line. Fine-tuning and the baselines read here."""
        examples = cls.read_file(path)
        cls.check(examples, split)
        return examples

    @classmethod
    def check(cls, examples: list[dict], split: str) -> None:
        """A split's checks beyond its lines' (subclasses extend): labels a metric or the
        training cannot use (one class, constant scores), raised before any training."""

    def training_source(self, path: str):
        """The training rows of a prepared corpus at `path` as a random-access source
        (len, read_batch -> featurize's arrays and "weight"), for the types that train on
        one; None: `path` is a file, read and featurized in memory."""
        return None

    def fit_labels(self, train_examples: list[dict], start: LabelSet | None = None) -> None:
        """Fixes label names from the training file (label-free tasks keep None).

        A resumed run passes its own names in (`labels`), so the head's rows keep their
        meaning. `start` is a fine-tuned starting point's map (same task type): kept when
        the file continues that task (`continues_label_map`), extended by the file's new
        labels, so a rare label the file lacks (but dev holds) is still known; another
        task of the type (RTE from MNLI) gets its own map. Fewer than two labels is refused.
        """
        if not self.uses_labels:
            return
        if self.labels is None:
            found = self.label_names(train_examples)
            self.labels = (start.extended(found) if continues_label_map(start, found)
                           else LabelSet(found))
        if len(self.labels.names) < 2:
            raise TaskDataError(f"{where_file(train_examples)}: only one label "
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
    @classmethod
    def has_gold(cls, examples: list[dict]) -> bool:
        return True

    def score(self, out, examples, arrays, meta):
        """(metrics, per-example predictions) from the raw outputs of every row."""
        raise NotImplementedError

    @classmethod
    def score_predictions(cls, examples: list[dict], preds: list[dict]) -> dict:
        """eval.json's metrics of predictions in predictions.jsonl form (a baseline's), as
        `score` computes them for the model's."""
        raise ValueError(f"no baseline score for task type {cls.name!r}")


def where_file(examples: list[dict]) -> str:
    """The file the examples came from (their `_where` without the line)."""
    return examples[0]["_where"].rsplit(":", 1)[0] if examples else "?"


def continues_label_map(start: LabelSet | None, found: list) -> bool:
    """True when a training file's labels continue a starting point's map: more than half
    of them are in it (the same task on new data: a rare label missing, a new one added),
    not another task of the same type (RTE's two labels from MNLI's three: one shared)."""
    if start is None or not start.names:
        return False
    return 2 * len(set(found) & set(start.names)) > len(found)


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
