"""A task type is one file and one line in TASKS (encoder/tasks/table.py).

Two guarantees: outside encoder/tasks/ no module names a task type (the few documented
exceptions below), and a type defined here, in a test module, runs through reading,
featurizing, the model, the loss, scoring, its baseline, the suite's catalog and presets
and the export's head without a line changed anywhere else. Each registered type's
declarations are checked against what its methods do.
"""
import ast
import os
import re
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.data.tokenizer import Tokenizer
from encoder.model import models
from encoder.tasks import baselines, files, readers, table
from encoder.tasks.base import Baseline, Export, Task, TaskDataError, softmax_nll, weighted_mean
from encoder.tasks.table import TASKS
from helpers import ROOT, write_jsonl

# Modules outside encoder/tasks/ that may spell a type's name, and why. Everything else
# reads the type's class from TASKS.
NAMED_ELSEWHERE = {
    # data, not dispatch: files that say which type a task is, as a task.json does
    "encoder/data/embedded_tasks.py": "writes the embedded tasks' task.json (data sits below "
                                    "tasks/ and may not import the table)",
    "encoder/tasks/glue.py": "GLUE's task definitions (Wang et al. 2019, Table 1)",
    # plain-data configs may not import the table (tests/test_imports.py)
    "encoder/finetune/config.py": "the default task and contrastive's mean-pooling default",
    # a config block that shares the type's name, not the type
    "encoder/retrieval/options.py": "reads the run config's `contrastive` options block",
    # STS pairs are read with regression's fields (a sentence pair and a score)
    "encoder/tasks/embedding.py": "reads STS pairs with regression's fields",
}


def _docstrings(tree) -> set[int]:
    """ids of the Constant nodes that are docstrings (prose may name a type)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def type_literals(path: str) -> list[str]:
    """'line: name' of every string literal in a module that is exactly a type's name."""
    tree = ast.parse(open(path).read())
    skip = _docstrings(tree)
    return [f"{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in TASKS and id(node) not in skip]


def python_files():
    for top in ("encoder", "experiments", "benchmarks"):
        for folder, _, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                if name.endswith(".py"):
                    yield os.path.relpath(os.path.join(folder, name), ROOT)


def test_no_module_outside_tasks_names_a_task_type():
    found = {}
    for rel in python_files():
        if rel.startswith(os.path.join("encoder", "tasks") + os.sep) or rel in NAMED_ELSEWHERE:
            continue
        hits = type_literals(os.path.join(ROOT, rel))
        if hits:
            found[rel] = hits
    assert not found, ("task types named outside encoder/tasks/ (read the type's class from "
                       f"encoder.tasks.table.TASKS instead): {found}")


def test_the_literal_finder_sees_dispatch_and_skips_prose(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('"""A qa module."""\ndef f(kind):\n    """regression."""\n'
                    '    return kind == "tagging" or kind in ("qa",)\n')
    assert type_literals(str(path)) == ["4: 'tagging'", "4: 'qa'"]


# ------------------------------------------------------- every registered type's declarations

@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_types_declarations_agree_with_each_other(name):
    cls = TASKS[name]
    assert cls.name == name and issubclass(cls, Task) and cls.fields
    assert cls.primary_metric in cls.metric_keys
    assert cls.default_metrics and set(cls.default_metrics) <= set(cls.metric_keys)
    assert cls.export.kind in ("sequence", "token", "span", "base")
    assert cls.probe in ("", "sentence", "token")
    assert cls.seq_len_field.endswith("max_seq_len") and cls.recipe_epochs >= 0
    for method, baseline in cls.baselines.items():
        assert callable(baseline.predict) and baseline.description, method


def test_the_views_read_the_table_in_its_order():
    assert table.lookup("qa") is TASKS["qa"]
    with pytest.raises(ValueError, match="valid names: classification, contrastive"):
        table.lookup("ranking")
    assert list(baselines.METHODS) == ["bow", "majority"]
    assert list(baselines.METHODS["bow"]) == table.having("baselines")
    assert table.having("probe") == ["classification", "regression", "tagging"]


# ------------------------------------------------------------------------- a toy type

class WordTokenizer:
    """One id per word (unknown words: unk); the shared encode_example packs them."""
    pad_id, unk_id, cls_id, sep_id, mask_id = 0, 1, 2, 3, 4
    words = ("red", "green", "blue", "sky", "grass", "the", "is")
    encode_example, example_from_ids = Tokenizer.encode_example, Tokenizer.example_from_ids

    def encode(self, text):
        return [5 + self.words.index(w) if w in self.words else self.unk_id
                for w in text.split()]

    def encode_with_offsets(self, text):
        spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
        return self.encode(text), spans


# One example of each registered type (a new type adds its own here to be checked).
EXAMPLES = {
    "classification": {"text_a": "blue sky", "text_b": "the grass", "label": "yes"},
    "regression": {"text": "green grass", "label": 2.5},
    "tagging": {"tokens": ["the", "blue", "sky"], "tags": ["O", "B-C", "O"]},
    "qa": {"question": "is the sky", "context": "the sky is blue", "answer_text": "blue",
           "answer_start": 11},
    "contrastive": {"text_a": "blue sky", "text_b": "green grass"},
}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_label_fields_are_what_featurize_writes(name):
    """The declared label arrays (what a compile report builds a batch from) are the
    featurizer's, with their shapes and dtypes."""
    cls = TASKS[name]
    examples = [{**EXAMPLES[name], "_where": f"x:{i}"} for i in range(2)]
    config = types.SimpleNamespace(data=types.SimpleNamespace(
        max_seq_len=12, doc_stride=4, max_answer_tokens=4))
    task = cls(config, WordTokenizer(), labels=["no", "yes"] if name == "classification"
               else None)
    task.fit_labels(examples)
    arrays, _ = task.featurize(examples)
    rows, tokens = arrays[next(iter(arrays))].shape
    assert {"input_ids", "a_input_ids"} & set(arrays)
    for key, shape, dtype in cls.label_fields:
        want = tuple(tokens if s == "T" else s for s in shape)
        assert arrays[key].shape == (rows, *want) and arrays[key].dtype == np.dtype(dtype)


def first_word(train, splits):
    """The toy's baseline: each sentence's first word is its colour (or not)."""
    del train
    return [[{"colour": ex["sentence"].split()[0]} for ex in s] for s in splits]


class Colour(Task):
    """Which colour a sentence is about: its own fields, label field, checks and metric."""
    name = "colour"
    primary_metric = "hit_rate"
    model_cls = models.SequenceClassifier
    uses_labels = True
    fields = (("sentence", "colour"),)
    single_label = True
    metric_keys = ("hit_rate",)
    default_metrics = ("hit_rate",)
    baselines = {"first_word": Baseline(first_word, "the sentence's first word")}
    export = Export("sequence", "single_label_classification")
    label_fields = (("labels", (), "int32"),)

    @staticmethod
    def check_line(example, where):
        if not example["sentence"].strip():
            raise TaskDataError(f"{where}: an empty sentence")

    @classmethod
    def label_names(cls, examples):
        return sorted({ex["colour"] for ex in examples})

    def featurize(self, examples):
        arrays = files.encode_texts([{"text": ex["sentence"]} for ex in examples],
                                    self.tokenizer, self.config.data.max_seq_len)
        arrays["labels"] = np.asarray([self.labels.index(ex["colour"], ex["_where"])
                                       for ex in examples], np.int32)
        return arrays, None

    def loss(self, out, batch):
        return weighted_mean(softmax_nll(out, batch["labels"]), batch["weight"])

    def score(self, out, examples, arrays, meta):
        pred = np.argmax(out, -1)
        preds = [{"colour": self.labels.names[p]} for p in pred]
        return self.score_predictions(examples, preds), preds

    @classmethod
    def score_predictions(cls, examples, preds):
        return {"hit_rate": float(np.mean([p["colour"] == ex["colour"]
                                           for ex, p in zip(examples, preds)]))}


ROWS = [{"sentence": "blue sky", "colour": "blue"}, {"sentence": "green grass", "colour": "green"},
        {"sentence": "the sky is blue", "colour": "blue"}]


@pytest.fixture
def with_colour(monkeypatch):
    """TASKS with the toy type registered (the table is restored afterwards)."""
    monkeypatch.setitem(TASKS, Colour.name, Colour)
    return TASKS


def test_a_new_type_reads_featurizes_trains_and_scores(tmp_path, tiny_cfg):
    path = str(tmp_path / "train.jsonl")
    write_jsonl(path, ROWS)
    config = types.SimpleNamespace(data=types.SimpleNamespace(max_seq_len=8))
    task = Colour(config, WordTokenizer())
    train = task.read(path, "train")
    task.fit_labels(train)
    assert task.labels.names == ["blue", "green"] and task.num_labels == 2
    arrays, meta = task.featurize(train)
    for key, shape, dtype in Colour.label_fields:
        assert arrays[key].dtype == np.dtype(dtype) and arrays[key].shape == (3, *shape)
    model = task.model(models.freeze(tiny_cfg), "mean")
    batch = {k: jnp.asarray(v) for k, v in arrays.items()}
    batch["weight"] = jnp.ones(3)
    params = model.init(jax.random.key(0), batch["input_ids"], batch["segment_ids"],
                        batch["attention_mask"])["params"]
    out = task.forward(model, params, batch)
    assert out.shape == (3, 2) and np.isfinite(float(task.loss(out, batch)))
    metrics, preds = task.score(np.asarray(out), train, arrays, meta)
    assert set(metrics) == set(Colour.metric_keys) and len(preds) == 3

    write_jsonl(path, [{"sentence": " ", "colour": "red"}])
    with pytest.raises(TaskDataError, match="train.jsonl:1: an empty sentence"):
        task.read(path, "train")


def test_a_new_type_reaches_every_table_through_tasks(tmp_path, with_colour):
    import json

    from encoder.jobs import export
    from encoder.studies.suite import baseline, presets
    from encoder.tasks import catalog

    # readers by name, baselines (method table, scores, the command's run)
    for split, rows in (("train", ROWS), ("dev", ROWS[:2])):
        write_jsonl(str(tmp_path / f"{split}.jsonl"), rows)
    assert readers.read_jsonl(str(tmp_path / "dev.jsonl"), "colour")[1]["colour"] == "green"
    assert baselines.methods()["first_word"] == {"colour": first_word}
    assert baselines.run("colour", str(tmp_path / "train.jsonl"),
                         str(tmp_path / "dev.jsonl")) == {"first_word": {"hit_rate": 1.0}}
    assert baseline.descriptions()["first_word"] == {"colour": "the sentence's first word"}
    # the suite: a task.json naming the type, its default metric, its input length
    (tmp_path / "task.json").write_text(json.dumps({"type": "colour"}))
    task = catalog.task_of(str(tmp_path))
    assert (task.type, task.score_metrics) == ("colour", ("hit_rate",))
    (tmp_path / "task.json").write_text(json.dumps({"type": "colour", "metric": "accuracy"}))
    with pytest.raises(TaskDataError, match=r"not reported for colour; choose from \('hit_"):
        catalog.task_of(str(tmp_path))
    preset = presets.resolve("electra", 256)
    assert presets.seq_len_for(preset, "colour") == preset["max_seq_len"]
    # the export: a fine-tuned model of the type is a sequence classifier
    spec = export.task_export(types.SimpleNamespace(task="colour"))
    assert (spec.kind, spec.problem) == ("sequence", "single_label_classification")
