"""Starting points keep their labels: a fine-tuning started from a fine-tuned
workdir of the same task type keeps the model's label map when the new training file
continues that task (a rare label missing is still known, new labels extend the map, the
head's rows keep their meaning); a dev label neither the file nor the map knows is an
error; another task of the type (RTE from MNLI) gets a map and a head of its own."""
import os

import jax
import numpy as np
import pytest

from encoder.jobs import finetune as run
from encoder.tasks.base import LabelSet, TaskDataError, continues_label_map
from encoder.tasks.table import TASKS
from experiments import finetune as finetune_exp
from helpers import topic_config, write_jsonl

WORDS = ["file", "socket", "thread", "path", "string", "number"]


def rows(labels, seed=0):
    """One row per label, five words drawn per row (the label does not need to be learnt)."""
    rng = np.random.default_rng(seed)
    return [{"text": " ".join(str(WORDS[j]) for j in rng.integers(0, 6, size=5)), "label": y}
            for y in labels]


def task_dir(folder, train_labels, dev_labels):
    os.makedirs(folder, exist_ok=True)
    write_jsonl(os.path.join(folder, "train.jsonl"), rows(train_labels))
    write_jsonl(os.path.join(folder, "dev.jsonl"), rows(dev_labels, seed=1))
    return str(folder)


@pytest.fixture(scope="module")
def source(tiny_pretrained, tmp_path_factory):
    """A fine-tuned classifier's workdir whose map is [a, b, c] (c rare: 4 of 32 rows),
    written by the job's own writers (best/ with labels.json by _save_best, config.json and
    the tokenizer as open_run does) without training it: a whole run of that kind is
    tests/e2e/test_finetune_runs.py. Its head's bias is set to 1, 2, 3 (rows told apart)."""
    root = tmp_path_factory.mktemp("labels")
    folder = task_dir(root / "task", ["a", "b"] * 14 + ["c"] * 4, ["a", "b", "c"] * 4)
    workdir = str(root / "source")
    ft = run.build(topic_config(tiny_pretrained, folder), workdir, devices=jax.devices()[:1])
    params = run.init_from_source(ft)(ft.trainer.fresh_state().params,
                                      ft.trainer.shardings.params)
    model = jax.device_get(params["model"])
    model["head"]["classifier"]["bias"] = np.arange(1.0, 4.0, dtype=np.float32)
    os.makedirs(workdir)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(ft.config.to_json(indent=2))
    ft.source.tokenizer.save(os.path.join(workdir, "tokenizer"))
    run._save_best(ft, model, {"score": 0.5, "step": 2, "epoch": 1})
    return workdir


def start(source, tmp_path, train_labels, dev_labels):
    """The second fine-tuning, built (its data read and featurized) and its start params."""
    folder = task_dir(tmp_path / "new", train_labels, dev_labels)
    ft = run.build(topic_config(source, folder), str(tmp_path / "second"),
                   devices=jax.devices()[:1])
    fresh = ft.trainer.fresh_state().params
    params = run.init_from_source(ft)(fresh, ft.trainer.shardings.params)
    return ft, jax.device_get(fresh["model"]["head"]), jax.device_get(params["model"]["head"])


def classifier(head):
    return np.asarray(head["classifier"]["kernel"]), np.asarray(head["classifier"]["bias"])


def test_a_rare_label_the_new_file_lacks_is_still_known(source, tmp_path):
    """The case that was refused ("label 'c' was not seen in training")."""
    ft, _, head = start(source, tmp_path, ["a", "b"] * 16, ["a", "b", "c"] * 4)
    assert ft.task.labels.names == ["a", "b", "c"]
    assert 2 in set(ft.splits["dev"].arrays["labels"].tolist())  # dev's c is row 2
    src = run.sources.load(source)
    for got, want in zip(classifier(head), classifier(src.params["head"])):
        np.testing.assert_array_equal(got, want)  # the whole head, every row in place


def test_new_labels_extend_the_map_and_the_old_rows_keep_their_meaning(source, tmp_path):
    ft, fresh, head = start(source, tmp_path, ["b", "a", "d"] * 11, ["a", "c", "d"] * 4)
    assert ft.task.labels.names == ["a", "b", "c", "d"]  # the map first, then the new label
    kernel, bias = classifier(head)
    src_kernel, src_bias = classifier(run.sources.load(source).params["head"])
    assert kernel.shape[-1] == 4
    np.testing.assert_array_equal(kernel[:, :3], src_kernel)
    np.testing.assert_array_equal(bias[:3], src_bias)
    fresh_kernel, fresh_bias = classifier(fresh)
    np.testing.assert_array_equal(kernel[:, 3], fresh_kernel[:, 3])  # d starts fresh
    np.testing.assert_array_equal(bias[3], fresh_bias[3])
    src_pooler = run.sources.load(source).params["head"].get("pooler")
    if src_pooler is not None:  # cls pooling may carry a pooler: it carries over whole
        jax.tree.map(np.testing.assert_array_equal, head["pooler"], src_pooler)


def test_a_dev_label_neither_the_file_nor_the_map_knows_is_an_error(source, tmp_path):
    with pytest.raises(TaskDataError, match=r"dev.jsonl:3: label 'z' is neither in the "
                                            r"training file nor in init_from=.*source's label "
                                            r"map; known labels: \['a', 'b', 'c'\]"):
        start(source, tmp_path, ["a", "b"] * 16, ["a", "b", "z"])


def test_another_task_of_the_type_gets_its_own_map_and_a_fresh_head(source, tmp_path):
    """RTE from MNLI: one label shared of the file's two is another task, not this one."""
    ft, fresh, head = start(source, tmp_path, ["a", "yes"] * 16, ["a", "yes"] * 4)
    assert ft.task.labels.names == ["a", "yes"] and not ft.task.labels.source
    for got, want in zip(classifier(head), classifier(fresh)):
        np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------- the rule itself

def test_which_files_continue_a_map():
    start_map = LabelSet(["contradiction", "entailment", "neutral"], "init_from=mnli")
    assert continues_label_map(start_map, ["contradiction", "entailment"])  # a rare one lacks
    assert continues_label_map(start_map, ["contradiction", "entailment", "other"])  # 2 of 3
    assert not continues_label_map(start_map, ["entailment", "not_entailment"])  # RTE: 1 of 2
    assert not continues_label_map(start_map, [0, 1])  # MRPC's integer labels
    assert not continues_label_map(None, ["a", "b"])
    assert start_map.extended(["other", "entailment"]).names == [
        "contradiction", "entailment", "neutral", "other"]


def test_fit_labels_keeps_extends_or_replaces_the_map():
    cls = TASKS["tagging"]
    config = finetune_exp.get_config("task=tagging")
    start_map = LabelSet(["B-X", "I-X", "O"], "init_from=run")
    tagged = [{"tokens": ["a", "b"], "tags": ["B-X", "O"]}, {"tokens": ["c"], "tags": ["B-Y"]},
              {"tokens": ["d"], "tags": ["I-X"]}]
    task = cls(config, None)
    task.fit_labels(tagged, start_map)
    assert task.labels.names == ["B-X", "I-X", "O", "B-Y"] and task.labels.source
    resumed = cls(config, None, labels=["B-X", "O"])  # a resumed run's own names win
    resumed.fit_labels(tagged, start_map)
    assert resumed.labels.names == ["B-X", "O"]
    with pytest.raises(TaskDataError, match="was not seen in training"):
        LabelSet(["a", "b"]).index("z", "dev.jsonl:1")
