"""Workdirs that cannot be corrupted, in process: strict JSON, every failed restore named, a
reused pid is no lock holder (whole runs: tests/e2e/test_workdir_runs.py)."""
import json
import os

import pytest

from encoder.checkpoints import store
from encoder.train import metrics_io, workdir as workdir_lib


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


def test_a_mixture_source_whose_files_change_changes_the_run_identity(tmp_path):
    """Each source of a mixture is named in the run's data identity by its files' content,
    so a restart over edited source files is seen (not trained on as the same run)."""
    from encoder import config as config_lib
    from encoder.train import workdir as workdir_lib
    web = tmp_path / "web.txt"
    web.write_text("one document\n")
    config = config_lib.base_config()
    config.data.sources = {"web": config_lib.mixture_source(files=str(web))}
    before = workdir_lib.data_identity(config)
    assert "data.sources.web.files" in before
    web.write_text("another document\n")
    assert workdir_lib.data_identity(config) != before
