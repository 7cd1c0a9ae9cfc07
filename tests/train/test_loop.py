"""The training loop as a step and periodic actions (encoder/train/loop.py): each stop and
action on its own, then the standard list through `run_loop` with a real orbax manager
and metrics writer, on a step that counts (its loss is the batch's value)."""
import dataclasses
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.checkpoints import store
from encoder.train import loop, metrics_io, supervision
from encoder.train.trainer import TrainState


class Batches:
    """Batch i is {"x": [i]}: step i's loss is i, so every mean below is a hand sum."""

    def __init__(self, start: int = 0):
        self.i = start

    def __next__(self):
        self.i += 1
        return {"x": np.array([float(self.i)], np.float32)}

    def get_state(self):
        return {"i": self.i}


def _step(state, batch, rng):
    del rng
    loss = batch["x"][0]
    return TrainState(state.step + 1, state.params + loss, state.opt_state), {"loss": loss}


class Trainer:
    """What run_loop reads of a Trainer: its step and how a batch is placed."""
    step_fn = staticmethod(jax.jit(_step))
    shard = staticmethod(lambda b: b)


def _state(step: int = 0):
    return TrainState(jnp.int32(step), jnp.float32(0.0), jnp.zeros(()))


def _window(restored=None):
    return loop.Window(lambda: None, "WD", restored)



@dataclasses.dataclass
class _Every:
    """An evaluator as the loop's Evaluate runs it: fn(state, step, last) every `every`."""
    fn: object
    every: int

    def __call__(self, state, step, last):
        return self.fn(state, step, last)

def test_the_step_limit_ends_the_loop_and_every_action_sees_every_step():
    seen = []
    state, why = loop.run(Trainer.step_fn, _state(), Batches(), Trainer.shard, _window(),
                          [loop.StepLimit(5)], [lambda t: seen.append((t.step, t.stop))], 5)
    assert why == "done" and int(state.step) == 5 and float(state.params) == 15.0
    assert seen == [(1, ""), (2, ""), (3, ""), (4, ""), (5, "done")]


def test_train_metrics_average_the_window_at_their_cadence_and_on_the_last_step():
    window = _window()
    rows = []
    metrics = loop.TrainMetrics(window, 2, metrics_io.Progress(5, 0, False), tokens_per_step=10,
                                learning_rate=lambda s: 0.1 * s)
    loop.run(Trainer.step_fn, _state(), Batches(), Trainer.shard, window, [loop.StepLimit(5)],
             [metrics, lambda t: rows.append((t.step, dict(t.row)))], 5)
    written = [(s, r["train/loss"], r["train/learning_rate"]) for s, r in rows if r]
    # steps 1-2 (mean 1.5), 3-4 (3.5), and the last step alone (5); lr at the step's index
    assert written == [(2, 1.5, pytest.approx(0.1)), (4, 3.5, pytest.approx(0.3)),
                       (5, 5.0, pytest.approx(0.4))]
    assert all(r["train/tokens_per_s"] > 0 for s, r in rows if r)


def test_a_non_finite_loss_stops_at_its_step_naming_the_last_checkpoint():
    window = loop.Window(lambda: 40, "/runs/x", None)
    window.add(41, {"loss": jnp.float32(1.0)})
    window.add(42, {"loss": jnp.float32(math.nan)})
    with pytest.raises(FloatingPointError, match=r"at step 42.*checkpoint \(step 40\) in /runs/x"):
        window.absorb()


def test_a_resumed_window_continues_the_interrupted_average():
    window = _window({"window": {"loss": 3.0}, "window_steps": 2})
    window.add(3, {"loss": jnp.float32(6.0)})
    window.absorb()
    means, _, _ = window.take()
    assert means == {"loss": 3.0} and window.state() == {"window": {}, "window_steps": 0}


def test_evaluation_runs_at_its_cadence_and_at_the_end_but_not_on_a_signal():
    calls = []
    ev = loop.Evaluate([_Every(lambda state, step, last: calls.append(step) or {"eval/x": step},
                               3)], _window(), {})
    for step, stop in ((1, ""), (3, ""), (4, "signal"), (5, "done"), (6, "budget")):
        ev(loop.Tick(step, None, stop))
    assert calls == [3, 5, 6]


def test_keep_best_keeps_the_best_score_and_never_a_nan():
    from encoder.eval import evaluators
    saved = []
    best = {"score": -math.inf}
    keep = evaluators.KeepBest(lambda state, rec: saved.append((state, rec)), best,
                               fields=("epoch",))
    flags = [keep(f"state{step}", step, score, {"epoch": step})
             for step, score in ((1, math.nan), (2, 0.5), (3, 0.4), (4, math.nan), (5, 0.7))]
    # the first evaluation counts even at NaN (stored as null); NaN never wins after it
    assert [s for s, _ in saved] == ["state1", "state2", "state5"]
    assert saved[0][1]["score"] is None and saved[-1][1] == {"score": 0.7, "step": 5, "epoch": 5}
    assert flags == [True, True, False, False, True]


def test_a_signal_stops_at_the_next_step_and_the_flag_restores_the_handlers():
    import signal
    before = signal.getsignal(signal.SIGTERM)
    with supervision.StopFlag() as flag:
        stop = supervision.Signal(flag, log_every=100)
        seen = []

        def signal_at_3(tick):
            seen.append(tick.step)
            if tick.step == 3:
                flag.set = True  # what the handler does
        state, why = loop.run(Trainer.step_fn, _state(), Batches(), Trainer.shard, _window(),
                              [loop.StepLimit(10), stop], [signal_at_3], 10)
        assert int(state.step) == 4 and why == "signal" and stop.seen  # seen after step 4
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_time_budget_counts_earlier_attempts_and_stops_when_spent(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(supervision, "clock", lambda: now[0])
    budget = supervision.TimeBudget(10.0, {"clock_s": 4.0}, log_every=1)  # 4 s spent before

    def tick_clock(tick):
        now[0] += 2.0
    # each step's action moves the clock 2 s after the budget read it: the reads after
    # steps 1-4 are 0.4, 0.6, 0.8, 1.0 of the budget
    stops = [loop.StepLimit(100), budget]
    state, why = loop.run(Trainer.step_fn, _state(), Batches(), Trainer.shard, _window(),
                          stops, [tick_clock], 100, budget=budget)
    assert why == "budget" and int(state.step) == 4
    assert budget.state() == {"clock_s": pytest.approx(10.0)}


def test_run_loop_writes_rows_checkpoints_and_resumes_where_it_stopped(tmp_path):
    wd = str(tmp_path)

    def attempt(num_steps, start_state, batches, restored=None):
        mngr = store.manager(wd, keep=10)
        writer = metrics_io.MetricsWriter(wd)
        evals = []
        opts = loop.LoopOptions(num_steps=num_steps, log_every=2, checkpoint_every=3)
        try:
            state, last = loop.run_loop(
                Trainer, start_state, batches, mngr, writer, opts,
                [_Every(lambda s, step, last: evals.append(step) or {"eval/p": float(s.params)},
                        4)],
                meta={"objective": "count"}, restored_meta=restored)
            steps = sorted(mngr.all_steps())
        finally:
            mngr.close()
            writer.close()
        return state, last, evals, steps

    state, last, evals, steps = attempt(5, _state(), Batches())
    assert evals == [4, 5] and steps == [3, 5] and not last["stopped"]
    rows = [json.loads(line) for line in open(os.path.join(wd, "metrics.jsonl"))]
    assert [r["step"] for r in rows] == [2, 4, 5]
    assert rows[1]["eval/p"] == 10.0 and rows[1]["train/loss"] == 3.5
    mngr = store.manager(wd, create=False)
    _, data_state, meta, step = store.restore(mngr)
    mngr.close()
    assert step == 5 and data_state == {"i": 5} and meta["objective"] == "count"
    assert meta["window_steps"] == 0  # the last step wrote its row: nothing left over
    # a longer run resumes at step 5 (the loop starts from state.step)
    state, last, evals, steps = attempt(8, state, Batches(5), meta)
    assert int(state.step) == 8 and evals == [8] and steps == [3, 5, 6, 8]
    assert last["train/loss"] == 7.5  # steps 7-8: the last row's mean


def _failing_run(wd, signal_first: bool, error: Exception):
    """run_loop whose evaluation at step 4 fails (after the step-3 checkpoint); with
    signal_first, a stop signal arrived just before (the flag the handler sets)."""
    import signal

    def evaluate(state, step, last):
        if signal_first:
            signal.getsignal(signal.SIGTERM).set = True  # the StopFlag's handler state
        raise error
    mngr, writer = store.manager(wd, keep=10), metrics_io.MetricsWriter(wd)
    opts = loop.LoopOptions(num_steps=8, log_every=2, checkpoint_every=3)
    try:
        loop.run_loop(Trainer, _state(), Batches(), mngr, writer, opts, [_Every(evaluate, 4)],
                      meta={"objective": "count"})
    finally:
        mngr.close()
        writer.close()


def test_an_error_after_a_stop_signal_is_a_resumable_stop_naming_the_checkpoint(tmp_path):
    """A scheduler's SIGTERM reaches the whole process group: a GPU compile in flight dies
    of it. That is the stop's doing (errors.Stopped: exit 75, requeued), not a crash."""
    from encoder import errors
    ptxas = RuntimeError("INTERNAL: ptxas exited with non-zero error code 15, output: ")
    with pytest.raises(errors.Stopped) as stopped:
        _failing_run(str(tmp_path / "signalled"), True, ptxas)
    text = str(stopped.value)
    assert "stopped by a signal" in text and "ptxas exited" in text
    assert "the last checkpoint is step 3" in text and "run the same command again" in text
    assert isinstance(stopped.value.__cause__, RuntimeError)
    # without a signal the same error is the error (a bug or a real compile failure)
    with pytest.raises(RuntimeError, match="ptxas exited"):
        _failing_run(str(tmp_path / "plain"), False, ptxas)
    # and a full disk stays a full disk, signal or not
    full = OSError(28, "No space left on device")
    with pytest.raises(OSError) as disk:
        _failing_run(str(tmp_path / "full"), True, full)
    assert not isinstance(disk.value, errors.Stopped)


def test_a_stopped_error_exits_75_in_one_line(capsys):
    from encoder import errors
    from encoder.commands.one_line import one_line_errors

    def main(argv):
        raise errors.Stopped("stopped by a signal; ...; the last checkpoint is step 3: run "
                             "the same command again to resume")
    with pytest.raises(SystemExit) as done:
        one_line_errors(main)([])
    assert done.value.code == errors.STOPPED_EXIT_CODE
    err = capsys.readouterr().err
    assert err.strip().endswith("run the same command again to resume")
    assert "Traceback" not in err
