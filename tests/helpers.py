"""Shared test helpers: the repository root, small models, a small topic task."""
import json
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


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def topic_task(folder, n_train=64, n_dev=16, seed=0):
    """A two-class topic task a tiny model learns in a few steps; returns the folder."""
    rng = np.random.default_rng(seed)
    words = ["file", "socket", "thread", "path", "string", "number"]
    rows = []
    for _ in range(n_train + n_dev):
        w = [str(words[j]) for j in rng.integers(0, 6, size=5)]
        rows.append({"text": " ".join(w), "label": "io" if "file" in w else "other"})
    os.makedirs(folder, exist_ok=True)
    write_jsonl(os.path.join(folder, "train.jsonl"), rows[:n_train])
    write_jsonl(os.path.join(folder, "dev.jsonl"), rows[n_train:])
    return str(folder)


def topic_config(source, task_dir, **train):
    config = _finetune_experiment().get_config("task=classification,runlocal")
    config.init_from = source
    config.data.train_file = os.path.join(task_dir, "train.jsonl")
    config.data.dev_file = os.path.join(task_dir, "dev.jsonl")
    config.train.update(train)
    return config


def _finetune_experiment():
    from experiments import finetune as finetune_exp
    return finetune_exp
