"""A vocabulary padded to a multiple of 64 (model.real_vocab_size): the same MLM loss and
gradients as the unpadded model on the same real rows, and no padding id is ever sampled by
ELECTRA's generator or drawn as a random replacement."""
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder import config as config_lib
from encoder.data import tokenizer as tokenizer_lib
from encoder.model import heads, models
from encoder.objectives import mlm, objectives, rtd
from helpers import init_masked_lm, random_ids

REAL = 101


def padded_pair(tiny_cfg):
    """(unpadded model, params), (padded model, params): the padded params are the unpadded
    ones plus random padding rows, with a large output bias so that unmasked they would win."""
    tiny_cfg.num_layers = 1  # the head is what differs; one layer keeps the compiles short
    padded_cfg = tiny_cfg.copy_and_resolve_references()
    padded_cfg.real_vocab_size = REAL
    padded_cfg.vocab_size = tokenizer_lib.padded_vocab_size(REAL, 64)
    assert (tiny_cfg.vocab_size, padded_cfg.vocab_size) == (REAL, 128)
    model, params = init_masked_lm(tiny_cfg)
    padded_model, padded = init_masked_lm(padded_cfg, seed=1)

    def merge(path, real, pad):
        if real.shape == pad.shape:
            return real
        assert pad.shape[0] == 128 and real.shape[0] == REAL, path  # the vocabulary rows
        extra = pad[REAL:] + (20.0 if path[-1].key == "output_bias" else 0.0)
        return jnp.concatenate([real, extra])

    return (model, params), (padded_model, jax.tree_util.tree_map_with_path(merge, params, padded))


def mlm_loss(model, params, ids, positions, labels, weights):
    out, _ = model.apply({"params": params}, ids, None, jnp.ones_like(ids), mlm_positions=positions)
    return mlm.masked_cross_entropy(out["mlm_logits"], labels, weights)


def test_padded_vocabulary_gives_the_unpadded_loss_and_gradients(tiny_cfg):
    (model, params), (padded_model, padded) = padded_pair(tiny_cfg)
    rng = np.random.default_rng(0)
    ids = jnp.asarray(random_ids(rng, 2, 16, REAL))
    positions = jnp.asarray(rng.integers(0, 16, (2, 5)), jnp.int32)
    labels = jnp.asarray(random_ids(rng, 2, 5, REAL))
    weights = jnp.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], jnp.float32)
    grad = jax.jit(jax.value_and_grad(mlm_loss, argnums=1, has_aux=True), static_argnums=0)
    (loss, stats), g = grad(model, params, ids, positions, labels, weights)
    (padded_loss, padded_stats), padded_g = grad(padded_model, padded, ids, positions, labels,
                                                 weights)
    print(f"loss {float(loss):.7f} unpadded, {float(padded_loss):.7f} padded")
    assert abs(float(loss) - float(padded_loss)) <= 1e-6
    assert float(stats["accuracy"]) == float(padded_stats["accuracy"])

    def compare(path, real, pad):
        if real.shape != pad.shape:  # the vocabulary rows: padding rows get no gradient
            np.testing.assert_array_equal(pad[REAL:], 0.0)
            pad = pad[:REAL]
        np.testing.assert_allclose(pad, real, atol=1e-6, err_msg=jax.tree_util.keystr(path))

    jax.tree_util.tree_map_with_path(compare, g, padded_g)
    # without the mask the padding rows' bias would take the softmax over
    unmasked = padded_model.cfg.to_dict()
    unmasked["real_vocab_size"] = 0
    loose = models.MaskedLM(models.freeze(unmasked))
    unmasked_loss, _ = jax.jit(mlm_loss, static_argnums=0)(loose, padded, ids, positions, labels,
                                                           weights)
    assert float(unmasked_loss) > float(loss) + 5


def test_no_padding_id_is_sampled_or_drawn(tiny_cfg):
    _, (padded_model, padded) = padded_pair(tiny_cfg)
    rng = np.random.default_rng(1)
    ids = jnp.asarray(random_ids(rng, 4, 16, REAL))
    out, _ = jax.jit(padded_model.apply)({"params": padded}, ids, None, jnp.ones_like(ids))
    logits = out["mlm_logits"]  # [B, T, V]: the generator's head is this MlmHead
    assert float(jnp.max(logits[..., REAL:])) == heads.PADDING_LOGIT
    for temperature in (1.0, 3.0):
        samples = jax.jit(jax.vmap(lambda k: rtd.sample_replacements(k, logits, temperature)))(
            jax.random.split(jax.random.key(0), 64))
        assert int(samples.max()) < REAL
    # ELECTRA's generator keeps the discriminator's real vocabulary
    config = config_lib.base_config()
    config.model.update(vocab_size=128, real_vocab_size=REAL)
    assert objectives.generator_config(config.model, 0.25).real_vocab_size == REAL
    # 80/10/10 with every selected token replaced at random: only real ids are drawn
    config.masking.update(mask_prob=0.0, random_prob=1.0, rate=0.5)
    ctx = types.SimpleNamespace(config=config, max_predictions=8, mask_id=4,
                                special_ids=(0, 1, 2, 3, 4), word_start_table=None)
    corrupted = jax.jit(lambda k, b: mlm.corrupt_batch(k, b, ctx)["input_ids"])(
        jax.random.key(2), {"input_ids": ids, "attention_mask": jnp.ones_like(ids)})
    assert bool(jnp.any(corrupted != ids)) and int(corrupted.max()) < REAL


def test_real_vocab_size_is_checked(tiny_cfg):
    tiny_cfg.real_vocab_size = tiny_cfg.vocab_size + 1
    with pytest.raises(ValueError, match="real_vocab_size must be 0"):
        models.validate_config(tiny_cfg)
    tiny_cfg.real_vocab_size = 0
    models.validate_config(tiny_cfg)
    assert heads.real_vocab_size(tiny_cfg) == tiny_cfg.vocab_size
