"""Ahead-of-time compilation of the train step from shapes alone: per-chip memory, FLOPs,
collectives, attention kernels and a step-time bound, for any mesh of devices (simulated
CPU devices, or the abstract chips of a TPU topology or a GPU node, compiled by libtpu or
XLA's CUDA compiler on a CPU machine: encoder/train/targets.py).

`compile_step(config, devices, job)` lowers and compiles exactly the step a run compiles
(pretraining: encoder.objectives.pretraining.build; fine-tuning: a task head from
encoder.tasks with the same encoder.train.trainer step); `compile_report` turns it into
one JSON-able row (`python -m encoder bench --mode=compile [--topology=v5e:2x2|h100:8]`).

What the compiled program holds (Mosaic, Triton and cuDNN kernels, collectives and the
hosts their groups span, the largest buffer) is read from its optimized HLO text, each
instruction weighted by how many times its computation runs (a scanned stack's
while-loop body runs G times).
"""
import collections
import re
import time

import jax
import jax.numpy as jnp
import numpy as np

from encoder import errors
from encoder.model import attention, scan
from encoder.objectives import pretraining
from encoder.train import chips, finetune_step, flops, optimizer, partitioning, targets
from encoder.train import trainer as trainer_lib

JOBS = ("pretrain", "finetune")
COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
# custom-call targets of the attention kernels, by kernel family
KERNEL_TARGETS = {"mosaic": "tpu_custom_call", "triton": "__gpu$xla.gpu.triton",
                  "cudnn": "__cudnn$fmha"}


# ------------------------------------------------------------------ devices

def topology_devices(topology: str, num_slices: int = 1) -> list:
    """The abstract devices of a TPU topology ('v5e:2x2') or a GPU node ('h100:8',
    'h100:2x8'): encoder.train.targets."""
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
    (attention.describe_paths) and per layer kind ({"global": ["cudnn (packed segments)"],
    "local 128": [...]}: attention.layer_paths). The init's forward pass, traced for
    the shapes, is not the step and is not counted."""


def compile_step(config, devices=None, job: str = "pretrain", task: str | None = None,
                 finetune: dict | None = None):
    """The train step lowered and compiled for config's shapes, from shapes alone (no
    parameter is allocated): a StepCompile. job="finetune": task's fine-tuning step, with
    `finetune` fields (mode="lora", lora_rank, layer_decay) as a fine-tuning run sets them."""
    if job not in JOBS:
        raise ValueError(f"job must be one of {JOBS}, got {job!r}")
    mesh = partitioning.make_mesh(config.mesh, devices)
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
    with attention.paths_taken() as paths, attention.layer_paths() as layers:
        lowered = step.lower(state, batch, rng)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    return StepCompile(compiled, abstract, shardings, mesh, (t1 - t0, time.perf_counter() - t1),
                       attention.describe_paths(paths),
                       {kind: sorted(paths) for kind, paths in sorted(layers.items())})


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


_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "s16": 2, "u16": 2,
                "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8,
                "f64": 8, "c64": 8, "c128": 16}
_SHAPE = re.compile(r"\b(" + "|".join(_DTYPE_BYTES) + r")\[([\d,]*)\]")
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s([\w\-]+)\(")
_CALLS = re.compile(r"\b(body|condition|calls|to_apply|branch_computations|true_computation|"
                    r"false_computation)=\{?([^}\s,]+(?:,\s*%[\w.\-]+)*)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')


def shape_bytes(shape_text: str) -> int:
    """Bytes of an HLO result shape ('bf16[4,128]{1,0}', or a tuple of them)."""
    return sum(_DTYPE_BYTES[d] * int(np.prod([int(x) for x in dims.split(",") if x] or [1]))
               for d, dims in _SHAPE.findall(shape_text))


def _computations(hlo: str) -> tuple[dict, str]:
    """{name: [instruction lines]} of an HLO module's text, and the entry's name."""
    comps, entry, current = {}, None, None
    for line in hlo.splitlines():
        if current is None:
            m = _COMPUTATION.match(line)
            if m and "=" not in line.split("{")[0].split("(")[0]:
                current = m.group(1)
                comps[current] = []
                if line.startswith("ENTRY"):
                    entry = current
        elif line.strip() == "}":
            current = None
        else:
            comps[current].append(line)
    return comps, entry


_CONSTANT = re.compile(r"\bs32\[\]\S*\s+constant\((\d+)\)")


def _trip_count(line: str, comps: dict) -> int:
    """A while loop's trip count: XLA's known_trip_count, else the bound its condition
    compares the counter with (`counter < N`, what a scan over N groups lowers to; the TPU
    compiler's loops carry no known_trip_count)."""
    known = _TRIP.search(line)
    if known:
        return int(known.group(1))
    cond = re.search(r"condition=%?([\w.\-]+)", line)
    lines = comps.get(cond.group(1), []) if cond else []
    bounds = [int(m.group(1)) for text in lines for m in [_CONSTANT.search(text)] if m]
    if len(bounds) == 1 and any("direction=LT" in text for text in lines):
        return bounds[0]
    return 1  # unknown: counted once (the report then undercounts, never invents)


def _multiplicities(comps: dict, entry: str) -> dict:
    """How many times each computation runs per step: while bodies (and conditions) times
    their trip count, every other call once per caller's run."""
    edges = collections.defaultdict(list)  # caller -> [(callee, factor)]
    for name, lines in comps.items():
        for line in lines:
            op = _INSTRUCTION.match(line)
            if op and op.group(2).endswith("-done"):
                continue  # async-done repeats its start's callee
            trip = _trip_count(line, comps) if " while(" in line else 1
            for kind, targets in _CALLS.findall(line):
                factor = trip if kind in ("body", "condition") else 1
                for target in re.findall(r"%?([\w.\-]+)", targets):
                    if target in comps:
                        edges[name].append((target, factor))
    mult = collections.Counter()

    def visit(name, factor, depth=0):
        mult[name] += factor
        if depth < 64:
            for callee, f in edges[name]:
                visit(callee, factor * f, depth + 1)
    if entry is not None:
        visit(entry, 1)
    return mult


_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]"
                          r"(?:,\s*device_ids=\(\[([\d,]+)\](?:T\(([\d,]+)\))?\))?"
                          r"\s*\{([^}]*)\}")
_LIST_GROUPS = re.compile(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}")
_IOTA_GROUPS = re.compile(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")


def _iota(dims, perm, n):
    ids = np.arange(n).reshape(dims) if dims else np.arange(n)
    return ids.transpose(perm) if perm else ids


def replica_groups(line: str, num_devices: int) -> list[list[int]] | None:
    """The device groups of a collective's HLO line (logical ids: positions in the program's
    device assignment), from any of the three forms XLA prints: explicit lists
    `{{0,1},{2,3}}`, iota `[2,4]<=[8]` (optionally transposed), and the mesh form
    `mesh['axis_0'=8,'axis_1'=2], device_ids=([2,8]T(1,0)) {'axis_0'}` (a group: the devices
    that differ only along the named axes). None where the line names none."""
    m = _MESH_GROUPS.search(line)
    if m:
        axes = re.findall(r"'([^']+)'=(\d+)", m.group(1))
        sizes = [int(v) for _, v in axes]
        n = int(np.prod(sizes))
        ids = (_iota([int(d) for d in m.group(2).split(",")],
                     [int(d) for d in m.group(3).split(",")] if m.group(3) else None, n)
               if m.group(2) else np.arange(n)).reshape(-1).reshape(sizes)
        over = [i for i, (name, _) in enumerate(axes) if f"'{name}'" in m.group(4)]
        rest = [i for i in range(len(axes)) if i not in over]
        grouped = ids.transpose(rest + over).reshape(-1, int(np.prod([sizes[i] for i in over]
                                                                      or [1])))
        return grouped.tolist()
    m = _IOTA_GROUPS.search(line)
    if m:
        groups, size = int(m.group(1)), int(m.group(2))
        dims = [int(d) for d in m.group(3).split(",")]
        perm = [int(d) for d in m.group(4).split(",")] if m.group(4) else None
        return _iota(dims, perm, groups * size).reshape(groups, size).tolist()
    m = _LIST_GROUPS.search(line)
    if m:
        groups = [[int(x) for x in g.split(",") if x] for g in re.findall(r"\{([\d,]*)\}",
                                                                          m.group(1))]
        return [g for g in groups if g] or [list(range(num_devices))]
    return None


def program_contents(hlo: str, process_of: list[int] | None = None) -> dict:
    """Collectives (count and bytes per kind) and attention kernel custom calls in an
    optimized HLO module, each weighted by its computation's runs per step.

    One collective is one channel_id: the TPU compiler copies a collective into several
    fusions (its async and collective-matmul pieces) under the same channel, so those count
    once. An async pair counts once (a -start's tuple is skipped). The TPU compiler writes
    a reduce-scatter as an all-reduce inside an `all-reduce-scatter` fusion: it is counted
    as a reduce-scatter. Bytes are the full (unsharded) operand's: an all-gather's result,
    a reduce-scatter's input (the GPU compiler's reduce-scatter gives its output shard:
    times the group's size).

    process_of (logical device id -> host) splits out, as `collectives_cross_host`, the
    collectives whose groups span hosts (InfiniBand on a GPU cluster, not NVLink).
    """
    comps, entry = _computations(hlo)
    mult = _multiplicities(comps, entry)
    seen = {}  # (kind, channel or instruction) -> (runs, bytes, crosses hosts)
    kernels = {k: 0 for k in KERNEL_TARGETS}
    # an async pair's groups are on its -start; its -done (which is counted) names the start
    start_groups = {m.group(1): line for lines in comps.values() for line in lines
                    for m in [re.match(r"^\s*%?([\w.\-]+)\s*=.*?-start\(", line)] if m}
    for name, lines in comps.items():
        runs = mult.get(name, 0)
        if not runs:
            continue
        for line in lines:
            op = _INSTRUCTION.match(line)
            if not op:
                continue
            shape, opcode = op.groups()
            base = opcode[:-5] if opcode.endswith("-done") else opcode
            if base in COLLECTIVES and not opcode.endswith("-start"):
                kind = ("reduce-scatter" if base == "all-reduce"
                        and name.startswith("all-reduce-scatter") else base)
                channel = re.search(r"channel_id=(\d+)", line)
                key = (kind, channel.group(1) if channel else f"{name}/{line.split('=')[0]}")
                started = re.search(r"-done\(%?([\w.\-]+)", line)
                groups = replica_groups(start_groups.get(started.group(1), "") if started
                                        else line, len(process_of or ()))
                nbytes = shape_bytes(shape)
                if base == "reduce-scatter" and groups:
                    nbytes *= len(groups[0])
                crosses = bool(process_of and groups and any(
                    len({process_of[i] for i in g if i < len(process_of)}) > 1 for g in groups))
                old_runs, nbytes, crosses = seen.get(key, (0, nbytes, crosses))
                seen[key] = (max(old_runs, runs), nbytes, crosses)
            if opcode == "custom-call":
                for family, target in KERNEL_TARGETS.items():
                    if f'custom_call_target="{target}' in line:
                        kernels[family] += runs
    coll = {k: {"count": 0, "bytes": 0} for k in COLLECTIVES}
    cross = {k: {"count": 0, "bytes": 0} for k in COLLECTIVES}
    for (kind, _), (runs, nbytes, crosses) in seen.items():
        for table in (coll, cross) if crosses else (coll,):
            table[kind]["count"] += runs
            table[kind]["bytes"] += runs * nbytes
    out = {"collectives": coll, "attention_kernels": kernels, **largest_buffer(comps)}
    if process_of is not None:
        out["collectives_cross_host"] = cross
    return out


_NOT_A_BUFFER = {"parameter", "tuple", "get-tuple-element", "bitcast", "constant",
                 "after-all", "partition-id", "replica-id", "while", "conditional", "call"}
# ^ a loop's, a branch's or a call's result is its body's buffers, counted there


def largest_buffer(comps: dict) -> dict:
    """The largest buffer the program materialises (an instruction's result, or one buffer
    of a tuple result, outside fusion bodies, whose intermediates live in registers): its
    bytes, shape and op. A packed batch whose attention builds a T x T mask or score (or
    a kernel's T x T statistics) shows it here, whatever the total."""
    fused = {t for lines in comps.values() for line in lines if " fusion(" in line
             for t in re.findall(r"calls=%?([\w.\-]+)", line)}
    best = (0, "", "")
    for name, lines in comps.items():
        if name in fused:
            continue
        for line in lines:
            op = _INSTRUCTION.match(line)
            if not op or op.group(2) in _NOT_A_BUFFER or op.group(2).endswith("-done"):
                continue
            for dtype, dims in _SHAPE.findall(op.group(1)):  # each of a tuple's buffers
                nbytes = shape_bytes(f"{dtype}[{dims}]")
                if nbytes > best[0]:
                    best = (nbytes, f"{dtype}[{dims}]", op.group(2))
    return {"largest_buffer_bytes": best[0], "largest_buffer": f"{best[2]} {best[1]}".strip()}


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
    with attention.recording() as notes:
        try:
            compiled, abstract, shardings, mesh, (lower_s, compile_s), ran, layers = \
                compile_step(config, devices, job, task, finetune)
        except Exception as e:  # noqa: BLE001 - only an out-of-memory compile becomes a row
            oom = _oom_row(e)
            if oom is None or not topology:
                raise
            return {**row, **oom, "attention_notes": list(notes)}
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
        "attention_notes": list(notes),
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
