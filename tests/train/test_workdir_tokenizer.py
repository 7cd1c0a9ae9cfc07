"""A workdir's own tokenizer is part of its run's identity: its fingerprint in run.json, a
restart over another one (or none) refused in one line, as `merge` refuses two tokenizers."""
import json
import os
import shutil

import pytest

from encoder.jobs import pretrain
from encoder.train import workdir as workdir_lib
from helpers import tiny_pretrain_config


@pytest.fixture
def run_copy(tmp_path, tiny_pretrained):
    """A copy of the session's tiny pretraining workdir (6 steps, checkpoint at 6)."""
    d = tmp_path / "w"
    shutil.copytree(tiny_pretrained, d, ignore=shutil.ignore_patterns("LOCK"))
    return str(d)


def test_run_json_records_the_tokenizer_and_a_copy_of_it_is_the_same(run_copy):
    recorded = json.load(open(os.path.join(run_copy, workdir_lib.RUN)))["tokenizer"]
    assert recorded["path"] == os.path.join("tokenizer", "sp.model")
    model = os.path.join(run_copy, "tokenizer", "sp.model")
    data = open(model, "rb").read()
    os.remove(model)
    open(model, "wb").write(data)  # the same bytes, another file: the same tokenizer
    workdir_lib.check_tokenizer(run_copy, recorded)


def test_a_swapped_tokenizer_is_refused_on_resume(run_copy, text_corpus):
    shutil.copy(text_corpus[1], os.path.join(run_copy, "tokenizer", "sp.model"))
    before = sorted(os.listdir(run_copy))
    with pytest.raises(workdir_lib.RunMismatch) as e:
        pretrain.train(tiny_pretrain_config(num_steps=8), run_copy)
    msg = str(e.value)
    assert "tokenizer/sp.model is not the tokenizer this run was trained with" in msg
    assert "\n" not in msg and "new --workdir" in msg
    assert sorted(os.listdir(run_copy)) == before  # nothing written, nothing re-prepared


def test_a_removed_tokenizer_is_refused_not_trained_again(run_copy):
    shutil.rmtree(os.path.join(run_copy, "tokenizer"))
    with pytest.raises(workdir_lib.RunMismatch, match="it is gone"):
        pretrain.train(tiny_pretrain_config(num_steps=8), run_copy)
    assert not os.path.exists(os.path.join(run_copy, "tokenizer"))
