"""Heads: small modules that read the encoder's output H [B, T, D].

  * MlmHead: dense + GELU + LayerNorm transform, then vocabulary logits tied to
    the token-embedding table (Devlin et al. 2019 §A.1), only at the gathered
    masked positions; the rows past model.real_vocab_size (a vocabulary padded to
    a multiple of 64) get a logit of PADDING_LOGIT, so no probability and no
    gradient;
  * POOLING: `cls`, `cls_tanh` (BERT's pooler), `cls_gelu` (ELECTRA's and RoFormer's
    classification heads), `mean`, `max` (both over real
    tokens only);
  * SequenceHead (classification / regression on the pooled vector),
    TokenHead (per-token labels), SpanHead (start/end logits) with
    `best_span` decoding, RtdHead (ELECTRA's per-token replaced/original logit).

Axes: B batch, T tokens, P gathered positions, D width, E embedding width,
V vocabulary, C classes.
"""
from typing import Any, Callable

import flax.linen as nn
import jax.numpy as jnp

from encoder.model import layers


def _dense(features, cfg, axes, name, use_bias=True):
    init = nn.initializers.normal(cfg.initializer_range)
    return nn.Dense(
        features, use_bias=use_bias, dtype=jnp.dtype(cfg.dtype),
        kernel_init=nn.with_logical_partitioning(init, axes),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (axes[-1],)),
        name=name)


# exp(PADDING_LOGIT - max) is exactly 0 in float32 for any real logit, so a padded
# vocabulary's softmax, loss and gradients equal the unpadded model's; finite, unlike
# -inf or float32's min, so logits / temperature and sums over V stay finite.
PADDING_LOGIT = -1e9


def real_vocab_size(cfg) -> int:
    """The tokenizer's tokens among cfg.vocab_size rows: model.real_vocab_size, or (0 or
    absent, the default) all of them."""
    return cfg.get("real_vocab_size", 0) or cfg.vocab_size


def mask_padding_logits(logits, cfg):
    """logits [..., V] with the padding rows (ids >= real_vocab_size) at PADDING_LOGIT."""
    real = real_vocab_size(cfg)
    if real >= logits.shape[-1]:
        return logits
    return jnp.where(jnp.arange(logits.shape[-1]) < real, logits, PADDING_LOGIT)


def gather_positions(hidden: jnp.ndarray, positions: jnp.ndarray) -> jnp.ndarray:
    """hidden [B, T, D], positions [B, P] -> [B, P, D]."""
    return jnp.take_along_axis(hidden, positions[..., None], axis=1)


class MlmHead(nn.Module):
    """Vocabulary logits at the given positions; tied to `attend` when given."""
    cfg: Any

    @nn.compact
    def __call__(self, hidden, positions=None, attend: Callable | None = None):
        cfg = self.cfg
        if positions is not None:
            hidden = gather_positions(hidden, positions)  # [B, P, D]
        width = cfg.embedding_size or cfg.hidden_size
        # BERT's transform has a bias; ModernBERT's only with classifier_bias.
        h = _dense(width, cfg, ("embed", "embed_factor"), "transform",
                   use_bias=cfg.get("mlm_transform_bias", True))(hidden)
        h = layers.ACTIVATIONS[cfg.head_activation].fn(h)
        h = layers.layer_norm(cfg, "transform_norm")(h)  # [B, P, E]
        if cfg.tie_embeddings:
            if attend is None:
                raise ValueError("tie_embeddings=True needs the embedder's attend()")
            logits = attend(h.astype(jnp.float32))
        else:
            logits = _dense(cfg.vocab_size, cfg, ("embed_factor", "vocab"), "decoder",
                            use_bias=False)(h)
        bias = self.param("output_bias", nn.with_logical_partitioning(
            nn.initializers.zeros, ("vocab",)), (cfg.vocab_size,))
        return mask_padding_logits(logits.astype(jnp.float32) + bias, cfg)  # [B, P, V]


def _real(attention_mask, hidden):
    if attention_mask is None:
        return jnp.ones(hidden.shape[:2], bool)
    return attention_mask.astype(bool)


def pool_cls(hidden, attention_mask):
    return hidden[:, 0]


def pool_mean(hidden, attention_mask):
    real = _real(attention_mask, hidden)[..., None]
    total = jnp.sum(jnp.where(real, hidden, 0.0), axis=1)
    return total / jnp.maximum(jnp.sum(real, axis=1), 1)


def pool_max(hidden, attention_mask):
    real = _real(attention_mask, hidden)[..., None]
    return jnp.max(jnp.where(real, hidden, jnp.finfo(hidden.dtype).min), axis=1)


class Pooler(nn.Module):
    """Pools [B, T, D] to [B, D] by rule name (see POOLING)."""
    cfg: Any
    rule: str = "cls"

    @nn.compact
    def __call__(self, hidden, attention_mask=None):
        if self.rule in PARAMETRIC_POOLING:
            # BERT's pooler: tanh(W c + b) on the [CLS] vector; ELECTRA's and RoFormer's
            # classification heads: gelu(W c + b).
            act = PARAMETRIC_POOLING[self.rule]
            return act(_dense(self.cfg.hidden_size, self.cfg, ("embed", "embed_out"),
                              "dense")(hidden[:, 0])).astype(jnp.float32)
        return POOLING[self.rule](hidden, attention_mask)


PARAMETRIC_POOLING: dict[str, Callable] = {"cls_tanh": jnp.tanh, "cls_gelu": layers.gelu_exact}


POOLING: dict[str, Callable | None] = {
    "cls": pool_cls,
    "cls_tanh": None,  # has parameters: built inside Pooler
    "cls_gelu": None,  # has parameters: built inside Pooler
    "mean": pool_mean,
    "max": pool_max,
}


class SequenceHead(nn.Module):
    """Pooled vector -> C logits (classification) or one value (regression, C=1)."""
    cfg: Any
    num_labels: int
    pooling: str = "cls"

    @nn.compact
    def __call__(self, hidden, attention_mask=None, deterministic=True):
        pooled = Pooler(self.cfg, self.pooling, name="pooler")(hidden, attention_mask)
        pooled = nn.Dropout(self.cfg.dropout)(pooled, deterministic)
        out = _dense(self.num_labels, self.cfg, ("embed", "classes"), "classifier")(pooled)
        return out.astype(jnp.float32)  # [B, C]


class TokenHead(nn.Module):
    """The same linear classifier on every token: [B, T, D] -> [B, T, C]."""
    cfg: Any
    num_labels: int

    @nn.compact
    def __call__(self, hidden, deterministic=True):
        hidden = nn.Dropout(self.cfg.dropout)(hidden, deterministic)
        return _dense(self.num_labels, self.cfg, ("embed", "classes"),
                      "classifier")(hidden).astype(jnp.float32)


class SpanHead(nn.Module):
    """Start and end logits per token: returns ([B, T], [B, T])."""
    cfg: Any

    @nn.compact
    def __call__(self, hidden):
        logits = _dense(2, self.cfg, ("embed", "classes"), "span")(hidden).astype(jnp.float32)
        return logits[..., 0], logits[..., 1]


class RtdHead(nn.Module):
    """ELECTRA's discriminator head: dense + GELU + dense -> one logit per token."""
    cfg: Any

    @nn.compact
    def __call__(self, hidden):
        h = _dense(self.cfg.hidden_size, self.cfg, ("embed", "embed_out"), "dense")(hidden)
        h = layers.ACTIVATIONS[self.cfg.head_activation].fn(h)
        return _dense(1, self.cfg, ("embed", "classes"), "out")(h)[..., 0].astype(jnp.float32)


def best_span(start_logits, end_logits, allowed, max_length: int):
    """Best (i, j) with i <= j < i + max_length, both allowed; scores s_i + e_j.

    start_logits, end_logits: [B, T]; allowed: [B, T] bool (e.g. context tokens).
    Returns (start [B], end [B], score [B]); score is -inf when no span is allowed.
    Jittable: O(T^2) memory per row, fine for T <= 512.
    """
    length = start_logits.shape[-1]
    i = jnp.arange(length)[:, None]
    j = jnp.arange(length)[None, :]
    valid = (i <= j) & (j < i + max_length)  # [T, T]
    valid = valid[None] & allowed[:, :, None] & allowed[:, None, :]  # [B, T, T]
    scores = start_logits[:, :, None] + end_logits[:, None, :]
    scores = jnp.where(valid, scores, -jnp.inf)
    flat = jnp.argmax(scores.reshape(scores.shape[0], -1), axis=-1)
    start, end = flat // length, flat % length
    return start, end, jnp.max(scores.reshape(scores.shape[0], -1), axis=-1)
