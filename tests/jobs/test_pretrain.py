"""Pretraining runs: sharding equivalence, resume after SIGKILL, SIGTERM, non-finite loss."""
import os
import subprocess
import sys
import time

import pytest

from encoder.train import metrics_io
from encoder.jobs import pretrain

from helpers import ROOT  # noqa: E402


def small_config(**train):
    sys.path.insert(0, ROOT)
    from experiments import pretrain
    config = pretrain.get_config("runlocal")
    config.train.update(dict(num_steps=10, log_every=1, eval_every=0, checkpoint_every=100))
    config.train.update(train)
    return config


@pytest.fixture(scope="module")
def shared_data(tiny_pretrained):
    """The session's tokenizer and prepared corpus, reused by every run here (speed)."""
    return os.path.join(tiny_pretrained, "tokenizer", "sp.model"), os.path.join(tiny_pretrained,
                                                                                 "cache")


def _losses(workdir):
    return [r["train/loss"] for r in metrics_io.read_metrics(workdir) if "train/loss" in r]


def test_fsdp_shards_parameters(shared_data, tmp_path):
    config = small_config()
    config.data.tokenizer, config.data.cache_dir = shared_data
    config.mesh.update(dict(data=4, fsdp=2))
    state = pretrain.build(config, str(tmp_path)).trainer.initial_state
    kernel = state.params["encoder"]["blocks_0"]["mlp"]["wi"]["kernel"]  # [embed, mlp]
    assert kernel.sharding.spec[0] == "fsdp"
    assert kernel.addressable_shards[0].data.shape == (kernel.shape[0] // 2, kernel.shape[1])
    mu = state.opt_state[1][0].mu["encoder"]["blocks_0"]["mlp"]["wi"]["kernel"]
    assert mu.sharding.spec[0] == "fsdp"


def _main(workdir, *extra, steps=30, checkpoint_every=10):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    cmd = [sys.executable, "-m", "encoder.main", "--config=experiments/pretrain.py:runlocal",
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


def test_the_run_says_how_many_times_it_reads_its_data():
    from encoder.jobs import pretrain
    once = pretrain.data_passes(rows=400, steps=50, batch_size=8, seq_len=128)
    assert "read it 1.0 times" in once and "many passes" not in once
    many = pretrain.data_passes(rows=3398, steps=1200, batch_size=32, seq_len=128)
    assert "read it 11.3 times" in many and "many passes" in many
