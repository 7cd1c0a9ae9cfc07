"""A suite task that cannot be learnt or scored is refused before the first run starts, in
one line naming the task and its file: a one-class classification task (its
run failed 30 s in, after other tasks ran), constant regression or STS scores (the suite's
average was NaN with exit 0)."""
import json
import os
import types

import pytest

from encoder.checkpoints import sources
from encoder.studies import runner
from encoder.studies.suite import battery
from encoder.tasks.readers import TaskDataError
from helpers import topic_task, write_jsonl


def task_folder(root, name, task_type, train, dev):
    folder = os.path.join(root, name)
    os.makedirs(folder)
    with open(os.path.join(folder, "task.json"), "w") as f:
        json.dump({"type": task_type}, f)
    write_jsonl(os.path.join(folder, "train.jsonl"), train)
    write_jsonl(os.path.join(folder, "dev.jsonl"), dev)
    return folder


def texts(labels):
    return [{"text": f"row {i} says {label}", "label": label} for i, label in enumerate(labels)]


@pytest.fixture
def no_model_no_runs(monkeypatch):
    """run_suite with a stand-in source (only its width is read before the checks) and a
    runner that fails the test if any run starts; returns the list of runs started."""
    started = []
    monkeypatch.setattr(sources, "load", lambda init_from: types.SimpleNamespace(
        model_cfg=types.SimpleNamespace(hidden_size=32)))
    monkeypatch.setattr(runner, "execute", lambda runs, *a, **k: started.extend(runs) or
                        pytest.fail("a run started before the checks"))
    return started


def suite(tmp_path, tasks, **options):
    return battery.SuiteOptions(init_from="model", workdir=str(tmp_path / "out"),
                                tasks=str(tasks), preset="runlocal", **options)


def test_a_one_class_task_is_refused_before_any_run(tmp_path, no_model_no_runs):
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic", n_train=32, n_dev=16)  # a good task beside it: never started
    train = task_folder(tasks, "single", "classification", texts(["yes"] * 20),
                        texts(["yes", "no"] * 4))
    with pytest.raises(TaskDataError) as e:
        battery.run_suite(suite(tmp_path, tasks))
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith("task single: ") and os.path.join(train, "train.jsonl") in message
    assert "one label ('yes') in all 20 training rows" in message
    assert not no_model_no_runs and not (tmp_path / "out" / "runs").exists()
    assert not (tmp_path / "out" / "data").exists()  # what the refused call began, removed


def test_a_drawn_training_subset_with_one_class_names_the_draw(tmp_path, no_model_no_runs):
    tasks = tmp_path / "tasks"
    task_folder(tasks, "rare", "classification", texts(["a"] * 20 + ["b"]), texts(["a", "b"]))
    with pytest.raises(TaskDataError, match=r"task rare: .*train\.seed0\.jsonl \(drawn from "
                                            r".*rare/train\.jsonl\) has one label \('a'\)"):
        battery.run_suite(suite(tmp_path, tasks, max_train=2))


@pytest.mark.parametrize("split", ["train", "dev"])
def test_constant_regression_scores_are_refused(tmp_path, no_model_no_runs, split):
    varied, constant = [0.5, 1.0, 2.5, 4.0] * 3, [3.0] * 12
    tasks = tmp_path / "tasks"
    folder = task_folder(tasks, "sts_b", "regression",
                         texts(constant if split == "train" else varied),
                         texts(constant if split == "dev" else varied))
    with pytest.raises(TaskDataError) as e:  # all rows: the message names the task's file
        battery.run_suite(suite(tmp_path, tasks, max_train=0, max_eval=0))
    message = str(e.value)
    assert message.startswith(f"task sts_b: every {split} score in "
                               f"{os.path.join(folder, split + '.jsonl')} is 3 (12 rows)")
    assert ("NaN" in message) == (split == "dev") and "\n" not in message


def test_an_sts_embedding_task_with_constant_scores_is_refused(tmp_path, no_model_no_runs):
    folder = tmp_path / "tasks" / "pairs"
    os.makedirs(folder)
    (folder / "task.json").write_text(json.dumps({"type": "sts"}))
    write_jsonl(folder / "test.jsonl", [{"text_a": f"a {i}", "text_b": f"b {i}", "label": 2}
                                        for i in range(8)])
    with pytest.raises(TaskDataError, match=r"^task pairs: every test score in "
                                            r".*pairs/test\.jsonl is 2 \(8 rows\).*NaN"):
        battery.run_suite(suite(tmp_path, tmp_path / "tasks"))


def test_a_source_that_is_not_there_is_named_before_any_task_is_built(tmp_path):
    """(The embedded suite was once built into --workdir first.)"""
    with pytest.raises(FileNotFoundError, match="does not exist"):
        battery.run_suite(battery.SuiteOptions(init_from=str(tmp_path / "nope"),
                                               workdir=str(tmp_path / "out"), preset="runlocal"))
    assert not (tmp_path / "out").exists()
