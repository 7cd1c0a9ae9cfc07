"""From the command line: a number out of its range and a run that diverges each end in one
`error: ...` line naming the field or the step and the likely causes, exit 1, no
traceback; a sweep variant out of range is named before any run starts."""
import pytest

from helpers import one_line, run_module

pytestmark = pytest.mark.e2e
P = ("encoder", "run", "--config=experiments/pretrain.py:runlocal", "--config.train.num_steps=4")


def test_out_of_range_numbers_are_one_line_before_anything_is_written(tmp_path):
    wd = tmp_path / "wd"
    for flag, words in (("--config.train.learning_rate=nan", "train.learning_rate must be"),
                        ("--config.model.dropout=1.5", "model.dropout must be a number in "
                                                       "[0, 1)"),
                        ("--config.model.num_heads=0", "model.num_heads must be an integer "
                                                       ">= 1, got 0")):
        rc, _, err = run_module(*P, flag, f"--workdir={wd}")
        one_line(rc, err, words)
        assert "ZeroDivisionError" not in err and len(err.strip().splitlines()) == 1
    rc, _, err = run_module("encoder", "ablate", "--config=experiments/pretrain.py:runlocal",
                            "--sweep=model.num_heads=0,2", f"--workdir={tmp_path / 'study'}")
    one_line(rc, err, "variant 'num_heads=0': model.num_heads must be")
    assert not wd.exists() and not (tmp_path / "study" / "runs").exists()


def test_a_divergence_is_one_line_naming_its_step_and_causes(shared_data, tmp_path):
    tok, cache = shared_data
    rc, out, err = run_module(*P, "--config.train.learning_rate=1e6",
                              "--config.train.warmup_steps=0", "--config.train.clip_norm=0",
                              "--config.train.log_every=1", f"--config.data.tokenizer={tok}",
                              f"--config.data.cache_dir={cache}", f"--workdir={tmp_path / 'w'}")
    one_line(rc, err, "non-finite", " at step ", "Likely causes, most likely first: 1) "
             "non-finite inputs or weights", "train.learning_rate")
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1
