"""Phases (encoder/train/phases.py): the plan's steps, tokens and schedule by hand, batch-size
warmup's exact token budget, what a phase may not change, the recipes' phases (the runs
themselves: tests/e2e/test_phases_runs.py)."""

import numpy as np
import pytest

from encoder.jobs import pretrain
from encoder.train import phases

from helpers import experiment_config, phase_base_config


# ----------------------------------------------------------------------------- the plan

def test_no_phases_is_one_phase_of_num_steps():
    c = phase_base_config(num_steps=20)
    p = phases.plan(c)
    assert [(ph.name, ph.start, ph.steps) for ph in p.phases] == [("main", 0, 20)]
    assert p.phases[0].fetch == c.train.batch_size and not p.phases[0].warmup_rows


def test_plan_steps_tokens_schedule_and_streams():
    c = phase_base_config()  # batch 8, seq_len 64: 512 tokens a step
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
    c = phase_base_config(batch_size=8, grad_accum_steps=4)  # micro-batches of 2 rows
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
    c = phase_base_config()
    c.phases = (dict(name="a", steps=2, model=dict(hidden_size=64)),)
    with pytest.raises(ValueError, match=r"model.hidden_size cannot change in a phase"):
        phases.plan(c)
    c.phases = (dict(name="a", steps=2, tokens=3),)
    with pytest.raises(ValueError, match="exactly one budget"):
        phases.plan(c)
    c.phases = (dict(name="a", steps=2, train=dict(schedule="trapezoid")),)
    with pytest.raises(ValueError, match="Unknown schedule 'trapezoid'"):
        pretrain.validate(c)


# ----------------------------------------------------------------------------- recipes

def test_ettin_keeps_modernbert_phases_with_its_budgets():
    e, m = experiment_config("ettin_base", None), experiment_config("modernbert_base", None)
    assert [p["tokens"] for p in e.phases] == [1.7e12, 2.5e11, 5e10]
    assert [{k: v for k, v in p.items() if k != "tokens"} for p in e.phases] == \
        [{k: v for k, v in p.items() if k != "tokens"} for p in m.phases]
    assert experiment_config("ettin_base").phases == experiment_config("modernbert_base").phases
