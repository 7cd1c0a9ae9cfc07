"""The one trainer every job uses: a pure, sharded, donated step and the loop services.

    step(state, batch, rng) -> (state, metrics)

is the only function compiled for training, for pretraining and fine-tuning
alike. A job hands `Trainer` three pure functions: `init_params(rng)` (boxed
with logical axes), `loss_fn(params, batch, rng) -> (loss, metrics)` and an
optional on-device `prepare(batch, rng)` (the MLM corruption). The Trainer
builds the mesh shardings once (eval_shape -> shardings -> jit(init,
out_shardings)), and jit-compiles the step with explicit shardings and the
old state donated.

`run_loop` is the loop both jobs share: it keeps each step's metrics on
device and reads them only at logging, evaluation and checkpoint steps,
stops on a non-finite loss naming its step, writes metrics.jsonl and
TensorBoard, evaluates through a callback, checkpoints every N steps, at the
end, and on SIGTERM or Ctrl-C (SIGINT; a second Ctrl-C exits at once).
`restore_or_init` resumes from the workdir's newest checkpoint that restores,
else applies an init source, else starts from scratch.
"""
import dataclasses
import math
import os
import signal
import time
from typing import Any, Callable

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging

from encoder.checkpoints import store
from encoder.train import metrics_io, optimizer, partitioning, workdir as workdir_lib


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any
    opt_state: Any


def check_train_config(train_cfg, num_devices: int | None = None) -> None:
    """Range checks on the loop's numbers, before anything is built or trained."""
    for name in ("batch_size", "grad_accum_steps", "keep_checkpoints"):
        if name in train_cfg and train_cfg[name] <= 0:
            raise ValueError(f"train.{name} must be positive, got {train_cfg[name]}")
    for name in ("num_steps", "eval_every", "warmup_steps", "eval_batches", "checkpoint_every"):
        if name in train_cfg and train_cfg[name] < 0:
            raise ValueError(f"train.{name} must be >= 0, got {train_cfg[name]}")
    if train_cfg.get("learning_rate", 0.0) < 0:
        raise ValueError(f"train.learning_rate must be >= 0, got {train_cfg.learning_rate}")
    bs = train_cfg.batch_size
    if bs % train_cfg.get("grad_accum_steps", 1):
        raise ValueError(f"train.batch_size {bs} is not divisible by grad_accum_steps "
                         f"{train_cfg.grad_accum_steps}")
    micro = bs // train_cfg.get("grad_accum_steps", 1)
    if num_devices and micro % num_devices:
        raise ValueError(f"the (micro-)batch of {micro} rows does not divide over {num_devices} "
                         f"devices: use a train.batch_size that is a multiple of "
                         f"{num_devices * train_cfg.get('grad_accum_steps', 1)}")


def make_step(loss_fn: Callable, tx, prepare: Callable | None = None, grad_accum: int = 1,
              nan_at_step: int = -1):
    """The pure train step; grad_accum > 1 scans over micro-batches.

    loss_fn(params, batch, rng) -> (loss, metrics); prepare(batch, rng) -> batch
    runs once per step on device before the micro-batches are cut.
    """
    def grads_and_metrics(params, batch, rng):
        (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, rng)
        return grads, metrics

    def step(state: TrainState, batch: dict, rng: jax.Array):
        k_prepare, rng = jax.random.split(rng)
        if prepare is not None:
            batch = prepare(batch, k_prepare)
        if grad_accum == 1:
            grads, metrics = grads_and_metrics(state.params, batch, rng)
        else:
            # Micro-batch i takes rows i, i+A, ...: each micro-batch spans every device.
            micro = jax.tree.map(
                lambda x: x.reshape(x.shape[0] // grad_accum, grad_accum, *x.shape[1:])
                .swapaxes(0, 1), batch)

            def body(carry, xs):
                mb, i = xs
                g, m = grads_and_metrics(state.params, mb, jax.random.fold_in(rng, i))
                return jax.tree.map(jnp.add, carry, (g, m)), None

            zeros = jax.tree.map(jnp.zeros_like, jax.eval_shape(
                grads_and_metrics, state.params, jax.tree.map(lambda x: x[0], micro), rng))
            (grads, metrics), _ = jax.lax.scan(body, zeros, (micro, jnp.arange(grad_accum)))
            grads, metrics = jax.tree.map(lambda x: x / grad_accum, (grads, metrics))
        if nan_at_step >= 0:  # testing hook for the non-finite-loss path
            poison = jnp.where(state.step == nan_at_step, jnp.nan, 1.0)
            grads = jax.tree.map(lambda g: g * poison, grads)
            metrics = {**metrics, "loss": metrics["loss"] * poison}
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {**metrics, "grad_norm": optax.global_norm(grads)}
        return TrainState(state.step + 1, params, opt_state), metrics

    return step


def state_shapes(init_params: Callable, tx, mesh, rng):
    """(abstract TrainState, its shardings) from shapes alone: nothing is allocated,
    so a run can be sized (encoder.bench --mode=compile) before it is started."""
    boxed = jax.eval_shape(partitioning.traced_under(init_params, mesh), rng)
    p_shard = partitioning.param_shardings(boxed, mesh)
    params = nn.unbox(boxed)
    opt_state = jax.eval_shape(tx.init, params)
    # Moments take their parameter's sharding, counters are replicated; frozen leaves
    # (multi_transform's MaskedNode) have no state and stay as they are.
    masked = lambda x: isinstance(x, optax.MaskedNode)  # noqa: E731
    o_shard = optax.tree_map_params(
        tx, lambda x, s: x if masked(x) else s, opt_state, p_shard,
        transform_non_params=lambda _: partitioning.replicated(mesh), is_leaf=masked)
    shardings = TrainState(partitioning.replicated(mesh), p_shard, o_shard)
    return TrainState(jax.ShapeDtypeStruct((), jnp.int32), params, opt_state), shardings


def init_state(init_params: Callable, tx, mesh, rng):
    """Sharded initial state: eval_shape -> shardings -> jit(init, out_shardings)."""
    _, shardings = state_shapes(init_params, tx, mesh, rng)
    init = partitioning.traced_under(init_params, mesh)  # the kernels see the mesh at init too
    params = jax.jit(lambda r: nn.unbox(init(r)), out_shardings=shardings.params)(rng)
    opt_state = jax.jit(tx.init, out_shardings=shardings.opt_state)(params)
    state = TrainState(jax.device_put(jnp.zeros((), jnp.int32), partitioning.replicated(mesh)),
                       params, opt_state)
    return state, shardings


def jit_step(step: Callable, shardings, mesh):
    """The step jit-compiled with the run's shardings and the old state donated; traced
    under the mesh's activation context (the model's constraints and kernel shard_maps)."""
    return jax.jit(partitioning.traced_under(step, mesh),
                   in_shardings=(shardings, partitioning.batch_sharding(mesh),
                                 partitioning.replicated(mesh)),
                   out_shardings=(shardings, partitioning.replicated(mesh)),
                   donate_argnums=(0,))


class Trainer:
    """Built once per run: the initial sharded state and the compiled, donated step."""

    def __init__(self, mesh, tx, init_params: Callable, loss_fn: Callable,
                 prepare: Callable | None = None, seed: int = 0, grad_accum: int = 1,
                 nan_at_step: int = -1):
        self.mesh, self.tx = mesh, tx
        self.batch_sharding = partitioning.batch_sharding(mesh)
        self.replicated = partitioning.replicated(mesh)
        self.initial_state, self.shardings = init_state(init_params, tx, mesh,
                                                        jax.random.key(seed))
        self.abstract = store.abstract_like(self.initial_state, self.shardings)
        self.step_fn = jit_step(make_step(loss_fn, tx, prepare, grad_accum, nan_at_step),
                                self.shardings, mesh)

    def jit_eval(self, fn: Callable):
        """jit of fn(params, batch, rng) with the run's shardings."""
        return jax.jit(partitioning.traced_under(fn, self.mesh),
                       in_shardings=(self.shardings.params, self.batch_sharding,
                                     self.replicated), out_shardings=self.replicated)

    def shard(self, batch: dict) -> dict:
        return partitioning.shard_batch(batch, self.mesh)

    def abstract_state(self):
        return self.abstract


@dataclasses.dataclass
class Restored:
    """Where a run starts: its state, and what the checkpoint held besides (None: scratch)."""
    state: Any
    data_state: dict | None = None
    meta: dict | None = None
    step: int | None = None


def restore_or_init(trainer: Trainer, mngr, init: Callable | None = None) -> Restored:
    """Own checkpoint (the newest that restores) > init(params, shardings) > scratch.

    The run takes the trainer's initial state (the first step donates it); a
    restore frees it first, so parameters are never held twice.
    """
    state, trainer.initial_state = trainer.initial_state, None
    if mngr.latest_step() is not None:
        del state
        state, data_state, meta, step = store.restore(mngr, trainer.abstract_state())
        return Restored(state, data_state, meta, step)
    if init is not None:
        state = state.replace(params=init(state.params, trainer.shardings.params))
    return Restored(state)


def open_run(trainer: Trainer, workdir: str, resolved, requested, keep: int,
             init: Callable | None = None):
    """Starts or resumes a run in its (claimed) workdir: (manager, metrics writer, Restored).

    Restores (or inits), drops the metrics rows of steps the run will redo, and
    only then writes config.json (the resolved config later jobs read) and
    run.json (the requested config a restart is compared with).
    """
    primary = jax.process_index() == 0
    mngr = store.manager(workdir, keep)
    start = restore_or_init(trainer, mngr, init)
    writer = metrics_io.MetricsWriter(workdir, enabled=primary)
    # Rows past the restored step (or, with no checkpoint, any row of an attempt killed
    # before its first one) are steps this run redoes.
    writer.drop_after(start.step or 0)
    if start.step is not None:
        report(f"resumed from {workdir} at step {start.step}")
    topology = {"processes": jax.process_count(), "devices": int(trainer.mesh.devices.size),
                "mesh": {k: int(v) for k, v in trainer.mesh.shape.items()}}
    change = workdir_lib.shape_change(workdir, topology) if start.step is not None else None
    if change:  # orbax restored the state into this mesh's shardings
        report(f"resuming on another shape: {change}; the state was resharded and the data "
               "iterator's position is global, so the run continues as it would have")
    if primary:
        with open(os.path.join(workdir, "config.json"), "w") as f:
            f.write(resolved.to_json(indent=2))
        workdir_lib.record_identity(workdir, requested, topology)
    return mngr, writer, start


@dataclasses.dataclass
class LoopOptions:
    """What the loop needs to know besides the trainer: counts, cadences, figures."""
    num_steps: int
    log_every: int
    checkpoint_every: int
    eval_every: int = 0                # 0: no evaluation callback
    tokens_per_step: int = 0
    flops_per_step: float = 0.0        # 0: no MFU column
    peak_flops: float = 0.0
    learning_rate: Callable[[int], float] | None = None
    progress: bool = False
    seed: int = 0
    # > 0: a wall-clock budget (optimizer.scale_by_clock): the run stops once this many
    # seconds of its loops (every attempt's, compile and evaluation included) are spent
    time_budget_s: float = 0.0


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
        try:  # os.write: a signal landing mid-print must not re-enter the stdout buffer
            os.write(2, f"received signal {signum}: checkpointing at the next step, then "
                        "stopping (Ctrl-C again to exit at once)\n".encode())
        except OSError:
            pass

    def agreed(self) -> bool:
        """The flag as every process sees it (any process signalled); call at the same step
        on all processes. One process alone would save a collective checkpoint and hang."""
        if jax.process_count() == 1:
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


# The loop's clock for a time budget (a module attribute, so a test can drive it).
clock: Callable[[], float] = time.monotonic


def report(line: str) -> None:
    """A progress line on stdout (process 0 only) and in the absl log."""
    logging.info(line)
    if jax.process_index() == 0:
        print(line, flush=True)


def run_loop(trainer: Trainer, state, batches, mngr, writer: metrics_io.MetricsWriter,
             opts: LoopOptions, evaluate: Callable | None = None,
             meta: dict | None = None, restored_meta: dict | None = None) -> tuple[Any, dict]:
    """Trains from state.step to opts.num_steps; returns (final state, last metrics).

    batches: an iterator of this process's numpy batches with get_state().
    evaluate(state, step, last) -> metrics dict, called every opts.eval_every
    steps and at the end (last: the latest training metrics, this step's
    included); its metrics join that step's row of metrics.jsonl.
    """
    base_key = jax.random.key(opts.seed)
    start = int(state.step)
    budget = float(opts.time_budget_s)
    spent_before = float((restored_meta or {}).get("clock_s", 0.0))
    clock_t0 = clock()

    def budget_share() -> float:
        """The share of the time budget spent so far (0 without a budget); process 0's
        clock, so every process steps with the same learning rate and stops together."""
        if not budget:
            return 0.0
        share = (spent_before + clock() - clock_t0) / budget
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils
            share = float(multihost_utils.broadcast_one_to_all(np.float64(share)))
        return share
    share = budget_share()
    share_used = share  # the share the last step's learning rate was read at
    progress = metrics_io.Progress(opts.num_steps, start, opts.progress)
    window: dict[str, float] = dict((restored_meta or {}).get("window", {}))
    window_steps = int((restored_meta or {}).get("window_steps", 0))
    timed_steps, window_t0 = 0, time.time()  # throughput counts only this process's steps
    pending: list = []  # (step, metrics on device) not yet read by the host
    last: dict = {}
    workdir = writer.workdir

    def absorb():
        """Reads pending metrics (the only host sync), checks them, adds them up."""
        nonlocal window_steps, timed_steps
        for step_no, metrics in jax.device_get(pending):
            loss = float(metrics["loss"])
            if not math.isfinite(loss):
                raise FloatingPointError(
                    f"non-finite loss ({loss}) at step {step_no}; stopping. The last good "
                    f"checkpoint (step {mngr.latest_step()}) in {workdir} is intact.")
            for k, v in metrics.items():
                window[k] = window.get(k, 0.0) + float(v)
            window_steps += 1
            timed_steps += 1
        pending.clear()

    def train_row(step: int) -> dict:
        nonlocal window_steps, timed_steps, window_t0
        elapsed = max(time.time() - window_t0, 1e-9)
        row = {f"train/{k}": v / window_steps for k, v in window.items()}
        if opts.tokens_per_step:
            row["train/tokens_per_s"] = timed_steps * opts.tokens_per_step / elapsed
        if opts.learning_rate is not None:  # on a clock: the schedule at its share of steps
            row["train/learning_rate"] = float(opts.learning_rate(
                share_used * opts.num_steps if budget else step))
        if budget:
            row["train/time_budget_share"] = min(share, 1.0)
        if opts.flops_per_step and opts.peak_flops:
            row["train/mfu"] = (timed_steps * opts.flops_per_step / elapsed
                                / (opts.peak_flops * jax.device_count()))
        window.clear()
        window_steps, timed_steps, window_t0 = 0, 0, time.time()
        return row

    stopping = False
    with StopFlag() as stop:
        try:
            if budget and share >= 1.0:
                report(f"the time budget ({budget:g} s) was spent at step {start}: nothing to do")
            for step in range(start, opts.num_steps if share < 1.0 else start):
                batch = trainer.shard(next(batches))
                if budget:  # this step's learning rate: the schedule at the budget's share
                    share_used = min(share, 1.0)
                    state = state.replace(opt_state=optimizer.set_clock(state.opt_state,
                                                                        share_used))
                state, metrics = trainer.step_fn(state, batch, jax.random.fold_in(base_key, step))
                step_no = step + 1
                pending.append((step_no, metrics))
                # the clock is read after every step (several processes: at log steps only,
                # where they synchronise anyway)
                if budget and (jax.process_count() == 1 or step_no % opts.log_every == 0):
                    share = budget_share()
                spent = bool(budget) and share >= 1.0
                done = step_no == opts.num_steps or spent
                if jax.process_count() == 1 or step_no % opts.log_every == 0 or done:
                    stopping = stop.agreed()  # at the same steps on every process
                row = {}
                if step_no % opts.log_every == 0 or done or stopping:
                    absorb()
                    row = train_row(step)
                    progress.update(step_no, row["train/loss"], row.get("train/tokens_per_s", 0))
                if evaluate is not None and opts.eval_every and (
                        step_no % opts.eval_every == 0 or done):
                    absorb()
                    row.update(evaluate(state, step_no, {**last, **row}) or {})
                if row:  # one row per step: training and evaluation metrics together
                    writer.write(step_no, row)
                    report(f"step {step_no}: " + ", ".join(
                        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in row.items()))
                    last.update(row)
                if step_no % opts.checkpoint_every == 0 or done or stopping:
                    absorb()  # never save a state whose loss was not checked
                    store.save(mngr, step_no, state, batches.get_state(),
                               {"step": step_no, **(meta or {}), "window": dict(window),
                                "window_steps": window_steps,
                                **({"clock_s": share * budget} if budget else {})})
                if spent:
                    report(f"the time budget ({budget:g} s) is spent: stopping at step "
                           f"{step_no} (checkpoint saved)")
                    break
                if stopping:
                    logging.warning("stopped by signal at step %d (checkpoint saved)", step_no)
                    report(f"stopped by signal at step {step_no}; checkpoint saved in {workdir}")
                    break
            absorb()
        finally:
            mngr.wait_until_finished()
            progress.close()
    last["stopped"] = stopping and int(state.step) < opts.num_steps
    last["signalled"] = stopping  # a run in phases stops even when the signal hit a phase's end
    return state, last
