"""Dynamic MLM corruption on device (Devlin et al. 2019 §3.1; Liu et al. 2019 §4.1).

`corrupt` is a pure, jittable function of (rng, batch): a fresh mask every step.

1. Units. Tokens are grouped into units that are masked together; the mode
   decides the grouping (MASKING_MODES):
     token       every token is its own unit;
     whole_word  a unit is a word: a piece that starts a word plus its
                 continuation pieces (the tokenizer's word_start_table);
     span        a unit is a run of whole words; each word starts a new run
                 with probability span_p, so run lengths are geometric in
                 words (SpanBERT, Joshi et al. 2020, without the length clip;
                 span_p=0.26 gives SpanBERT's mean of 3.8 words).
   Special tokens and padding are never in a unit.
2. Selection. Each row masks n = floor(rate * candidates + u), u ~ U[0,1)
   tokens (unbiased: E[n] = rate * candidates). Units get random scores; the
   lowest-scoring units are taken whole until the next would exceed n.
3. Replacement: of the selected tokens, mask_prob -> [MASK], random_prob ->
   a uniformly random non-special token, the rest unchanged (80/10/10).

Outputs have static shapes: P = max_predictions slots per row; slot p holds
a position, its original token and a weight (1 = a real prediction).

Axes: B batch, T tokens, P prediction slots.
"""
import jax
import jax.numpy as jnp



def token_units(rng, input_ids, word_start, span_p):
    """Every token is its own unit."""
    return jnp.ones(input_ids.shape, bool)


def word_units(rng, input_ids, word_start, span_p):
    """A unit is a word: a word-start piece plus its continuation pieces."""
    return word_start


def span_units(rng, input_ids, word_start, span_p):
    """A unit is a run of words; each word starts a new run with probability span_p."""
    return word_start & jax.random.bernoulli(rng, span_p, input_ids.shape)


# name -> (rng, input_ids, word_start [B, T], span_p) -> unit starts bool [B, T]
MASKING_MODES = {"token": token_units, "whole_word": word_units, "span": span_units}


def candidates_mask(input_ids, attention_mask, special_ids):
    """bool [B, T]: real, non-special tokens (the only ones that may be masked)."""
    special = jnp.isin(input_ids, jnp.asarray(special_ids, input_ids.dtype))
    return attention_mask.astype(bool) & ~special


def select(rng, candidates, unit_start, rate: float, max_predictions: int):
    """Chooses whole units; returns (positions [B, P], weights [B, P], selected [B, T])."""
    b, t = candidates.shape
    k_units, k_count = jax.random.split(rng)
    not_cand = ~candidates
    prev_not_cand = jnp.pad(not_cand[:, :-1], ((0, 0), (1, 0)), constant_values=True)
    start = unit_start | not_cand | prev_not_cand
    # prefix scans written as log-depth trees: jax lowers cumsum/cummax to an O(T^2)
    # reduce-window, which XLA constant-folds naively when its input is a constant (token
    # masking's unit starts are all True): 25+ minutes of compile at T = 8,192
    unit_id = jax.lax.associative_scan(jnp.add, start.astype(jnp.int32), axis=1) - 1  # [B, T]
    unit_score = jax.random.uniform(k_units, (b, t))
    score = jnp.take_along_axis(unit_score, unit_id, axis=1)
    score = jnp.where(candidates, score, 2.0)  # non-candidates sort last
    order = jnp.argsort(score, axis=1, stable=True)  # units contiguous, in token order

    idx = jnp.arange(t)
    unit_first = jax.lax.associative_scan(jnp.maximum, jnp.where(start, idx, 0), axis=1)
    # ^ the first index of each token's own unit
    rank_in_unit = idx - unit_first
    unit_len = jax.vmap(lambda u: jax.ops.segment_sum(jnp.ones(t, jnp.int32), u, t))(unit_id)
    unit_len = jnp.take_along_axis(unit_len, unit_id, axis=1)

    s_cand = jnp.take_along_axis(candidates, order, axis=1)
    s_rank = jnp.take_along_axis(rank_in_unit, order, axis=1)
    s_len = jnp.take_along_axis(unit_len, order, axis=1)
    cum = jnp.cumsum(s_cand, axis=1)
    cum_at_unit_end = cum - s_rank + s_len - 1

    n_cand = jnp.sum(candidates, axis=1)
    target = jnp.floor(rate * n_cand + jax.random.uniform(k_count, (b,))).astype(jnp.int32)
    target = jnp.minimum(target, max_predictions)
    s_selected = s_cand & (cum_at_unit_end <= target[:, None])  # a prefix of whole units

    positions = order[:, :max_predictions]
    weights = s_selected[:, :max_predictions]
    selected = jnp.zeros((b, t), bool).at[jnp.arange(b)[:, None], order].set(s_selected)
    return positions, weights, selected


def corrupt(rng, input_ids, attention_mask, *, rate: float, max_predictions: int, mask_id: int,
            vocab_size: int, special_ids, mode: str = "token", word_start_table=None,
            mask_prob: float = 0.8, random_prob: float = 0.1, span_p: float = 0.26) -> dict:
    """The 80/10/10 corruption; see the module docstring.

    Returns input_ids (corrupted) [B, T], mlm_positions [B, P], mlm_labels [B, P],
    mlm_weights [B, P] float32, and masked [B, T] (selected for prediction).
    """
    k_units, k_select, k_action, k_random = jax.random.split(rng, 4)
    cand = candidates_mask(input_ids, attention_mask, special_ids)
    if mode not in MASKING_MODES:
        raise ValueError(f"Unknown masking mode {mode!r}; valid names: {', '.join(MASKING_MODES)}")
    if mode != "token" and word_start_table is None:
        raise ValueError(f"masking mode {mode!r} needs the tokenizer's word_start_table")
    word_start = None if word_start_table is None else jnp.asarray(word_start_table)[input_ids]
    starts = MASKING_MODES[mode](k_units, input_ids, word_start, span_p)
    positions, weights, selected = select(k_select, cand, starts, rate, max_predictions)

    u = jax.random.uniform(k_action, input_ids.shape)
    first_random = max(special_ids) + 1
    random_tokens = jax.random.randint(k_random, input_ids.shape, first_random, vocab_size,
                                       dtype=input_ids.dtype)
    corrupted = jnp.where(selected & (u < mask_prob), mask_id, input_ids)
    corrupted = jnp.where(selected & (u >= mask_prob) & (u < mask_prob + random_prob),
                          random_tokens, corrupted)
    labels = jnp.take_along_axis(input_ids, positions, axis=1)
    return {
        "input_ids": corrupted,
        "mlm_positions": positions,
        "mlm_labels": labels,
        "mlm_weights": weights.astype(jnp.float32),
        "masked": selected,
    }
