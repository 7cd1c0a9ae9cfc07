"""The training loop: a step, then a list of periodic actions, until something says stop.

    for each step:
        state, metrics = step(state, batch, rng)        # dispatched; metrics stay on device
        tick = Tick(step, state)
        stops decide tick.stop    (StepLimit; the supervisor's TimeBudget and Signal,
                                   encoder/train/supervision.py: the same on every process)
        actions run in order      (TrainMetrics, Evaluate, WriteRow, Checkpoint)

Each action is a small object with its own state, called with the Tick after every step
and deciding itself whether it is due (`every` steps, at the last step, on a stop). Metrics
reach the host only through `Window.absorb()`, which an action calls when it needs checked
numbers (nanodo: read step N-1's metrics after dispatching step N); a non-finite loss stops
the run there, naming its step. Pretraining and fine-tuning run the same loop; what
differs is their evaluators (encoder/eval/evaluators.py).
"""
import dataclasses
import math
import time
from typing import Any, Callable, Sequence

import jax
from absl import logging

from encoder.checkpoints import store
from encoder.train import metrics_io, supervision


def report(line: str) -> None:
    """A progress line on stdout (process 0 only) and in the absl log."""
    logging.info(line)
    if jax.process_index() == 0:
        print(line, flush=True)


@dataclasses.dataclass
class Tick:
    """What every stop and action sees after a step."""
    step: int                  # steps done, this one included
    state: Any
    stop: str = ""             # why the loop ends after this step ("": it goes on)
    row: dict = dataclasses.field(default_factory=dict)  # this step's metrics row

    @property
    def final(self) -> bool:
        return bool(self.stop)


def due(tick: Tick, every: int, on_stop: bool = True) -> bool:
    """Every `every` steps (0: never), and on the loop's last step when on_stop."""
    return bool(every and tick.step % every == 0) or (on_stop and tick.final)


# ----------------------------------------------------------------------------- metrics

class Window:
    """The training metrics since the last row: dispatched steps' metrics wait on device
    (`pending`) until an action absorbs them; absorbed sums are averaged into a row."""

    def __init__(self, checkpointed: Callable[[], Any], workdir: str, restored: dict | None):
        self.checkpointed, self.workdir = checkpointed, workdir
        self.pending: list = []
        self.sums: dict[str, float] = dict((restored or {}).get("window", {}))
        self.steps = int((restored or {}).get("window_steps", 0))
        self.timed, self.t0 = 0, time.time()  # throughput: this process's steps only

    def add(self, step: int, metrics) -> None:
        self.pending.append((step, metrics))

    def absorb(self) -> None:
        """Reads the pending metrics (the loop's only host sync) and checks each step's
        loss and gradient norm are finite."""
        for step, metrics in jax.device_get(self.pending):
            # the loss, then the gradient the update used (a NaN gradient makes this step's
            # parameters NaN: never saved, since Checkpoint absorbs first)
            for what, key in (("loss", "loss"), ("gradient norm", "grad_norm")):
                value = float(metrics.get(key, 0.0))
                if not math.isfinite(value):
                    from encoder import errors  # the one-line stop: encoder/errors.py
                    raise errors.non_finite(what, value, step, self.checkpointed(),
                                            self.workdir)
            for k, v in metrics.items():
                self.sums[k] = self.sums.get(k, 0.0) + float(v)
            self.steps += 1
            self.timed += 1
        self.pending.clear()

    def take(self) -> tuple[dict, int, float]:
        """(mean of each metric, steps timed, seconds) since the last take; starts anew."""
        means = {k: v / self.steps for k, v in self.sums.items()}
        out = (means, self.timed, max(time.time() - self.t0, 1e-9))
        self.sums.clear()
        self.steps, self.timed, self.t0 = 0, 0, time.time()
        return out

    def state(self) -> dict:
        """What a checkpoint keeps, so a resumed run's next row averages the same steps."""
        return {"window": dict(self.sums), "window_steps": self.steps}


# ----------------------------------------------------------------------------- stops

class StepLimit:
    """The loop's last step (the operational stops are encoder/train/supervision.py's)."""

    def __init__(self, num_steps: int):
        self.num_steps = num_steps

    def __call__(self, tick: Tick) -> str:
        return "done" if tick.step >= self.num_steps else ""


# ----------------------------------------------------------------------------- actions

@dataclasses.dataclass
class TrainMetrics:
    """Every `every` steps (and on a stop): the window's averages as train/* in the row,
    with tokens/s, the learning rate, the budget's share and MFU where known."""
    window: Window
    every: int
    progress: metrics_io.Progress
    tokens_per_step: int = 0
    flops_per_step: float = 0.0
    peak_flops: float = 0.0
    learning_rate: Callable[[int], float] | None = None
    budget: supervision.TimeBudget | None = None
    num_steps: int = 0
    data: Callable[[], dict] | None = None  # the batches' own figures (a mixture's sources)

    def __call__(self, tick: Tick) -> None:
        if not due(tick, self.every):
            return
        self.window.absorb()
        means, timed, seconds = self.window.take()
        row = {f"train/{k}": v for k, v in means.items()}
        if self.tokens_per_step:
            row["train/tokens_per_s"] = timed * self.tokens_per_step / seconds
        if self.learning_rate is not None:  # on a clock: the schedule at its share of steps
            at = self.budget.used * self.num_steps if self.budget else tick.step - 1
            row["train/learning_rate"] = float(self.learning_rate(at))
        if self.budget:
            row["train/time_budget_share"] = min(self.budget.share, 1.0)
        if self.flops_per_step and self.peak_flops:
            row["train/mfu"] = (timed * self.flops_per_step / seconds
                                / (self.peak_flops * jax.device_count()))
        tick.row.update({**row, **(self.data() if self.data else {})})
        self.progress.update(tick.step, row["train/loss"], row.get("train/tokens_per_s", 0))


@dataclasses.dataclass
class Evaluate:
    """Every evaluator at its own cadence (`every` steps) and at the last step (not on a
    signal): ev(state, step, last) -> entries of the row (last: the latest value of every
    metric, this step's training metrics included). Held-out figures, config.evals and
    fine-tuning's dev score are all evaluators (encoder/eval/evaluators.py)."""
    evaluators: Sequence
    window: Window
    history: dict

    def __call__(self, tick: Tick) -> None:
        final = tick.stop in ("done", "budget")
        for ev in self.evaluators:
            if not due(tick, ev.every, on_stop=final):
                continue
            self.window.absorb()  # never score a state whose loss was not checked
            tick.row.update(ev(tick.state, tick.step, {**self.history, **tick.row}) or {})


@dataclasses.dataclass
class WriteRow:
    """The step's row (training and evaluation metrics together) to metrics.jsonl,
    TensorBoard and a progress line; `history` keeps the latest value of every metric."""
    writer: Any
    history: dict

    def __call__(self, tick: Tick) -> None:
        if not tick.row:
            return
        self.writer.write(tick.step, tick.row)
        report(f"step {tick.step}: " + ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in tick.row.items()))
        self.history.update(tick.row)


@dataclasses.dataclass
class Checkpoint:
    """Every `every` steps, at the last step and on a stop: the state, the data iterator's
    position and `meta` (plus what the window and the budget must resume with)."""
    mngr: Any
    every: int
    batches: Any
    window: Window
    meta: dict
    budget: supervision.TimeBudget | None = None
    workdir: str = "."
    nbytes: int | None = None  # one checkpoint's arrays (measured at the first save)

    def __call__(self, tick: Tick) -> None:
        if not due(tick, self.every):
            return
        self.window.absorb()  # never save a state whose loss was not checked
        if self.nbytes is None:
            self.nbytes = store.state_bytes(tick.state)
        last = self.mngr.latest_step()
        store.check_room(self.workdir, self.nbytes, f"the checkpoint of step {tick.step}",
                         f"the last complete one is step {last}" if last is not None
                         else "no complete checkpoint yet")
        extra = {**self.window.state(), **(self.budget.state() if self.budget else {})}
        store.save(self.mngr, tick.step, tick.state, self.batches.get_state(),
                   {"step": tick.step, **self.meta, **extra})


# ----------------------------------------------------------------------------- the loop

def run(step_fn: Callable, state, batches, shard: Callable, window: Window,
        stops: Sequence[Callable], actions: Sequence[Callable], num_steps: int, seed: int = 0,
        budget: supervision.TimeBudget | None = None) -> tuple[Any, str]:
    """Steps from state.step until a stop; returns (state, why it stopped: "" when
    state.step already was num_steps)."""
    base_key = jax.random.key(seed)
    stop = ""
    for step in range(int(state.step), num_steps):
        if budget is not None:
            state = budget.before_step(state)
        state, metrics = step_fn(state, shard(next(batches)), jax.random.fold_in(base_key, step))
        window.add(step + 1, metrics)
        tick = Tick(step + 1, state)
        for s in stops:  # in order: a later stop sees an earlier one's reason
            tick.stop = tick.stop or s(tick)
        for action in actions:
            action(tick)
        if tick.stop:
            stop = tick.stop
            break
    return state, stop


@dataclasses.dataclass
class LoopOptions:
    """What the loop needs to know besides the trainer: counts, cadences, figures."""
    num_steps: int
    log_every: int
    checkpoint_every: int
    tokens_per_step: int = 0
    flops_per_step: float = 0.0        # 0: no MFU column
    peak_flops: float = 0.0
    learning_rate: Callable[[int], float] | None = None
    progress: bool = False
    seed: int = 0
    # > 0: a wall-clock budget (optimizer.scale_by_clock): the run stops once this many
    # seconds of its loops (every attempt's, compile and evaluation included) are spent
    time_budget_s: float = 0.0


def run_loop(trainer, state, batches, mngr, writer: metrics_io.MetricsWriter,
             opts: LoopOptions, evaluators: Sequence = (), meta: dict | None = None, restored_meta: dict | None = None) -> tuple[Any, dict]:
    """Trains from state.step to opts.num_steps with the standard actions; returns (final
    state, the latest value of every metric, with "stopped" and "signalled").

    trainer: anything with step_fn(state, batch, rng) and shard(batch); batches: an
    iterator of this process's numpy batches with get_state(); evaluators: each with
    `every` and ev(state, step, last) -> row entries.
    """
    start = int(state.step)
    sup = supervision.Supervisor(opts.log_every, opts.time_budget_s, restored_meta)
    budget = sup.budget
    window = Window(mngr.latest_step, writer.workdir, restored_meta)
    progress = metrics_io.Progress(opts.num_steps, start, opts.progress)
    history: dict = {}
    end = opts.num_steps
    if budget and budget.spent:
        report(f"the time budget ({budget.budget:g} s) was spent at step {start}: nothing to do")
        end = start
    actions = [TrainMetrics(window, opts.log_every, progress, opts.tokens_per_step,
                            opts.flops_per_step, opts.peak_flops, opts.learning_rate, budget,
                            opts.num_steps, getattr(batches, "metrics", None)),
               Evaluate(list(evaluators), window, history),
               WriteRow(writer, history),
               Checkpoint(mngr, opts.checkpoint_every, batches, window, meta or {}, budget,
                          writer.workdir)]
    with sup.watching(mngr), store.disk_full_named(writer.workdir, mngr):
        try:
            state, why = run(trainer.step_fn, state, batches, trainer.shard, window,
                             [StepLimit(opts.num_steps), *sup.stops], actions, end, opts.seed,
                             budget)
            window.absorb()
        finally:
            try:
                mngr.wait_until_finished()
            finally:
                progress.close()
    step = int(state.step)
    if why == "budget":
        report(f"the time budget ({budget.budget:g} s) is spent: stopping at step {step} "
               "(checkpoint saved)")
    if sup.signalled:
        report(f"stopped by signal at step {step}; checkpoint saved in {writer.workdir}")
    history["stopped"] = sup.signalled and step < opts.num_steps
    history["signalled"] = sup.signalled  # a run in phases stops even when a phase's end was hit
    return state, history
