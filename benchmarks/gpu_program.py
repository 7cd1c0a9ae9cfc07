"""What the compiled train step asks of a GPU, counted from its program without one
(python -m encoder bench --mode=program --topology=h200:1 --size=base --seq_len=128
--batch_size=256 --dtype=bfloat16): XLA's CUDA compiler on this machine
(requirements-gpu-compile.txt) compiles the step pretraining runs, and its optimized HLO is
read for

    kernels                 launches a step (fusions, custom calls, copies; a scanned
                            stack's loop body counted once per layer group), by the
                            categories of benchmarks/profile_step.py
    non_matrix_bytes        bytes the non-matrix kernels read and write (operands + results:
                            HBM traffic where nothing stays in cache), by category
    attention_transposes    copies / transposes feeding or reading the cuDNN attention calls
    optimizer_kernels       kernels of the optimizer update (per-leaf: one or more for each
                            of the parameter tensors, unless XLA fuses them)

The optimizer, the corruption and the loss are compiled in named scopes (profile_step.
scoped: names only) so their kernels can be counted apart. Figures, not timings: they say
what a change removes before a GPU measures what it buys.
"""
import json
import re

from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_float("dropout", -1.0, "program: model.dropout for the compile (default: the "
                   "benchmark's 0; BERT-base trains with 0.1)")

# instructions that launch nothing: bookkeeping, or a region whose body is counted itself
_NO_KERNEL = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while",
              "conditional", "call", "after-all", "partition-id", "replica-id", "opt-barrier",
              "add-dependency", "copy-done", "all-reduce-done", "all-gather-done",
              "async-done", "domain"}
_ARGS = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([\w\-]+)\(([^)]*)\)")


def program_figures(hlo_text: str) -> dict:
    """Kernels, bytes by category, attention transposes and optimizer kernels of an
    optimized HLO module (see the module docstring)."""
    from benchmarks import profile_step
    from encoder.aot import hlo
    comps, entry = hlo._computations(hlo_text)  # noqa: SLF001 - the module's own reader
    runs = hlo._multiplicities(comps, entry)    # noqa: SLF001
    ops = profile_step.program_ops(hlo_text)
    shapes, parsed = {}, {}
    for name, lines in comps.items():
        for line in lines:
            m = _ARGS.match(line)
            if m:
                shapes[m.group(1)] = m.group(2)
                parsed[m.group(1)] = (name, m.group(3), re.findall(r"%([\w.\-]+)", m.group(4)))
    kernels = {c: 0 for c in profile_step.CATEGORIES[:-1]}
    nbytes = {c: 0 for c in profile_step.CATEGORIES[:-1]}
    for inst, op in ops.items():
        comp, opcode, operands = parsed.get(inst, (None, op.opcode, []))
        n = runs.get(comp, 0)
        if not n or opcode in _NO_KERNEL:
            continue
        cat = profile_step.category(op)
        kernels[cat] += n
        nbytes[cat] += n * moved_bytes(op, opcode, operands, shapes, shapes.get(inst, ""))
    matrix = ("attention kernels", "matrix products")
    return {"kernels": sum(kernels.values()), "kernels_by_category": kernels,
            "non_matrix_bytes": sum(v for k, v in nbytes.items() if k not in matrix),
            "bytes_by_category": nbytes,
            "attention_transposes": attention_transposes(parsed, shapes, ops, runs),
            "optimizer_kernels": kernels["optimizer"]}


def _body(text: str) -> tuple[dict, str]:
    """{name: (shape, opcode, operands)} of a fused computation's lines, and its root."""
    insts, root = {}, ""
    for line in text.splitlines():
        m = _ARGS.match(line)
        if m:
            insts[m.group(1)] = (m.group(2), m.group(3), re.findall(r"%([\w.\-]+)", m.group(4)),
                                 line)
            if line.lstrip().startswith("ROOT"):
                root = m.group(1)
    return insts, root


def moved_bytes(op, opcode: str, operands: list[str], shapes: dict, result: str) -> int:
    """Bytes a kernel reads and writes: its operands and result, except that an operand
    only dynamic-sliced reads its slice, and a dynamic-update-slice writes its update in
    place (a scanned stack's per-layer reads and writes of stacked buffers)."""
    from encoder.aot import hlo
    full = [hlo.shape_bytes(shapes.get(a, "")) for a in operands]
    if opcode == "dynamic-update-slice":
        return 2 * (full[1] if len(full) > 1 else 0)
    if opcode != "fusion" or not op.body:
        return hlo.shape_bytes(result) + sum(full)
    insts, root = _body(op.body)
    params = {}
    for name, (_, code, _, line) in insts.items():
        k = re.search(r"parameter\((\d+)\)", line)
        if code == "parameter" and k:
            params[name] = int(k.group(1))
    reads = list(full)
    for name, k in params.items():
        uses = [(code, args.index(name), shape) for shape, code, args, _ in insts.values()
                if name in args]
        if uses and all(c == "dynamic-slice" and i == 0 for c, i, _ in uses) and k < len(reads):
            reads[k] = sum(hlo.shape_bytes(sh) for _, _, sh in uses)
        elif uses and all(c == "dynamic-update-slice" and i == 0 for c, i, _ in uses) \
                and k < len(reads):
            reads[k] = 0  # the buffer updated in place: its write is counted below
    outs = insts[root][2] if root and insts[root][1] == "tuple" else [root]
    written = 0
    for out in outs:
        shape, code, args, _ = insts.get(out, ("", "", [], ""))
        if code == "dynamic-update-slice" and len(args) > 1:
            written += hlo.shape_bytes(insts.get(args[1], ("",))[0])
        else:
            written += hlo.shape_bytes(shape)
    return written + sum(reads)


def attention_transposes(parsed: dict, shapes: dict, ops: dict, runs: dict) -> dict:
    """Copies and transposes that feed a cuDNN attention call or read its outputs
    (through the call's tuple elements): count and bytes a step."""
    from benchmarks import profile_step
    from encoder.aot import hlo
    calls = {i for i, op in ops.items() if op.opcode == "custom-call" and "__cudnn$fmha"
             in op.line}
    outputs = {i for i, (_, opcode, args) in parsed.items()
               if opcode == "get-tuple-element" and set(args) & calls}
    count = size = 0
    for inst, (comp, opcode, args) in parsed.items():
        op = ops.get(inst)
        if op is None or profile_step.category(op) != "copies and transposes":
            continue
        feeds = any(inst in parsed[c][2] for c in calls if c in parsed)
        reads = bool(set(args) & (outputs | calls))
        if feeds or reads:
            n = runs.get(comp, 0)
            count += n
            size += n * hlo.shape_bytes(shapes.get(inst, ""))
    return {"count": count, "bytes": size, "attention_calls": sum(
        runs.get(parsed[c][0], 0) for c in calls if c in parsed)}


def compile_text(config, topology: str) -> tuple[str, dict]:
    """(optimized HLO text, the compile's facts) of config's pretraining step for the
    chips of `topology`, with profile_step's named scopes."""
    import time

    import jax
    from benchmarks import profile_step
    from encoder.aot import attention_trace, cudnn_target, targets
    from encoder.aot.compile_report import abstract_batch
    from encoder.objectives import pretraining
    from encoder.train import optimizer, partitioning, trainer as trainer_lib
    devices = targets.devices(topology)
    mesh = partitioning.make_mesh(config.mesh, devices)
    pieces = pretraining.build(config)
    tx, prepare, loss_fn = profile_step.scoped(optimizer.make_optimizer(config.train),
                                               pieces.prepare, pieces.loss_fn)
    with cudnn_target.checks_for(mesh.devices.flat[0]):
        abstract, shardings = trainer_lib.state_shapes(pieces.init_params, tx, mesh,
                                                       jax.random.key(0))
        step = trainer_lib.jit_step(trainer_lib.make_step(loss_fn, tx, prepare),
                                    shardings, mesh)
        state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                             abstract, shardings)
        t0 = time.perf_counter()
        with attention_trace.traced() as trace:
            lowered = step.lower(state, abstract_batch(config, mesh),
                                 jax.eval_shape(lambda: jax.random.key(0)))
        compiled = lowered.compile()
    return compiled.as_text(), {"compile_s": round(time.perf_counter() - t0, 1),
                                "attention_layers": trace.layer_paths(),
                                "parameter_tensors": len(jax.tree.leaves(abstract.params))}


def run():
    from benchmarks.common import bench_config, experiment_config
    from encoder import errors
    if not FLAGS.topology:
        raise errors.UsageError("--mode=program needs --topology (a GPU node: h200:1, "
                                "h100:8; or a TPU topology)")
    config = experiment_config() if FLAGS.config is not None else bench_config()
    if FLAGS.dropout >= 0:
        config.model.dropout = FLAGS.dropout
    text, facts = compile_text(config, FLAGS.topology)
    row = {"benchmark": "program", "topology": FLAGS.topology, "size": config.model.size,
           "seq_len": config.data.seq_len, "batch_size": config.train.batch_size,
           "dtype": config.model.dtype, "dropout": config.model.dropout,
           "attention_impl": config.model.attention_impl, **facts, **program_figures(text)}
    print(json.dumps(row), flush=True)
