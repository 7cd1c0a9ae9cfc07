"""Shared test helpers: the repository root, small models."""
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from encoder.model import models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository


def init_masked_lm(cfg, batch=2, length=16, seed=0):
    model = models.MaskedLM(models.freeze(cfg))
    ids = jnp.full((batch, length), 5, jnp.int32)
    # jitted: an eager flax init dispatches (and compiles) every op one by one.
    variables = jax.jit(lambda rng: model.init(
        rng, ids, None, jnp.ones((batch, length), jnp.int32),
        mlm_positions=jnp.zeros((batch, 2), jnp.int32)))(jax.random.key(seed))
    return model, nn.unbox(variables)["params"]


def random_ids(rng, batch, length, vocab, low=5):
    return np.asarray(rng.integers(low, vocab, size=(batch, length)), dtype=np.int32)


def count(tree) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))
