"""Workdirs that cannot be corrupted: identity on restart, one writer, checkpoint fallback,
up-front numeric checks, strict JSON."""
import hashlib
import json
import os

import pytest

from encoder.checkpoints import store
from encoder.train import metrics_io, workdir as workdir_lib
from experiments import pretrain as pretrain_exp


def tiny_config(tiny_pretrained, **train):
    """The configuration tiny_pretrained was trained with (conftest), plus overrides."""
    config = pretrain_exp.get_config("runlocal")
    config.train.update(dict(num_steps=6, eval_every=0, checkpoint_every=6))
    config.train.update(train)
    return config


def snapshot(folder) -> dict:
    """path -> sha256 of every file under folder (what 'nothing changed' means)."""
    out = {}
    for d, _, files in os.walk(folder):
        for name in files:
            p = os.path.join(d, name)
            out[os.path.relpath(p, folder)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def test_metrics_json_never_holds_nan(tmp_path):
    with pytest.raises(FloatingPointError, match="dev/pearson is not finite"):
        metrics_io.write_json(str(tmp_path / "eval.json"), {"dev": {"pearson": float("nan")}})
    assert not (tmp_path / "eval.json").exists()
    metrics_io.write_json(str(tmp_path / "eval.json"), {"dev": {"pearson": 0.5}})
    assert json.load(open(tmp_path / "eval.json")) == {"dev": {"pearson": 0.5}}


def test_restore_reports_every_step_when_none_restores(tmp_path):
    mngr = store.manager(str(tmp_path))
    with pytest.raises(store.CheckpointError, match="no checkpoint"):
        store.restore(mngr)


def test_a_restarted_container_reusing_our_pid_does_not_lock_itself_out(tmp_path):
    """Same host, same pid, another start time: the holder is gone (a restarted container)."""
    import socket
    (tmp_path / workdir_lib.LOCK).write_text(json.dumps(
        {"host": socket.gethostname(), "pid": os.getpid(), "since": 0, "started": "1"}))
    with workdir_lib.Lock(str(tmp_path)) as lock:
        assert lock.held
        assert json.loads((tmp_path / workdir_lib.LOCK).read_text())["started"] != "1"
