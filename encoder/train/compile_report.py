"""Ahead-of-time compilation of the pretraining train step from shapes alone: per-device
memory, FLOPs and the compiled program, for any mesh of devices (simulated CPU devices,
or abstract devices of an accelerator topology).

`compile_step(config, devices)` lowers and compiles exactly the step a run compiles
(encoder.objectives.pretraining.build + encoder.train.trainer); `compile_report` turns it
into one JSON-able row (`python -m encoder.bench --mode=compile`).
"""
import time

import jax
import jax.numpy as jnp
import numpy as np

from encoder.model import scan
from encoder.objectives import pretraining
from encoder.train import flops, optimizer, partitioning, trainer as trainer_lib


def abstract_batch(config, mesh) -> dict:
    """ShapeDtypeStructs of one global pretraining batch (what the pipeline yields), sharded."""
    b, t = config.train.batch_size, config.data.seq_len
    sharding = partitioning.batch_sharding(mesh)
    keys = ["input_ids", "segment_ids", "attention_mask", "document_ids", "positions"]
    batch = {k: jax.ShapeDtypeStruct((b, t), jnp.int32, sharding=sharding) for k in keys}
    if config.pair_task != "none":
        batch["pair_labels"] = jax.ShapeDtypeStruct((b,), jnp.int32, sharding=sharding)
    return batch


def _bytes_per_device(tree, shardings) -> int:
    """Bytes one device holds of a sharded tree (its shard of every leaf)."""
    leaves = jax.tree.leaves(tree)
    specs = jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
    return sum(int(np.prod(s.shard_shape(x.shape))) * jnp.dtype(x.dtype).itemsize
               for x, s in zip(leaves, specs))


def _xla_flops(compiled) -> float | None:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost["flops"]) if cost and "flops" in cost else None


def compile_step(config, devices=None):
    """The pretraining train step lowered and compiled for config's shapes, from shapes
    alone (no parameter is allocated): (compiled, abstract state, shardings, mesh, seconds)."""
    pieces = pretraining.build(config)
    mesh = partitioning.make_mesh(config.mesh, devices)
    tx = optimizer.make_optimizer(config.train)
    abstract, shardings = trainer_lib.state_shapes(pieces.init_params, tx, mesh,
                                                   jax.random.key(0))
    step = trainer_lib.jit_step(trainer_lib.make_step(
        pieces.loss_fn, tx, pieces.prepare, config.train.grad_accum_steps), shardings, mesh)
    state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                         abstract, shardings)
    rng = jax.eval_shape(lambda: jax.random.key(0))
    t0 = time.perf_counter()
    lowered = step.lower(state, abstract_batch(config, mesh), rng)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    return compiled, abstract, shardings, mesh, (t1 - t0, time.perf_counter() - t1)


def unrolled_xla_flops(config, devices=None) -> float:
    """XLA's FLOPs of the whole unrolled step, extrapolated from 1- and 2-layer compiles.

    XLA's cost analysis counts a while loop's body once, so a scanned stack's own count
    misses (G - 1) groups; the layers are identical in FLOPs (a dense mask costs the same
    for local and global layers), so count(L) = count(1) + (L - 1) (count(2) - count(1)).
    """
    counts = []
    for depth in (1, 2):
        probe = config.copy_and_resolve_references()
        probe.model.num_layers = depth
        probe.electra.generator_layers = min(probe.electra.generator_layers, depth)
        probe.model.scan_layers = "false"
        counts.append(_xla_flops(compile_step(probe, devices)[0]))
    return counts[0] + (config.model.num_layers - 1) * (counts[1] - counts[0])


def compile_report(config, unrolled_flops: bool = True, devices=None) -> dict:
    """Per-device memory and FLOPs of the compiled train step (see compile_step).

    XLA's FLOPs count every op of the step (norms, softmax, the optimizer, the
    masking); the analytic count (encoder.train.flops) only the matmuls. With a
    scanned stack the raw count covers one loop iteration: `xla_flops_unrolled`
    (unrolled_flops=True) is the whole step's and is what the ratio uses.
    """
    compiled, abstract, shardings, mesh, (lower_s, compile_s) = compile_step(config, devices)
    n = mesh.devices.size
    mem = compiled.memory_analysis()
    analytic = flops.config_train_flops_per_step(config) / n
    xla = _xla_flops(compiled)
    p = scan.plan(config.model)
    full = unrolled_xla_flops(config, devices) if (p is not None and unrolled_flops) else (
        None if p is not None else xla)
    return {"benchmark": "compile", "size": config.model.size, "objective": config.objective,
            "num_layers": config.model.num_layers, "scan_groups": p.groups if p else 0,
            "seq_len": config.data.seq_len, "global_batch": config.train.batch_size,
            "devices": n, "mesh": dict(mesh.shape), "dtype": config.model.dtype,
            "remat": config.model.remat, "attention_impl": config.model.attention_impl,
            "platform": jax.devices()[0].platform,
            "parameters": sum(int(np.prod(x.shape)) for x in jax.tree.leaves(abstract.params)),
            "lower_s": round(lower_s, 2), "compile_s": round(compile_s, 2),
            # per device:
            "param_bytes": _bytes_per_device(abstract.params, shardings.params),
            "optimizer_bytes": _bytes_per_device(abstract.opt_state, shardings.opt_state),
            "temp_bytes": int(mem.temp_size_in_bytes),
            "argument_bytes": int(mem.argument_size_in_bytes),
            "output_bytes": int(mem.output_size_in_bytes),
            "alias_bytes": int(mem.alias_size_in_bytes),
            "peak_bytes": int(mem.argument_size_in_bytes + mem.output_size_in_bytes
                              - mem.alias_size_in_bytes + mem.temp_size_in_bytes),
            "analytic_flops": analytic, "xla_flops": xla, "xla_flops_unrolled": full,
            "xla_over_analytic": full / analytic if full else None}
