"""Exact top-k inner-product search: a chunked matmul sharded over every device.

The corpus is cut into blocks of (devices x chunk) rows; inside `shard_map` each
device scores its chunk against a block of queries ([Q, chunk] at most in memory),
keeps its local top-k, and the local lists are merged with the running top-k.
Nothing is approximate: the result is numpy's argsort of the full score matrix (ties
by lower corpus row first), in a memory that does not grow with the corpus. FAISS's
flat index does the same on one host; this runs on every device of a mesh.

Axes: Q queries, N corpus rows, D width, k results.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "rows"
NEG = -jnp.inf


def _mesh(devices=None) -> Mesh:
    return Mesh(np.asarray(list(devices if devices is not None else jax.devices())), (AXIS,))


@functools.lru_cache(maxsize=16)
def _block_fn(mesh: Mesh, k: int):
    """(queries [Q, D], block [S*C, D] sharded, valid [S*C], offset) -> top-k per device
    gathered: (scores [Q, S*k], rows [Q, S*k])."""
    def local(q, c, valid, offset):
        s = jnp.einsum("qd,cd->qc", q, c, precision=jax.lax.Precision.HIGHEST)  # [Q, C]
        s = jnp.where(valid[None, :] > 0, s, NEG)
        kk = min(k, c.shape[0])
        top, idx = jax.lax.top_k(s, kk)                                    # [Q, kk]
        base = offset + jax.lax.axis_index(AXIS) * c.shape[0]
        return top, (idx + base).astype(jnp.int32)

    fn = jax.shard_map(local, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS), P()),
                       out_specs=(P(None, AXIS), P(None, AXIS)))
    return jax.jit(fn)


@functools.partial(jax.jit, static_argnums=(4,))
def _merge(best_s, best_i, new_s, new_i, k: int):
    s = jnp.concatenate([best_s, new_s], 1)
    i = jnp.concatenate([best_i, new_i], 1)
    # ties: the lower corpus row first (numpy's stable argsort of -scores)
    order = jnp.lexsort((i, -s), axis=1)[:, :k]
    return jnp.take_along_axis(s, order, 1), jnp.take_along_axis(i, order, 1)


def exact_topk(queries: np.ndarray, corpus: np.ndarray, k: int, chunk: int = 4096,
               query_block: int = 1024, devices=None):
    """(scores [Q, k] float32, rows [Q, k] int) of the k largest inner products per query."""
    queries = np.asarray(queries, np.float32)
    corpus = np.asarray(corpus, np.float32)
    n = len(corpus)
    k = min(k, n)
    if not k or not len(queries):
        return np.zeros((len(queries), k), np.float32), np.zeros((len(queries), k), np.int64)
    mesh = _mesh(devices)
    shards = mesh.devices.size
    chunk = max(1, min(chunk, -(-n // shards)))
    block = shards * chunk
    fn = _block_fn(mesh, k)
    row_sharding = NamedSharding(mesh, P(AXIS))
    out_s, out_i = [], []
    for qs in range(0, len(queries), query_block):
        q = jnp.asarray(queries[qs:qs + query_block])
        best_s = jnp.full((len(q), k), NEG, jnp.float32)
        best_i = jnp.full((len(q), k), n, jnp.int32)
        for start in range(0, n, block):
            rows = corpus[start:start + block]
            pad = block - len(rows)
            valid = np.concatenate([np.ones(len(rows), np.int32), np.zeros(pad, np.int32)])
            if pad:
                rows = np.concatenate([rows, np.zeros((pad, corpus.shape[1]), np.float32)])
            s, i = fn(q, jax.device_put(rows, row_sharding), jax.device_put(valid, row_sharding),
                      jnp.int32(start))
            best_s, best_i = _merge(best_s, best_i, s, i, k)
        out_s.append(np.asarray(best_s))
        out_i.append(np.asarray(best_i))
    return np.concatenate(out_s), np.concatenate(out_i).astype(np.int64)
