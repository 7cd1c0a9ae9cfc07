"""Data is part of a run's identity: a restart on other data is refused with a diff."""
import os

import ml_collections
import pytest

from encoder.data import corpus
from encoder.train import workdir as workdir_lib


def _config(**data):
    return ml_collections.ConfigDict({"seed": 0, "data": {"train_files": "", "valid_files": "",
                                                          "tokenizer": "", **data}})


def _run_dir(tmp_path, config):
    wd = tmp_path / "wd"
    (wd / "checkpoints" / "6").mkdir(parents=True)  # what store.has_checkpoint looks for
    workdir_lib.record_identity(str(wd), config)
    return str(wd)


def test_a_file_added_to_the_training_folder_is_refused(tmp_path):
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "a.txt").write_text("one document\n")
    config = _config(train_files=str(tmp_path / "text"))
    wd = _run_dir(tmp_path, config)
    assert workdir_lib.check_identity(wd, config, ()) == []
    (tmp_path / "text" / "b.txt").write_text("another\n")
    with pytest.raises(workdir_lib.RunMismatch, match=r"different data(.|\n)*file added: .*b\.txt"):
        workdir_lib.check_identity(wd, config, ())


def test_a_grown_finetuning_file_is_refused_and_a_touched_one_is_not(tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text('{"text": "a", "label": "x"}\n')
    config = _config(train_file=str(train), dev_file="")
    wd = _run_dir(tmp_path, config)
    os.utime(train, (1, 1))  # same bytes, another date: the same data
    assert workdir_lib.check_identity(wd, config, ()) == []
    with open(train, "a") as f:
        f.write('{"text": "b", "label": "y"}\n')
    with pytest.raises(workdir_lib.RunMismatch, match=r"data\.train_file: file changed"):
        workdir_lib.check_identity(wd, config, ())


def test_a_prepared_corpus_is_named_by_its_manifest():
    assert corpus.fingerprint("") == {}
    old = {"prepared": "/c", "plan": "a", "tokenizer": "t", "documents": {}, "shards": "s"}
    new = {**old, "shards": "s2"}
    assert corpus.fingerprint_diff(old, new) == ["shards: s -> s2"]


def test_a_refused_change_of_a_rule_valued_field_says_auto(tmp_path):
    """Once 'train.learning_rate: 0.0 -> 0.01' where 0 meant "by size"."""
    train = tmp_path / "train.jsonl"
    train.write_text('{"text": "a", "label": "x"}\n')
    config = _config(train_file=str(train), dev_file="")
    config.mode, config.train = "finetune", ml_collections.ConfigDict({"learning_rate": 0.0})
    wd = _run_dir(tmp_path, config)
    config.train.learning_rate = 0.01
    with pytest.raises(workdir_lib.RunMismatch, match=r"train\.learning_rate: 0\.0 \(auto: "
                                                      r"chosen by the model's size\) -> 0\.01"):
        workdir_lib.check_identity(wd, config, ())
    config.mode = "pretrain"  # pretraining's 0.0 is a number
    with pytest.raises(workdir_lib.RunMismatch, match=r"train\.learning_rate: 0\.0 -> 0\.01"):
        workdir_lib.check_identity(wd, config, ())
