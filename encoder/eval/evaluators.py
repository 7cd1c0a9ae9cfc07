"""Evaluators: what a training loop measures besides its loss, behind one interface.

An evaluator of parameters is a callable `(params, step) -> {metric: value}` (HeldOut,
config.evals' kinds); what the training loop's one Evaluate action runs is a list of
objects with a name and a cadence, called with the train state (HeldOutFigures, Recorded,
fine-tuning's dev score), so a job declares what it evaluates and the loop never asks
which job it runs (big_vision's `config.evals`).
"""
import dataclasses
import math
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


# ------------------------------------------------------------- what the loop's Evaluate runs
# Each has `name`, `every` (steps; 0: only where asked) and is called as
# ev(state, step, last) -> entries of the metrics row.

@dataclasses.dataclass(frozen=True, eq=False)
class HeldOutFigures:
    """The objective's held-out metrics (eval/...) every `every` steps, and those of the
    parameters' EMA (eval_ema/...) where the optimizer keeps one (ema(opt_state) -> params
    or None)."""
    on_params: HeldOut
    on_ema: HeldOut
    ema: Callable
    every: int
    name: str = "heldout"

    def __call__(self, state, step: int, last: dict) -> dict:
        del last
        out = self.on_params(state.params, step)
        ema = self.ema(state.opt_state)
        if ema is not None:
            out.update(self.on_ema(ema, step))
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class Recorded:
    """A declared evaluator (config.evals: .name, .key, .every, .fn(params, step)) whose
    scores go to the workdir's record (evals.jsonl) as evals/NAME/METRIC: a step the
    record already scored (a resumed run replaying it) is read back, not scored again."""
    declared: object
    record: object            # metrics_io.ScoreRecord

    @property
    def name(self) -> str:
        return self.declared.name

    @property
    def every(self) -> int:
        return self.declared.every

    def __call__(self, state, step: int, last: dict) -> dict:
        del last
        metrics = self.record.get(self.declared, step)
        if metrics is None:
            metrics = self.declared.fn(state.params, step)
            self.record.add(self.declared, step, metrics)
        return {f"evals/{self.name}/{k}": v for k, v in metrics.items()}


@dataclasses.dataclass
class KeepBest:
    """Keeps the parameters whose score is the best so far through save(state, record)
    (the first evaluation always counts; a NaN score, e.g. a constant Pearson, never wins
    after it). best is the running record {"score", "step", and the row's `fields`},
    restored by the caller on resume. Returns whether this evaluation is the new best."""
    save: Callable
    best: dict
    fields: tuple = ()

    def __call__(self, state, step: int, score: float, row: dict) -> bool:
        finite = math.isfinite(score)
        score = score if finite else -math.inf
        if score > self.best.get("score", -math.inf) or "step" not in self.best:
            self.best.update(score=score, step=step,
                             **{f: row[f] for f in self.fields if f in row})
            self.save(state, {**self.best, "score": score if finite else None})
            return True
        return False
