"""Optimizers as names: StableAdamW against its formula and sharded (data=4 x fsdp=2) against
one device; Lion; the shared decay mask and clipping; the parameter EMA against hand values."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from ml_collections import ConfigDict

from encoder.train import optimizer


def train_cfg(**kw):
    base = dict(learning_rate=0.1, warmup_steps=0, num_steps=100, schedule="constant",
                end_learning_rate_fraction=0.0, b1=0.9, b2=0.98, eps=1e-6, weight_decay=0.0,
                clip_norm=0.0, optimizer="adamw", ema_decay=0.0)
    return ConfigDict({**base, **kw})


def stable_adamw_by_hand(grads, b1=0.9, b2=0.98, eps=1e-6, lr=0.1):
    """Wortsman et al. 2023 Alg. 2 for one tensor, in numpy float64: the updates."""
    m = v = np.zeros_like(grads[0])
    out = []
    for t, g in enumerate(grads, 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)
        rms = np.sqrt(np.mean(g * g / np.maximum(v_hat, eps * eps)))
        out.append(-lr * m_hat / (np.sqrt(v_hat) + eps) / max(1.0, rms))
    return out


def test_stable_adamw_matches_the_formula_and_clips():
    rng = np.random.default_rng(0)
    # A gradient that jumps at step 3 (RMS > 1: the step is clipped) then calms down.
    grads = [rng.normal(size=(4, 3)) * s for s in (1.0, 1.0, 20.0, 0.5)]
    tx = optimizer.make_optimizer(train_cfg(optimizer="stable_adamw"))
    params = {"w": {"kernel": jnp.zeros((4, 3))}}
    state = tx.init(params)
    hand = stable_adamw_by_hand(grads)
    for g, h in zip(grads, hand):
        upd, state = tx.update({"w": {"kernel": jnp.asarray(g, jnp.float32)}}, state, params)
        np.testing.assert_allclose(upd["w"]["kernel"], h, rtol=1e-5, atol=1e-7)
    # the jump is clipped: its update is smaller than plain Adam's
    adam = optimizer.make_optimizer(train_cfg())
    s = adam.init(params)
    for g in grads[:3]:
        a, s = adam.update({"w": {"kernel": jnp.asarray(g, jnp.float32)}}, s, params)
    assert np.abs(hand[2]).max() < 0.7 * float(jnp.abs(a["w"]["kernel"]).max())


def _loss(params, x):
    h = jnp.tanh(x @ params["a"]["kernel"])                  # [B, H]
    return jnp.mean((h @ params["b"]["kernel"] - 1.0) ** 2)


def _run(tx, params, xs, shard_params=None, shard_x=None):
    state = tx.init(params)

    def step(params, state, x):
        loss, g = jax.value_and_grad(_loss)(params, x)
        upd, state = tx.update(g, state, params)
        return optax.apply_updates(params, upd), state, loss

    if shard_params is not None:
        params = jax.device_put(params, shard_params)
        state = jax.tree.map(lambda a: a, state)
        step = jax.jit(step, in_shardings=(shard_params, None, shard_x))
    else:
        step = jax.jit(step)
    losses = []
    for x in xs:
        params, state, loss = step(params, state, x)
        losses.append(float(loss))
    return losses, params


@pytest.mark.parametrize("name", ["stable_adamw", "adamw", "lion"])
def test_sharded_fsdp_equals_one_device(name):
    """8 simulated devices (data=4 x fsdp=2, parameters split over fsdp) vs 1 device."""
    assert jax.device_count() >= 8, "tests/conftest.py forces 8 CPU devices"
    rng = np.random.default_rng(1)
    params = {"a": {"kernel": jnp.asarray(rng.normal(size=(16, 8)) * 0.3, jnp.float32)},
              "b": {"kernel": jnp.asarray(rng.normal(size=(8, 4)) * 0.3, jnp.float32)}}
    xs = [jnp.asarray(rng.normal(size=(8, 16)) * (5.0 if i == 3 else 1.0), jnp.float32)
          for i in range(6)]
    tx = optimizer.make_optimizer(train_cfg(optimizer=name, weight_decay=0.01, clip_norm=1.0,
                                            learning_rate=0.01))
    one, p1 = _run(tx, params, [jax.device_put(x, jax.devices()[0]) for x in xs])
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "fsdp"))
    shard_p = {"a": {"kernel": NamedSharding(mesh, P("fsdp", None))},
               "b": {"kernel": NamedSharding(mesh, P("fsdp", None))}}
    shard_x = NamedSharding(mesh, P(("data", "fsdp"), None))
    eight, p8 = _run(tx, params, [jax.device_put(x, shard_x) for x in xs], shard_p, shard_x)
    assert p8["a"]["kernel"].sharding.spec[0] == "fsdp"
    np.testing.assert_allclose(eight, one, rtol=1e-5)
    np.testing.assert_allclose(p8["a"]["kernel"], p1["a"]["kernel"], rtol=1e-5, atol=1e-6)


def test_lion_is_a_sign_update_and_decay_skips_biases():
    tx = optimizer.make_optimizer(train_cfg(optimizer="lion", weight_decay=0.5))
    params = {"d": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}}
    g = {"d": {"kernel": jnp.array([[1.0, -2.0], [0.0, 3.0]]), "bias": jnp.array([-1.0, 1.0])}}
    upd, _ = tx.update(g, tx.init(params), params)
    # Lion: -lr * (sign((1 - b1) g) + wd * p) on kernels; biases get no decay.
    np.testing.assert_allclose(upd["d"]["kernel"], -0.1 * (np.sign(g["d"]["kernel"]) + 0.5))
    np.testing.assert_allclose(upd["d"]["bias"], -0.1 * np.sign(g["d"]["bias"]))


def test_decoupled_weight_decay_does_not_scale_with_the_peak():
    params = {"d": {"kernel": jnp.ones((2,))}}
    zero = {"d": {"kernel": jnp.zeros((2,))}}
    for lr in (0.1, 0.001):
        tx = optimizer.make_optimizer(train_cfg(learning_rate=lr, weight_decay=0.01,
                                                decoupled_weight_decay=True))
        upd, _ = tx.update(zero, tx.init(params), params)
        np.testing.assert_allclose(upd["d"]["kernel"], -0.01, rtol=1e-6)  # wd * lr_t / lr_peak


def test_ema_against_hand_average():
    d = 0.8
    tx = optimizer.make_optimizer(train_cfg(ema_decay=d, optimizer="adamw"))
    params = {"w": {"kernel": jnp.array([1.0, -1.0])}}
    state = tx.init(params)
    ema = np.array([1.0, -1.0])
    rng = np.random.default_rng(0)
    for _ in range(5):
        g = {"w": {"kernel": jnp.asarray(rng.normal(size=2), jnp.float32)}}
        upd, state = tx.update(g, state, params)
        params = optax.apply_updates(params, upd)
        ema = d * ema + (1 - d) * np.asarray(params["w"]["kernel"])
    np.testing.assert_allclose(optimizer.ema_params(state)["w"]["kernel"], ema, rtol=1e-6)
    assert optimizer.ema_params(optimizer.make_optimizer(train_cfg()).init(params)) is None


def test_unknown_optimizer_lists_the_valid_names():
    with pytest.raises(ValueError, match="valid names: adamw, lion, stable_adamw"):
        optimizer.make_optimizer(train_cfg(optimizer="sgd"))
    with pytest.raises(ValueError, match="ema_decay"):
        optimizer.make_optimizer(train_cfg(ema_decay=1.0))
