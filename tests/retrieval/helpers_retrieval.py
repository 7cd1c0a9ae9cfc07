"""A tiny retriever and a contrastive batch with hard negatives and duplicates."""
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from encoder import config as config_lib
from encoder.model import models
from encoder.tasks.contrastive import Contrastive
from helpers import filled_params


def tiny_cfg(**kw):
    cfg = config_lib.model_config("tiny")
    cfg.update(dict(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                    vocab_size=64, max_position=32, dropout=0.0, attention_dropout=0.0))
    cfg.update(kw)
    return models.freeze(cfg)


def task_of(**contrastive):
    config = types.SimpleNamespace(data=types.SimpleNamespace(max_seq_len=8),
                                   contrastive=types.SimpleNamespace(**contrastive))
    return Contrastive(config, None)


def batch_of(b=16, t=8, k=2, vocab=64, seed=0):
    """Token arrays for b rows (queries, positives, k negatives each); row 1 repeats row 0's
    positive, row 3 repeats row 2's query, and one negative of row 4 is row 5's positive."""
    rng = np.random.default_rng(seed)
    ids = lambda *s: rng.integers(5, vocab, size=(*s, t)).astype(np.int32)  # noqa: E731
    a, p, n = ids(b), ids(b), ids(b, k)
    p[1] = p[0]
    a[3] = a[2]
    n[4, 0] = p[5]
    lens = rng.integers(3, t + 1, size=b)
    mask = (np.arange(t)[None] < lens[:, None]).astype(np.int32)
    batch = {"a_input_ids": a, "a_segment_ids": np.zeros_like(a), "a_attention_mask": mask,
             "b_input_ids": p, "b_segment_ids": np.zeros_like(p), "b_attention_mask": mask,
             "n_input_ids": n, "n_segment_ids": np.zeros_like(n),
             "n_attention_mask": np.repeat(mask[:, None], k, 1),
             "n_mask": np.ones((b, k), np.int32), "weight": np.ones(b, np.float32)}
    batch["n_mask"][7, 1] = 0
    a_id, p_id = np.arange(b), np.arange(b) + 100
    p_id[1] = p_id[0]
    a_id[3] = a_id[2]
    n_id = np.arange(b * k).reshape(b, k) + 1000
    n_id[4, 0] = p_id[5]
    batch.update(a_text_id=a_id.astype(np.int32), b_text_id=p_id.astype(np.int32),
                 n_text_id=n_id.astype(np.int32))
    return batch


def init(task, cfg, pooling="mean"):
    model = task.model(cfg, pooling)
    ids = jnp.ones((2, 8), jnp.int32)
    boxed = jax.eval_shape(lambda r: model.init(r, ids, ids * 0, ids)["params"],
                           jax.random.key(0))
    params = filled_params(nn.unbox(boxed))  # traced, not compiled (helpers.filled_params)
    return model, params, boxed


def loss_fn(task, model):
    def f(params, batch):
        return task.loss(task.forward(model, params, batch, deterministic=True), batch)
    return f
