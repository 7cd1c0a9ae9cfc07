"""The fine-tuning job in process: FSDP shards the parameters, strict task files, too few
examples said plainly (whole runs, resume after SIGKILL: tests/e2e/test_finetune_runs.py)."""
import json
import os

import jax
import pytest

from encoder.checkpoints import sources
from encoder.jobs import finetune as run
from encoder.tasks.base import TaskDataError
from encoder.tasks.table import TASKS
from experiments import finetune as finetune_exp
from helpers import topic_config, topic_task, write_jsonl as _write


def test_parameters_are_sharded_over_fsdp(tiny_pretrained, tmp_path):
    config = topic_config(tiny_pretrained, topic_task(tmp_path / "task"))
    config.mesh.update(dict(data=4, fsdp=2))
    ft = run.build(config, str(tmp_path / "out"), devices=jax.devices())
    kernel = ft.trainer.fresh_state().params["model"]["encoder"]["blocks_0"]["mlp"]["wi"]["kernel"]
    assert kernel.sharding.spec[0] == "fsdp"
    assert kernel.addressable_shards[0].data.shape == (kernel.shape[0] // 2, kernel.shape[1])


BAD_FILES = {  # what a user writes by accident -> the error it must get
    "mixed label types": ("classification", [{"text": "a", "label": 0}, {"text": "b", "label": "0"}],
                          r"train.jsonl:2: label '0' is a str.*mixed label types"),
    "one label": ("classification", [{"text": "a", "label": "x"}, {"text": "b", "label": "x"}],
                  r"only one label"),
    "missing label": ("classification", [{"text": "a", "label": "x"}, {"text": "b"}],
                      r"train.jsonl:2: no 'label' field"),
    "tokens as a string": ("tagging", [{"tokens": "ab", "tags": ["O", "O"]}],
                           r"train.jsonl:1: 'tokens' must be a list of strings"),
    "non-numeric regression label": ("regression", [{"text": "a", "label": "high"}],
                                     r"train.jsonl:1: regression label 'high' is not a number"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_task_files_that_would_change_the_task_are_refused(tiny_pretrained, tmp_path, case):
    task, rows, message = BAD_FILES[case]
    _write(tmp_path / "train.jsonl", rows)
    t = TASKS[task](finetune_exp.get_config(f"task={task}"), sources.load(tiny_pretrained).tokenizer)
    with pytest.raises(TaskDataError, match=message):
        examples = t.read(str(tmp_path / "train.jsonl"), "train")
        t.fit_labels(examples)


def test_a_half_labelled_dev_file_is_refused_not_half_scored(tiny_pretrained, tmp_path):
    task_dir = topic_task(tmp_path / "task")
    rows = [json.loads(x) for x in open(os.path.join(task_dir, "dev.jsonl"))]
    del rows[3]["label"]
    _write(tmp_path / "task" / "dev.jsonl", rows)
    with pytest.raises(TaskDataError, match=r"dev.jsonl:4: no 'label' field \(1 of 16"):
        run.build(topic_config(tiny_pretrained, task_dir), str(tmp_path / "out"))


def test_fewer_examples_than_one_batch_is_said_plainly(tiny_pretrained, tmp_path):
    task_dir = topic_task(tmp_path / "task", n_train=8)
    with pytest.raises(TaskDataError, match="8 training rows, fewer than one batch of 16"):
        run.build(topic_config(tiny_pretrained, task_dir), str(tmp_path / "out"))
