"""Heads: gathered MLM logits, pooling over real tokens, span decoding."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.model import heads
from encoder.model.models import freeze
from helpers import init_masked_lm, random_ids


def test_gathered_mlm_logits_equal_full_logits(tiny_cfg):
    model, params = init_masked_lm(tiny_cfg)
    ids = jnp.asarray(random_ids(np.random.default_rng(0), 2, 12, tiny_cfg.vocab_size))
    pos = jnp.array([[0, 5, 11], [2, 2, 7]])
    apply = jax.jit(lambda p, positions: model.apply({"params": p}, ids, None, None,
                                                     mlm_positions=positions)[0]["mlm_logits"])
    out, full = {"mlm_logits": apply(params, pos)}, {"mlm_logits": apply(params, None)}
    expected = jnp.take_along_axis(full["mlm_logits"], pos[..., None], axis=1)
    np.testing.assert_allclose(out["mlm_logits"], expected, atol=1e-5)


@pytest.mark.parametrize("rule", ["mean", "max"])
def test_pooling_ignores_padding(rule):
    rng = np.random.default_rng(1)
    hidden = jnp.asarray(rng.normal(size=(2, 6, 4)), jnp.float32)
    mask = jnp.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    noisy = hidden.at[0, 3:].set(1e3)
    pooled = heads.POOLING[rule](hidden, mask)
    np.testing.assert_allclose(heads.POOLING[rule](noisy, mask), pooled, atol=1e-6)
    reduce = np.mean if rule == "mean" else np.max
    np.testing.assert_allclose(pooled[0], reduce(np.asarray(hidden[0, :3]), axis=0), atol=1e-6)


def test_cls_and_cls_tanh_pooling(tiny_cfg):
    hidden = jnp.asarray(np.random.default_rng(2).normal(size=(2, 5, 32)), jnp.float32)
    np.testing.assert_array_equal(heads.POOLING["cls"](hidden, None), hidden[:, 0])
    pooler = heads.Pooler(freeze(tiny_cfg), "cls_tanh")
    params = pooler.init(jax.random.key(0), hidden)
    out = pooler.apply(params, hidden)
    k = params["params"]["dense"]["kernel"].value
    b = params["params"]["dense"]["bias"].value
    np.testing.assert_allclose(out, np.tanh(hidden[:, 0] @ k + b), atol=1e-5)


def test_span_decoder_never_returns_start_after_end():
    rng = np.random.default_rng(3)
    start = jnp.asarray(rng.normal(size=(256, 20)), jnp.float32)
    end = jnp.asarray(rng.normal(size=(256, 20)), jnp.float32)
    allowed = jnp.asarray(rng.random((256, 20)) < 0.6)
    s, e, score = jax.jit(heads.best_span, static_argnums=3)(start, end, allowed, 5)
    ok = np.isfinite(score)
    assert ok.mean() > 0.9
    s, e = np.asarray(s)[ok], np.asarray(e)[ok]
    assert np.all(s <= e) and np.all(e - s < 5)
    al = np.asarray(allowed)[ok]
    assert np.all(al[np.arange(len(s)), s]) and np.all(al[np.arange(len(e)), e])
    # Brute force agrees on one row.
    row = int(np.argmax(ok))
    best = max(((i, j) for i in range(20) for j in range(i, min(20, i + 5))
                if allowed[row, i] and allowed[row, j]),
               key=lambda ij: float(start[row, ij[0]] + end[row, ij[1]]))
    s_all, e_all, _ = heads.best_span(start, end, allowed, 5)
    assert (int(s_all[row]), int(e_all[row])) == best


def test_token_heads_are_per_token_and_the_sequence_head_reads_the_pool(tiny_cfg):
    """A token-level head's output at t depends on h_t only; a mean-pooled sequence head
    only on the mean of the real tokens (so reordering them changes nothing)."""
    cfg = freeze(tiny_cfg)
    hidden = jnp.asarray(np.random.default_rng(3).normal(size=(2, 7, 32)), jnp.float32)
    moved = hidden.at[:, 4].add(1.0)  # change one position
    for module, expected in ((heads.TokenHead(cfg, 5), (2, 7, 5)), (heads.RtdHead(cfg), (2, 7))):
        params = module.init(jax.random.key(0), hidden)
        out, out2 = module.apply(params, hidden), module.apply(params, moved)
        assert out.shape == expected
        changed = np.any(np.abs(np.asarray(out2 - out)) > 1e-6,
                         axis=tuple(range(2, len(expected))))
        assert changed[:, 4].all() and not np.delete(changed, 4, axis=1).any()
    span = heads.SpanHead(cfg)
    params = span.init(jax.random.key(0), hidden)
    (s, e), (s2, e2) = span.apply(params, hidden), span.apply(params, moved)
    assert s.shape == e.shape == (2, 7)
    np.testing.assert_array_equal(np.delete(np.asarray(s2 - s), 4, axis=1), 0)
    np.testing.assert_array_equal(np.delete(np.asarray(e2 - e), 4, axis=1), 0)
    mask = jnp.array([[1, 1, 1, 1, 1, 0, 0], [1] * 7])
    seq = heads.SequenceHead(cfg, 3, "mean")
    params = seq.init(jax.random.key(0), hidden, mask)
    shuffled = hidden.at[0, :5].set(hidden[0, jnp.array([3, 1, 4, 0, 2])])
    np.testing.assert_allclose(seq.apply(params, shuffled, mask)[0],
                               seq.apply(params, hidden, mask)[0], atol=1e-5)
    assert seq.apply(params, hidden, mask).shape == (2, 3)
