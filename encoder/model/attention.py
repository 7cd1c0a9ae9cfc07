"""Bidirectional multi-head self-attention and the masks that shape it.

Masks are boolean [B, 1, T, T] (True = may attend), built once per forward
pass from the padding mask, the packed rows' document ids and an optional
local window, and shared by every layer (ModernBERT alternates a local and a
global mask between layers).

Two numerically equivalent paths compute attention:
  * `jax.nn.dot_product_attention`: the fast path; on NVIDIA GPUs in
    bfloat16/float16 with no bias it can use the fused cuDNN kernel;
  * `reference_attention`: explicit einsums with a float32 softmax; used when
    attention-probability dropout is active (the fused call has no dropout)
    and as the reference in tests.

Axes: B batch, T tokens, D model width, H heads, K head dim.
"""
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.model import positions as positions_lib

ATTENTION_IMPLEMENTATIONS = ("auto", "xla", "cudnn", "reference")


def make_mask(attention_mask: jnp.ndarray | None,
              document_ids: jnp.ndarray | None,
              window: int = 0,
              length: int | None = None) -> jnp.ndarray | None:
    """Boolean [B, 1, T, T] mask, or None when nothing is masked.

    attention_mask: [B, T], 1 for real tokens; document_ids: [B, T], a token
    attends only to keys with the same id; window > 0 keeps |i - j| <= window//2.
    """
    mask = None
    if attention_mask is not None:
        real = attention_mask.astype(bool)
        mask = real[:, None, None, :]  # keys must be real
    if document_ids is not None:
        same_doc = document_ids[:, None, :, None] == document_ids[:, None, None, :]
        mask = same_doc if mask is None else mask & same_doc
    if window:
        if length is None:
            raise ValueError("make_mask needs `length` for a local window")
        idx = jnp.arange(length)
        local = jnp.abs(idx[:, None] - idx[None, :]) <= window // 2
        local = local[None, None]
        mask = local if mask is None else mask & local
    return mask


def reference_attention(q, k, v, bias=None, mask=None, dropout=None):
    """softmax(q k^T / sqrt(K) + bias) v with the softmax in float32.

    q, k, v: [B, T, H, K]; bias: [B, H, T, T] float; mask: [B, 1|H, T, T] bool.
    dropout: optional function applied to the attention probabilities.
    """
    scale = q.shape[-1] ** -0.5
    logits = jnp.einsum("bqhk,bshk->bhqs", q, k).astype(jnp.float32) * scale
    if bias is not None:
        logits = logits + bias
    if mask is not None:
        logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1)
    if dropout is not None:
        probs = dropout(probs)
    return jnp.einsum("bhqs,bshk->bqhk", probs.astype(v.dtype), v)


MASKED_BIAS = -1e9  # finite: a fully masked row softmaxes to uniform, never NaN


def fused_attention(q, k, v, bias=None, mask=None, implementation="auto"):
    """jax.nn.dot_product_attention, choosing cuDNN where it is allowed.

    Off cuDNN, a boolean mask is folded into the additive bias: the XLA path
    would otherwise select on the logits forward and on their gradient
    backward (a select per layer that an add does not need).
    """
    impl = None if implementation == "auto" else implementation
    if impl is None and _cudnn_usable(q, bias):
        impl = "cudnn"
    if mask is not None and impl != "cudnn":
        mask_bias = jnp.where(mask, 0.0, MASKED_BIAS).astype(jnp.float32)
        bias = mask_bias if bias is None else bias + mask_bias
        mask = None
    if bias is not None:
        bias = bias.astype(q.dtype)
    return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, implementation=impl)


def _cudnn_usable(q, bias) -> bool:
    """cuDNN flash attention: NVIDIA GPU, half precision, head dim <= 128."""
    return (jax.default_backend() == "gpu" and q.dtype in (jnp.bfloat16, jnp.float16)
            and q.shape[-1] <= 128 and q.shape[-1] % 8 == 0)


class SelfAttention(nn.Module):
    """Multi-head self-attention with a fused QKV projection."""
    cfg: Any  # model config

    @nn.compact
    def __call__(self, x, positions, bias=None, mask=None, deterministic=True,
                 rope_theta=None, relative=None):
        """rope_theta: this layer's RoPE base (ModernBERT's local layers use their own).

        relative: DeBERTa's (table [2S, D], index [B, T, T]) from the Encoder's
        DisentangledPositions, or None.
        """
        cfg = self.cfg
        dtype = jnp.dtype(cfg.dtype)
        heads, head_dim = cfg.num_heads, cfg.hidden_size // cfg.num_heads
        init = nn.initializers.normal(cfg.initializer_range)
        qkv_proj = nn.DenseGeneral(
            features=(3, heads, head_dim), use_bias=cfg.use_bias, dtype=dtype,
            kernel_init=nn.with_logical_partitioning(init, ("embed", None, "heads", "kv")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (None, "heads", "kv")),
            name="qkv")
        qkv = qkv_proj(x)  # [B, T, 3, H, K]
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [B, T, H, K]
        if positions_lib.POSITIONS[cfg.position].rotary:
            theta = rope_theta or cfg.rope_theta
            q = positions_lib.apply_rope(q, positions, theta)
            k = positions_lib.apply_rope(k, positions, theta)
        if relative is not None:
            # DeBERTa (He et al. 2021 §3.1): the shared relative embeddings go through this
            # layer's own query/key projections (v2's share_att_key), dropped out per layer.
            table, index = relative  # [2S, D], [B, T, T]
            table = nn.Dropout(cfg.dropout, name="relative_dropout")(table, deterministic)
            pos = qkv_proj(table)  # [2S, 3, H, K]
            q, bias = positions_lib.disentangled_attention(q, k, pos[:, 0], pos[:, 1], index, bias)

        use_dropout = cfg.attention_dropout > 0 and not deterministic
        if cfg.attention_impl == "reference" or use_dropout:
            drop = nn.Dropout(cfg.attention_dropout)
            out = reference_attention(
                q, k, v, bias, mask,
                dropout=(lambda p: drop(p, deterministic=False)) if use_dropout else None)
        else:
            out = fused_attention(q, k, v, bias, mask, cfg.attention_impl)  # [B, T, H, K]
        return nn.DenseGeneral(
            features=cfg.hidden_size, axis=(-2, -1), use_bias=cfg.use_bias, dtype=dtype,
            kernel_init=nn.with_logical_partitioning(init, ("heads", "kv", "embed")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            name="out")(out)  # [B, T, D]
