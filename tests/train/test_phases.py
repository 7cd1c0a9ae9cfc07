"""Runs in phases (encoder/train/phases.py, encoder/jobs/pretrain.py): the plan's steps,
tokens and schedule by hand; a two-phase run in one workdir; a decay from step N of a
stable run equals the decay inside one run; a context extension started from a short run
reads what the uninterrupted run reads; batch-size warmup's exact token budget and resume."""
import json
import os
import sys

import jax
import numpy as np
import pytest

from encoder import config as config_lib
from encoder.checkpoints import store
from encoder.jobs import pretrain
from encoder.train import metrics_io, phases
from encoder.train.workdir import RunMismatch

from helpers import ROOT  # noqa: E402


def base(**train):
    sys.path.insert(0, ROOT)
    from experiments import pretrain as exp
    config = exp.get_config("runlocal")
    config.model.dropout = 0.0
    config.train.update(dict(log_every=1, eval_every=0, checkpoint_every=100, warmup_steps=2,
                             learning_rate=1e-3))
    config.train.update(train)
    return config


@pytest.fixture(scope="module")
def shared_data(tiny_pretrained):
    return (os.path.join(tiny_pretrained, "tokenizer", "sp.model"),
            os.path.join(tiny_pretrained, "cache"))


def with_data(config, shared_data):
    config.data.tokenizer, config.data.cache_dir = shared_data
    return config


def rows(workdir):
    return [r for r in metrics_io.read_metrics(workdir) if "train/loss" in r]


STABLE_DECAY = (dict(name="stable", steps=6, train=dict(schedule="constant")),
                dict(name="decay", steps=4, train=dict(schedule="linear", warmup_steps=0)))


# ----------------------------------------------------------------------------- the plan

def test_no_phases_is_one_phase_of_num_steps():
    c = base(num_steps=20)
    p = phases.plan(c)
    assert [(ph.name, ph.start, ph.steps) for ph in p.phases] == [("main", 0, 20)]
    assert p.phases[0].fetch == c.train.batch_size and not p.phases[0].warmup_rows


def test_plan_steps_tokens_schedule_and_streams():
    c = base()  # batch 8, seq_len 64: 512 tokens a step
    c.phases = (dict(name="stable", tokens=512 * 10, train=dict(schedule="constant")),
                dict(name="ext", steps=5, data=dict(seq_len=128), model=dict(rope_theta=1e5),
                     train=dict(batch_size=4, learning_rate=5e-4, schedule="constant",
                                warmup_steps=0)),
                dict(name="decay", tokens=512 * 3 + 1, data=dict(seq_len=128),
                     train=dict(batch_size=4, learning_rate=5e-4, schedule="wsd",
                                warmup_steps=0, decay_fraction=1.0, decay_shape="1-sqrt")))
    p = phases.plan(c)
    assert [(ph.start, ph.steps) for ph in p.phases] == [(0, 10), (10, 5), (15, 4)]
    assert [ph.stream for ph in p.phases] == [0, 1, 1]  # the decay reads on in ext's stream
    assert p.phases[1].config.model.rope_theta == 1e5 and c.model.rope_theta == 10000.0
    lr = [float(p.schedule(s)) for s in (0, 1, 2, 9, 10, 14, 15, 17, 19)]
    np.testing.assert_allclose(lr, [0, 5e-4, 1e-3, 1e-3, 5e-4, 5e-4, 5e-4,
                                    5e-4 * (1 - np.sqrt(0.5)), 0], rtol=1e-6, atol=1e-9)
    assert p.tokens_after(10) == 5120 and p.tokens_after(15) == 5120 + 5 * 512
    assert p.index_at(9) == 0 and p.index_at(10) == 1 and p.index_at(19) == 2


def test_batch_size_warmup_consumes_exactly_its_tokens():
    c = base(batch_size=8, grad_accum_steps=4)  # micro-batches of 2 rows
    c.phases = (dict(name="warm", tokens=64 * 100, train=dict(
        batch_warmup_tokens=64 * 30, batch_warmup_start=2, batch_warmup_increment=2)),)
    ph = phases.plan(c).phases[0]
    assert ph.fetch == 2 and ph.micro == 2
    # rows = 2 + 6 * seen / 30 rounded down to 2s (seen: rows so far 0, 2, 4, ... 22, 28);
    # the last warmup step takes exactly what is left of the 30 rows.
    assert ph.warmup_rows == (2, 2, 2, 2, 2, 4, 4, 4, 6, 2) and sum(ph.warmup_rows) == 30
    assert ph.tokens_after(len(ph.warmup_rows)) == 64 * 30
    # the rest of the phase at the full batch: 70 rows -> 9 steps of 8 (rounded up)
    assert ph.steps == len(ph.warmup_rows) + 9


def test_a_phase_may_not_change_the_model_or_the_optimizer():
    c = base()
    c.phases = (dict(name="a", steps=2, model=dict(hidden_size=64)),)
    with pytest.raises(ValueError, match=r"model.hidden_size cannot change in a phase"):
        phases.plan(c)
    c.phases = (dict(name="a", steps=2, tokens=3),)
    with pytest.raises(ValueError, match="exactly one budget"):
        phases.plan(c)
    c.phases = (dict(name="a", steps=2, train=dict(schedule="trapezoid")),)
    with pytest.raises(ValueError, match="Unknown schedule 'trapezoid'"):
        pretrain.validate(c)


# ----------------------------------------------------------------------------- runs

def test_two_phases_in_one_workdir(shared_data, tmp_path):
    c = with_data(base(eval_every=5, eval_batches=1), shared_data)
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
    one = with_data(base(checkpoint_every=3), shared_data)
    one.phases = STABLE_DECAY
    pretrain.train(one, str(tmp_path / "one"), devices=jax.devices()[:1])
    stable = with_data(base(checkpoint_every=3), shared_data)
    stable.phases = STABLE_DECAY[:1]
    pretrain.train(stable, str(tmp_path / "stable"), devices=jax.devices()[:1])
    decay = with_data(base(checkpoint_every=3), shared_data)
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
    one = with_data(base(), shared_data)
    one.phases = (short, ext)
    pretrain.train(one, str(tmp_path / "one"), devices=jax.devices()[:1])
    first = with_data(base(), shared_data)
    first.phases = (short,)
    pretrain.train(first, str(tmp_path / "short"), devices=jax.devices()[:1])
    second = with_data(base(), shared_data)
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
        c = with_data(base(batch_size=8, grad_accum_steps=4, checkpoint_every=3,
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


# ----------------------------------------------------------------------------- recipes

def _recipe(name, arg="runlocal"):
    sys.path.insert(0, ROOT)
    import importlib
    return importlib.import_module(f"experiments.{name}").get_config(arg)


@pytest.mark.parametrize("name,rates", [("modernbert_base", [0.3, 0.3, 0.3]),
                                        ("mmbert_base", [0.3, 0.15, 0.05])])
def test_phased_recipe_runs_all_its_phases_at_runlocal(name, rates, shared_data, tmp_path):
    c = with_data(_recipe(name), shared_data)
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


def test_ettin_keeps_modernbert_phases_with_its_budgets():
    e, m = _recipe("ettin_base", None), _recipe("modernbert_base", None)
    assert [p["tokens"] for p in e.phases] == [1.7e12, 2.5e11, 5e10]
    assert [{k: v for k, v in p.items() if k != "tokens"} for p in e.phases] == \
        [{k: v for k, v in p.items() if k != "tokens"} for p in m.phases]
    assert _recipe("ettin_base").phases == _recipe("modernbert_base").phases
