"""The one trainer every job uses: a pure, sharded, donated step and the loop services.

    step(state, batch, rng) -> (state, metrics)

is the only function compiled for training, for pretraining and fine-tuning
alike. A job hands `Trainer` three pure functions: `init_params(rng)` (boxed
with logical axes), `loss_fn(params, batch, rng) -> (loss, metrics)` and an
optional on-device `prepare(batch, rng)` (the MLM corruption). The Trainer
builds the mesh shardings once (eval_shape -> shardings -> jit(init,
out_shardings)), and jit-compiles the step with explicit shardings and the
old state donated.

The loop both jobs run is encoder/train/loop.py (a step, then periodic actions).
`restore_or_init` resumes from the workdir's newest checkpoint that restores,
else applies an init source, else starts from scratch; `open_run` does that and
writes the run's config records.
"""
import dataclasses
import os
from typing import Any, Callable

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from encoder.checkpoints import store
from encoder.train import metrics_io, partitioning, workdir as workdir_lib
from encoder.train.loop import report


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
    so a run can be sized (`encoder bench --mode=compile`) before it is started."""
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
    os.makedirs(workdir, exist_ok=True)
    # a disk that cannot hold one checkpoint is refused before the first step, not at a save
    store.check_room(workdir, store.state_bytes(trainer.abstract_state()), "a checkpoint")
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
