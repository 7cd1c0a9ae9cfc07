"""Pretraining runs: sharding equivalence, resume after SIGKILL, SIGTERM, non-finite loss."""
import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from encoder.train import metrics_io
from encoder.jobs import pretrain

from helpers import ROOT, child_env, tiny_pretrain_config


def small_config(**train):
    return tiny_pretrain_config(**{"num_steps": 10, "log_every": 1, "checkpoint_every": 100,
                                   **train})


def _losses(workdir):
    return [r["train/loss"] for r in metrics_io.read_metrics(workdir) if "train/loss" in r]


def _main(workdir, *extra, steps=30, checkpoint_every=10):
    env = child_env()
    cmd = [sys.executable, "-m", "encoder", "run", "--config=experiments/pretrain.py:runlocal",
           f"--workdir={workdir}", f"--config.train.num_steps={steps}",
           "--config.train.log_every=1", "--config.train.eval_every=0",
           f"--config.train.checkpoint_every={checkpoint_every}", *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for(predicate, proc, timeout=240):
    t0 = time.time()
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"process exited early:\n{proc.stdout.read()}")
        if time.time() - t0 > timeout:
            proc.kill()
            raise AssertionError("timed out")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def reference_losses(tmp_path_factory, shared_data):
    """An uninterrupted 30-step run through the CLI: the losses every resume must reproduce."""
    tok, cache = shared_data
    d = tmp_path_factory.mktemp("reference")
    ref = _main(d, f"--config.data.tokenizer={tok}", f"--config.data.cache_dir={cache}")
    assert ref.wait(timeout=300) == 0, ref.stdout.read()
    return _losses(str(d))


@pytest.mark.parametrize("objective", ["mlm", "rtd"])
def test_one_and_eight_devices_give_the_same_loss(tmp_path, shared_data, objective):
    results = {}
    # data=4 x fsdp=2 exercises both mesh axes at once (batch over 8 devices, parameters
    # and optimizer state over 2).
    for name, devices, mesh in (("1", jax.devices()[:1], dict(data=1, fsdp=1)),
                                ("data4_fsdp2", jax.devices(), dict(data=4, fsdp=2))):
        config = small_config()
        config.objective = objective
        config.data.tokenizer, config.data.cache_dir = shared_data
        config.mesh.update(mesh)
        pretrain.train(config, str(tmp_path / name), devices=devices)
        results[name] = _losses(str(tmp_path / name))
    assert len(results["1"]) == 10
    np.testing.assert_allclose(results["data4_fsdp2"], results["1"], rtol=1e-5)
    assert results["1"][-1] < results["1"][0]


def test_gradient_accumulation_matches_the_full_batch(shared_data, tmp_path):
    losses = {}
    for accum in (1, 2):
        config = small_config(num_steps=3, grad_accum_steps=accum)
        config.data.tokenizer, config.data.cache_dir = shared_data
        config.model.dropout = 0.0
        pretrain.train(config, str(tmp_path / str(accum)), devices=jax.devices()[:1])
        losses[accum] = _losses(str(tmp_path / str(accum)))
    # Same masks (corruption precedes micro-batching); the loss is a mean of
    # micro-batch means, which differs from the full-batch mean only through the
    # unequal masked counts per micro-batch.
    np.testing.assert_allclose(losses[2], losses[1], rtol=2e-2)
    assert losses[2] != losses[1]  # the accumulation path really ran


def test_non_finite_loss_stops_with_the_step_and_keeps_the_checkpoint(shared_data, tmp_path):
    config = small_config(num_steps=20, checkpoint_every=5, debug_nan_at_step=7)
    config.data.tokenizer, config.data.cache_dir = shared_data
    with pytest.raises(FloatingPointError, match=r"at step 8.*last good checkpoint \(step 5\)"):
        pretrain.train(config, str(tmp_path), devices=jax.devices()[:1])
    from encoder.checkpoints import store as checkpoint
    mngr = checkpoint.manager(str(tmp_path))
    assert mngr.all_steps() == [5]
    restored = mngr.restore(5, args=checkpoint.ocp.args.Composite(
        state=checkpoint.ocp.args.StandardRestore()))
    leaves = jax.tree.leaves(restored["state"]["params"])
    assert all(np.all(np.isfinite(x)) for x in leaves)


def test_sigkill_then_restart_reaches_the_same_loss(tmp_path, shared_data, reference_losses):
    tok, cache = shared_data
    extra = (f"--config.data.tokenizer={tok}", f"--config.data.cache_dir={cache}")
    victim = _main(tmp_path / "victim", *extra)
    ckpt = tmp_path / "victim" / "checkpoints" / "10"
    _wait_for(lambda: ckpt.exists() and len(_losses(str(tmp_path / "victim"))) >= 13, victim)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    done = len(_losses(str(tmp_path / "victim")))
    assert 10 < done < 30
    again = _main(tmp_path / "victim", *extra)
    assert again.wait(timeout=300) == 0, again.stdout.read()
    rows = [r for r in metrics_io.read_metrics(str(tmp_path / "victim")) if "train/loss" in r]
    # Rows of the steps the kill undid were dropped on resume: every step appears once,
    # and the whole curve is the reference's, bitwise on CPU.
    assert [r["step"] for r in rows] == list(range(1, 31))
    assert [r["train/loss"] for r in rows] == reference_losses


def test_ctrl_c_checkpoints_and_a_restart_reaches_the_same_loss(tmp_path, shared_data,
                                                                reference_losses):
    tok, cache = shared_data
    extra = (f"--config.data.tokenizer={tok}", f"--config.data.cache_dir={cache}")
    proc = _main(tmp_path, *extra, checkpoint_every=100000)
    _wait_for(lambda: len(_losses(str(tmp_path))) >= 3, proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 75, proc.stdout.read()  # stopped, not finished
    from encoder.checkpoints import store
    steps = store.manager(str(tmp_path)).all_steps()
    assert len(steps) == 1 and 3 <= steps[0] < 30  # saved at the step boundary, not lost
    again = _main(tmp_path, *extra, checkpoint_every=100000)
    assert again.wait(timeout=300) == 0, again.stdout.read()
    assert _losses(str(tmp_path)) == reference_losses


def test_sigterm_writes_a_checkpoint_before_exit(tmp_path, shared_data):
    tok, cache = shared_data
    proc = _main(tmp_path, f"--config.data.tokenizer={tok}", f"--config.data.cache_dir={cache}",
                 steps=100000, checkpoint_every=100000)
    _wait_for(lambda: len(_losses(str(tmp_path))) >= 3, proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 75  # checkpointed and stopped: not a finished run
    from encoder.checkpoints import store as checkpoint
    steps = checkpoint.manager(str(tmp_path)).all_steps()
    assert len(steps) == 1 and 3 <= steps[0] < 100000


def test_two_processes_match_one(tmp_path, shared_data):
    import portpicker
    tok, cache = shared_data
    extra = [f"--config.data.tokenizer={tok}", f"--config.data.cache_dir={cache}"]
    single = _main(tmp_path / "single", *extra, steps=10)
    assert single.wait(timeout=300) == 0, single.stdout.read()
    port = portpicker.pick_unused_port()
    procs = [_main(tmp_path / "multi", *extra,
                   f"--config.distributed.coordinator_address=localhost:{port}",
                   "--config.distributed.num_processes=2",
                   f"--config.distributed.process_id={i}", steps=10) for i in range(2)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stdout.read()
    np.testing.assert_allclose(_losses(str(tmp_path / "multi")), _losses(str(tmp_path / "single")),
                               rtol=1e-5)


def test_resolved_config_and_metrics_files(shared_data, tmp_path):
    config = small_config(num_steps=4, eval_every=4, log_every=2)
    config.data.tokenizer, config.data.cache_dir = shared_data
    pretrain.train(config, str(tmp_path), devices=jax.devices()[:1])
    rows = metrics_io.read_metrics(str(tmp_path))
    assert [r["step"] for r in rows if "train/loss" in r] == [2, 4]
    ev = [r for r in rows if "eval/loss" in r]
    assert ev and {"eval/mlm_accuracy", "eval/mlm_baseline_accuracy"} <= set(ev[0])
    assert os.path.isdir(tmp_path / "tensorboard")
    with open(tmp_path / "config.json") as f:
        assert json.load(f)["objective"] == "mlm"
