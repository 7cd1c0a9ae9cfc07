"""A whole pretraining run on a wall-clock budget (train.time_budget_s), on a clock the test
drives (one second per reading): it stops when the budget is spent, its rows follow the
schedule at the share each step used, and a restart trains no further. The optimizer's
clock alone: tests/train/test_time_budget.py."""
import jax
import pytest

from encoder.checkpoints import store
from encoder.jobs import pretrain
from encoder.train import loop, metrics_io, supervision
from helpers import tiny_pretrain_config


def test_a_budget_run_stops_when_spent_and_a_restart_trains_no_further(
        shared_data, tmp_path, monkeypatch):
    """Budget 6 s on a clock of 1 s a reading: the loop reads it at its start and after
    each step, so step k (from 0) runs at share (k + 1) / 6 and the 5th step spends the
    budget. Every row's learning rate is the linear schedule at share x num_steps, the
    checkpoint holds the last share and the time spent, and a restart does nothing."""
    ticks = iter(range(10_000))
    monkeypatch.setattr(supervision, "clock", lambda: float(next(ticks)))
    config = tiny_pretrain_config(num_steps=100, warmup_steps=0, schedule="linear",
                                  learning_rate=1e-3, time_budget_s=6.0, log_every=1,
                                  checkpoint_every=100)
    config.data.tokenizer, config.data.cache_dir = shared_data
    work = str(tmp_path / "run")
    result = pretrain.train(config, work, devices=jax.devices()[:1])
    assert result["step"] == 5
    rows = [r for r in metrics_io.read_metrics(work) if "train/loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    for r in rows:
        share = r["step"] / 6  # the share step r["step"] - 1 was taken at
        assert r["train/learning_rate"] == pytest.approx(1e-3 * (1 - share), rel=1e-6)
    assert rows[-1]["train/time_budget_share"] == 1.0
    mngr = store.manager(work, create=False)
    saved, _, meta, step = store.restore(mngr, set_aside=False)
    mngr.close()
    assert step == 5 and meta["clock_s"] == pytest.approx(6.0)
    # the state carries the share the last step was taken at (the host set it)
    progress = [v for k, v in jax.tree_util.tree_leaves_with_path(saved["opt_state"])
                if "progress" in jax.tree_util.keystr(k)]
    assert len(progress) == 1 and float(progress[0]) == pytest.approx(5 / 6)
    # a restart: the checkpoint says the budget is spent, so no step is taken
    again = pretrain.train(config, work, devices=jax.devices()[:1])
    assert again["step"] == 5
    assert len([r for r in metrics_io.read_metrics(work) if "train/loss" in r]) == 5
