"""The train step: this codebase's jit-compiled pretraining step against HuggingFace's
FlaxBertForMaskedLM at the identical configuration (python -m encoder bench --mode=step)."""
import json

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from benchmarks import hf_reference
from benchmarks.common import (attention_ran, bench_config, experiment_config, report,
                               time_step)
from encoder.aot import attention_trace, chips
from encoder.data import synthetic

FLAGS = flags.FLAGS


def ours(config, peak):
    from encoder.objectives import pretraining
    from encoder.train import flops, optimizer, partitioning, trainer as trainer_lib

    step = pretraining.build(config)
    # The very step pretraining compiles (encoder/train/trainer.py), not a copy of it.
    trainer = trainer_lib.Trainer(
        partitioning.make_mesh(config.mesh), optimizer.make_optimizer(config.train),
        step.init_params, seed=config.seed)
    state = trainer.fresh_state()
    batch = trainer.shard(synthetic.random_batch(config))
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params))
    with attention_trace.traced() as trace:  # at trace time
        compile_s, step_s, mem, metrics = time_step(
            trainer.step(step.loss_fn, step.prepare), state, batch, lambda i: jax.random.key(i),
            traced=lambda: print(json.dumps({"attention_layers": trace.layer_paths(),
                                             "attention_notes": list(trace.notes)}),
                                 flush=True))
    fps = flops.config_train_flops_per_step(config)
    return report("this codebase", config, n_params, compile_s, step_s, fps, peak, mem,
                  loss=float(metrics["loss"]), attention_layers=trace.layer_paths(),
                  **attention_ran(trace))


def hf(config, peak):
    """FlaxBertForMaskedLM with the same config, loss (masked slots) and AdamW."""
    model = hf_reference.hf_model(config)
    params = model.params
    step, tx = hf_reference.hf_train_step(config, model)
    opt_state = tx.init(params)
    batch = {k: jnp.asarray(v) for k, v in synthetic.random_batch(config).items()}
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    compile_s, step_s, mem, metrics = time_step(jax.jit(step, donate_argnums=(0,)),
                                                (params, opt_state), batch,
                                                lambda i: jax.random.key(i))
    return report("huggingface FlaxBertForMaskedLM", config, n_params, compile_s, step_s,
                  hf_reference.hf_train_flops(config), peak, mem, loss=float(metrics["loss"]),
                  attention_impl="its own", attention_ran=hf_reference.HF_ATTENTION)


def run():
    config = experiment_config() if FLAGS.config is not None else bench_config()
    peak = chips.peak_flops_per_device()
    row = ours(config, peak)
    print(json.dumps(row), flush=True)
    if FLAGS.against == "hf":
        ref = hf(config, peak)
        if ref["parameters"] != row["parameters"]:
            raise AssertionError(f"parameter counts differ: ours {row['parameters']:,}, "
                                 f"HF {ref['parameters']:,}")
        ref["speedup"] = row["tokens_per_s"] / ref["tokens_per_s"]
        print(json.dumps(ref), flush=True)
