"""The pretraining step's pieces, built from a config in one place.

Every consumer of a pretraining step (the pretraining job, held-out evaluation,
the benchmarks and the compile report) gets its model init, loss, on-device
corruption and evaluation step from `build`, so what is benchmarked or compiled
for a TPU is exactly what a run trains.
"""
import dataclasses
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np

from encoder.objectives import objectives


class ShapeOnlyTokenizer:
    """The special ids an objective needs, without a sentencepiece model (benchmarks,
    compiles from shapes): [PAD]=0 .. [MASK]=4 as our tokenizers number them. Its word
    table says every piece starts a word: the values span and whole-word masking read
    do not change the compiled program, only which tokens a real run masks."""
    special_ids, mask_id = (0, 1, 2, 3, 4), 4

    def __init__(self, vocab_size: int):
        self.vocab_size = int(vocab_size)

    def word_start_table(self) -> np.ndarray:
        return np.ones((self.vocab_size,), bool)


def most_frequent_token(token_counts: np.ndarray, special_ids) -> int:
    """The MLM baseline's answer: the most frequent non-special token."""
    counts = np.array(token_counts, np.int64)
    counts[[i for i in special_ids if i < len(counts)]] = 0
    return int(np.argmax(counts))


def model_init_fn(model, seq_len: int, max_predictions: int) -> Callable:
    """rng -> boxed params of a pretraining model (MLM slots included)."""
    dummy = jnp.ones((1, seq_len), jnp.int32)

    def init_params(rng):
        return model.init(rng, dummy, dummy * 0, dummy, mlm_positions=jnp.zeros(
            (1, max_predictions), jnp.int32))["params"]
    return init_params


@dataclasses.dataclass(frozen=True, eq=False)
class PretrainingStep:
    """init_params(rng) -> params; loss_fn(params, batch, rng) -> (loss, metrics) on a
    prepared batch; prepare(batch, rng) corrupts on device; eval_step(params, batch, rng)
    -> metrics (prepare + deterministic loss)."""
    ctx: Any  # objectives.ObjectiveContext
    objective: objectives.Objective
    init_params: Callable
    loss_fn: Callable
    prepare: Callable
    eval_step: Callable


def build(config, tokenizer=None, most_frequent_id: int = 5) -> PretrainingStep:
    """The step pieces for config; tokenizer None means shape-only (ShapeOnlyTokenizer)."""
    tokenizer = tokenizer or ShapeOnlyTokenizer(config.model.vocab_size)
    ctx = objectives.make_context(config, tokenizer, most_frequent_id)
    objective = objectives.OBJECTIVES[config.objective]

    def loss_fn(params, batch, rng):
        return objective.loss_fn(params, batch, rng, ctx)

    def prepare(batch, rng):
        return objective.prepare(batch, rng, ctx)

    def eval_step(params, batch, rng):
        return objective.loss_fn(params, objective.prepare(batch, rng, ctx), rng, ctx,
                                 deterministic=True)[1]

    return PretrainingStep(ctx, objective,
                           model_init_fn(ctx.model, config.data.seq_len, ctx.max_predictions),
                           loss_fn, prepare, eval_step)
