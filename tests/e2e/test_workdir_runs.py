"""Workdirs that cannot be corrupted: identity on restart, one writer, checkpoint fallback,
up-front numeric checks, strict JSON."""
import json
import os
import shutil
import subprocess
import sys

import jax
import pytest

from encoder.train import metrics_io, workdir as workdir_lib
from encoder.jobs import pretrain
from helpers import ROOT, child_env, snapshot, tiny_pretrain_config


@pytest.mark.parametrize("change", ["model.hidden_size", "objective", "data.seq_len"])
def test_restart_with_another_run_is_refused_and_nothing_changes(tiny_pretrained, tmp_path,
                                                                 change):
    wd = str(tmp_path / "wd")
    shutil.copytree(tiny_pretrained, wd)
    before = snapshot(wd)
    config = tiny_pretrain_config(num_steps=8)
    if change == "model.hidden_size":
        config.model.hidden_size = 256
    elif change == "objective":
        config.objective = "rtd"
    else:
        config.data.seq_len = 128
    with pytest.raises(workdir_lib.RunMismatch, match=change.replace(".", r"\.")):
        pretrain.train(config, wd, devices=jax.devices()[:1])
    assert snapshot(wd) == before  # config.json, checkpoints, metrics: all untouched


def test_a_changed_step_count_is_allowed_and_logged(tiny_pretrained, tmp_path, capsys):
    wd = str(tmp_path / "wd")
    shutil.copytree(tiny_pretrained, wd)
    result = pretrain.train(tiny_pretrain_config(num_steps=8), wd,
                            devices=jax.devices()[:1])
    assert result["step"] == 8
    out = capsys.readouterr().out
    assert "resuming with a changed setting: train.num_steps: 6 -> 8" in out
    steps = [r["step"] for r in metrics_io.read_metrics(wd) if "train/loss" in r]
    assert steps == sorted(set(steps))  # every step once
    assert not os.path.exists(os.path.join(wd, workdir_lib.LOCK))  # released


def test_one_writer_per_workdir_and_stale_locks_are_taken_over(tmp_path):
    with workdir_lib.Lock(str(tmp_path)):
        with pytest.raises(workdir_lib.WorkdirBusy, match=f"in use by pid {os.getpid()}"):
            workdir_lib.Lock(str(tmp_path)).acquire()
    assert not (tmp_path / workdir_lib.LOCK).exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket
    (tmp_path / workdir_lib.LOCK).write_text(json.dumps(
        {"host": socket.gethostname(), "pid": dead.pid, "since": 0}))
    with workdir_lib.Lock(str(tmp_path)) as lock:
        assert json.loads((tmp_path / workdir_lib.LOCK).read_text())["pid"] == os.getpid()
        assert lock.held


def test_a_second_launch_on_a_busy_workdir_says_who_holds_it(tiny_pretrained, tmp_path):
    wd = tmp_path / "wd"
    with workdir_lib.Lock(str(wd)):  # the first run, alive
        proc = subprocess.run(
            [sys.executable, "-m", "encoder", "run", "--config=experiments/pretrain.py:runlocal",
             f"--workdir={wd}"], cwd=ROOT, capture_output=True, text=True, timeout=120,
            env=child_env())
        assert sorted(os.listdir(wd)) == [workdir_lib.LOCK]  # only the first run's lock
    assert f"in use by pid {os.getpid()}" in proc.stderr
    assert "Traceback" not in proc.stderr  # one line, not a stack
    assert sorted(os.listdir(wd)) == []  # nothing written by the second launch (lock released)


def test_a_truncated_latest_checkpoint_falls_back_to_the_previous_one(tiny_pretrained, tmp_path,
                                                                      capsys):
    tok = os.path.join(tiny_pretrained, "tokenizer", "sp.model")
    wd = str(tmp_path / "wd")
    config = tiny_pretrain_config(num_steps=4, checkpoint_every=2, log_every=1)
    config.data.tokenizer, config.data.cache_dir = tok, os.path.join(tiny_pretrained, "cache")
    pretrain.train(config, wd, devices=jax.devices()[:1])
    reference = [r["train/loss"] for r in metrics_io.read_metrics(wd) if "train/loss" in r]
    # Damage step 4: truncate every array file of its state (a crash mid-write, a full disk).
    damaged = 0
    for d, _, files in os.walk(os.path.join(wd, "checkpoints", "4", "state")):
        for name in files:
            path = os.path.join(d, name)
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 3)
            damaged += 1
    assert damaged
    capsys.readouterr()
    pretrain.train(config, wd, devices=jax.devices()[:1])
    out = capsys.readouterr().out
    assert "checkpoint step 4" in out and "does not restore" in out
    assert "resumed from" in out and "at step 2" in out
    kept = os.listdir(os.path.join(wd, "checkpoints.bad"))  # set aside, not deleted
    assert len(kept) == 1 and kept[0].startswith("4-")
    rows = [r for r in metrics_io.read_metrics(wd) if "train/loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # steps 3-4 once, from the redo
    assert [r["train/loss"] for r in rows] == reference  # the redo is exact


def test_numbers_are_checked_before_anything_runs(tiny_pretrained, tmp_path):
    bad = {"batch_size": 0, "grad_accum_steps": 0, "log_every": 0, "checkpoint_every": 0,
           "learning_rate": -1.0, "num_steps": 0}
    for field, value in bad.items():
        config = tiny_pretrain_config()
        config.train[field] = value
        with pytest.raises(ValueError, match=f"train.{field} must be"):
            pretrain.validate(config)
    config = tiny_pretrain_config(batch_size=12)
    with pytest.raises(ValueError, match="does not divide over 8 devices.*multiple of 8"):
        pretrain.train(config, str(tmp_path / "wd"), devices=jax.devices())
    assert not (tmp_path / "wd" / "tokenizer").exists()  # refused before any tokenizer


def test_init_from_a_typo_is_refused_without_creating_it(tiny_pretrained, tmp_path):
    config = tiny_pretrain_config()
    config.init_from = str(tmp_path / "no_such_run")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        pretrain.train(config, str(tmp_path / "wd"), devices=jax.devices()[:1])
    assert not (tmp_path / "no_such_run").exists()


def test_no_held_out_document_is_an_error_not_training_text(tiny_pretrained, tmp_path):
    (tmp_path / "corpus.txt").write_text("\n\n".join(f"Document {i} says something about "
                                                     "files and paths." for i in range(6)))
    config = tiny_pretrain_config(eval_every=5)
    config.data.tokenizer = os.path.join(tiny_pretrained, "tokenizer", "sp.model")
    config.data.train_files = str(tmp_path / "corpus.txt")
    config.data.valid_fraction = 0.0
    with pytest.raises(ValueError, match="no held-out document to evaluate on"):
        pretrain.train(config, str(tmp_path / "wd"), devices=jax.devices()[:1])
