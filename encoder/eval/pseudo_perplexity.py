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
                    batch_size: int = 64, segment_ids=None, max_tokens: int | None = None,
                    extra: dict | None = None):
    """log P(x_i | x_{-i}) for every scorable token (numpy float array).

    apply_fn(input_ids, segment_ids, attention_mask, positions [B, 1], **extra) -> logits
    [B, 1, V]; extra: further [N, T] row arrays (document_ids, positions) passed by name,
    each copy reading its own row's. Batching is encoder/eval/inference.py's (fixed shapes,
    the last batch padded and its padding dropped).
    """
    from encoder.eval import inference
    rows, cols, targets = masked_copies(input_ids, attention_mask, special_ids, mask_id)
    if max_tokens is not None:
        rows, cols, targets = rows[:max_tokens], cols[:max_tokens], targets[:max_tokens]
    if len(rows) == 0:
        return np.zeros(0)
    if segment_ids is None:
        segment_ids = np.zeros_like(input_ids)
    table = {"input_ids": input_ids, "segment_ids": segment_ids,
             "attention_mask": attention_mask, **(extra or {})}
    table = {k: jnp.asarray(v) for k, v in table.items()}  # [N, T] each, on device once

    @jax.jit
    def score(table, copy):
        r = copy["row"]  # [B]: each copy's row, gathered on device
        ids = table["input_ids"][r].at[jnp.arange(r.shape[0]), copy["col"]].set(mask_id)
        named = {k: table[k][r] for k in table
                 if k not in ("input_ids", "segment_ids", "attention_mask")}
        logits = apply_fn(ids, table["segment_ids"][r], table["attention_mask"][r],
                          copy["col"][:, None], **named)[:, 0]  # [B, V]
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        return jnp.take_along_axis(logp, copy["target"][:, None], -1)[:, 0]

    copies = {"row": rows.astype(np.int32), "col": cols.astype(np.int32),
              "target": targets.astype(np.int32)}
    return np.asarray(inference.predict(score, table, copies, batch_size), np.float64)


def pseudo_perplexity(log_probs: np.ndarray) -> float:
    if len(log_probs) == 0:
        raise ValueError("no scorable token: pseudo-perplexity is undefined")
    return math.exp(-float(np.mean(log_probs)))
