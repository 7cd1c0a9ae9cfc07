"""Ahead-of-time compilation of the train step from shapes alone: per-chip memory, FLOPs,
collectives, attention kernels and a step-time bound, for any mesh of devices (simulated
CPU devices, or the abstract chips of a TPU topology or a GPU node, compiled by libtpu or
XLA's CUDA compiler on a CPU machine: encoder/aot/targets.py).

`compile_step(config, devices, job)` lowers and compiles exactly the step a run compiles
(pretraining: encoder.objectives.pretraining.build; fine-tuning: a task head from
encoder.tasks with the same encoder.train.trainer step); `compile_report` turns it into
one JSON-able row (`python -m encoder bench --mode=compile [--topology=v5e:2x2|h100:8]`).

What the compiled program holds (Mosaic, Triton and cuDNN kernels, collectives and the
hosts their groups span, the largest buffer) is read from its optimized HLO text
(encoder/aot/hlo.py); what its attention was compiled to, from the trace
(encoder/aot/attention_trace.py).
"""
import collections
import re
import time

import jax
import jax.numpy as jnp
import numpy as np

from encoder import errors
from encoder.aot import attention_trace, chips, cudnn_target, targets
from encoder.aot.hlo import program_contents
from encoder.model import models, scan
from encoder.objectives import pretraining
from encoder.train import finetune_step, flops, optimizer, partitioning
from encoder.train import trainer as trainer_lib

JOBS = ("pretrain", "finetune")


# ------------------------------------------------------------------ devices

def topology_devices(topology: str, num_slices: int = 1) -> list:
    """The abstract devices of a TPU topology ('v5e:2x2') or a GPU node ('h100:8',
    'h100:2x8'): encoder.aot.targets."""
    return targets.devices(topology, num_slices)


# ------------------------------------------------------------------ the step

def abstract_batch(config, mesh) -> dict:
    """ShapeDtypeStructs of one global pretraining batch (what the pipeline yields), sharded."""
    b, t = config.train.batch_size, config.data.seq_len
    sharding = partitioning.batch_sharding(mesh)
    keys = ["input_ids", "segment_ids", "attention_mask", "document_ids", "positions"]
    batch = {k: jax.ShapeDtypeStruct((b, t), jnp.int32, sharding=sharding) for k in keys}
    if config.pair_task != "none":
        batch["pair_labels"] = jax.ShapeDtypeStruct((b,), jnp.int32, sharding=sharding)
    return batch


def finetune_config(config, finetune: dict | None = None):
    """A fine-tuning config over a pretraining experiment's model, batch and length, with
    fine-tuning's own fields (mode, lora_rank, layer_decay, ...) from `finetune`."""
    from encoder.finetune import config as finetune_config_lib
    ft = finetune_config_lib.finetune_config()
    ft.model = config.model.copy_and_resolve_references()
    ft.pooling = config.get("pooling", "cls")
    ft.train.update(batch_size=config.train.batch_size, learning_rate=1e-4, num_steps=1000)
    ft.data.max_seq_len = config.data.seq_len
    ft.finetune.update(dict(dropout=float(config.model.dropout), **(finetune or {})))
    return ft


def _finetune_pieces(config, task_name: str, mesh, finetune: dict | None = None):
    """(init_params, loss_fn, tx, abstract batch) of a fine-tuning step, built by the one
    builder the fine-tuning job trains with (encoder/train/finetune_step.py): the task
    type's head and loss, LoRA, frozen modes and layer decay included."""
    from encoder.tasks.table import TASKS
    built = [name for name, cls in TASKS.items() if cls.label_fields]
    if task_name not in built:
        raise ValueError(f"--task={task_name!r}: the compile report builds {sorted(built)}")
    cls = TASKS[task_name]
    ft = finetune_config(config, finetune)
    ft.task = task_name
    # three placeholder label names where the head's rows come from the training file
    # (the first is tagging's outside tag); the shapes are all the compile needs
    task = cls(ft, None, labels=["O", "B-X", "I-X"] if cls.uses_labels else None)
    step = finetune_step.build(ft, task, finetune_step.model_config(ft, config.model),
                               ft.train.num_steps)
    batch = finetune_step.abstract_batch(cls, config.train.batch_size, config.data.seq_len,
                                         partitioning.batch_sharding(mesh))
    return step.init_params, step.loss_fn, step.tx, batch


class StepCompile(collections.namedtuple("StepCompile", "compiled abstract shardings mesh "
                                         "seconds ran layers")):
    """compile_step's result: the executable, the abstract state and its shardings, the
    mesh, (lower s, compile s), the attention paths the step's trace took
    (attention_trace.describe_paths) and per layer kind ({"global": ["cudnn (packed
    segments)"], "local 128": [...]}: AttentionTrace.layer_paths). The init's forward
    pass, traced for the shapes, is not the step and is not counted."""


def compile_step(config, devices=None, job: str = "pretrain", task: str | None = None,
                 finetune: dict | None = None):
    """The train step lowered and compiled for config's shapes, from shapes alone (no
    parameter is allocated): a StepCompile. job="finetune": task's fine-tuning step, with
    `finetune` fields (mode="lora", lora_rank, layer_decay) as a fine-tuning run sets them."""
    if job not in JOBS:
        raise ValueError(f"job must be one of {JOBS}, got {job!r}")
    mesh = partitioning.make_mesh(config.mesh, devices)
    with cudnn_target.checks_for(mesh.devices.flat[0]):
        return _compile_step(config, mesh, job, task, finetune)


def _compile_step(config, mesh, job, task, finetune) -> StepCompile:
    if job == "pretrain":
        pieces = pretraining.build(config)
        init_params, loss_fn, prepare = pieces.init_params, pieces.loss_fn, pieces.prepare
        tx = optimizer.make_optimizer(config.train)
        batch = abstract_batch(config, mesh)
    else:
        from encoder.tasks.table import DEFAULT
        init_params, loss_fn, tx, batch = _finetune_pieces(config, task or DEFAULT, mesh,
                                                           finetune)
        prepare = None
    abstract, shardings = trainer_lib.state_shapes(init_params, tx, mesh, jax.random.key(0))
    step = trainer_lib.jit_step(trainer_lib.make_step(
        loss_fn, tx, prepare, config.train.grad_accum_steps), shardings, mesh)
    state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                         abstract, shardings)
    rng = jax.eval_shape(lambda: jax.random.key(0))
    t0 = time.perf_counter()
    with attention_trace.traced() as trace:
        lowered = step.lower(state, batch, rng)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    return StepCompile(compiled, abstract, shardings, mesh, (t1 - t0, time.perf_counter() - t1),
                       trace.described(), trace.layer_paths())


# ------------------------------------------------------------------ reading the program

def _bytes_per_device(tree, shardings) -> int:
    """Bytes one device holds of a sharded tree (its shard of every leaf)."""
    leaves = jax.tree.leaves(tree)
    specs = jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
    return sum(int(np.prod(s.shard_shape(x.shape))) * jnp.dtype(x.dtype).itemsize
               for x, s in zip(leaves, specs))


def _cost(compiled) -> dict:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return dict(cost or {})


def _xla_flops(compiled) -> float | None:
    cost = _cost(compiled)
    return float(cost["flops"]) if "flops" in cost else None


# ------------------------------------------------------------------ the estimate

def step_time_estimate(chip: chips.Chip, flops_per_chip: float, hbm_bytes: float | None,
                       collectives: dict, num_slices: int = 1,
                       cross_host: dict | None = None) -> dict:
    """A lower bound on one step's seconds: the largest of FLOPs / peak, HBM traffic /
    bandwidth and collective bytes / interconnect (no overlap is assumed away, none is
    modelled: real steps are slower). On TPU slices the gradient all-reduces cross DCN
    when there are several; on GPUs (cross_host given) the collectives whose groups span
    hosts cross InfiniBand (`dcn_s`), the rest NVLink (`ici_s`)."""
    compute = flops_per_chip / chip.peak_flops
    memory = (hbm_bytes or 0.0) / chip.hbm_bandwidth  # 0 where unknown (a scanned stack
    # compiled without the unrolled probes): the bound is then compute or interconnect
    total = sum(v["bytes"] for v in collectives.values())
    if cross_host is not None:
        across = sum(v["bytes"] for v in cross_host.values())
        ici = (total - across) / chip.ici_bandwidth
        dcn = across / chip.dcn_bandwidth
    else:
        ici = total / chip.ici_bandwidth
        dcn = collectives["all-reduce"]["bytes"] / chip.dcn_bandwidth if num_slices > 1 else 0.0
    bound = max(compute, memory, ici + dcn)
    return {"estimate": "lower bound, not a measurement", "step_s": bound,
            "compute_s": compute, "hbm_s": memory, "ici_s": ici, "dcn_s": dcn,
            "bound_by": max((("compute", compute), ("hbm", memory), ("interconnect", ici + dcn)),
                            key=lambda kv: kv[1])[0],
            "interconnect": chip.interconnect, "chip": chip.name, "chip_constants": chip.source}


# ------------------------------------------------------------------ the report

def unrolled_xla_flops(config, devices=None, job="pretrain", task=None) -> float | None:
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
        counts.append(_xla_flops(compile_step(probe, devices, job, task)[0]))
    if None in counts:  # a target whose compiler counts no FLOPs (GPUs, deviceless)
        return None
    return counts[0] + (config.model.num_layers - 1) * (counts[1] - counts[0])


_OOM = re.compile(r"(?:Used|used)\s+([\d.]+)([KMGT])\s+of\s+([\d.]+)([KMGT])\s+hbm", re.I)


def _oom_row(error: Exception) -> dict | None:
    """What a TPU compile that ran out of HBM says: needed and available bytes."""
    text = str(error)
    if "RESOURCE_EXHAUSTED" not in text and "Ran out of memory" not in text:
        return None
    unit = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    m = _OOM.search(text)
    row = {"fits": False, "compile_error": "out of memory: " + text.strip().splitlines()[0][:300]}
    if m:
        row["peak_bytes"] = int(float(m.group(1)) * unit[m.group(2)])
    return row


def check_seq_len(model_cfg, seq_len: int) -> None:
    """A length past the model's learned positions is refused before sizing it (the
    compile would size a model no run can build: fine-tuning and pretraining refuse it)."""
    try:
        models.validate_config(model_cfg, seq_len)
    except ValueError as e:
        if "seq_len" in str(e):
            raise errors.UsageError(f"--seq_len={seq_len}: {e}; to size a model with that "
                                    f"many positions, give --config.model.max_position="
                                    f"{seq_len}") from None


def compile_report(config, unrolled_flops: bool = True, devices=None, *, topology: str = "",
                   num_slices: int = 1, job: str = "pretrain",
                   task: str | None = None, finetune: dict | None = None) -> dict:
    """One row per compile: memory per chip, FLOPs, collectives, kernels, fit, step bound.

    XLA's FLOPs count every op of the step (norms, softmax, the optimizer, the masking);
    the analytic count (encoder.train.flops) only the matmuls. With a scanned stack the raw
    count covers one loop iteration: `xla_flops_unrolled` (unrolled_flops=True) is the whole
    step's and is what the ratio uses. A TPU compile that runs out of HBM is a row with
    fits=false (the compiler's figure as peak_bytes), not an exception.
    """
    if topology:
        devices = topology_devices(topology, num_slices)
    devices = list(devices if devices is not None else jax.devices())
    platform = devices[0].platform
    chip = chips.chip_for_topology(topology) if topology else chips.chip_for_device(devices[0])
    model_cfg = config.model if job != "finetune" else finetune_step.model_config(
        finetune_config(config, finetune), config.model)  # as the fine-tuning step runs it
    check_seq_len(model_cfg, config.data.seq_len)
    p = scan.plan(model_cfg)
    mesh_shape = partitioning.make_mesh(config.mesh, devices).shape
    split = mesh_shape.get("data", 1) * mesh_shape.get("fsdp", 1)  # the batch's axes
    if config.train.batch_size % split:
        raise errors.UsageError(
            f"--batch_size={config.train.batch_size} does not split over the {split} devices "
            f"of the batch axes ({dict(mesh_shape)}{', ' + topology if topology else ''}): "
            f"give a multiple of {split}")
    row = {"benchmark": "compile", "job": job, "task": task if job == "finetune" else None,
           "finetune": dict(finetune or {}) if job == "finetune" else None,
           "size": config.model.size, "objective": config.objective,
           "num_layers": config.model.num_layers, "scan_groups": p.groups if p else 0,
           "seq_len": config.data.seq_len, "global_batch": config.train.batch_size,
           "platform": platform, "topology": topology or None, "num_slices": num_slices,
           "chips": len(devices), "devices": len(devices), "mesh": dict(mesh_shape),
           "rows_per_chip": config.train.batch_size / len(devices),
           "dtype": config.model.dtype, "remat": config.model.remat,
           "scan_layers": str(model_cfg.get("scan_layers", "false")),
           "attention_impl": config.model.attention_impl,
           "attention_dropout": config.model.attention_dropout,
           "chip_hbm_bytes": chip.hbm_bytes if chip else None}
    with attention_trace.traced() as trace:
        try:
            compiled, abstract, shardings, mesh, (lower_s, compile_s), ran, layers = \
                compile_step(config, devices, job, task, finetune)
        except Exception as e:  # noqa: BLE001 - only an out-of-memory compile becomes a row
            oom = _oom_row(e)
            if oom is None or not topology:
                raise
            return {**row, **oom, "attention_notes": list(trace.notes)}
    n = len(devices)
    mem = compiled.memory_analysis()
    analytic = (flops.config_train_flops_per_step(config) / n) if job == "pretrain" else None
    xla = _xla_flops(compiled)
    # the 1- and 2-layer probe compiles only where the compiler counts FLOPs at all
    full = (unrolled_xla_flops(config, devices, job, task)
            if (p is not None and unrolled_flops and xla is not None)
            else (None if p is not None else xla))
    gpu = platform == "gpu"
    process_of = [d.process_index for d in mesh.devices.flat] if gpu else None
    contents = program_contents(compiled.as_text(), process_of)
    peak = int(mem.argument_size_in_bytes + mem.output_size_in_bytes
               - mem.alias_size_in_bytes + mem.temp_size_in_bytes)
    row.update({
        "parameters": sum(int(np.prod(x.shape)) for x in jax.tree.leaves(abstract.params)),
        "lower_s": round(lower_s, 2), "compile_s": round(compile_s, 2),
        # per chip:
        "param_bytes": _bytes_per_device(abstract.params, shardings.params),
        "optimizer_bytes": _bytes_per_device(abstract.opt_state, shardings.opt_state),
        "temp_bytes": int(mem.temp_size_in_bytes),
        "argument_bytes": int(mem.argument_size_in_bytes),
        "output_bytes": int(mem.output_size_in_bytes),
        "alias_bytes": int(mem.alias_size_in_bytes),
        "peak_bytes": peak,
        "fits": (peak <= chip.hbm_bytes) if chip else None,
        "analytic_flops": analytic, "xla_flops": xla, "xla_flops_unrolled": full,
        "xla_over_analytic": full / analytic if (full and analytic) else None,
        **contents,
        "attention_ran": ran,  # what the step compiled to, not only what was asked
        "attention_layers": layers,  # per layer kind (global, local W): kernel and how
        "attention_notes": list(trace.notes),
    })
    if chip is not None:
        per_chip_flops = full or analytic or xla or 0.0
        hbm = _cost(compiled).get("bytes accessed")
        if p is not None:  # XLA counts a loop body's traffic once: scale it, or leave it out
            hbm = hbm * full / xla if (hbm and xla and full) else None
        row["step_time"] = step_time_estimate(chip, per_chip_flops, hbm,
                                              contents["collectives"], num_slices,
                                              contents.get("collectives_cross_host"))
    return row
