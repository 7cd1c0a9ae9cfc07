"""The one trainer every job uses: a pure, sharded, donated step and the loop services.

    step(state, batch, rng) -> (state, metrics)

is the only function compiled for training, for pretraining and fine-tuning
alike. A job hands `Trainer` `init_params(rng)` (boxed with logical axes); each segment
of a run asks it for the step of its `loss_fn(params, batch, rng) -> (loss,
metrics)` and optional on-device `prepare(batch, rng)` (the MLM corruption). The
Trainer builds the mesh shardings once from shapes (eval_shape -> shardings ->
jit(init, out_shardings)), and jit-compiles each step with explicit shardings and
the old state donated.

The loop both jobs run is encoder/train/loop.py (a step, then periodic actions).
`start_state` is the one place a run's state comes from: the workdir's newest
checkpoint that restores, else another run's whole state, else a fresh state with an
init source's parameters applied, else a fresh state.
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
        if "train_step" in batch:  # a loss that ramps a term over training (SPLADE's FLOPS)
            batch = {**batch, "train_step": jnp.broadcast_to(
                state.step, batch["train_step"].shape).astype(batch["train_step"].dtype)}
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
    """The run's mesh, optimizer and state shardings (from shapes: nothing is allocated
    until `fresh_state`), and its steps, each compiled when first used."""

    def __init__(self, mesh, tx, init_params: Callable, seed: int = 0, nan_at_step: int = -1):
        self.mesh, self.tx = mesh, tx
        self.init_params, self.seed, self.nan_at_step = init_params, seed, nan_at_step
        self.batch_sharding = partitioning.batch_sharding(mesh)
        self.replicated = partitioning.replicated(mesh)
        shapes, self.shardings = state_shapes(init_params, tx, mesh, jax.random.key(seed))
        self.abstract = store.abstract_like(shapes, self.shardings)
        self._steps: dict = {}

    def fresh_state(self) -> TrainState:
        """The initial sharded state from the run's seed."""
        return init_state(self.init_params, self.tx, self.mesh, jax.random.key(self.seed))[0]

    def step(self, loss_fn: Callable, prepare: Callable | None = None, grad_accum: int = 1):
        """The jitted, donated step for these pieces (compiled once per piece and count)."""
        key = (loss_fn, prepare, grad_accum)
        if key not in self._steps:
            self._steps[key] = jit_step(make_step(loss_fn, self.tx, prepare, grad_accum,
                                                  self.nan_at_step), self.shardings, self.mesh)
        return self._steps[key]

    def jit_eval(self, fn: Callable):
        """jit of fn(params, batch, rng) with the run's shardings."""
        return jax.jit(partitioning.traced_under(fn, self.mesh),
                       in_shardings=(self.shardings.params, self.batch_sharding,
                                     self.replicated), out_shardings=self.replicated)

    def shard(self, batch: dict) -> dict:
        return partitioning.shard_batch(batch, self.mesh)

    def abstract_state(self):
        return self.abstract


@dataclasses.dataclass(frozen=True, eq=False)
class Steps:
    """What the loop reads of a trainer for one segment: step_fn and shard. A batch of
    `batch_size` rows takes `grad_accum` micro-batches; another row count (a batch-size
    warmup's) takes rows / micro of them, each count compiled once."""
    trainer: Trainer
    loss_fn: Callable
    prepare: Callable | None
    batch_size: int
    grad_accum: int = 1
    micro: int = 0

    def step_fn(self, state, batch, rng):
        rows = next(iter(batch.values())).shape[0]
        accum = self.grad_accum if rows == self.batch_size else rows // self.micro
        return self.trainer.step(self.loss_fn, self.prepare, accum)(state, batch, rng)

    def shard(self, batch: dict) -> dict:
        return self.trainer.shard(batch)


@dataclasses.dataclass
class Restored:
    """Where a run starts: its state, and what the checkpoint held besides (None: scratch)."""
    state: Any
    data_state: dict | None = None
    meta: dict | None = None
    step: int | None = None


def start_state(trainer: Trainer, mngr, init: Callable | None = None,
                other: Callable[[], Restored] | None = None) -> Restored:
    """The state a run starts from: its own newest checkpoint that restores > another
    run's whole state (`other()`: init_state=full) > a fresh state with init(params,
    shardings) applied (an init source's parameters) > a fresh state."""
    if mngr.latest_step() is not None:
        state, data_state, meta, step = store.restore(mngr, trainer.abstract_state())
        return Restored(state, data_state, meta, step)
    if other is not None:
        return other()
    state = trainer.fresh_state()
    if init is not None:
        state = state.replace(params=init(state.params, trainer.shardings.params))
    return Restored(state)


def open_records(trainer: Trainer, workdir: str, resolved, requested, start: Restored):
    """The metrics writer of a started run (rows past its step dropped: steps it redoes),
    then config.json (the resolved config later jobs read) and run.json (the requested
    config a restart is compared with)."""
    primary = jax.process_index() == 0
    writer = metrics_io.MetricsWriter(workdir, enabled=primary)
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
    return writer
