"""Runs in phases (encoder/jobs/pretrain.py), in process: a two-phase run in one workdir; a
decay from step N of a stable run equals the decay inside one run; a context extension
started from a short run reads what the uninterrupted run reads; batch-size warmup resumes
exactly; the phased recipes run all their phases at runlocal size."""
import json
import os

import jax
import numpy as np
import pytest

from encoder.checkpoints import store
from encoder.jobs import pretrain
from encoder.train import metrics_io, phases
from encoder.train.workdir import RunMismatch

from helpers import experiment_config, phase_base_config


def with_data(config, shared_data):
    config.data.tokenizer, config.data.cache_dir = shared_data
    return config


def rows(workdir):
    return [r for r in metrics_io.read_metrics(workdir) if "train/loss" in r]


STABLE_DECAY = (dict(name="stable", steps=6, train=dict(schedule="constant")),
                dict(name="decay", steps=4, train=dict(schedule="linear", warmup_steps=0)))


def test_two_phases_in_one_workdir(shared_data, tmp_path):
    c = with_data(phase_base_config(eval_every=5, eval_batches=1), shared_data)
    c.phases = (dict(name="short", steps=5, masking=dict(rate=0.3)),
                dict(name="long", steps=3, data=dict(seq_len=128), model=dict(rope_theta=5e4),
                     train=dict(batch_size=4, schedule="constant", warmup_steps=0)))
    wd = str(tmp_path)
    result = pretrain.train(c, wd, devices=jax.devices()[:1])
    assert result["step"] == 8 and "eval/mlm_accuracy" in result
    r = metrics_io.read_metrics(wd)
    assert [x["phase"] for x in r] == ["short"] * 5 + ["long"] * 3
    assert all("train/learning_rate" in x for x in r)
    assert [x["tokens"] for x in r][4:6] == [5 * 8 * 64, 5 * 8 * 64 + 4 * 128]
    assert "eval/mlm_loss" in r[4] and "eval/mlm_loss" in r[7]  # each phase's end evaluates
    mngr = store.manager(wd, create=False)
    _, _, meta, step = store.restore(mngr, step=5, set_aside=False)
    assert (meta["phase"], meta["phase_index"], step) == ("short", 0, 5)
    assert store.restore(mngr, set_aside=False)[2]["phase"] == "long"
    mngr.close()
    with open(os.path.join(wd, "config.json")) as f:
        assert json.load(f)["train"]["num_steps"] == 8
    # appending a phase continues the run; changing a declared one is refused
    c.phases = c.phases + (dict(name="decay", steps=2, data=dict(seq_len=128),
                                train=dict(batch_size=4, warmup_steps=0)),)
    assert pretrain.train(c, wd, devices=jax.devices()[:1])["step"] == 10
    c.phases = (dict(c.phases[0], steps=6),) + c.phases[1:]
    with pytest.raises(RunMismatch, match="may only append"):
        pretrain.train(c, wd, devices=jax.devices()[:1])


def test_a_decay_from_step_n_equals_the_decay_inside_one_run(shared_data, tmp_path):
    one = with_data(phase_base_config(checkpoint_every=3), shared_data)
    one.phases = STABLE_DECAY
    pretrain.train(one, str(tmp_path / "one"), devices=jax.devices()[:1])
    stable = with_data(phase_base_config(checkpoint_every=3), shared_data)
    stable.phases = STABLE_DECAY[:1]
    pretrain.train(stable, str(tmp_path / "stable"), devices=jax.devices()[:1])
    decay = with_data(phase_base_config(checkpoint_every=3), shared_data)
    decay.phases = STABLE_DECAY
    decay.init_from, decay.init_step, decay.init_state = str(tmp_path / "stable"), 6, "full"
    pretrain.train(decay, str(tmp_path / "decay"), devices=jax.devices()[:1])
    a, b = rows(str(tmp_path / "one")), rows(str(tmp_path / "decay"))
    assert [x["step"] for x in b] == [7, 8, 9, 10] and {x["phase"] for x in b} == {"decay"}
    np.testing.assert_allclose([x["train/loss"] for x in b], [x["train/loss"] for x in a[6:]],
                               rtol=1e-6)
    np.testing.assert_allclose([x["train/learning_rate"] for x in b],
                               [x["train/learning_rate"] for x in a[6:]], rtol=1e-7)
    # from step 3 of the stable run: the same decay after 3 more stable steps
    decay.init_step = 3
    pretrain.train(decay, str(tmp_path / "decay3"), devices=jax.devices()[:1])
    np.testing.assert_allclose([x["train/loss"] for x in rows(str(tmp_path / "decay3"))],
                               [x["train/loss"] for x in a[3:]], rtol=1e-6)


def test_context_extension_from_a_short_run(shared_data, tmp_path):
    short = dict(name="short", steps=4)
    ext = dict(name="ext", steps=3, data=dict(seq_len=512), model=dict(rope_theta=1.6e5),
               train=dict(batch_size=2, schedule="constant", warmup_steps=0))
    one = with_data(phase_base_config(), shared_data)
    one.phases = (short, ext)
    pretrain.train(one, str(tmp_path / "one"), devices=jax.devices()[:1])
    first = with_data(phase_base_config(), shared_data)
    first.phases = (short,)
    pretrain.train(first, str(tmp_path / "short"), devices=jax.devices()[:1])
    second = with_data(phase_base_config(), shared_data)
    second.phases = (short, ext)
    second.init_from, second.init_state = str(tmp_path / "short"), "full"
    pretrain.train(second, str(tmp_path / "ext"), devices=jax.devices()[:1])
    a, b = rows(str(tmp_path / "one"))[4:], rows(str(tmp_path / "ext"))
    assert [x["phase"] for x in b] == ["ext"] * 3
    assert b[0]["tokens"] == 4 * 8 * 64 + 2 * 512
    np.testing.assert_allclose([x["train/loss"] for x in b], [x["train/loss"] for x in a],
                               rtol=1e-6)


def test_batch_warmup_resumes_exactly(shared_data, tmp_path):
    def config(nan_at=-1):
        c = with_data(phase_base_config(batch_size=8, grad_accum_steps=4, checkpoint_every=3,
                           debug_nan_at_step=nan_at), shared_data)
        c.phases = (dict(name="warm", tokens=64 * 44, train=dict(
            batch_warmup_tokens=64 * 20, batch_warmup_start=2, batch_warmup_increment=2)),)
        return c
    pretrain.train(config(), str(tmp_path / "ref"), devices=jax.devices()[:1])
    ref = rows(str(tmp_path / "ref"))
    assert ref[-1]["tokens"] == 64 * 44  # 20 rows of warmup + 3 steps of 8
    with pytest.raises(FloatingPointError):  # stopped inside the warmup, after step 3's save
        pretrain.train(config(nan_at=4), str(tmp_path / "cut"), devices=jax.devices()[:1])
    pretrain.train(config(), str(tmp_path / "cut"), devices=jax.devices()[:1])
    cut = rows(str(tmp_path / "cut"))
    assert [x["step"] for x in cut] == [x["step"] for x in ref]
    np.testing.assert_array_equal([x["train/loss"] for x in cut], [x["train/loss"] for x in ref])


@pytest.mark.parametrize("name,rates", [("modernbert_base", [0.3, 0.3, 0.3]),
                                        ("mmbert_base", [0.3, 0.15, 0.05])])
def test_phased_recipe_runs_all_its_phases_at_runlocal(name, rates, shared_data, tmp_path):
    c = with_data(experiment_config(name), shared_data)
    c.train.update(dict(log_every=1, eval_batches=1))
    result = pretrain.train(c, str(tmp_path), devices=jax.devices()[:1])
    plan = phases.plan(c)
    assert result["step"] == plan.total_steps == 15 and "eval/mlm_accuracy" in result
    assert [ph.config.masking.rate for ph in plan.phases] == rates
    assert [ph.config.data.seq_len for ph in plan.phases] == [64, 512, 512]
    assert [ph.config.model.rope_theta for ph in plan.phases] == [1e4, 1.6e5, 1.6e5]
    r = rows(str(tmp_path))
    assert [x["phase"] for x in r] == [ph.name for ph in plan.phases for _ in range(5)]
    lr = [x["train/learning_rate"] for x in r]
    assert lr[-1] < lr[10] == pytest.approx(3e-4)  # the 1-sqrt decay from 3e-4
