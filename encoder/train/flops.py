"""Analytic model FLOPs (multiply-add = 2 FLOPs), forward + backward = 3x forward.

Per token, per layer (Kaplan et al. 2020; the Chinchilla appendix), with
D width, F MLP width (x1.5 for gated MLPs' extra input projection), T length:
  attention projections  2 * 4 D^2
  attention scores/mix   2 * 2 T D       (the T x T products, full attention)
  MLP                    2 * 2 D F  (gated: 2 * 3 D F)
Embedding projection (factorized E < D): 2 E D per token.
MLM head per predicted slot: 2 (D E + E V); RTD head per token: 2 (D^2 + D).
Embedding lookups, norms, softmax and biases are not counted (as is usual).
"""
from encoder.model import layers


def encoder_flops_per_token(cfg, seq_len: int) -> float:
    d, f = cfg.hidden_size, cfg.intermediate_size
    mlp = (3 if layers.ACTIVATIONS[cfg.activation].gated else 2) * d * f
    per_layer = 2 * 4 * d * d + 2 * 2 * seq_len * d + 2 * mlp
    e = cfg.embedding_size or d
    proj = 2 * e * d if e != d else 0
    return cfg.num_layers * per_layer + proj


def mlm_head_flops(cfg) -> float:
    e = cfg.embedding_size or cfg.hidden_size
    return 2 * (cfg.hidden_size * e + e * cfg.vocab_size)


def train_flops_per_step(config, batch_size: int, seq_len: int, predictions_per_row: int,
                         gen_cfg=None) -> float:
    """Forward + backward FLOPs of one train step (3x the forward pass)."""
    m = config.model
    tokens = batch_size * seq_len
    fwd = tokens * encoder_flops_per_token(m, seq_len)
    if config.objective == "rtd":
        fwd += tokens * 2 * (m.hidden_size * m.hidden_size + m.hidden_size)
        fwd += tokens * encoder_flops_per_token(gen_cfg, seq_len)
        fwd += batch_size * predictions_per_row * mlm_head_flops(gen_cfg)
    else:
        fwd += batch_size * predictions_per_row * mlm_head_flops(m)
    return 3.0 * fwd


def peak_flops_per_device() -> float:
    """Datasheet dense bf16 peak for known accelerators (encoder/train/chips.py); a
    measurement on CPU."""
    import jax
    from encoder.train import chips
    dev = jax.devices()[0]
    chip = chips.chip_for_device(dev)
    if chip is not None:
        return chip.peak_flops
    return measure_matmul_flops()


def measure_matmul_flops(n: int = 1024, repeats: int = 5) -> float:
    """Achieved float32 FLOP/s of an n x n matmul on the default device."""
    import time
    import jax
    import jax.numpy as jnp
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        f(a).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


def config_train_flops_per_step(config) -> float:
    """train_flops_per_step for an experiment config (its batch, length, slots, generator)."""
    from encoder.config import max_predictions
    from encoder.objectives import objectives
    gen = objectives.generator_config(config.model, config.electra.generator_fraction,
                                      config.electra.generator_layers)
    return train_flops_per_step(config, config.train.batch_size, config.data.seq_len,
                                max_predictions(config.data.seq_len, config.masking.rate), gen)
