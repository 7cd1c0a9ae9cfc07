"""Encoder + head compositions that the objectives and tasks train.

Every module returns (out, aux): `out` is what the loss reads, `aux` holds
named intermediates (`encoded`, `pooled`, ...) for probes and tests.
The encoder submodule is always named `encoder`, so `encode(config, params)`
can read any of these models' parameters.
"""
from typing import Any

import flax.linen as nn
import ml_collections

from encoder import registry
from encoder.model import attention_backends, encoder as encoder_lib, heads, layers, positions
from encoder.model import scan
from encoder.model.encoder import Embeddings, Encoder


def freeze(cfg) -> ml_collections.FrozenConfigDict:
    """Flax module attributes must be hashable: freeze ConfigDicts."""
    if isinstance(cfg, ml_collections.FrozenConfigDict):
        return cfg
    return ml_collections.FrozenConfigDict(cfg)


def validate_config(cfg, seq_len: int | None = None) -> None:
    """Raises ValueError on an impossible model config, before compiling.

    Every variant name is checked against the table that defines it.
    """
    registry.lookup(positions.POSITIONS, cfg.position, "position scheme")
    registry.lookup(layers.NORM_PLACEMENTS, cfg.norm, "norm placement")
    registry.lookup(layers.ACTIVATIONS, cfg.activation, "activation")
    registry.lookup(layers.ACTIVATIONS, cfg.head_activation, "head activation")
    registry.lookup({k: k for k in attention_backends.IMPLEMENTATIONS}, cfg.attention_impl,
                    "attention implementation")
    registry.lookup({k: k for k in encoder_lib.REMAT_POLICIES}, cfg.remat, "remat policy")
    registry.lookup({k: k for k in scan.SCAN_CHOICES}, scan.scan_choice(cfg), "model.scan_layers")
    registry.lookup({"float32": 0, "bfloat16": 0, "float16": 0}, cfg.dtype, "compute dtype")
    if cfg.hidden_size % cfg.num_heads:
        raise ValueError(f"hidden_size {cfg.hidden_size} is not divisible by num_heads "
                         f"{cfg.num_heads}")
    if cfg.position == "rope" and (cfg.hidden_size // cfg.num_heads) % 2:
        raise ValueError(f"rope needs an even head dimension, got "
                         f"{cfg.hidden_size // cfg.num_heads}")
    for name in ("num_layers", "num_heads", "hidden_size", "intermediate_size", "vocab_size"):
        if cfg[name] <= 0:
            raise ValueError(f"model.{name} must be positive, got {cfg[name]}")
    real = cfg.get("real_vocab_size", 0)
    if real < 0 or real > cfg.vocab_size:
        raise ValueError(f"model.real_vocab_size must be 0 (no padding) or in [1, vocab_size="
                         f"{cfg.vocab_size}], got {real}")
    if cfg.embedding_size < 0 or cfg.embedding_size > cfg.hidden_size:
        raise ValueError(f"embedding_size must be 0 or in [1, hidden_size={cfg.hidden_size}], "
                         f"got {cfg.embedding_size}")
    if cfg.local_window < 0 or cfg.local_window % 2:
        raise ValueError(f"local_window must be 0 or a positive even width, got {cfg.local_window}")
    if cfg.get("local_rope_theta", 0.0) < 0:
        raise ValueError(f"local_rope_theta must be 0 (same as rope_theta) or positive, got "
                         f"{cfg.local_rope_theta}")
    if not cfg.get("first_attention_norm", True) and cfg.norm != "pre_ln":
        # Under post_ln the norm is the residual stream's only normalisation: dropping it
        # is not ModernBERT's "the input is already normed" shortcut.
        raise ValueError(f"first_attention_norm=False needs norm='pre_ln', got {cfg.norm!r}")
    if seq_len is not None and positions.POSITIONS[cfg.position].absolute is not None:
        if seq_len > cfg.max_position:
            raise ValueError(f"seq_len {seq_len} is longer than the {cfg.max_position} "
                             f"{cfg.position} positions (model.max_position)")
    if cfg.position == "deberta":
        _validate_deberta(cfg)


def _validate_deberta(cfg) -> None:
    """The log buckets need mid = buckets // 2 >= 1 and max_relative_positions - 1 > mid."""
    buckets, reach = cfg.deberta_position_buckets, cfg.deberta_max_relative_positions
    if buckets < 0 or buckets == 1:
        raise ValueError(f"deberta_position_buckets must be 0 (no bucketing) or >= 2, "
                         f"got {buckets}")
    if reach < 1 or (buckets and reach - 1 <= buckets // 2):
        raise ValueError(f"deberta_max_relative_positions must be positive and, with buckets, "
                         f"> deberta_position_buckets // 2 + 1; got {reach} with {buckets} buckets")


def validate_pooling(name: str) -> None:
    registry.lookup(heads.POOLING, name, "pooling rule")


class MaskedLM(nn.Module):
    """Encoder + tied MLM head (+ optional sentence-pair head for NSP/SOP)."""
    cfg: Any
    pair_head: bool = False

    def setup(self):
        self.encoder = Encoder(self.cfg)
        self.mlm_head = heads.MlmHead(self.cfg)
        if self.pair_head:
            self.pair = heads.SequenceHead(self.cfg, num_labels=2, pooling="cls_tanh")

    def __call__(self, input_ids, segment_ids, attention_mask, positions=None,
                 document_ids=None, mlm_positions=None, deterministic=True):
        hidden, aux = self.encoder(input_ids, segment_ids, attention_mask, positions,
                                   document_ids, deterministic)
        out = {"mlm_logits": self.mlm_head(hidden, mlm_positions, self.encoder.attend)}
        if self.pair_head:
            out["pair_logits"] = self.pair(hidden, attention_mask, deterministic)
        return out, {**aux, "encoded": hidden}


class Electra(nn.Module):
    """ELECTRA (Clark et al. 2020): generator and discriminator sharing embeddings.

    gen_cfg is the generator's model config (a narrower encoder with the same
    embedding width, so the token/segment/position tables can be shared).
    """
    cfg: Any
    gen_cfg: Any

    def setup(self):
        self.embeddings = Embeddings(self.cfg)
        self.generator = Encoder(self.gen_cfg, embeddings=self.embeddings)
        self.generator_head = heads.MlmHead(self.gen_cfg)
        self.encoder = Encoder(self.cfg, embeddings=self.embeddings)  # the discriminator
        self.rtd_head = heads.RtdHead(self.cfg)

    def generate(self, input_ids, segment_ids, attention_mask, positions, document_ids,
                 mlm_positions, deterministic=True):
        """Generator MLM logits at the masked positions: [B, P, V]."""
        hidden, _ = self.generator(input_ids, segment_ids, attention_mask, positions,
                                   document_ids, deterministic)
        return self.generator_head(hidden, mlm_positions, self.embeddings.attend)

    def discriminate(self, input_ids, segment_ids, attention_mask, positions, document_ids,
                     deterministic=True):
        """Per-token 'replaced' logits [B, T] and the discriminator's hidden states."""
        hidden, aux = self.encoder(input_ids, segment_ids, attention_mask, positions,
                                   document_ids, deterministic)
        return self.rtd_head(hidden), {**aux, "encoded": hidden}

    def __call__(self, input_ids, segment_ids, attention_mask, positions=None,
                 document_ids=None, mlm_positions=None, deterministic=True):
        """Runs both halves on the same input (used by init)."""
        gen_logits = self.generate(input_ids, segment_ids, attention_mask, positions,
                                   document_ids, mlm_positions, deterministic)
        rtd_logits, aux = self.discriminate(input_ids, segment_ids, attention_mask, positions,
                                            document_ids, deterministic)
        return {"mlm_logits": gen_logits, "rtd_logits": rtd_logits}, aux


class _TaskModel(nn.Module):
    """Encoder + one task head; a subclass names the head and how it reads H [B, T, D]."""
    cfg: Any
    num_labels: int = 0
    pooling: str = "cls"

    def setup(self):
        self.encoder = Encoder(self.cfg)
        self.head = self.make_head()

    def __call__(self, input_ids, segment_ids=None, attention_mask=None, deterministic=True):
        hidden, aux = self.encoder(input_ids, segment_ids, attention_mask,
                                   deterministic=deterministic)
        return self.read(hidden, attention_mask, deterministic), {**aux, "encoded": hidden}


class SequenceClassifier(_TaskModel):
    """Pooled classifier (C logits) or regressor (C = 1): [B, C]."""

    def make_head(self):
        return heads.SequenceHead(self.cfg, self.num_labels, self.pooling)

    def read(self, hidden, attention_mask, deterministic):
        return self.head(hidden, attention_mask, deterministic)


class TokenClassifier(_TaskModel):
    """Per-token classifier: [B, T, C]."""

    def make_head(self):
        return heads.TokenHead(self.cfg, self.num_labels)

    def read(self, hidden, attention_mask, deterministic):
        return self.head(hidden, deterministic)


class SpanExtractor(_TaskModel):
    """Start/end logits ([B, T] each), for extractive QA."""

    def make_head(self):
        return heads.SpanHead(self.cfg)

    def read(self, hidden, attention_mask, deterministic):
        return self.head(hidden)


class Embedder(_TaskModel):
    """Pooling -> L2-normalised sentence vectors [B, D] (Sentence-BERT)."""
    pooling: str = "mean"

    def make_head(self):
        return heads.Pooler(self.cfg, self.pooling)

    def read(self, hidden, attention_mask, deterministic):
        import jax.numpy as jnp
        pooled = self.head(hidden, attention_mask)
        norm = jnp.sqrt(jnp.sum(pooled * pooled, axis=-1, keepdims=True))
        return pooled / jnp.maximum(norm, 1e-12)
