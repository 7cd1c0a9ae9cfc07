"""The retriever: encoder + pooling (+ a learned temperature, + a ColBERT projection, + the
MLM head for SPLADE's sparse vectors), and the cached (GradCache) embedding that trains
batches beyond memory.

The parameter tree keeps the Embedder's names (`encoder`, `head` for a parametric
pooler) so every reader of an embedding model reads a retriever; `logit_scale` (a
scalar), `colbert` (a [D, K] projection) and `mlm_head` (the pretraining model's own
name, so a source's MLM head is the sparse head's start) sit beside them when asked for.

Cached embedding (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under
Memory Limited Setup", GradCache): the batch is cut into chunks; each chunk is embedded
under `jax.checkpoint` inside a `lax.map`, so the forward pass keeps no activation but
the chunk's inputs; the loss then runs over the full batch's vectors, and the backward
pass walks the chunks (the transposed scan), recomputing each chunk's forward and
backpropagating the loss's vector gradients through it. That is GradCache's
"embed without gradients, loss over all, backprop chunk by chunk" written as
autodiff: peak memory is one chunk's activations plus the [B, D] vectors, and the
gradients are the full batch's (each chunk's dropout key is fixed, so the recomputed
forward is the same one).
"""
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from encoder.model import heads
from encoder.model.encoder import Encoder
from encoder.retrieval import sparse as sparse_lib


class Retriever(nn.Module):
    """out: {"pooled": [B, D] raw pooled vectors (float32; the losses normalise, at each
    Matryoshka prefix), "tokens": [B, T, K] unit ColBERT token vectors (colbert_dim > 0),
    "sparse": [B, V] SPLADE weights (sparse=True; sparse.py)}."""
    cfg: Any
    num_labels: int = 0            # the Task.model signature; a retriever has no labels
    pooling: str = "mean"
    learn_temperature: bool = False
    temperature: float = 0.05
    colbert_dim: int = 0
    sparse: bool = False

    def setup(self):
        self.encoder = Encoder(self.cfg)
        self.head = heads.Pooler(self.cfg, self.pooling)
        if self.learn_temperature:
            self.logit_scale = self.param(
                "logit_scale", nn.initializers.constant(float(np.log(1.0 / self.temperature))),
                ())
        if self.colbert_dim:
            # ColBERT (Khattab & Zaharia 2020 §3.1): a bias-free linear map per token.
            self.colbert = nn.Dense(
                self.colbert_dim, use_bias=False, dtype=jnp.dtype(self.cfg.dtype),
                kernel_init=nn.with_logical_partitioning(
                    nn.initializers.normal(self.cfg.initializer_range), ("embed", None)),
                name="colbert")
        if self.sparse:
            self.mlm_head = heads.MlmHead(self.cfg)

    def __call__(self, input_ids, segment_ids=None, attention_mask=None, deterministic=True):
        hidden, aux = self.encoder(input_ids, segment_ids, attention_mask,
                                   deterministic=deterministic)            # [B, T, D]
        out = {"pooled": self.head(hidden, attention_mask).astype(jnp.float32)}
        if self.colbert_dim:
            tok = self.colbert(hidden).astype(jnp.float32)                 # [B, T, K]
            out["tokens"] = tok / jnp.maximum(jnp.linalg.norm(tok, axis=-1, keepdims=True),
                                              1e-12)
        if self.sparse:
            logits = self.mlm_head(hidden, None, self.encoder.attend)         # [B, T, V]
            out["sparse"] = sparse_lib.splade_pool(logits, attention_mask)  # [B, V]
        return out, {**aux, "encoded": hidden}


def embed(model, params, ids, segments, mask, deterministic: bool = True, rng=None,
          chunk: int = 0):
    """model's out for [B, T] inputs; chunk > 0 embeds chunks of that many rows under the
    cached (GradCache) scheme above. Chunk i takes rows i, i + A, ... (A = B / chunk), so
    under the trainer's batch sharding every chunk spans every device."""
    rngs = {} if rng is None else {"dropout": rng}

    def run(p, x, r):
        return model.apply({"params": p}, *x, deterministic=deterministic,
                           rngs={} if r is None else {"dropout": r})[0]

    b = ids.shape[0]
    if not chunk or chunk >= b:
        return model.apply({"params": params}, ids, segments, mask, deterministic=deterministic,
                           rngs=rngs)[0]
    if b % chunk:
        raise ValueError(f"contrastive.cache_chunk {chunk} does not divide the batch of {b} rows")
    a = b // chunk
    cut = lambda x: x.reshape(chunk, a, *x.shape[1:]).swapaxes(0, 1)  # noqa: E731  [A, chunk, ...]
    keys = (jax.random.split(rng, a) if rng is not None else None)
    step = jax.checkpoint(run)

    def body(xs):
        x, r = xs
        return step(params, x, r)

    outs = jax.lax.map(body, ((cut(ids), cut(segments), cut(mask)), keys))
    return jax.tree.map(lambda y: y.swapaxes(0, 1).reshape(b, *y.shape[2:]), outs)
