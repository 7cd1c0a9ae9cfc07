"""An experiment: one frozen value of the pure pieces a job runs, built once.

    Experiment
      config      the resolved config (validated once, before it was built)
      trainer     mesh, optimizer, state shardings; a step compiled per segment when used
      start       mngr -> Restored: the workdir's checkpoint, another run's state, an
                  init source's parameters, or a fresh state (encoder/train/trainer.py)
      segments    the run's phases in order, each [start, end) with its step, batches,
                  evaluators and loop options, opened when the run reaches it
      begin       (Restored, writer) -> None: the opening lines (and figures) of a run
      finish      (state, last) -> the job's result

The job that runs one is encoder/jobs/skeleton.py: claim, start, each segment's loop,
finish — the same for pretraining (encoder/jobs/pretrain.py) and fine-tuning
(encoder/jobs/finetune.py).
"""
import dataclasses
import functools
from typing import Any, Callable, Sequence

from encoder.train import loop


@dataclasses.dataclass(frozen=True, eq=False)
class Parts:
    """A segment's pieces once opened."""
    steps: Any                      # trainer.Steps (step_fn, shard)
    batches: Callable               # (data_state | None, step, previous Parts' batches) -> it
    evaluators: Sequence            # what the loop's Evaluate runs
    options: loop.LoopOptions
    meta: dict                      # what each checkpoint of this segment records
    writer: Callable = lambda w: w  # the run's metrics writer, as this segment writes it


@dataclasses.dataclass(frozen=True, eq=False)
class Segment:
    """Steps [start, end) of a run; `parts` are built once, when the run first reaches it."""
    name: str
    index: int
    start: int
    end: int
    build: Callable[[], Parts]

    @functools.cached_property
    def parts(self) -> Parts:
        return self.build()


@dataclasses.dataclass(frozen=True, eq=False)
class Experiment:
    config: Any
    requested: Any                  # the config as the user gave it (run.json)
    workdir: str
    trainer: Any                    # trainer.Trainer
    start: Callable                 # mngr -> trainer.Restored
    segments: tuple
    keep_checkpoints: int
    begin: Callable = lambda start, writer: None
    finish: Callable = lambda state, last: last

    @property
    def total_steps(self) -> int:
        return self.segments[-1].end
