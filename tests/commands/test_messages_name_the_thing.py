"""Mistakes told in one line that names what the user gave: an empty path flag, export's
--workdir (not init_from=), an HF folder given to merge, the ELECTRA generator the user never
sized, a length past the model's positions (probe, bench --mode=compile), and the recipes
found (or placed) when a command runs outside the checkout."""
import os
import shutil

import pytest

from helpers import ROOT, child_env, minilm_dir, one_line, run_module


@pytest.mark.parametrize("args,flag", [
    (["run", "--config=experiments/pretrain.py:runlocal", "--workdir="], "--workdir"),
    (["export", "--workdir=", "--out=x"], "--workdir"),
    (["suite", "--baseline=bow", "--workdir="], "--workdir"),
    (["prepare", "--input=stdlib", "--out="], "--out"),
    (["import_hf", "--checkpoint=", "--out=x"], "--checkpoint"),
])
def test_an_empty_path_flag_is_named_not_a_missing_file(tmp_path, args, flag):
    rc, _, err = run_module("encoder", *args, timeout=120)
    one_line(rc, err, f"error: {flag} is empty: give ")
    assert "No such file" not in err


def test_export_names_its_own_flag(tmp_path):
    rc, _, err = run_module("encoder", "export", f"--workdir={tmp_path / 'nope'}",
                            f"--out={tmp_path / 'out'}", timeout=120)
    one_line(rc, err, f"--workdir='{tmp_path / 'nope'}' does not exist")
    assert "init_from" not in err


def test_merge_says_an_hf_folder_is_no_workdir(tmp_path):
    rc, _, err = run_module("encoder", "merge", f"--workdirs=hf:{minilm_dir()}",
                            f"--out={tmp_path / 'out'}", timeout=120)
    one_line(rc, err, "an HF folder is none", "experiments/continue.py")
    assert "is not a folder" not in err


def test_the_generator_is_named_with_the_fraction_that_sized_it():
    from encoder.jobs import pretrain_checks
    from helpers import experiment_config
    config = experiment_config("pretrain", "runlocal,objective=rtd")
    config.model.update(dict(hidden_size=100, num_heads=2, position="rope"))
    with pytest.raises(ValueError) as e:
        pretrain_checks.validate(config)
    assert str(e.value).startswith("the ELECTRA generator sized from electra.generator_fraction="
                                   "0.25 x model.hidden_size=100 (width 25, 1 head(s) of 25)")


def test_probe_refuses_a_length_past_the_positions_up_front(tmp_path):
    rc, _, err = run_module("encoder", "probe", f"--init_from=hf:{minilm_dir()}",
                            f"--tasks={tmp_path}", f"--out={tmp_path / 'out'}",
                            "--max_len=1000", timeout=120)
    one_line(rc, err, "--max_len=1000: seq_len 1000 is longer than the 512 learned positions")
    assert not (tmp_path / "out").exists()


def test_bench_compile_refuses_a_length_past_the_recipes_positions():
    rc, _, err = run_module("encoder", "bench", "--mode=compile",
                            "--config=experiments/bert_base.py", "--seq_len=4096", timeout=300)
    one_line(rc, err, "--seq_len=4096: seq_len 4096 is longer than the 512 learned positions",
             "--config.model.max_position=4096")


def _outside(cwd, pythonpath, *args):
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "encoder", *args], cwd=cwd,
                       env=child_env(PYTHONPATH=pythonpath), capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stderr


def test_recipes_are_found_from_any_directory_of_an_editable_install(tmp_path):
    rc, err = _outside(tmp_path, ROOT, "run", "--config=experiments/bert_base.py:runlocal",
                       "--config.train.learning_rate=nan", f"--workdir={tmp_path / 'w'}")
    assert f"reading the recipes of {ROOT}" in err, err
    one_line(rc, err, "train.learning_rate must be")  # the recipe was read (and imported
    # experiments.pop_attention_dropout), then the value refused


def test_an_install_without_recipes_says_where_they_are(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "encoder"), site / "encoder",
                    ignore=shutil.ignore_patterns("__pycache__"))
    rc, err = _outside(tmp_path, str(site), "run", "--config=experiments/pretrain.py",
                       f"--workdir={tmp_path / 'w'}")
    one_line(rc, err, "experiments is not a folder here", "not installed with the package",
             "experiments/pretrain.py")


def test_a_typed_num_steps_that_phases_replace_is_said(tmp_path):
    rc, _, err = run_module("encoder", "run", "--config=experiments/wsd.py:runlocal",
                            "--config.train.num_steps=50", "--config.data.seq_len=4",
                            f"--workdir={tmp_path / 'w'}", timeout=120)
    assert ("warning: --config.train.num_steps=50 does not set this run's length: with phases "
            "declared it is their sum, 10 steps (stable 5 + decay 5)") in err, err
    one_line(rc, err, "data.seq_len=4")  # then refused for the short rows, as before
