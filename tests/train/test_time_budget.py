"""A wall-clock budget (cramming's budget schedules): the optimizer's step follows the
schedule at the budget's share spent; the refusals. A whole run on a driven clock:
tests/e2e/test_time_budget_runs.py."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from ml_collections import ConfigDict

from encoder.jobs import pretrain
from encoder.train import optimizer
from helpers import tiny_pretrain_config


def train_cfg(**kw):
    base = dict(learning_rate=0.1, warmup_steps=10, num_steps=100, schedule="linear",
                end_learning_rate_fraction=0.0, b1=0.9, b2=0.98, eps=1e-6,
                weight_decay=0.1, clip_norm=1.0, optimizer="adamw", ema_decay=0.0,
                time_budget_s=60.0)
    return ConfigDict({**base, **kw})


def linear_by_hand(s, peak=0.1, warmup=10, steps=100):
    """The warmed-up linear schedule at (fractional) step s."""
    return peak * s / warmup if s < warmup else peak * (1 - (s - warmup) / (steps - warmup))


@pytest.mark.parametrize("name", ["adamw", "stable_adamw", "lion"])
def test_the_clock_applies_the_schedule_at_the_budget_share(name):
    """On the clock, each update equals the same rule's at a fixed learning rate equal to
    the step schedule at share x num_steps (warmup and decay), weight decay and clipping
    included."""
    rng = np.random.default_rng(0)
    params = {"w": {"kernel": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)},
              "b": {"bias": jnp.ones((3,), jnp.float32)}}
    cfg = train_cfg(optimizer=name)
    tx = optimizer.make_optimizer(cfg)
    state = tx.init(params)
    ref_states = {}
    for share in (0.05, 0.5, 0.95):  # in the warmup, mid-decay, near the end
        grads = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape) * 3, jnp.float32),
                             params)
        state = optimizer.set_clock(state, share)
        upd, state = tx.update(grads, state, params)
        lr = linear_by_hand(share * 100)
        # the reference: the rule at this learning rate, carrying the same moments
        ref_tx = optax.chain(optax.clip_by_global_norm(1.0),
                             optimizer.OPTIMIZERS[name](cfg, lr, 0.1))
        ref_state = ref_states.get("s", ref_tx.init(params))
        ref, ref_states["s"] = ref_tx.update(grads, ref_state, params)
        for a, b in zip(jax.tree.leaves(upd), jax.tree.leaves(ref)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8)


def test_no_budget_keeps_the_optimizer_as_it_was():
    tx = optimizer.make_optimizer(train_cfg(time_budget_s=0.0))
    state = tx.init({"w": {"kernel": jnp.zeros((2, 2))}})
    is_clock = lambda x: isinstance(x, optimizer.ClockState)  # noqa: E731
    assert not any(is_clock(x) for x in jax.tree.leaves(state, is_leaf=is_clock))


def test_a_negative_budget_is_refused():
    with pytest.raises(ValueError, match="time_budget_s"):
        optimizer.validate(train_cfg(time_budget_s=-1.0))


def test_a_budget_with_phases_is_refused():
    config = tiny_pretrain_config(time_budget_s=10.0)
    config.phases = (dict(name="a", steps=3), dict(name="b", steps=3))
    with pytest.raises(ValueError, match="one phase"):
        pretrain.validate(config)
