"""Where a train step's time goes, as a table (python -m encoder bench --mode=profile):
a jax.profiler trace of this codebase's pretraining step, reduced on the machine that ran
it to one row per category, written as profile.json and profile.md under --profile_dir
($OUT on a lent GPU).

    python -m encoder bench --mode=profile --size=base --seq_len=128 --batch_size=256 \\
        --dtype=bfloat16 --profile_dir=$OUT/profile_base_128 [--steps=5]

Categories (each device op of the trace is put in the first that matches it, read from
the compiled program's own HLO, so the names in the trace and the program agree):

    attention kernels      fused attention custom calls (cuDNN, Triton) and, on the dense
                           path, attention's batched score and mix products
    matrix products        every other dot / GEMM (cuBLAS, Triton GEMM fusions, XLA's CPU
                           dots), the MLM head's vocabulary projection included
    optimizer              ops of the optimizer update (clipping, AdamW, the parameter add)
    masking and MLM head   the on-device corruption, the head's transform and norm, the
                           gathers at the masked slots and the loss
    copies and transposes  copy / transpose ops and fusions XLA names after them
    elementwise fusions    every other fusion: LayerNorm, GELU, dropout, residual adds,
                           bias gradients (reductions)
    other                  the rest (loops' bookkeeping, sorts, RNG)
    host gaps              the step's wall time (host dispatch to the result) that no
                           device op covers

The step is the one pretraining runs (encoder.objectives.pretraining.build and
encoder.train.trainer), with the optimizer update, the corruption and the loss in named
scopes (jax.named_scope: a name in the HLO metadata, the computation unchanged) so their
ops can be told apart. Time per category is the sum of its ops' device time per step (an
op nested in another on the same thread counts its own time only); where ops run at once
(the CPU runs thunks on several threads) the sum can pass the wall time, so shares are of
the sum of all categories and the host gaps.
"""
import collections
import dataclasses
import glob
import gzip
import json
import os
import re
import shutil
import statistics
import tempfile
import time

from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_string("profile_dir", "", "profile: the folder profile.json and profile.md go "
                    "to (default: $OUT/profile, else ./profile)")
flags.DEFINE_integer("keep_trace_mb", 25, "profile: keep the perfetto trace beside the table "
                     "when it is at most this many MB", lower_bound=0)

CATEGORIES = ("attention kernels", "matrix products", "optimizer", "masking and MLM head",
              "copies and transposes", "elementwise fusions", "other", "host gaps")
SCOPE_OPTIMIZER, SCOPE_MASKING, SCOPE_LOSS = "optimizer", "masking", "loss"
STEP_NAME = "train"

# thread names of the profiler's derived timelines: they repeat the ops of the real ones
_DERIVED = ("XLA Ops", "XLA Modules", "Framework", "TensorFlow", "Source", "Steps",
            "Launch Stats", "XLA TraceMe")


# ------------------------------------------------------------------ the program

@dataclasses.dataclass(frozen=True)
class Op:
    """One instruction of the compiled program that runs as a kernel or thunk."""
    name: str
    opcode: str
    line: str
    body: str      # a fusion's called computation, else ""
    scope: str     # metadata op_name: the jax name stack

    def calls_dot(self) -> bool:
        text = self.line + self.body
        return bool(re.search(r"\b(dot|convolution)\(", text)) or any(
            k in text for k in ("__cublas", "gemm", "matmul", "__triton_gemm"))

    def batched_dot(self) -> bool:
        """A product with batch dimensions (attention's scores and mix), not a projection."""
        text = self.line + self.body
        return bool(re.search(r"lhs_batch_dims=\{\d", text)
                    or re.search(r'"lhs_batch_dimensions":\["\d', text))


_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INST = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*.*?\s([\w\-]+)\(")


def program_ops(hlo: str) -> dict[str, Op]:
    """{instruction name: Op} of every computation that is not a fusion's body."""
    comps, current = {}, None
    for line in hlo.splitlines():
        if current is None:
            m = _COMP.match(line)
            if m and "=" not in line.split("{")[0].split("(")[0]:
                current = m.group(1)
                comps[current] = []
        elif line.strip() == "}":
            current = None
        else:
            comps[current].append(line)
    fused = {t for lines in comps.values() for line in lines if " fusion(" in line
             for t in re.findall(r"calls=%?([\w.\-]+)", line)}
    ops = {}
    for name, lines in comps.items():
        if name in fused:
            continue
        for line in lines:
            m = _INST.match(line)
            if not m:
                continue
            called = re.search(r"calls=%?([\w.\-]+)", line)
            body = "\n".join(comps.get(called.group(1), [])) if (
                called and m.group(2) == "fusion") else ""
            scope = re.search(r'op_name="([^"]*)"', line)
            ops[m.group(1)] = Op(m.group(1), m.group(2), line, body,
                                 scope.group(1) if scope else "")
    return ops


def category(op: Op | None, name: str = "") -> str:
    """The table row an op's time goes to (the module docstring's order)."""
    if op is None:
        return "other"
    scope = "/" + op.scope + "/"
    target = re.search(r'custom_call_target="([^"]+)"', op.line)
    target = target.group(1) if target else ""
    if "fmha" in target or "flash" in target or (
            "triton" in target and "/attention/" in scope):
        return "attention kernels"
    if op.calls_dot():
        return "attention kernels" if ("/attention/" in scope and op.batched_dot()) \
            else "matrix products"
    if in_scope(scope, SCOPE_OPTIMIZER):
        return "optimizer"
    if in_scope(scope, SCOPE_MASKING) or in_scope(scope, "mlm_head") or (
            in_scope(scope, SCOPE_LOSS) and not in_scope(scope, "encoder")):
        return "masking and MLM head"
    if op.opcode in ("copy", "transpose", "copy-start", "copy-done") or re.match(
            r"(copy|transpose)", op.name):
        return "copies and transposes"
    if op.opcode == "fusion" or op.opcode in _ELEMENTWISE:
        return "elementwise fusions"
    return "other"


def in_scope(scope: str, name: str) -> bool:
    """Whether a name-stack component is `name`, bare or inside a transformation's
    parentheses (jvp(loss), transpose(jvp(MaskedLM)))."""
    return re.search(rf"[/(]{re.escape(name)}[)/]", scope) is not None


_ELEMENTWISE = {"add", "multiply", "subtract", "divide", "select", "convert", "broadcast",
                "exponential", "log", "maximum", "minimum", "compare", "reduce", "negate",
                "rsqrt", "sqrt", "tanh", "and", "or", "xor", "concatenate", "slice",
                "dynamic-slice", "dynamic-update-slice", "pad", "reverse", "iota"}


# ------------------------------------------------------------------ the trace

def trace_events(path: str) -> list[dict]:
    """The complete ('X') events of a perfetto / trace-viewer JSON file, each with its
    process and thread names."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    procs = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    out = []
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            out.append({**e, "process": procs.get(e["pid"], ""),
                        "thread": threads.get((e["pid"], e.get("tid")), "")})
    return out


def device_op_events(events: list[dict], module: str = "") -> list[dict]:
    """Events of the program's ops (an `hlo_op` argument) on the threads that ran them: a
    GPU's streams where the trace has them, else the host's XLA threads; the profiler's
    derived timelines (XLA Ops, Steps, ...) are left out."""
    ops = [e for e in events if "hlo_op" in e.get("args", {})
           and not e["thread"].startswith(_DERIVED)
           and (not module or e["args"].get("hlo_module", module) == module)]
    streams = [e for e in ops if "/device:" in e["process"]]
    return streams or ops


def exclusive_times(events: list[dict]) -> list[tuple[dict, float]]:
    """(event, its own microseconds): an event nested inside another on the same thread
    (a loop thunk around its body's ops) gives its children's time to them."""
    out = []
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[(e["pid"], e.get("tid"))].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[list] = []  # [event, end, child time]
        for e in evs:
            end = e["ts"] + e["dur"]
            while stack and e["ts"] >= stack[-1][1]:
                done = stack.pop()
                out.append((done[0], done[0]["dur"] - done[2]))
            if stack:
                stack[-1][2] += e["dur"]
            stack.append([e, end, 0.0])
        out.extend((d[0], d[0]["dur"] - d[2]) for d in stack)
    return out


def busy_time(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of [start, end) intervals."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def reduce_trace(events: list[dict], ops: dict[str, Op], module: str = "") -> dict:
    """The per-category table of the traced steps (the StepTraceAnnotation named STEP_NAME
    around each): ms per step, share, and the ops that took the most time."""
    steps = sorted((e for e in events if e["name"] == STEP_NAME
                    and "step_num" in e.get("args", {})), key=lambda e: e["ts"])
    if not steps:
        raise ValueError(f"the trace has no '{STEP_NAME}' step annotations")
    device = device_op_events(events, module)
    if not device:
        raise ValueError("the trace has no device op events (hlo_op): was the step traced?")
    t0, t1 = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
    device = [e for e in device if t0 <= e["ts"] < t1]
    n = len(steps)
    per_cat = collections.Counter()
    per_op = collections.Counter()
    calls = collections.Counter()
    for e, own in exclusive_times(device):
        name = e["args"]["hlo_op"]
        per_cat[category(ops.get(name), name)] += own
        per_op[name] += own
        calls[name] += 1
    wall = [s["dur"] for s in steps]
    busy = [busy_time([(e["ts"], e["ts"] + e["dur"]) for e in device
                       if s["ts"] <= e["ts"] < s["ts"] + s["dur"]]) for s in steps]
    per_cat["host gaps"] = max(0.0, sum(w - b for w, b in zip(wall, busy)))
    total = sum(per_cat.values())
    rows = [{"category": c, "ms_per_step": per_cat[c] / n / 1e3,
             "share": per_cat[c] / total if total else 0.0} for c in CATEGORIES]
    top = [{"op": name, "category": category(ops.get(name), name),
            "ms_per_step": us / n / 1e3, "launches_per_step": calls[name] / n}
           for name, us in per_op.most_common(15)]
    return {"steps": n, "step_ms_median": statistics.median(wall) / 1e3,
            "device_busy_ms_median": statistics.median(busy) / 1e3,
            "device_ops_per_step": len(device) / n,
            "distinct_ops": len(per_op), "unmatched_ops": sum(
                1 for name in per_op if name not in ops),
            "categories": rows, "top_ops": top}


def markdown(table: dict, title: str) -> str:
    lines = [f"## {title}", "",
             f"{table['steps']} traced steps; step {table['step_ms_median']:.2f} ms (median), "
             f"device busy {table['device_busy_ms_median']:.2f} ms, "
             f"{table['device_ops_per_step']:.0f} device ops a step.", "",
             "| category | ms / step | share |", "|---|---|---|"]
    lines += [f"| {r['category']} | {r['ms_per_step']:.3f} | {100 * r['share']:.1f}% |"
              for r in table["categories"]]
    lines += ["", "| op | category | ms / step | launches / step |", "|---|---|---|---|"]
    lines += [f"| `{r['op']}` | {r['category']} | {r['ms_per_step']:.3f} | "
              f"{r['launches_per_step']:g} |" for r in table["top_ops"]]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the run

def scoped(tx, prepare, loss_fn):
    """The optimizer, the corruption and the loss under named scopes (the HLO's op names
    say which ops are theirs; the model's own ops keep their module names inside the
    loss's); what they compute is unchanged."""
    import jax
    import optax

    def scoped_loss(params, batch, rng):
        with jax.named_scope(SCOPE_LOSS):
            return loss_fn(params, batch, rng)

    def update(updates, state, params=None):
        with jax.named_scope(SCOPE_OPTIMIZER):
            return tx.update(updates, state, params)

    def scoped_prepare(batch, rng):
        with jax.named_scope(SCOPE_MASKING):
            return prepare(batch, rng)
    return optax.GradientTransformation(tx.init, update), scoped_prepare, scoped_loss


def profile(config, out_dir: str, steps: int, warmup: int, keep_trace_mb: int = 25) -> dict:
    """Compiles config's pretraining step, traces `steps` steps after `warmup`, writes
    profile.json and profile.md under out_dir; returns the table."""
    import jax
    import numpy as np
    from encoder.aot import chips
    from encoder.data import synthetic
    from encoder.objectives import pretraining
    from encoder.train import flops, optimizer, partitioning, trainer as trainer_lib

    pieces = pretraining.build(config)
    tx, prepare, loss_fn = scoped(optimizer.make_optimizer(config.train), pieces.prepare,
                                  pieces.loss_fn)
    trainer = trainer_lib.Trainer(partitioning.make_mesh(config.mesh), tx, pieces.init_params,
                                  seed=config.seed)
    state = trainer.fresh_state()
    batch = trainer.shard(synthetic.random_batch(config))
    t0 = time.perf_counter()
    compiled = trainer.step(loss_fn, prepare).lower(
        state, batch, jax.random.key(0)).compile()
    compile_s = time.perf_counter() - t0
    hlo = compiled.as_text()
    ops = program_ops(hlo)
    for i in range(warmup):
        state, metrics = compiled(state, batch, jax.random.key(i))
    jax.block_until_ready(metrics)
    os.makedirs(out_dir, exist_ok=True)
    log_dir = tempfile.mkdtemp(prefix="trace_", dir=out_dir)
    with jax.profiler.trace(log_dir, create_perfetto_trace=True):
        for i in range(steps):
            with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i):
                state, metrics = compiled(state, batch, jax.random.key(warmup + i))
                jax.block_until_ready(metrics)
    found = glob.glob(os.path.join(log_dir, "**", "perfetto_trace.json.gz"), recursive=True)
    if not found:
        raise RuntimeError(f"jax.profiler wrote no perfetto_trace.json.gz under {log_dir}")
    table = reduce_trace(trace_events(found[0]), ops)
    tokens = config.train.batch_size * config.data.seq_len
    step_s = table["step_ms_median"] / 1e3
    fps = flops.config_train_flops_per_step(config)
    table.update({
        "size": config.model.size, "seq_len": config.data.seq_len,
        "batch_size": config.train.batch_size, "dtype": config.model.dtype,
        "attention_impl": config.model.attention_impl, "device": jax.devices()[0].device_kind,
        "compile_s": round(compile_s, 2), "tokens_per_s_traced": tokens / step_s,
        "mfu_traced": fps / step_s / chips.peak_flops_per_device(),
        "program_ops": len(ops), "loss": float(np.asarray(metrics["loss"]))})
    with open(os.path.join(out_dir, "profile.json"), "w") as f:
        json.dump(table, f, indent=1)
    title = (f"{config.model.size}, {config.train.batch_size} x {config.data.seq_len}, "
             f"{config.model.dtype}, {table['device']}")
    with open(os.path.join(out_dir, "profile.md"), "w") as f:
        f.write(markdown(table, title))
    with gzip.open(os.path.join(out_dir, "program.hlo.txt.gz"), "wt") as f:
        f.write(hlo)  # the names the table's ops have, for reading it further
    if os.path.getsize(found[0]) <= keep_trace_mb * 2**20:
        shutil.copy(found[0], os.path.join(out_dir, "perfetto_trace.json.gz"))
    shutil.rmtree(log_dir, ignore_errors=True)
    return table


def run():
    from benchmarks.common import bench_config, experiment_config
    config = experiment_config() if FLAGS.config is not None else bench_config()
    out = FLAGS.profile_dir or os.path.join(os.environ.get("OUT", "."), "profile")
    table = profile(config, out, FLAGS.steps, FLAGS.warmup, FLAGS.keep_trace_mb)
    print(json.dumps({"benchmark": "profile", "profile_dir": os.path.abspath(out),
                      **{k: v for k, v in table.items() if k != "top_ops"}}), flush=True)
