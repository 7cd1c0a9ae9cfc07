"""The transformer block: attention and MLP sub-layers around a residual stream.

Two variant axes live here, each one table:
  * ACTIVATIONS: the MLP's nonlinearity; gated entries (GeGLU, SwiGLU;
    Shazeer 2020) split the first projection into a value and a gate;
  * NORM_PLACEMENTS: `post_ln` (BERT: norm after the residual add) or
    `pre_ln` (norm before each sub-layer, plus one final norm on the stack).

Axes: B batch, T tokens, D model width, F MLP width.
"""
import dataclasses
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.model import attention as attention_lib
from encoder.model import sharding


@dataclasses.dataclass(frozen=True)
class Activation:
    fn: Callable[[jnp.ndarray], jnp.ndarray]
    gated: bool = False


def gelu_exact(x):
    """erf GELU, as in BERT and HuggingFace's `gelu` (needed for parity)."""
    return jax.nn.gelu(x, approximate=False)


ACTIVATIONS: dict[str, Activation] = {
    "gelu": Activation(gelu_exact),
    "gelu_tanh": Activation(lambda x: jax.nn.gelu(x, approximate=True)),
    "relu": Activation(jax.nn.relu),
    "geglu": Activation(gelu_exact, gated=True),
    "swiglu": Activation(jax.nn.silu, gated=True),
}


def post_ln(x, sublayer, norm):
    """BERT (Devlin et al. 2019): LayerNorm(x + f(x))."""
    return norm(x + sublayer(x))


def pre_ln(x, sublayer, norm):
    """Xiong et al. 2020: x + f(LayerNorm(x)); the stack ends with a LayerNorm."""
    return x + sublayer(norm(x))


@dataclasses.dataclass(frozen=True)
class NormPlacement:
    residual: Callable
    final_norm: bool


NORM_PLACEMENTS: dict[str, NormPlacement] = {
    "post_ln": NormPlacement(post_ln, final_norm=False),
    "pre_ln": NormPlacement(pre_ln, final_norm=True),
}


def layer_norm(cfg, name: str) -> nn.LayerNorm:
    """LayerNorm in the compute dtype with float32 statistics."""
    return nn.LayerNorm(
        epsilon=cfg.layer_norm_eps, use_bias=cfg.use_bias, dtype=jnp.dtype(cfg.dtype),
        scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("norm",)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("norm",)),
        name=name)


class Mlp(nn.Module):
    """D -> F -> D feed-forward; gated activations use a [D, 2, F] input kernel."""
    cfg: Any  # model config

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        act = ACTIVATIONS[cfg.activation]
        dtype = jnp.dtype(cfg.dtype)
        init = nn.initializers.normal(cfg.initializer_range)
        if act.gated:
            h = nn.DenseGeneral(
                (2, cfg.intermediate_size), use_bias=cfg.use_bias, dtype=dtype,
                kernel_init=nn.with_logical_partitioning(init, ("embed", None, "mlp")),
                bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (None, "mlp")),
                name="wi")(x)  # [B, T, 2, F]
            h = act.fn(h[..., 0, :]) * h[..., 1, :]  # [B, T, F]
        else:
            h = act.fn(nn.Dense(
                cfg.intermediate_size, use_bias=cfg.use_bias, dtype=dtype,
                kernel_init=nn.with_logical_partitioning(init, ("embed", "mlp")),
                bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("mlp",)),
                name="wi")(x))  # [B, T, F]
        h = sharding.constrain(h, ("batch", "length", "act_mlp"))
        return nn.Dense(
            cfg.hidden_size, use_bias=cfg.use_bias, dtype=dtype,
            kernel_init=nn.with_logical_partitioning(init, ("mlp", "embed")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            name="wo")(h)  # [B, T, D]


class Block(nn.Module):
    """One encoder layer: attention then MLP, each wrapped by the norm placement."""
    cfg: Any  # model config

    @nn.compact
    def __call__(self, x, positions, bias, mask, deterministic=True, rope_theta=None,
                 attention_norm=True, relative=None):
        """mask: this layer's AttentionPattern (padding, documents, window) or None; each
        attention backend builds its own mask from it.
        rope_theta: this layer's RoPE base (None: cfg.rope_theta); attention_norm=False
        drops the attention sub-layer's norm (ModernBERT's layer 0, whose input is
        already the normed embeddings). Both are static: they pick the layer's shape.
        relative: DeBERTa's shared (table [2S, D], index [B, T, T]), or None."""
        cfg = self.cfg
        residual = NORM_PLACEMENTS[cfg.norm].residual
        drop = nn.Dropout(cfg.dropout)
        attn = attention_lib.SelfAttention(cfg, name="attention")
        mlp = Mlp(cfg, name="mlp")

        def attention_sublayer(h):
            return drop(attn(h, positions, bias, mask, deterministic, rope_theta, relative),
                        deterministic)

        def mlp_sublayer(h):
            return drop(mlp(h), deterministic)

        attn_norm = layer_norm(cfg, "attention_norm") if attention_norm else (lambda h: h)
        x = residual(x, attention_sublayer, attn_norm)
        x = residual(x, mlp_sublayer, layer_norm(cfg, "mlp_norm"))
        return x  # [B, T, D]
