"""Mistakes a new user made, each refused before the work: a dev file that
is the training file (fine-tuning and the baselines), a held-out file inside the training
folder, a sweep of the seed, a user's folder as evaluate/probe output, a watch of a run
that is not a pretraining run or with other suite settings than its curve's."""
import dataclasses
import json
import shutil

import pytest

from encoder.finetune import config as finetune_config
from encoder.jobs import evaluate, finetune, pretrain, probe
from encoder.studies import ablation, watch
from encoder.tasks import baselines
from encoder.tasks.base import TaskDataError
from helpers import tiny_pretrain_config


def _task(tmp_path):
    rows = [{"text": f"text number {i} about {'cats' if i % 2 else 'dogs'}",
             "label": "a" if i % 2 else "b"} for i in range(20)]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    copy = tmp_path / "copy.jsonl"
    shutil.copy(train, copy)
    return str(train), str(copy)


def test_a_dev_file_that_is_the_training_file_is_refused(tmp_path):
    train, copy = _task(tmp_path)
    config = finetune_config.get_config("task=classification,runlocal")
    config.data.train_file = train
    for dev in (train, copy):  # the same path, and a byte copy elsewhere
        config.data.dev_file = dev
        with pytest.raises(TaskDataError, match=r"--config.data.dev_file=.* is the training "
                                                r"file .*training scores"):
            finetune.validate(config)
        with pytest.raises(TaskDataError, match=r"--dev=.* is the training file"):
            baselines.run("classification", train, dev)


def test_a_held_out_file_inside_the_training_folder_is_refused(tmp_path):
    (tmp_path / "corpus").mkdir()
    for name in ("a.txt", "b.txt"):
        (tmp_path / "corpus" / name).write_text("some words\n")
    config = tiny_pretrain_config(eval_every=2)
    config.data.train_files = str(tmp_path / "corpus")
    config.data.valid_files = str(tmp_path / "corpus" / "b.txt")
    with pytest.raises(ValueError, match="are the training files"):
        pretrain.validate(config)


def test_sweeping_the_seed_is_refused_for_seeds():
    with pytest.raises(ValueError, match="give --seeds=N instead"):
        ablation.check_sweeps([("seed", [0, 1])])


def test_evaluate_and_probe_never_write_into_a_users_folder(tmp_path, tiny_pretrained):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "eval.json").write_text('{"mine": 1}')
    config = finetune_config.get_config("runlocal", job="evaluate")
    config.init_from = tiny_pretrained
    with pytest.raises(ValueError, match="mine"):
        evaluate.evaluate(config, str(mine))
    with pytest.raises(ValueError, match="mine"):
        probe.probe(tiny_pretrained, [], str(mine))
    assert (mine / "eval.json").read_text() == '{"mine": 1}'


@dataclasses.dataclass(frozen=True)
class Opts:
    init_from: str = ""
    workdir: str = ""
    only: tuple = ()
    tasks: str = "/tasks"


def test_a_watch_follows_pretraining_runs_with_one_protocol(tmp_path, tiny_pretrained):
    ft = tmp_path / "ft"
    ft.mkdir()
    (ft / "config.json").write_text(json.dumps({"mode": "finetune", "model": {}}))
    with pytest.raises(ValueError, match="not a pretraining workdir"):
        watch.watch(str(ft), str(tmp_path / "w0"), Opts(), None, once=True)
    out = str(tmp_path / "w")
    watch.watch(tiny_pretrained, out, Opts(only=("topic",)), lambda o: {}, once=True)
    with pytest.raises(ValueError, match=r"other suite settings \(only: \['topic'\] -> "):
        watch.watch(tiny_pretrained, out, Opts(only=("api_retrieval",)), lambda o: {},
                    once=True)
