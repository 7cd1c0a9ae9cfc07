"""Supervision: what ends a training loop besides its last step, kept out of the loop.

A `Supervisor` holds the run's operational stops — SIGTERM / Ctrl-C (`StopFlag`, agreed
across processes by `Signal`) and a wall-clock budget (`TimeBudget`) — and `watching`
turns an error raised while a stop signal was in flight into a resumable stop (exit 75).
The loop (encoder/train/loop.py) only asks each stop, after every step, whether to end.
"""
import contextlib
import os
import signal
import time
from typing import Callable

import jax
import numpy as np

from encoder import errors
from encoder.train import optimizer

# The supervisor's clock for a time budget (a module attribute, so a test can drive it).
clock: Callable[[], float] = time.monotonic


def _multihost() -> bool:
    return jax.process_count() > 1


class TimeBudget:
    """A wall-clock budget (optimizer.scale_by_clock): each step's learning rate is the
    schedule at the budget's share spent, and the loop stops once it is all spent. Every
    attempt's seconds count (a checkpoint keeps them); process 0's clock, broadcast, so
    every process steps with the same learning rate and stops together."""

    def __init__(self, budget_s: float, restored: dict | None, log_every: int):
        self.budget, self.log_every = float(budget_s), log_every
        self.before = float((restored or {}).get("clock_s", 0.0))
        self.t0 = clock()
        self.share = self.read()
        self.used = self.share  # the share the last step's learning rate was read at

    def read(self) -> float:
        share = (self.before + clock() - self.t0) / self.budget
        if _multihost():
            from jax.experimental import multihost_utils
            share = float(multihost_utils.broadcast_one_to_all(np.float64(share)))
        return share

    @property
    def spent(self) -> bool:
        return self.share >= 1.0

    def before_step(self, state):
        self.used = min(self.share, 1.0)
        return state.replace(opt_state=optimizer.set_clock(state.opt_state, self.used))

    def __call__(self, tick) -> str:
        # read after every step (several processes: at log steps, where they meet anyway)
        if not _multihost() or tick.step % self.log_every == 0:
            self.share = self.read()
        return "budget" if self.spent else ""

    def state(self) -> dict:
        return {"clock_s": self.share * self.budget}


class StopFlag:
    """Set by SIGTERM or the first Ctrl-C: checkpoint and exit at the next step boundary."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.set = False
        self.previous = {}

    def __call__(self, signum, frame):
        if self.set and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: exit now
        self.set = True  # first: nothing below may stop the flag from being set
        hint = " (Ctrl-C again to exit at once)" if signum == signal.SIGINT else ""
        try:  # os.write: a signal landing mid-print must not re-enter the stdout buffer
            os.write(2, f"received signal {signum}: checkpointing at the next step, then "
                        f"stopping{hint}\n".encode())
        except OSError:
            pass

    def agreed(self) -> bool:
        """The flag as every process sees it (any process signalled); call at the same step
        on all processes. One process alone would save a collective checkpoint and hang."""
        if not _multihost():
            return self.set
        from jax.experimental import multihost_utils
        return bool(np.any(multihost_utils.process_allgather(np.array(self.set))))

    def __enter__(self):
        for s in self.SIGNALS:
            try:
                self.previous[s] = signal.signal(s, self)
            except ValueError:  # not the main thread: signals stay with the caller
                pass
        return self

    def __exit__(self, *exc):
        for s, handler in self.previous.items():
            signal.signal(s, handler)


def stopped_instead(error: Exception, flag: StopFlag, mngr) -> Exception:
    """The error to raise for one that ended the loop: itself, unless a stop signal had
    arrived, when it is the stop's doing and the run is resumable (errors.Stopped, exit 75).
    A scheduler's SIGTERM reaches the whole process group, so a GPU compile in flight (an
    evaluator's program at a checkpoint step) loses its `ptxas` to it and fails with "ptxas
    exited with non-zero error code 15": a crash would not be requeued. A full disk stays
    a full disk (its own one line)."""
    if not flag.set or isinstance(error, errors.UserFacing) or errors.is_disk_full(error):
        return error
    try:
        last = mngr.latest_step()
    except Exception:  # noqa: BLE001 -- the message only
        last = None
    where = f"the last checkpoint is step {last}" if last is not None else "no checkpoint yet"
    return errors.Stopped(
        f"stopped by a signal; the work in flight failed as it stopped "
        f"({type(error).__name__}: {errors.one_line(str(error))[:200]}); {where}: run the same "
        "command again to resume")


class Signal:
    """Stops on SIGTERM / Ctrl-C in any process; the processes agree at log steps and at
    the loop's last step (every step with one process)."""

    def __init__(self, flag: StopFlag, log_every: int):
        self.flag, self.log_every = flag, log_every
        self.seen = False

    def __call__(self, tick) -> str:
        if not _multihost() or tick.step % self.log_every == 0 or tick.stop:
            self.seen = self.flag.agreed()
        return "signal" if self.seen else ""


class Supervisor:
    """A loop's operational stops: a signal, and a time budget when the run has one
    (`restored`: the checkpoint's meta, which carries the budget's seconds spent)."""

    def __init__(self, log_every: int, time_budget_s: float = 0.0,
                 restored: dict | None = None):
        self.flag = StopFlag()
        self.signal = Signal(self.flag, log_every)
        self.budget = (TimeBudget(time_budget_s, restored, log_every)
                       if time_budget_s else None)

    @property
    def stops(self) -> list:
        """In the order the loop asks them (after its own step limit)."""
        return [*([self.budget] if self.budget else []), self.signal]

    @property
    def signalled(self) -> bool:
        return self.signal.seen

    @contextlib.contextmanager
    def watching(self, mngr):
        """Signals caught for the block; an error that ends it while a stop signal is in
        flight is the stop's doing (errors.Stopped), anything else is itself."""
        with self.flag:
            try:
                yield self
            except Exception as e:  # noqa: BLE001 -- re-raised, as itself or as the stop's
                stop = stopped_instead(e, self.flag, mngr)
                if stop is e:
                    raise
                raise stop from e
