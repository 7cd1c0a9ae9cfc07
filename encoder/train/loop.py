"""Pretraining: one pure, jit-compiled train step over a device mesh, and the loop.

    step(state, batch, rng) -> (state, metrics)

is the only function compiled for training. Parameters and optimizer state are
sharded by their logical axes (partitioning.RULES), the batch over the data
axes, and the old state is donated. The loop keeps each step's metrics on
device and reads them only at logging, evaluation and checkpoint steps (the
host never waits for the device in between), checks them for non-finite
values naming the exact step, logs, evaluates, checkpoints every N steps, at
the end and on SIGTERM, and resumes from the workdir's latest checkpoint.
"""
import dataclasses
import math
import os
import signal
import time
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging

from encoder import config as config_lib
from encoder.data import pipeline
from encoder.objectives import objectives
from encoder.train import checkpoint, flops, metrics_io, optimizer, partitioning


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any
    opt_state: Any


def make_step(ctx, tx, objective, grad_accum: int = 1, nan_at_step: int = -1):
    """The pure train step; grad_accum > 1 scans over micro-batches."""
    loss_fn = objective.loss_fn

    def grads_and_metrics(params, batch, rng):
        (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, rng, ctx)
        return grads, metrics

    def step(state: TrainState, batch: dict, rng: jax.Array):
        k_prepare, rng = jax.random.split(rng)
        batch = objective.prepare(batch, k_prepare, ctx)
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


@dataclasses.dataclass
class Run:
    """Everything a pretraining run holds besides the loop's local variables."""
    config: Any
    workdir: str
    mesh: Any
    tokenizer: Any
    ctx: Any
    tx: Any
    train_rows: Any      # random-access row sources (encoder.data.pipeline)
    valid_rows: Any
    state_shardings: Any
    step_fn: Any
    eval_fn: Any
    flops_per_step: float
    batch_sharding: Any
    replicated: Any


def _barrier(name: str) -> None:
    """All processes wait here (after process 0 prepared data or trained a tokenizer)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


def most_frequent_token(token_counts: np.ndarray, special_ids) -> int:
    counts = np.array(token_counts, np.int64)
    counts[[i for i in special_ids if i < len(counts)]] = 0
    return int(np.argmax(counts))


def init_state(run_model, config, tx, mesh, max_predictions: int):
    """Sharded initial state: eval_shape -> shardings -> jit(init, out_shardings)."""
    seq = config.data.seq_len
    dummy = jnp.ones((1, seq), jnp.int32)

    def init_params(rng):
        return run_model.init(rng, dummy, dummy * 0, dummy, mlm_positions=jnp.zeros(
            (1, max_predictions), jnp.int32))["params"]

    rng = jax.random.key(config.seed)
    boxed = jax.eval_shape(init_params, rng)
    p_shard = partitioning.param_shardings(boxed, mesh)
    params = jax.jit(lambda r: nn.unbox(init_params(r)), out_shardings=p_shard)(rng)
    opt_abstract = jax.eval_shape(tx.init, params)
    o_shard = optax.tree_map_params(tx, lambda _, s: s, opt_abstract, p_shard,
                                    transform_non_params=lambda _: partitioning.replicated(mesh))
    opt_state = jax.jit(tx.init, out_shardings=o_shard)(params)
    shardings = TrainState(partitioning.replicated(mesh), p_shard, o_shard)
    state = TrainState(jax.device_put(jnp.zeros((), jnp.int32), partitioning.replicated(mesh)),
                       params, opt_state)
    return state, shardings


def setup(config, workdir: str, devices=None) -> Run:
    config_lib.validate(config)
    mesh = partitioning.make_mesh(config.mesh, devices)
    data = pipeline.open_pretraining_data(config.data, workdir, config.model.vocab_size,
                                          config.pair_task, config.seed,
                                          primary=jax.process_index() == 0, barrier=_barrier)
    logging.info("data: %s", data.description)
    if data.valid is None and config.train.eval_every:
        raise ValueError(f"no held-out document to evaluate on ({data.description}): raise "
                         f"data.valid_fraction (now {config.data.valid_fraction}), give "
                         "data.valid_files, or set train.eval_every=0")
    tok = data.tokenizer
    if tok.vocab_size != config.model.vocab_size:
        # The tokenizer defines the vocabulary (sentencepiece stops early on a small corpus).
        logging.warning("model.vocab_size %d -> %d, the tokenizer's size",
                        config.model.vocab_size, tok.vocab_size)
        config.model.vocab_size = tok.vocab_size
    ctx = objectives.make_context(config, tok, most_frequent_token(data.token_counts,
                                                                  tok.special_ids))
    tx = optimizer.make_optimizer(config.train)
    objective = objectives.OBJECTIVES[config.objective]
    step = make_step(ctx, tx, objective, config.train.grad_accum_steps,
                     config.train.debug_nan_at_step)
    # Shardings are known only after init; compile_fns wraps step_fn in jit then.
    fps = flops.config_train_flops_per_step(config)
    return Run(config, workdir, mesh, tok, ctx, tx, data.train, data.valid, None, step, None, fps,
               partitioning.batch_sharding(mesh), partitioning.replicated(mesh))


def compile_fns(run: Run, state_shardings):
    objective = objectives.OBJECTIVES[run.config.objective]
    run.state_shardings = state_shardings
    run.step_fn = jax.jit(run.step_fn, in_shardings=(state_shardings, run.batch_sharding,
                                                     run.replicated),
                          out_shardings=(state_shardings, run.replicated), donate_argnums=(0,))

    def eval_step(params, batch, rng):
        batch = objective.prepare(batch, rng, run.ctx)
        _, metrics = objective.loss_fn(params, batch, rng, run.ctx, deterministic=True)
        return metrics

    run.eval_fn = jax.jit(eval_step, in_shardings=(state_shardings.params, run.batch_sharding,
                                                   run.replicated), out_shardings=run.replicated)


def evaluate(run: Run, params) -> dict:
    """Held-out metrics over eval_batches fixed batches with fixed masks."""
    cfg = run.config
    it = pipeline.batch_iterator(run.valid_rows, cfg.train.batch_size, seed=0, shuffle=False,
                                 repeat=True, process_index=jax.process_index(),
                                 process_count=jax.process_count())
    keys = objectives.OBJECTIVES[cfg.objective].eval_keys
    totals: dict[str, float] = {}
    for i in range(cfg.train.eval_batches):
        batch = partitioning.shard_batch(next(it), run.mesh)
        m = jax.device_get(run.eval_fn(params, batch, jax.random.key(10_000 + i)))
        for k in keys:
            if k in m:
                totals[k] = totals.get(k, 0.0) + float(m[k])
    return {f"eval/{k}": v / cfg.train.eval_batches for k, v in totals.items()}


def report(line: str) -> None:
    """A progress line on stdout (process 0 only) and in the absl log."""
    logging.info(line)
    if jax.process_index() == 0:
        print(line, flush=True)


class _StopFlag:
    """Set by SIGTERM: the loop checkpoints and exits at the next step boundary."""

    def __init__(self):
        self.set = False

    def __call__(self, signum, frame):
        logging.warning("received signal %d: checkpointing and stopping", signum)
        self.set = True


def train(config, workdir: str, devices=None) -> dict:
    """Runs (or resumes) pretraining; returns the last train and eval metrics.

    devices: the devices of the mesh (default: all).
    """
    os.makedirs(workdir, exist_ok=True)
    run = setup(config, workdir, devices)
    if jax.process_index() == 0:
        with open(os.path.join(workdir, "config.json"), "w") as f:
            f.write(config.to_json(indent=2))
    cfg = run.config
    state, shardings = init_state(run.ctx.model, cfg, run.tx, run.mesh, run.ctx.max_predictions)
    compile_fns(run, shardings)
    mngr = checkpoint.manager(workdir, cfg.train.keep_checkpoints)
    data_state = None
    if mngr.latest_step() is not None:
        state, data_state, meta = checkpoint.restore(
            mngr, checkpoint.abstract_like(state, shardings))
        report(f"resumed from {workdir} at step {int(state.step)}")
    elif cfg.init_from:
        state = state.replace(params=load_init_params(cfg.init_from, state.params, shardings.params))
    n_params, n_model = objectives.parameter_count(cfg)
    report(f"model: {cfg.objective}, size {cfg.model.size}, {n_model:,} parameters"
           + (f" ({n_params:,} with the generator)" if n_params != n_model else ""))

    it = pipeline.batch_iterator(run.train_rows, cfg.train.batch_size, seed=cfg.seed,
                                 process_index=jax.process_index(),
                                 process_count=jax.process_count())
    if data_state is not None:
        it.set_state(data_state)
    writer = metrics_io.MetricsWriter(workdir, enabled=jax.process_index() == 0)
    stop = _StopFlag()
    previous_handler = signal.signal(signal.SIGTERM, stop)
    peak = cfg.train.peak_flops or flops.peak_flops_per_device()
    base_key = jax.random.key(cfg.seed)
    schedule = optimizer.learning_rate_schedule(cfg.train)
    tokens_per_step = cfg.train.batch_size * cfg.data.seq_len
    start = int(state.step)
    progress = metrics_io.Progress(cfg.train.num_steps, start, cfg.train.progress)
    window: dict[str, float] = {}
    window_steps, window_t0 = 0, time.time()
    pending: list = []  # (step, metrics on device) not yet read by the host
    last: dict = {}

    def absorb():
        """Reads every pending step's metrics (the only host sync), checks them, adds them up.

        Called at logging, evaluation, checkpoint and final steps only; a
        non-finite loss is reported with the exact step that produced it.
        """
        nonlocal window_steps
        for step_no, metrics in jax.device_get(pending):
            loss = float(metrics["loss"])
            if not math.isfinite(loss):
                raise FloatingPointError(
                    f"non-finite loss ({loss}) at step {step_no}; stopping. The last good "
                    f"checkpoint (step {mngr.latest_step()}) in {workdir} is intact.")
            for k, v in metrics.items():
                window[k] = window.get(k, 0.0) + float(v)
            window_steps += 1
        pending.clear()

    try:
        for step in range(start, cfg.train.num_steps):
            batch = partitioning.shard_batch(next(it), run.mesh)
            state, metrics = run.step_fn(state, batch, jax.random.fold_in(base_key, step))
            step_no = step + 1
            pending.append((step_no, metrics))
            done = step_no == cfg.train.num_steps
            if step_no % cfg.train.log_every == 0 or done or stop.set:
                absorb()
                elapsed = time.time() - window_t0
                tps = window_steps * tokens_per_step / max(elapsed, 1e-9)
                row = {f"train/{k}": v / window_steps for k, v in window.items()}
                row.update({"train/tokens_per_s": tps,
                            "train/learning_rate": float(schedule(step)),
                            "train/mfu": window_steps * run.flops_per_step / max(elapsed, 1e-9)
                            / (peak * jax.device_count())})
                writer.write(step_no, row)
                report(f"step {step_no}: " + ", ".join(f"{k}={v:.4g}" for k, v in row.items()))
                progress.update(step_no, row["train/loss"], tps)
                last.update(row)
                window.clear()
                window_steps, window_t0 = 0, time.time()
            if cfg.train.eval_every and (step_no % cfg.train.eval_every == 0 or done):
                ev = evaluate(run, state.params)
                writer.write(step_no, ev)
                report(f"step {step_no} " + ", ".join(f"{k}={v:.4g}" for k, v in ev.items()))
                last.update(ev)
            if step_no % cfg.train.checkpoint_every == 0 or done or stop.set:
                absorb()  # never save a state whose loss was not checked
                checkpoint.save(mngr, step_no, state, it.get_state(),
                                {"step": step_no, "objective": cfg.objective})
            if stop.set:
                logging.warning("stopped by signal at step %d (checkpoint saved)", step_no)
                break
        absorb()
    finally:
        mngr.wait_until_finished()
        mngr.close()
        writer.close()
        progress.close()
        signal.signal(signal.SIGTERM, previous_handler)
    last["step"] = int(state.step)
    last["parameters"] = n_model
    return last


def load_init_params(init_from: str, params, shardings):
    """Copies matching subtrees from a workdir checkpoint or hf:DIR into params."""
    if init_from.startswith("hf:"):
        from encoder.interop import hf_bert
        _, loaded = hf_bert.load(init_from[3:])
    else:
        mngr = checkpoint.manager(init_from)
        if mngr.latest_step() is None:
            raise FileNotFoundError(f"init_from={init_from!r} has no checkpoint")
        restored = mngr.restore(mngr.latest_step(), args=checkpoint.ocp.args.Composite(
            state=checkpoint.ocp.args.StandardRestore()))
        loaded = restored["state"]["params"]
    return merge_params(params, loaded, shardings)


def merge_params(params, loaded, shardings, path=""):
    """params with every subtree that `loaded` also has replaced (shapes must match)."""
    if not isinstance(params, dict):
        if tuple(params.shape) != tuple(np.shape(loaded)):
            raise ValueError(f"init_from: {path} has shape {np.shape(loaded)}, "
                             f"the model expects {params.shape}")
        return jax.device_put(np.asarray(loaded, params.dtype), shardings)
    return {k: merge_params(v, loaded[k], shardings[k], f"{path}/{k}") if k in loaded else v
            for k, v in params.items()}
