"""Analytic forward FLOPs of the encoder and its MLM head (multiply-add = 2 FLOPs).

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
