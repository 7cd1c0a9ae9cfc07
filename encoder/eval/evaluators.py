"""Evaluators: what a training loop measures besides its loss, behind one interface.

An evaluator is a callable `(params, step) -> {metric: value}`; `as_callback` turns a
list of them into the loop's evaluation callback (encoder/train/loop.py, Evaluate),
so a job declares what it evaluates and the loop never asks which job it runs
(big_vision's `config.evals`, as a list of objects instead of a registry of names).
"""
import dataclasses
from typing import Callable, Protocol, Sequence

import jax

from encoder.data import pipeline


class Evaluator(Protocol):
    def __call__(self, params, step: int) -> dict: ...


@dataclasses.dataclass(frozen=True, eq=False)
class HeldOut:
    """The objective's metrics on held-out rows: `num_batches` fixed batches (the first of
    the split, in order) with fixed corruption keys, averaged; the same numbers at every
    step, so curves compare. eval_fn(params, batch, rng) -> metrics (a jitted eval step)."""
    eval_fn: Callable
    rows: object              # a random-access row source (encoder.data.pipeline)
    batch_size: int
    num_batches: int
    keys: Sequence[str]       # metrics to report (the objective's eval_keys)
    shard: Callable           # places a host batch on the mesh
    prefix: str = "eval/"
    key_offset: int = 10_000  # corruption keys: never those of a training step

    def __call__(self, params, step: int) -> dict:
        it = pipeline.batch_iterator(self.rows, self.batch_size, seed=0, shuffle=False,
                                     repeat=True, process_index=jax.process_index(),
                                     process_count=jax.process_count())
        totals: dict[str, float] = {}
        for i in range(self.num_batches):
            m = jax.device_get(self.eval_fn(params, self.shard(next(it)),
                                            jax.random.key(self.key_offset + i)))
            for k in self.keys:
                if k in m:
                    totals[k] = totals.get(k, 0.0) + float(m[k])
        return {f"{self.prefix}{k}": v / self.num_batches for k, v in totals.items()}


def as_callback(evaluators: Sequence[Evaluator]) -> Callable | None:
    """The trainer's evaluate(state, step, last) -> metrics over every evaluator (None if
    there are none); a metric named twice is an error, not an overwrite."""
    if not evaluators:
        return None

    def evaluate(state, step: int, last: dict) -> dict:
        del last
        out: dict = {}
        for ev in evaluators:
            metrics = ev(state.params, step)
            clash = set(out) & set(metrics)
            if clash:
                raise ValueError(f"two evaluators report {sorted(clash)}")
            out.update(metrics)
        return out
    return evaluate
