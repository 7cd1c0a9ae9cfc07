"""The train step: this codebase's jit-compiled pretraining step against the stacks a
researcher would otherwise use, at the identical configuration (python -m encoder bench
--mode=step [--against=...]):

    --against=hf               HuggingFace's FlaxBertForMaskedLM (transformers 4.x only)
    --against=torch            HF's PyTorch BertForMaskedLM / ModernBertForMaskedLM, eager
                               and torch.compile: two rows (benchmarks/torch_reference.py)
    --against=torch_eager      the eager row only
    --against=torch_compiled   the compiled row only

Every side is built first, then stepped in turns of --interleave steps each until each has
--steps timed steps (after --warmup), so a shared machine's load falls on all of them
alike; each row is the median. One JSON line per side, this codebase's first; every row
has tokens_per_s, mfu (the same analytic FLOP count for every side: encoder.train.flops,
the encoder on every token and the vocabulary projection at the masked slots),
parameters, loss (after the timed steps), peak_bytes (the device's high-water mark where
it keeps one) and threads."""
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from benchmarks import hf_reference
from benchmarks.common import (attention_ran, bench_config, experiment_config, memory_bytes,
                               report)
from encoder import errors
from encoder.aot import attention_trace, chips
from encoder.data import synthetic

flags.DEFINE_integer("interleave", 5, "step: timed steps a side takes in each turn",
                     lower_bound=1)
FLAGS = flags.FLAGS

# --against -> the reference sides it adds, in row order
AGAINST = {"": (), "hf": ("hf",), "torch": ("torch", "torch_compiled"),
           "torch_eager": ("torch",), "torch_compiled": ("torch_compiled",)}


class JaxSide:
    """A compiled, donated jax step and its state; step() blocks until the step is done."""

    def __init__(self, name, jitted, state, batch):
        self.name, self.state, self.batch = name, state, batch
        self.index, self.metrics = 0, None
        t0 = time.perf_counter()
        self.compiled = jitted.lower(state, batch, jax.random.key(0)).compile()
        self.compile_s = time.perf_counter() - t0

    def step(self):
        self.state, self.metrics = self.compiled(self.state, self.batch,
                                                 jax.random.key(self.index))
        jax.block_until_ready(self.metrics)
        self.index += 1

    def final_loss(self) -> float:
        return float(self.metrics["loss"])


def ours(config):
    """(side, row maker): the very step pretraining compiles (encoder/train/trainer.py)."""
    from encoder.objectives import pretraining
    from encoder.train import optimizer, partitioning, trainer as trainer_lib

    step = pretraining.build(config)
    trainer = trainer_lib.Trainer(
        partitioning.make_mesh(config.mesh), optimizer.make_optimizer(config.train),
        step.init_params, seed=config.seed)
    state = trainer.fresh_state()
    batch = trainer.shard(synthetic.random_batch(config))
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params))
    with attention_trace.traced() as trace:  # at trace time
        side = JaxSide("this codebase", trainer.step(step.loss_fn, step.prepare), state, batch)
    # first, once compiled and before it runs: which kernels each layer kind took
    print(json.dumps({"attention_layers": trace.layer_paths(),
                      "attention_notes": list(trace.notes)}), flush=True)

    def row(step_s, peak):
        from encoder.train import flops
        return report("this codebase", config, n_params, side.compile_s, step_s,
                      flops.config_train_flops_per_step(config), peak,
                      memory_bytes(side.compiled), loss=side.final_loss(),
                      attention_layers=trace.layer_paths(), optimizer=config.train.get(
                          "optimizer", "adamw"), **attention_ran(trace))
    return side, row


def hf_flax(config):
    """FlaxBertForMaskedLM with the same config, loss (masked slots) and AdamW."""
    model = hf_reference.hf_model(config)
    params = model.params
    step, tx = hf_reference.hf_train_step(config, model)
    opt_state = tx.init(params)
    batch = {k: jnp.asarray(v) for k, v in synthetic.random_batch(config).items()}
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    side = JaxSide("huggingface FlaxBertForMaskedLM", jax.jit(step, donate_argnums=(0,)),
                   (params, opt_state), batch)

    def row(step_s, peak):
        return report(side.name, config, n_params, side.compile_s, step_s,
                      hf_reference.hf_train_flops(config), peak, memory_bytes(side.compiled),
                      loss=side.final_loss(), attention_impl="its own",
                      attention_ran=hf_reference.HF_ATTENTION)
    return side, row


def torch_side(config, compiled: bool):
    """HF's PyTorch model (benchmarks/torch_reference.py); compile_s is its first step
    (torch.compile compiles there)."""
    from benchmarks import torch_reference as tr
    total = FLAGS.warmup + FLAGS.steps + 1
    side = tr.build_side(config, synthetic.random_batch(config), compiled, total)
    side.compile_s = tr.time_once(side.step)
    tr.settle_memory(side)
    label = "torch.compile" if compiled else "eager"

    def row(step_s, peak):
        from encoder.train import flops
        name = f"huggingface {type(side.model).__name__} (PyTorch {label})"
        return report(name, config, side.parameters, side.compile_s, step_s,
                      flops.config_train_flops_per_step(config), peak, None,
                      loss=side.final_loss(), attention_impl=side.attention,
                      attention_ran=f"torch {side.attention}", side=side.name,
                      optimizer=f"torch.optim.AdamW ({side.optimizer})",
                      flops_as_computed=tr.own_flops(config),
                      torch_dtype="bfloat16 autocast" if side.device == "cuda" else "float32",
                      **tr.versions(), **({"device_peak_bytes": side.peak_bytes()}
                                          if side.device == "cuda" else {}))
    return side, row


def build_sides(config, against: str) -> list:
    """[(side, row maker)]: this codebase's first, then each reference --against names."""
    sides = [ours(config)]
    for name in AGAINST[against]:
        if name == "hf":
            sides.append(hf_flax(config))
        else:
            sides.append(torch_side(config, compiled=name == "torch_compiled"))
    return sides


def interleaved_times(sides, steps: int, warmup: int, turn: int) -> list[list[float]]:
    """Each side's timed step seconds: warm-up steps first, then turns of `turn` steps a
    side until every side has `steps`."""
    for side in sides:
        for _ in range(warmup):
            side.step()
    times = [[] for _ in sides]
    while any(len(t) < steps for t in times):
        for side, t in zip(sides, times):
            for _ in range(min(turn, steps - len(t))):
                start = time.perf_counter()
                side.step()
                t.append(time.perf_counter() - start)
    return times


def finish(row: dict, peak_bytes_key: str = "device_peak_bytes") -> dict:
    """The fields every step row carries for the tables (benchmarks/device_tables.py):
    mfu (the fraction of peak by the shared FLOP count), peak_bytes, threads."""
    row["mfu"] = row["fraction_of_peak"]
    row["peak_bytes"] = row.get(peak_bytes_key)
    # torch's pool where a PyTorch side ran in this process (no torch import for the rest)
    if "torch" in sys.modules:
        from benchmarks import torch_reference
        row["threads"] = torch_reference.threads()
    else:
        row["threads"] = {"xla": len(os.sched_getaffinity(0))}
    return row


def _torch_installed() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch") is not None


def run():
    against = FLAGS.against
    if against.startswith("torch"):
        # jax takes 75% of a GPU at start by default; the PyTorch sides share the device
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        if not _torch_installed():
            raise errors.UsageError(f"--against={against} needs PyTorch and transformers "
                                    "(requirements-test.txt pins both: pip install "
                                    "torch==2.13.0 'transformers>=4.40')")
    config = experiment_config() if FLAGS.config is not None else bench_config()
    peak = chips.peak_flops_per_device()
    sides = build_sides(config, against)
    times = interleaved_times([s for s, _ in sides], FLAGS.steps, FLAGS.warmup,
                              FLAGS.interleave)
    rows = [finish(make(float(np.median(t)), peak)) for (_, make), t in zip(sides, times)]
    ours_row = rows[0]
    print(json.dumps(ours_row), flush=True)
    for ref in rows[1:]:
        if ref["parameters"] != ours_row["parameters"]:
            raise AssertionError(f"parameter counts differ: ours {ours_row['parameters']:,}, "
                                 f"{ref['implementation']} {ref['parameters']:,}")
        ref["speedup"] = ours_row["tokens_per_s"] / ref["tokens_per_s"]
        print(json.dumps(ref), flush=True)
