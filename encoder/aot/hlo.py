"""Reading a compiled step's optimized HLO text: what the program holds and how often it runs.

Collectives (count and bytes per kind, and the hosts their groups span), the attention
kernels' custom calls (Mosaic, Triton, cuDNN) and the largest buffer, each instruction
weighted by how many times its computation runs per step (a scanned stack's while-loop
body runs G times). Plain text parsing: no jax.
"""
import collections
import re

import numpy as np

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
# custom-call targets of the attention kernels, by kernel family
KERNEL_TARGETS = {"mosaic": "tpu_custom_call", "triton": "__gpu$xla.gpu.triton",
                  "cudnn": "__cudnn$fmha"}

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
