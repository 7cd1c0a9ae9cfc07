"""The encoder g(x; θ): token ids [B, T] -> contextual vectors [B, T, D].

Embeddings (token + segment + absolute position, LayerNorm, dropout) feed a
stack of blocks; the position scheme, norm placement, activation, local/global
attention pattern and cross-layer sharing are all read from the model config.
`encode` is the pure-function face of the module.

Axes: B batch, T tokens, E embedding width, D model width, H heads.
"""
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from encoder.model import layers
from encoder.model import positions as positions_lib
from encoder.model import scan as scan_lib
from encoder.model import sharding
from encoder.model.attention_pattern import AttentionPattern, layer_is_global

# Logical names of the residual stream [B, T, D]: the batch is split over the mesh's data
# axes (encoder/train/partitioning.py RULES), never along a parameter's FSDP axis.
RESIDUAL = ("batch", "length", "act_embed")


class Embeddings(nn.Module):
    """Token + segment + absolute-position embeddings, then LayerNorm and dropout.

    Output width is embedding_size E (ALBERT's factorization lets E < D; the
    encoder projects E -> D). This module can be shared by two encoders
    (ELECTRA's generator and discriminator).
    """
    cfg: Any

    def setup(self):
        cfg = self.cfg
        width = cfg.embedding_size or cfg.hidden_size
        init = nn.initializers.normal(cfg.initializer_range)
        self.token = nn.Embed(
            cfg.vocab_size, width,
            embedding_init=nn.with_logical_partitioning(init, ("vocab", "embed")))
        if cfg.type_vocab_size:
            self.segment = nn.Embed(
                cfg.type_vocab_size, width,
                embedding_init=nn.with_logical_partitioning(init, ("segments", "embed")))
        absolute = positions_lib.POSITIONS[cfg.position].absolute
        if absolute is not None:
            self.position = absolute(cfg.max_position, width, cfg.initializer_range)
        self.norm = layers.layer_norm(cfg, "norm")
        self.dropout = nn.Dropout(cfg.dropout)

    def __call__(self, input_ids, segment_ids, positions, deterministic=True):
        x = self.token(input_ids)  # [B, T, E]
        if self.cfg.type_vocab_size:
            x = x + self.segment(segment_ids)
        if positions_lib.POSITIONS[self.cfg.position].absolute is not None:
            x = x + self.position(positions)
        x = self.norm(x.astype(jnp.dtype(self.cfg.dtype)))
        return self.dropout(x, deterministic)

    def attend(self, x):
        """x [..., E] -> logits [..., V] against the token table (weight tying)."""
        return self.token.attend(x)


def layer_rope_theta(cfg, index: int) -> float:
    """ModernBERT rotates local-window layers with their own base (1e4 vs 1.6e5 global).

    .get: configs saved before local_rope_theta existed keep one theta.
    """
    local = cfg.get("local_rope_theta", 0.0)
    return float(cfg.rope_theta if layer_is_global(cfg, index) or not local else local)


def layer_has_attention_norm(cfg, index: int) -> bool:
    """ModernBERT's layer 0 has no attention norm (its input is the normed embeddings)."""
    return index > 0 or cfg.get("first_attention_norm", True)


# What a rematerialised layer keeps from its forward pass for the backward pass
# (None: nothing but its input). "none" means no nn.remat at all.
REMAT_POLICIES = {
    "none": None,
    "full": None,
    "dots": jax.checkpoint_policies.checkpoint_dots,
    # MaxText's usual choice: keeps the weight matmuls' outputs, recomputes attention's
    # batched score/mix products (the T x T part).
    "dots_with_no_batch_dims": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def _block_class(cfg, in_scan: bool = False):
    """Block, wrapped in nn.remat when a rematerialisation policy is set.

    in_scan: inside nn.scan the loop already keeps XLA from merging the
    recomputation into the forward pass, so prevent_cse's barriers are dropped.
    """
    if cfg.remat == "none":
        return layers.Block
    # deterministic, rope_theta, attention_norm (self is argument 0) are static
    return nn.remat(layers.Block, policy=REMAT_POLICIES[cfg.remat], static_argnums=(5, 6, 7),
                    prevent_cse=not in_scan)


def call_layer(cfg, block, x, index: int, shared: dict, deterministic: bool):
    """Layer `index` on x [B, T, D]: its static choices (mask, RoPE base, attention norm)
    come from the index; `shared` holds the per-forward inputs every layer reads."""
    mask = shared["global_mask"] if layer_is_global(cfg, index) else shared["local_mask"]
    x = block(x, shared["positions"], shared["bias"], mask, deterministic,
              layer_rope_theta(cfg, index), layer_has_attention_norm(cfg, index),
              shared["relative"])
    return sharding.constrain(x, RESIDUAL)  # [B, T, D]


class LayerGroup(nn.Module):
    """`period` consecutive layers: the body nn.scan repeats (encoder/model/scan.py).

    first: the index of group 0's first layer; member j takes layer first + j's
    static choices, which every group shares (the pattern repeats every period).
    """
    cfg: Any
    first: int
    period: int

    @nn.compact
    def __call__(self, x, shared, deterministic, return_all):
        block = _block_class(self.cfg, in_scan=True)
        outs = []
        for j in range(self.period):
            x = call_layer(self.cfg, block(self.cfg, name=f"blocks_{j}"), x, self.first + j,
                           shared, deterministic)
            outs.append(x)
        return x, (jnp.stack(outs) if return_all else None)  # [B, T, D], [P, B, T, D]


def scanned_groups(cfg, plan: scan_lib.Plan):
    """nn.scan over the plan's groups: parameters gain a leading [G] axis named 'layers'."""
    return nn.scan(LayerGroup, variable_axes={"params": 0},
                   split_rngs={"params": True, "dropout": True},
                   in_axes=(nn.broadcast, nn.broadcast, nn.broadcast), length=plan.groups,
                   metadata_params={nn.PARTITION_NAME: scan_lib.SCANNED}
                   )(cfg, plan.prefix, plan.period, name=scan_lib.SCANNED)


class Encoder(nn.Module):
    """The stack. Returns (hidden [B, T, D] float32, aux dict).

    aux['hidden_states'] holds every layer's output (embeddings first) when
    asked for with return_all=True.
    """
    cfg: Any
    embeddings: Embeddings | None = None  # pass one to share it between encoders

    def setup(self):
        cfg = self.cfg
        self.embed = self.embeddings if self.embeddings is not None else Embeddings(cfg)
        width = cfg.embedding_size or cfg.hidden_size
        if width != cfg.hidden_size:
            self.embed_projection = nn.Dense(
                cfg.hidden_size, dtype=jnp.dtype(cfg.dtype),
                kernel_init=nn.with_logical_partitioning(
                    nn.initializers.normal(cfg.initializer_range), ("embed_factor", "embed")),
                bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)))
        scheme = positions_lib.POSITIONS[cfg.position]
        if scheme.bias is not None:
            self.position_bias = scheme.bias(cfg)
        if scheme.disentangled is not None:  # DeBERTa: one relative table for all layers
            self.relative_positions = scheme.disentangled(cfg)
        block = _block_class(cfg)
        plan = scan_lib.plan(cfg)
        if cfg.share_layers:
            self.shared_block = block(cfg)
        elif plan is None:
            self.blocks = [block(cfg) for _ in range(cfg.num_layers)]
        else:  # named blocks_{i} like the unrolled layout; the rest live under 'layers'
            self.blocks = {i: block(cfg) for i in plan.unrolled}
            self.layers = scanned_groups(cfg, plan)
        if layers.NORM_PLACEMENTS[cfg.norm].final_norm:
            self.final_norm = layers.layer_norm(cfg, "final_norm")

    def __call__(self, input_ids, segment_ids=None, attention_mask=None, positions=None,
                 document_ids=None, deterministic=True, return_all=False):
        cfg = self.cfg
        batch, length = input_ids.shape
        if segment_ids is None:
            segment_ids = jnp.zeros_like(input_ids)
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(length), (batch, length))

        x = self.embed(input_ids, segment_ids, positions, deterministic)  # [B, T, E]
        if (cfg.embedding_size or cfg.hidden_size) != cfg.hidden_size:
            x = self.embed_projection(x)  # [B, T, D]
        x = sharding.constrain(x, RESIDUAL)
        bias = self.position_bias(positions) if positions_lib.POSITIONS[cfg.position].bias else None
        relative = (self.relative_positions(positions)  # ([2S, D], [B, T, T])
                    if positions_lib.POSITIONS[cfg.position].disentangled else None)
        # The masks' ingredients, not [B, 1, T, T] arrays: each attention backend builds its own
        # form (a dense mask, or segment ids and a window for the kernels).
        global_mask = AttentionPattern(attention_mask, document_ids)
        local_mask = (global_mask.replace(window=cfg.local_window) if cfg.local_window else None)

        shared = {"positions": positions, "bias": bias, "relative": relative,
                  "global_mask": global_mask, "local_mask": local_mask}
        plan = scan_lib.plan(cfg)
        hidden_states = [x]
        for i in range(cfg.num_layers):
            if plan is not None and i in plan.scanned:
                if i == plan.prefix:  # the whole scan runs once, at its first layer
                    x, ys = self.layers(x, shared, deterministic, return_all)  # ys [G, P, B, T, D]
                    if return_all:
                        hidden_states.extend(ys.reshape(-1, *ys.shape[2:]))
                continue
            block = self.shared_block if cfg.share_layers else self.blocks[i]
            x = call_layer(cfg, block, x, i, shared, deterministic)
            hidden_states.append(x)
        if layers.NORM_PLACEMENTS[cfg.norm].final_norm:
            x = self.final_norm(x)
            hidden_states[-1] = x
        aux = {"hidden_states": tuple(h.astype(jnp.float32) for h in hidden_states)} if return_all else {}
        return x.astype(jnp.float32), aux  # [B, T, D]

    def attend(self, x):
        """Tied vocabulary projection through the token-embedding table."""
        return self.embed.attend(x)


def model_config(config):
    """Accepts a full experiment config (with .model) or a model config."""
    return config.model if "model" in config else config


def encoder_params(params):
    """A standalone Encoder's params from any model's params (or bare encoder params).

    ELECTRA keeps the shared embeddings beside the discriminator ('embeddings'),
    so they are put back where a standalone Encoder expects them ('embed').
    """
    params = params.get("params", params)
    if "encoder" not in params:
        return params
    enc = params["encoder"]
    if "embed" not in enc and "embeddings" in params:
        enc = {**enc, "embed": params["embeddings"]}
    return enc


def encode(config, params, input_ids, segment_ids=None, attention_mask=None,
           positions=None, document_ids=None):
    """g(x; θ): the pure encoder, jit-compiled. Returns hidden [B, T, D] in float32.

    attention_mask is 1 for real tokens, 0 for padding. params may be a full
    model's params (with an 'encoder' subtree) or the encoder's own.
    """
    as_array = lambda x: None if x is None else jnp.asarray(x)  # noqa: E731
    cfg = model_config(config)
    if not isinstance(cfg, ml_collections.FrozenConfigDict):
        cfg = ml_collections.FrozenConfigDict(cfg)  # hashable: a static argument of the jit
    return _encode(cfg, encoder_params(params), jnp.asarray(input_ids),
                   as_array(segment_ids), as_array(attention_mask), as_array(positions),
                   as_array(document_ids))


@functools.partial(jax.jit, static_argnums=0)
def _encode(cfg, params, input_ids, segment_ids, attention_mask, positions, document_ids):
    hidden, _ = Encoder(cfg).apply({"params": params}, input_ids, segment_ids, attention_mask,
                                   positions, document_ids)
    return hidden
