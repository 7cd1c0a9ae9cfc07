"""Bidirectional multi-head self-attention: the layer (a fused QKV projection, RoPE or
DeBERTa's disentangled positions, attention dropout) around one call into the backends.

Who attends to whom arrives as the layer's AttentionPattern (encoder/model/attention_pattern.py);
the kernel that computes it is `model.attention_impl`, an entry of the backends' table
(encoder/model/attention_backends/).

Axes: B batch, T tokens, D model width, H heads, K head dim.
"""
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from encoder.model import attention_backends
from encoder.model import positions as positions_lib
from encoder.model import sharding
from encoder.model.attention_backends import dense, events
from encoder.model.attention_pattern import AttentionPattern


class SelfAttention(nn.Module):
    """Multi-head self-attention with a fused QKV projection."""
    cfg: Any  # model config

    @nn.compact
    def __call__(self, x, positions, bias=None, mask=None, deterministic=True,
                 rope_theta=None, relative=None):
        """mask: this layer's AttentionPattern (or None: every token attends to every token).

        rope_theta: this layer's RoPE base (ModernBERT's local layers use their own).

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

        heads_names = ("batch", "length", "act_heads", "act_kv")
        q, k, v = (sharding.constrain(x, heads_names) for x in (q, k, v))  # [B, T, H, K]
        pattern = AttentionPattern() if mask is None else mask
        use_dropout = cfg.attention_dropout > 0 and not deterministic
        if use_dropout:
            # No kernel here drops attention probabilities: training with attention dropout
            # takes the einsum path (dense mask) whatever the backend.
            if cfg.attention_impl != "reference":
                events.note(f"attention_dropout={cfg.attention_dropout}: no kernel applies "
                            f"it; attention_impl={cfg.attention_impl} uses the dense reference "
                            "path while dropout is active")
            drop = nn.Dropout(cfg.attention_dropout)
            events.took("reference (attention dropout)", pattern.window)
            out = dense.reference_attention(q, k, v, bias, pattern.dense(q.shape[1]),
                                            dropout=lambda p: drop(p, deterministic=False))
        else:
            out = attention_backends.attend(q, k, v, bias, pattern,
                                            cfg.attention_impl)  # [B, T, H, K]
        out = sharding.constrain(out, heads_names)
        return nn.DenseGeneral(
            features=cfg.hidden_size, axis=(-2, -1), use_bias=cfg.use_bias, dtype=dtype,
            kernel_init=nn.with_logical_partitioning(init, ("heads", "kv", "embed")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            name="out")(out)  # [B, T, D]
