"""Pseudo-perplexity (Salazar et al. 2020): mask every position once, score the original.

PPPL = exp(-(1/N) sum_i log P(x_i | x with only position i masked)) over the N
real, non-special tokens. Batched: each (row, position) pair becomes one
input with one [MASK] and one prediction slot, so the MLM head computes a
single vocabulary distribution per input; thousands of tokens take seconds.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np


def masked_copies(input_ids: np.ndarray, attention_mask: np.ndarray, special_ids,
                  mask_id: int):
    """For every scorable token: (row index, position, original id)."""
    real = attention_mask.astype(bool) & ~np.isin(input_ids, np.asarray(special_ids))
    rows, cols = np.nonzero(real)
    return rows, cols, input_ids[rows, cols]


def token_log_probs(apply_fn, input_ids, attention_mask, special_ids, mask_id: int,
                    batch_size: int = 64, segment_ids=None, max_tokens: int | None = None):
    """log P(x_i | x_{-i}) for every scorable token (numpy float array).

    apply_fn(input_ids, segment_ids, attention_mask, positions [B, 1]) -> logits [B, 1, V].
    """
    rows, cols, targets = masked_copies(input_ids, attention_mask, special_ids, mask_id)
    if max_tokens is not None:
        rows, cols, targets = rows[:max_tokens], cols[:max_tokens], targets[:max_tokens]
    if segment_ids is None:
        segment_ids = np.zeros_like(input_ids)

    @jax.jit
    def score(ids, seg, mask, pos, tgt):
        ids = ids.at[jnp.arange(ids.shape[0]), pos].set(mask_id)
        logits = apply_fn(ids, seg, mask, pos[:, None])[:, 0]  # [B, V]
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        return jnp.take_along_axis(logp, tgt[:, None], -1)[:, 0]

    out = []
    for i in range(0, len(rows), batch_size):
        r, c, t = rows[i:i + batch_size], cols[i:i + batch_size], targets[i:i + batch_size]
        n = len(r)
        pad = batch_size - n  # fixed shapes: one compilation
        r, c, t = (np.concatenate([a, np.repeat(a[:1], pad)]) for a in (r, c, t))
        lp = score(jnp.asarray(input_ids[r]), jnp.asarray(segment_ids[r]),
                   jnp.asarray(attention_mask[r]), jnp.asarray(c), jnp.asarray(t))
        out.append(np.asarray(lp)[:n])
    return np.concatenate(out) if out else np.zeros(0)


def pseudo_perplexity(log_probs: np.ndarray) -> float:
    if len(log_probs) == 0:
        raise ValueError("no scorable token: pseudo-perplexity is undefined")
    return math.exp(-float(np.mean(log_probs)))
