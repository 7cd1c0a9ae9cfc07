"""init_from, init_step and init_fresh refused together before anything is read: each
message names the flags and what to give."""
import os

import ml_collections
import pytest

from encoder.checkpoints import sources


def _cfg(**fields):
    return ml_collections.ConfigDict({"init_from": "", "init_step": -1, "init_fresh": "",
                                      **fields})


def _workdir(tmp_path, *steps):
    d = tmp_path / "src"
    for s in steps:
        os.makedirs(d / "checkpoints" / str(s))
    return str(d)


def test_workdir_at_step_splits_and_a_step_that_is_not_a_number_names_the_steps(tmp_path):
    src = _workdir(tmp_path, 2, 6)
    assert sources.split_step(f"{src}@6") == (src, 6)
    assert sources.split_step("hf:/a@b") == ("hf:/a@b", None)
    for bad, step in ((f"{src}@abc", "abc"), (f"{src}@", "")):
        with pytest.raises(ValueError) as e:
            sources.split_step(bad)
        assert f"@{step} is not a step: give WORKDIR@STEP with STEP a number ({src} has " \
               "checkpoints at [2, 6])" in str(e.value)
    os.makedirs(tmp_path / "odd@name")  # a folder whose own name holds an @ is that folder
    assert sources.split_step(str(tmp_path / "odd@name")) == (str(tmp_path / "odd@name"), None)
    os.makedirs(tmp_path / "run@6")  # ... even when what follows the @ is a number
    assert sources.split_step(str(tmp_path / "run@6")) == (str(tmp_path / "run@6"), None)
    os.makedirs(f"{src}@6")  # both readings exist: refused, not guessed
    with pytest.raises(ValueError, match=r"names two things: the folder .*src@6 and step 6 "
                                         r"of .*src; rename the folder"):
        sources.split_step(f"{src}@6")


@pytest.mark.parametrize("fields, words", [
    ({"init_fresh": "mlm_head"}, ["init_fresh='mlm_head' needs --config.init_from"]),
    ({"init_step": 4}, ["--config.init_step=4 needs --config.init_from"]),
    ({"init_from": "W", "init_fresh": "/"}, ["init_fresh='/' names no parameter path",
                                             "drop init_from"]),
    ({"init_from": "W@6", "init_step": 3}, ["init_from=W@6 and --config.init_step=3 name two "
                                            "steps: give one"]),
])
def test_init_fields_that_disagree_are_refused(fields, words):
    with pytest.raises(ValueError) as e:
        sources.check_init_fields(_cfg(**fields))
    for w in words:
        assert w in str(e.value), str(e.value)


def test_init_fields_that_agree_pass():
    for fields in ({}, {"init_from": "W@6", "init_step": 6}, {"init_from": "W", "init_step": 3},
                   {"init_from": "W", "init_fresh": "mlm_head,encoder/blocks_0"}):
        sources.check_init_fields(_cfg(**fields))
