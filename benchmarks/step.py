"""The train step: this codebase's jit-compiled pretraining step against HuggingFace's
FlaxBertForMaskedLM at the identical configuration (python -m encoder.bench --mode=step)."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import flags

from benchmarks.common import (attention_ran, bench_config, experiment_config, report,
                               time_step)
from encoder.data import synthetic
from encoder.model import attention

FLAGS = flags.FLAGS
# FlaxBertSelfAttention: flax's dot_product_attention_weights, einsums over a dense mask,
# whatever --attention_impl says (that flag is this codebase's).
HF_ATTENTION = "huggingface einsum (dense mask)"


def ours(config, peak):
    from encoder.objectives import pretraining
    from encoder.train import flops, optimizer, partitioning, trainer as trainer_lib

    step = pretraining.build(config)
    # The very step pretraining compiles (encoder/train/trainer.py), not a copy of it.
    trainer = trainer_lib.Trainer(
        partitioning.make_mesh(config.mesh), optimizer.make_optimizer(config.train),
        step.init_params, loss_fn=step.loss_fn, prepare=step.prepare, seed=config.seed)
    state = trainer.initial_state
    batch = trainer.shard(synthetic.random_batch(config))
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params))
    with attention.recording() as notes, attention.paths_taken() as paths:  # at trace time
        compile_s, step_s, mem, metrics = time_step(trainer.step_fn, state, batch,
                                                    lambda i: jax.random.key(i))
    fps = flops.config_train_flops_per_step(config)
    return report("this codebase", config, n_params, compile_s, step_s, fps, peak, mem,
                  loss=float(metrics["loss"]), **attention_ran(paths, notes))


def hf(config, peak):
    """FlaxBertForMaskedLM with the same config, loss (masked slots) and AdamW."""
    from transformers import BertConfig, FlaxBertForMaskedLM
    from encoder import config as config_lib
    from encoder.objectives import masking, mlm
    from encoder.train import flops, optimizer
    m = config.model
    hf_cfg = BertConfig(vocab_size=m.vocab_size, hidden_size=m.hidden_size,
                        num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads,
                        intermediate_size=m.intermediate_size, max_position_embeddings=m.max_position,
                        type_vocab_size=m.type_vocab_size, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, hidden_act="gelu")
    dtype = jnp.dtype(m.dtype)
    model = FlaxBertForMaskedLM(hf_cfg, input_shape=(1, config.data.seq_len), dtype=dtype, seed=0)
    params = model.params
    tx = optimizer.make_optimizer(config.train)
    opt_state = tx.init(params)
    max_pred = config_lib.max_predictions(config.data.seq_len, config.masking.rate)

    def step(state, batch, rng):
        params, opt_state = state
        c = masking.corrupt(rng, batch["input_ids"], batch["attention_mask"],
                            rate=config.masking.rate, max_predictions=max_pred, mask_id=4,
                            vocab_size=m.vocab_size, special_ids=(0, 1, 2, 3, 4))

        def loss_fn(p):
            logits = model(c["input_ids"], batch["attention_mask"], batch["segment_ids"],
                           params=p, train=False).logits  # [B, T, V]: every position
            gathered = jnp.take_along_axis(logits, c["mlm_positions"][..., None], axis=1)
            loss, _ = mlm.masked_cross_entropy(gathered.astype(jnp.float32), c["mlm_labels"],
                                               c["mlm_weights"])
            return loss

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), {"loss": loss}

    batch = {k: jnp.asarray(v) for k, v in synthetic.random_batch(config).items()}
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    compile_s, step_s, mem, metrics = time_step(jax.jit(step, donate_argnums=(0,)),
                                                (params, opt_state), batch,
                                                lambda i: jax.random.key(i))
    b, t = config.train.batch_size, config.data.seq_len
    fwd = b * t * (flops.encoder_flops_per_token(m, t) + flops.mlm_head_flops(m))
    return report("huggingface FlaxBertForMaskedLM", config, n_params, compile_s, step_s,
                  3.0 * fwd, peak, mem, loss=float(metrics["loss"]),
                  attention_impl="its own", attention_ran=HF_ATTENTION)


def run():
    from encoder.train import flops
    config = experiment_config() if FLAGS.config is not None else bench_config()
    peak = flops.peak_flops_per_device()
    row = ours(config, peak)
    print(json.dumps(row), flush=True)
    if FLAGS.against == "hf":
        ref = hf(config, peak)
        if ref["parameters"] != row["parameters"]:
            raise AssertionError(f"parameter counts differ: ours {row['parameters']:,}, "
                                 f"HF {ref['parameters']:,}")
        ref["speedup"] = row["tokens_per_s"] / ref["tokens_per_s"]
        print(json.dumps(ref), flush=True)
