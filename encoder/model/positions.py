"""Position schemes: how an encoder learns where a token sits.

A scheme can touch the model in three places, and each entry of POSITIONS says
which it uses:
  * `absolute`: a module adding a position vector to the token embedding
    (BERT's learned table, the Transformer's sinusoids);
  * `rotary`:   rotate queries and keys by position (RoPE, Su et al. 2021);
  * `bias`:     a module producing an additive attention bias [B, H, T, T]
    from position offsets (ALiBi, Press et al. 2022; T5's bucketed relative
    bias, Raffel et al. 2020 §2.1);
  * `disentangled`: a module producing shared relative-position embeddings
    and each query-key pair's bucket index; every attention layer projects the
    embeddings with its own query/key weights and adds DeBERTa's
    content->position and position->content scores (He et al. 2021 §3.1).
    A bias from positions alone cannot express these terms: they read the
    layer's queries and keys.

Axes: B batch, T tokens, E embedding width, H heads, K head dim.
Positions are integer ids [B, T]; with packed rows they may restart at every
document, so offsets i - j are taken from position ids, not token indices.
"""
import dataclasses
import math
from typing import Any, Callable

import flax.linen as nn
import jax.numpy as jnp
import numpy as np


def sinusoidal_table(num_positions: int, dim: int) -> np.ndarray:
    """Vaswani et al. 2017 §3.5 table: sin on even, cos on odd channels."""
    position = np.arange(num_positions, dtype=np.float64)[:, None]
    freq = np.exp(-math.log(10000.0) * np.arange(0, dim, 2, dtype=np.float64) / dim)
    table = np.zeros((num_positions, dim), dtype=np.float32)
    table[:, 0::2] = np.sin(position * freq)
    table[:, 1::2] = np.cos(position * freq)[:, : dim // 2]
    return table


class LearnedPositions(nn.Module):
    """BERT's learned absolute position table: positions [B, T] -> [B, T, E]."""
    num_positions: int
    features: int
    init_std: float = 0.02

    @nn.compact
    def __call__(self, positions: jnp.ndarray) -> jnp.ndarray:
        table = self.param(
            "embedding",
            nn.with_logical_partitioning(
                nn.initializers.normal(self.init_std), ("positions", "embed")),
            (self.num_positions, self.features))
        return jnp.take(table, positions, axis=0)  # [B, T, E]


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal table (no parameters): positions [B, T] -> [B, T, E]."""
    num_positions: int
    features: int
    init_std: float = 0.02  # unused; keeps the constructor uniform

    def __call__(self, positions: jnp.ndarray) -> jnp.ndarray:
        table = jnp.asarray(sinusoidal_table(self.num_positions, self.features))
        return jnp.take(table, positions, axis=0)


def apply_rope(x: jnp.ndarray, positions: jnp.ndarray, theta: float) -> jnp.ndarray:
    """Rotates x [B, T, H, K] by angle position * theta^(-2i/K).

    Uses the half-split pairing (channel i with i + K/2), as GPT-NeoX and
    ModernBERT do. Computed in float32, returned in x's dtype.
    """
    k = x.shape[-1]
    if k % 2:
        raise ValueError(f"RoPE needs an even head dimension, got {k}")
    inv_freq = theta ** (-jnp.arange(0, k // 2, dtype=jnp.float32) * 2.0 / k)  # [K/2]
    angle = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, K/2]
    cos = jnp.cos(angle)[:, :, None, :]  # [B, T, 1, K/2]
    sin = jnp.sin(angle)[:, :, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)


def alibi_slopes(num_heads: int) -> np.ndarray:
    """Press et al. 2022: geometric slopes 2^(-8/n), 2^(-16/n), ...

    For a head count that is not a power of two, the closest smaller power's
    slopes are followed by every other slope of the next power (as in the
    paper's reference code).
    """
    def power_of_two(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(num_heads).is_integer():
        slopes = power_of_two(num_heads)
    else:
        closest = 2 ** math.floor(math.log2(num_heads))
        slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][: num_heads - closest]
    return np.asarray(slopes, dtype=np.float32)


class AlibiBias(nn.Module):
    """Symmetric ALiBi for a bidirectional encoder: bias = -slope_h * |i - j|."""
    num_heads: int

    def __call__(self, positions: jnp.ndarray) -> jnp.ndarray:
        offset = positions[:, None, :, None] - positions[:, None, None, :]  # [B, 1, T, T]
        slopes = jnp.asarray(alibi_slopes(self.num_heads))[None, :, None, None]
        return -slopes * jnp.abs(offset).astype(jnp.float32)  # [B, H, T, T]


def t5_relative_bucket(offset: jnp.ndarray, num_buckets: int, max_distance: int) -> jnp.ndarray:
    """T5's bidirectional bucketing of offset = key_pos - query_pos.

    Half the buckets per direction; within a direction, the first half of the
    buckets are exact offsets and the rest grow logarithmically up to
    max_distance, beyond which everything shares the last bucket.
    """
    half = num_buckets // 2
    bucket = jnp.where(offset > 0, half, 0)
    distance = jnp.abs(offset)
    exact = half // 2
    is_small = distance < exact
    log_ratio = jnp.log(jnp.maximum(distance, 1).astype(jnp.float32) / exact) / math.log(
        max_distance / exact)
    large = exact + (log_ratio * (half - exact)).astype(jnp.int32)
    large = jnp.minimum(large, half - 1)
    return bucket + jnp.where(is_small, distance, large)


class T5Bias(nn.Module):
    """Learned per-head scalar for each relative-position bucket."""
    num_heads: int
    num_buckets: int = 32
    max_distance: int = 128
    init_std: float = 0.02

    @nn.compact
    def __call__(self, positions: jnp.ndarray) -> jnp.ndarray:
        table = self.param(
            "embedding",
            nn.with_logical_partitioning(
                nn.initializers.normal(self.init_std), ("buckets", "heads")),
            (self.num_buckets, self.num_heads))
        offset = positions[:, None, :] - positions[:, :, None]  # [B, T(query), T(key)]
        buckets = t5_relative_bucket(offset, self.num_buckets, self.max_distance)
        bias = jnp.take(table, buckets, axis=0)  # [B, T, T, H]
        return jnp.transpose(bias, (0, 3, 1, 2)).astype(jnp.float32)  # [B, H, T, T]


def deberta_log_bucket(offset: jnp.ndarray, num_buckets: int, max_distance: int) -> jnp.ndarray:
    """DeBERTa-v2's log buckets of offset = query_pos - key_pos (He et al. 2021, v2 release).

    Offsets with |offset| <= num_buckets // 2 keep their value; larger ones map
    to mid + ceil(log(|offset| / mid) / log((max_distance - 1) / mid) * (mid - 1))
    with the offset's sign, so buckets grow logarithmically and reach about
    ±num_buckets at max_distance (beyond, the caller's clamp takes over).
    num_buckets <= 0: no bucketing, the offset itself. Computed in float32 as the
    reference implementation does, so the ceil lands on the same integers.
    """
    if num_buckets <= 0:
        return offset
    mid = num_buckets // 2
    sign = jnp.sign(offset)
    near = (offset < mid) & (offset > -mid)
    distance = jnp.where(near, mid - 1, jnp.abs(offset))  # mid - 1: keeps log() finite
    ratio = distance.astype(jnp.float32) / mid
    log_pos = jnp.ceil(jnp.log(ratio) / jnp.log(jnp.float32((max_distance - 1) / mid))
                       * (mid - 1)) + mid
    return jnp.where(distance <= mid, offset, (log_pos * sign).astype(offset.dtype))


def deberta_span(num_buckets: int, max_distance: int) -> int:
    """Half the relative-embedding table: buckets per direction (the reference's att_span)."""
    return num_buckets if num_buckets > 0 else max_distance


class DisentangledPositions(nn.Module):
    """DeBERTa's relative-position embeddings P [2S, D], shared by every layer.

    positions [B, T] -> (P after LayerNorm [2S, D], index [B, T, T]) with
    index[b, i, j] = clip(bucket(pos_i - pos_j) + S, 0, 2S - 1): row δ(i, j) of
    He et al. 2021 eq. 3. Offsets come from position ids, so packed rows whose
    positions restart per document see the same offsets as separate rows.
    The LayerNorm on P is DeBERTa-v2/v3's `norm_rel_ebd=layer_norm`.
    """
    features: int
    num_buckets: int = 256
    max_distance: int = 512
    init_std: float = 0.02
    layer_norm_eps: float = 1e-7
    use_bias: bool = True
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, positions: jnp.ndarray):
        span = deberta_span(self.num_buckets, self.max_distance)
        table = self.param(
            "embedding",
            nn.with_logical_partitioning(
                nn.initializers.normal(self.init_std), ("buckets", "embed")),
            (2 * span, self.features))
        table = nn.LayerNorm(
            epsilon=self.layer_norm_eps, use_bias=self.use_bias, dtype=self.dtype,
            scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("norm",)),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("norm",)),
            name="norm")(table)  # [2S, D]
        offset = positions[:, :, None] - positions[:, None, :]  # [B, T(query), T(key)]: i - j
        bucket = deberta_log_bucket(offset, self.num_buckets, self.max_distance)
        return table, jnp.clip(bucket + span, 0, 2 * span - 1)  # [2S, D], [B, T, T]


DEBERTA_TERMS = 2  # c2p and p2c: DeBERTa scales scores by 1/sqrt(K * (1 + terms))


def disentangled_scores(q, k, pos_q, pos_k, index) -> jnp.ndarray:
    """c2p + p2c scores [B, H, T, T] in float32, unscaled (He et al. 2021 eq. 4).

    q, k: [B, T, H, K] the layer's content queries/keys; pos_q, pos_k: [2S, H, K]
    the relative embeddings through the same layer's query/key projections
    (DeBERTa-v2's share_att_key); index: [B, T, T] rows δ(i, j).
      c2p[i, j] = q_i . pos_k[δ(i, j)]   (content-to-position)
      p2c[i, j] = k_j . pos_q[δ(i, j)]   (position-to-content)
    p2c uses the same row as c2p, as the released DeBERTa code (which checkpoints
    follow) does: it gathers at the negated key-major offset and transposes, and
    the two sign flips cancel.
    Both are computed against all 2S rows and gathered: O(T S) products
    instead of materialising [B, T, T, K] relative vectors.
    """
    b, t = index.shape[:2]
    h = q.shape[2]
    c2p = jnp.einsum("bqhk,rhk->bhqr", q, pos_k).astype(jnp.float32)  # [B, H, T, 2S]
    c2p = jnp.take_along_axis(c2p, jnp.broadcast_to(index[:, None], (b, h, t, t)), axis=-1)
    p2c = jnp.einsum("bshk,rhk->bhsr", k, pos_q).astype(jnp.float32)  # [B, H, T(key), 2S]
    key_major = jnp.swapaxes(index, 1, 2)[:, None]  # [B, 1, T(key), T(query)]
    p2c = jnp.take_along_axis(p2c, jnp.broadcast_to(key_major, (b, h, t, t)), axis=-1)
    return c2p + jnp.swapaxes(p2c, -1, -2)  # [B, H, T(query), T(key)]


def disentangled_attention(q, k, pos_q, pos_k, index, bias=None):
    """Folds DeBERTa's terms into (q', bias') for any softmax(q'k^T/sqrt(K) + bias') kernel.

    DeBERTa: softmax((q.k + c2p + p2c) / sqrt(3K)) (He et al. 2021 eq. 4). The
    kernels scale by 1/sqrt(K), so q' = q / sqrt(3) and the position terms
    enter as an additive float32 bias (c2p + p2c) / sqrt(3K); masks stay
    separate, so padding, document and window masks work unchanged.
    Returns q' [B, T, H, K] and bias' [B, H, T, T].
    """
    factor = 1 + DEBERTA_TERMS
    scale = (q.shape[-1] * factor) ** -0.5
    rel = disentangled_scores(q, k, pos_q, pos_k, index) * scale
    q = (q.astype(jnp.float32) * factor ** -0.5).astype(q.dtype)
    return q, rel if bias is None else bias + rel


@dataclasses.dataclass(frozen=True)
class PositionScheme:
    """Where a scheme enters the model; see the module docstring."""
    absolute: Callable[..., nn.Module] | None = None  # (num_positions, features, init_std)
    rotary: bool = False
    bias: Callable[[Any], nn.Module] | None = None  # (model config) -> module
    # (model config) -> module: positions -> (relative table [2S, D], index [B, T, T]),
    # owned by the Encoder and read by every SelfAttention (DeBERTa)
    disentangled: Callable[[Any], nn.Module] | None = None


POSITIONS: dict[str, PositionScheme] = {
    "learned": PositionScheme(absolute=LearnedPositions),
    "sinusoidal": PositionScheme(absolute=SinusoidalPositions),
    "rope": PositionScheme(rotary=True),
    "alibi": PositionScheme(bias=lambda cfg: AlibiBias(cfg.num_heads)),
    "t5_bias": PositionScheme(bias=lambda cfg: T5Bias(
        cfg.num_heads, cfg.t5_num_buckets, cfg.t5_max_distance, cfg.initializer_range)),
    "deberta": PositionScheme(disentangled=lambda cfg: DisentangledPositions(
        cfg.hidden_size, cfg.deberta_position_buckets, cfg.deberta_max_relative_positions,
        cfg.initializer_range, cfg.layer_norm_eps, cfg.use_bias, jnp.dtype(cfg.dtype))),
    "none": PositionScheme(),
}
