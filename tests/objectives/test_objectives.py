"""The objectives' losses on hand-computed cases."""
import jax
import jax.numpy as jnp
import numpy as np

from encoder.objectives import mlm, objectives, rtd
from encoder.train import optimizer


def test_masked_cross_entropy_by_hand():
    logits = jnp.log(jnp.array([[[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]]]))
    labels = jnp.array([[0, 1, 2]])
    weights = jnp.array([[1.0, 1.0, 0.0]])  # the third slot is padding
    loss, stats = mlm.masked_cross_entropy(logits, labels, weights)
    np.testing.assert_allclose(loss, -(np.log(0.7) + np.log(0.1)) / 2, rtol=1e-6)
    np.testing.assert_allclose(stats["accuracy"], 0.5)
    assert float(stats["count"]) == 2


def test_discriminator_loss_by_hand():
    logits = jnp.array([[2.0, -1.0, 0.5, 3.0]])
    replaced = jnp.array([[True, False, False, True]])
    real = jnp.array([[1, 1, 1, 0]])
    loss, m = rtd.discriminator_loss(logits, replaced, real)
    sig = lambda x: 1 / (1 + np.exp(-x))
    expected = -(np.log(sig(2.0)) + np.log(1 - sig(-1.0)) + np.log(1 - sig(0.5))) / 3
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    # predictions (logit > 0): T, F, T on real tokens; truth: T, F, F
    np.testing.assert_allclose(m["rtd_accuracy"], 2 / 3, rtol=1e-6)
    np.testing.assert_allclose(m["rtd_baseline_accuracy"], 2 / 3, rtol=1e-6)
    np.testing.assert_allclose(m["rtd_precision"], 1 / 2, rtol=1e-6)
    np.testing.assert_allclose(m["rtd_recall"], 1.0, rtol=1e-6)


def test_replacement_equal_to_original_counts_as_original():
    ids = jnp.array([[2, 10, 11, 12, 3]])
    positions = jnp.array([[1, 2, 0]])
    weights = jnp.array([[1.0, 1.0, 0.0]])
    sampled = jnp.array([[10, 99, 77]])  # slot 0 resamples the original; slot 2 is padding
    out = rtd.replace_tokens(ids, positions, sampled, weights)
    assert out.tolist() == [[2, 10, 99, 12, 3]]
    assert (out != ids).tolist() == [[False, False, True, False, False]]


def test_gumbel_sampling_follows_softmax_and_blocks_gradient():
    logits = jnp.log(jnp.array([0.5, 0.3, 0.2]))
    draws = rtd.sample_replacements(jax.random.key(0), jnp.broadcast_to(logits, (20000, 3)))
    freq = np.bincount(np.asarray(draws), minlength=3) / 20000
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.2], atol=0.015)
    grad = jax.grad(lambda z: jnp.sum(rtd.sample_replacements(jax.random.key(1), z)
                                      .astype(jnp.float32)))(logits)
    assert np.all(np.asarray(grad) == 0)


def test_generator_is_narrower_and_shares_embedding_width():
    from encoder import config
    cfg = config.model_config("base")
    gen = objectives.generator_config(cfg, 0.25)
    assert gen.hidden_size == 192 and gen.num_heads == 3 and gen.intermediate_size == 768
    assert gen.embedding_size == 768 and gen.num_layers == 12


def test_weight_decay_mask_skips_biases_and_norms():
    params = {"dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)},
              "norm": {"scale": jnp.ones(2), "bias": jnp.ones(2)},
              "qkv": {"kernel": jnp.ones((2, 3, 1, 2)), "bias": jnp.ones((3, 1, 2))},
              "token": {"embedding": jnp.ones((5, 2))}}
    mask = optimizer.decay_mask(params)
    assert mask == {"dense": {"kernel": True, "bias": False}, "norm": {"scale": False,
                    "bias": False}, "qkv": {"kernel": True, "bias": False},
                    "token": {"embedding": True}}


def test_schedule_warms_up_then_decays():
    from ml_collections import ConfigDict
    cfg = ConfigDict(dict(learning_rate=1.0, warmup_steps=10, num_steps=110, schedule="linear",
                          end_learning_rate_fraction=0.0))
    lr = optimizer.learning_rate_schedule(cfg)
    np.testing.assert_allclose([lr(0), lr(5), lr(10), lr(60), lr(110)], [0, 0.5, 1, 0.5, 0],
                               atol=1e-6)
    cfg.schedule = "cosine"
    lr = optimizer.learning_rate_schedule(cfg)
    np.testing.assert_allclose([lr(10), lr(60), lr(110)], [1, 0.5, 0], atol=1e-6)
