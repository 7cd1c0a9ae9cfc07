"""DeBERTa's disentangled attention (position='deberta'): the scheme's properties."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import encoder
from encoder.model import models, positions
from helpers import init_masked_lm, random_ids

LENGTH = 20  # > deberta_max_relative_positions=16: the log buckets and the clamp are both used


@pytest.fixture
def cfg(tiny_cfg):
    tiny_cfg.update(dict(position="deberta", deberta_position_buckets=8,
                         deberta_max_relative_positions=16, type_vocab_size=0))
    return tiny_cfg


def _perturbed(params, seed=1, scale=0.1):
    """Every leaf moved off its init (LayerNorm scales 1, biases 0 would hide mistakes)."""
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree.unflatten(tree, [x + scale * jax.random.normal(k, x.shape)
                                     for x, k in zip(leaves, keys)])


def test_log_buckets_are_odd_exact_near_and_logarithmic_far():
    off = jnp.arange(-40, 41)
    b = np.asarray(positions.deberta_log_bucket(off, 8, 16))
    np.testing.assert_array_equal(b, -b[::-1])  # bucket(-x) = -bucket(x)
    np.testing.assert_array_equal(b[36:45], np.arange(-4, 5))  # |x| <= mid: exact
    assert np.all(np.diff(b) >= 0) and b.max() > 4 and b.max() < 40  # monotone, compressed
    np.testing.assert_array_equal(positions.deberta_log_bucket(off, 0, 16), off)  # 0: none


def test_outputs_depend_on_relative_not_absolute_positions(cfg):
    _, params = init_masked_lm(cfg)
    params = _perturbed(params)
    ids = random_ids(np.random.default_rng(0), 2, LENGTH, cfg.vocab_size)
    pos = np.broadcast_to(np.arange(LENGTH), ids.shape)
    out = encoder.encode(cfg, params, ids, positions=pos)
    np.testing.assert_allclose(encoder.encode(cfg, params, ids, positions=pos + 37), out,
                               atol=1e-5)
    # ...and the offsets do matter (so the test can fail).
    assert np.abs(encoder.encode(cfg, params, ids, positions=2 * pos) - out).max() > 1e-3


def test_packed_rows_with_restarted_positions_equal_separate_rows(cfg):
    _, params = init_masked_lm(cfg)
    params = _perturbed(params)
    rng = np.random.default_rng(1)
    a, b = random_ids(rng, 1, 9, cfg.vocab_size)[0], random_ids(rng, 1, 11, cfg.vocab_size)[0]
    packed = np.concatenate([a, b])[None]
    pos = np.concatenate([np.arange(9), np.arange(11)])[None]
    docs = np.concatenate([np.zeros(9, np.int32), np.ones(11, np.int32)])[None]
    out = encoder.encode(cfg, params, packed, attention_mask=np.ones_like(packed),
                         positions=pos, document_ids=docs)
    sep_a = encoder.encode(cfg, params, a[None])
    sep_b = encoder.encode(cfg, params, b[None])
    np.testing.assert_allclose(out[0, :9], sep_a[0], atol=1e-5)
    np.testing.assert_allclose(out[0, 9:], sep_b[0], atol=1e-5)


def test_padding_and_local_window_masks_still_apply(cfg):
    cfg.local_window, cfg.global_every = 4, 2
    _, params = init_masked_lm(cfg)
    params = _perturbed(params)
    rng = np.random.default_rng(2)
    ids = random_ids(rng, 1, 12, cfg.vocab_size)
    short = encoder.encode(cfg, params, ids, attention_mask=np.ones_like(ids))
    padded = np.concatenate([ids, random_ids(rng, 1, 8, cfg.vocab_size)], axis=1)
    mask = np.concatenate([np.ones((1, 12), np.int32), np.zeros((1, 8), np.int32)], axis=1)
    np.testing.assert_allclose(encoder.encode(cfg, params, padded, attention_mask=mask)[:, :12],
                               short, atol=1e-5)


def test_fused_and_reference_paths_agree(cfg):
    cfg.local_window, cfg.global_every = 6, 2
    _, params = init_masked_lm(cfg)
    params = _perturbed(params)
    rng = np.random.default_rng(3)
    ids = random_ids(rng, 2, LENGTH, cfg.vocab_size)
    mask = np.ones_like(ids)
    mask[1, 14:] = 0
    docs = np.zeros_like(ids)
    docs[0, 8:] = 1
    pos = np.where(docs == 1, np.arange(LENGTH) - 8, np.arange(LENGTH))
    outs = {}
    for impl in ("xla", "reference"):
        cfg.attention_impl = impl
        outs[impl] = encoder.encode(cfg, params, ids, attention_mask=mask, positions=pos,
                                    document_ids=docs)
    np.testing.assert_allclose(outs["xla"], outs["reference"], atol=1e-5)


def test_disentangled_attention_matches_the_explicit_formula():
    """softmax((q.k + q.Kr[δ] + k.Qr[δ]) / sqrt(3K)) (He et al. 2021 eq. 4), entry by entry."""
    rng = np.random.default_rng(4)
    b, t, h, k, span = 1, 7, 2, 4, 3
    q, kk = (jnp.asarray(rng.normal(size=(b, t, h, k)), jnp.float32) for _ in range(2))
    pq, pk = (jnp.asarray(rng.normal(size=(2 * span, h, k)), jnp.float32) for _ in range(2))
    pos = jnp.arange(t)[None]
    delta = jnp.clip(pos[:, :, None] - pos[:, None, :] + span, 0, 2 * span - 1)  # no buckets
    q2, bias = positions.disentangled_attention(q, kk, pq, pk, delta)
    got = np.einsum("bqhk,bshk->bhqs", q2, kk) / np.sqrt(k) + np.asarray(bias)
    want = np.zeros((b, h, t, t))
    for i in range(t):
        for j in range(t):
            d = int(delta[0, i, j])
            want[0, :, i, j] = (np.einsum("hk,hk->h", q[0, i], kk[0, j])
                                + np.einsum("hk,hk->h", q[0, i], pk[d])
                                + np.einsum("hk,hk->h", kk[0, j], pq[d])) / np.sqrt(3 * k)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_gradients_are_finite_and_reach_the_relative_table(cfg):
    model, params = init_masked_lm(cfg)
    ids = jnp.asarray(random_ids(np.random.default_rng(5), 2, LENGTH, cfg.vocab_size))

    def loss(p):
        out, _ = model.apply({"params": p}, ids, None, jnp.ones_like(ids),
                             mlm_positions=jnp.array([[1, 5], [2, 19]]))
        return jnp.mean(jax.nn.logsumexp(out["mlm_logits"], axis=-1))

    grads = jax.jit(jax.grad(loss))(params)  # eager: 35 s
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))
    rel = grads["encoder"]["relative_positions"]
    assert float(jnp.abs(rel["embedding"]).max()) > 0
    assert float(jnp.abs(rel["norm"]["scale"]).max()) > 0


def test_parameters_are_the_table_and_its_norm(cfg):
    _, params = init_masked_lm(cfg)
    rel = params["encoder"]["relative_positions"]
    assert rel["embedding"].shape == (2 * 8, cfg.hidden_size)  # 2 * position_buckets rows
    assert set(rel["norm"]) == {"scale", "bias"}
    assert "position" not in params["encoder"]["embed"]  # no absolute table (v3)


@pytest.mark.parametrize("change,message", [
    (dict(deberta_position_buckets=1), "must be 0 .* or >= 2"),
    (dict(deberta_max_relative_positions=5), "deberta_max_relative_positions must be"),
])
def test_bad_bucket_settings_fail_validation(cfg, change, message):
    cfg.update(change)
    with pytest.raises(ValueError, match=message):
        models.validate_config(cfg, 16)


def test_rtd_generator_gets_its_own_table(cfg):
    from encoder.objectives import objectives
    gen = objectives.generator_config(cfg, 0.5)
    model = models.Electra(models.freeze(cfg), models.freeze(gen))
    ids = jnp.ones((1, 8), jnp.int32)
    shapes = jax.eval_shape(lambda: nn.unbox(model.init(
        jax.random.key(0), ids, None, None, mlm_positions=jnp.zeros((1, 2), jnp.int32))))
    p = shapes["params"]
    assert p["generator"]["relative_positions"]["embedding"].shape == (16, gen.hidden_size)
    assert p["encoder"]["relative_positions"]["embedding"].shape == (16, cfg.hidden_size)


def test_training_mode_dropout_runs_and_is_random(cfg):
    """Relative-embedding dropout (per layer, as DeBERTa's pos_dropout) and attention dropout."""
    cfg.dropout, cfg.attention_dropout = 0.1, 0.1
    model, params = init_masked_lm(cfg)
    ids = jnp.asarray(random_ids(np.random.default_rng(6), 1, 12, cfg.vocab_size))

    @jax.jit
    def run(key):
        _, aux = model.apply({"params": params}, ids, None, jnp.ones_like(ids),
                             mlm_positions=jnp.zeros((1, 1), jnp.int32), deterministic=False,
                             rngs={"dropout": key})
        return aux["encoded"]

    a, b = run(jax.random.key(0)), run(jax.random.key(1))
    assert bool(jnp.all(jnp.isfinite(a))) and float(jnp.abs(a - b).max()) > 1e-3
