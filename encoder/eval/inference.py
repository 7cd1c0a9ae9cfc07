"""Batched inference: one helper for every job that runs a model over many rows
(fine-tuning's dev/test scoring, held-out evaluation, embeddings, probes).

Rows are cut into fixed-size batches (one compiled shape; the last batch is padded
by repeating its first row and carries `weight` 0 there), each batch is placed by
`shard` (the trainer's batch sharding over the mesh, so every device works on its
own rows; default: the default device), and the outputs come back in order with
the padding dropped.
"""
from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np


def padded_batches(arrays: dict, batch_size: int) -> Iterator[dict]:
    """In-order batches with a `weight` column; the last one is padded (weight 0)."""
    n = len(next(iter(arrays.values())))
    for i in range(0, n, batch_size):
        idx = np.arange(i, min(i + batch_size, n))
        pad = batch_size - len(idx)
        take = np.concatenate([idx, np.repeat(idx[:1], pad)]) if pad else idx
        batch = {k: v[take] for k, v in arrays.items()}
        batch["weight"] = np.concatenate([np.ones(len(idx)), np.zeros(pad)]).astype(np.float32)
        yield batch


def _to_device(batch: dict) -> dict:
    return {k: jnp.asarray(v) for k, v in batch.items()}


def predict(fn: Callable, params, arrays: dict, batch_size: int,
            shard: Callable | None = None):
    """fn(params, batch) for every row, as numpy in row order (a tree like fn's output).

    Outputs are batch-major: every leaf's first axis is the batch's rows."""
    shard = shard or _to_device
    outs = []
    for batch in padded_batches(arrays, batch_size):
        keep = int(batch["weight"].sum())
        out = jax.device_get(fn(params, shard(batch)))
        outs.append(jax.tree.map(lambda x: np.asarray(x)[:keep], out))
    if not outs:
        raise ValueError("predict: no rows")
    return jax.tree.map(lambda *xs: np.concatenate(xs), *outs)


def encode_texts(tokenizer, texts, max_len: int, pairs=None) -> dict:
    """Token arrays ([N, T] each: input_ids, segment_ids, attention_mask) for texts
    (and optional second segments), as the tokenizer encodes an example."""
    pairs = pairs if pairs is not None else [None] * len(texts)
    feats = [tokenizer.encode_example(a, b, max_len) for a, b in zip(texts, pairs)]
    if not feats:
        return {k: np.zeros((0, max_len), np.int32)
                for k in ("input_ids", "segment_ids", "attention_mask")}
    return {k: np.stack([f[k] for f in feats]) for k in feats[0]}
