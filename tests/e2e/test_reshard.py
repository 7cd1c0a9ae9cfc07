"""Resume onto another shape: a run checkpointed on 1 device continues on 8 (data=4 x fsdp=2)
to the uninterrupted run's loss, and the reverse (the state reshards through orbax; the data
iterator's position does not depend on the device or process count)."""
import json
import os
import sys

import jax
import numpy as np
import pytest

from encoder.jobs import pretrain
from encoder.studies import jobconfig
from encoder.train import metrics_io

from helpers import ROOT

pytestmark = pytest.mark.e2e


def _config(tiny_data, steps: int, mesh: dict):
    sys.path.insert(0, ROOT)
    from experiments import pretrain as experiment
    config = experiment.get_config("runlocal")
    config = jobconfig.override(config, {**tiny_data, "train.num_steps": steps,
                                         "train.log_every": 1, "train.eval_every": 0,
                                         "train.checkpoint_every": 100,
                                         # one schedule whatever num_steps (a split run stops at 3)
                                         "train.schedule": "constant"})
    config.mesh.update(mesh)
    return config


def _losses(workdir):
    return [r["train/loss"] for r in metrics_io.read_metrics(workdir) if "train/loss" in r]


ONE = ({"data": 1, "fsdp": 1}, 1)
EIGHT = ({"data": 4, "fsdp": 2}, 8)


@pytest.fixture(scope="module")
def whole(tmp_path_factory, tiny_data):
    """The uninterrupted run's losses (one device: eight give the same, tests/train)."""
    d = str(tmp_path_factory.mktemp("whole"))
    pretrain.train(_config(tiny_data, 6, ONE[0]), d, devices=jax.devices()[:1])
    return _losses(d)


@pytest.mark.parametrize("first,then", [(ONE, EIGHT), (EIGHT, ONE)], ids=["1to8", "8to1"])
def test_a_run_continues_on_another_device_count(tmp_path, tiny_data, whole, first, then,
                                                 capsys):
    assert jax.device_count() == 8  # the conftest's simulated devices
    split = str(tmp_path / "split")
    pretrain.train(_config(tiny_data, 3, first[0]), split, devices=jax.devices()[:first[1]])
    capsys.readouterr()
    result = pretrain.train(_config(tiny_data, 6, then[0]), split,
                            devices=jax.devices()[:then[1]])
    out = capsys.readouterr().out
    assert "resumed from" in out and "at step 3" in out
    assert "resuming on another shape" in out  # the identity check allows it and says so
    np.testing.assert_allclose(_losses(split), whole, rtol=1e-5)
    assert result["step"] == 6
    with open(os.path.join(split, "run.json")) as f:
        assert json.load(f)["topology"]["devices"] == then[1]
