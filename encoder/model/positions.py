"""Position schemes: how an encoder learns where a token sits.

A scheme can touch the model in three places, and each entry of POSITIONS says
which it uses:
  * `absolute`: a module adding a position vector to the token embedding
    (BERT's learned table, the Transformer's sinusoids);
  * `rotary`:   rotate queries and keys by position (RoPE, Su et al. 2021);
  * `bias`:     a module producing an additive attention bias [B, H, T, T]
    from position offsets (ALiBi, Press et al. 2022; T5's bucketed relative
    bias, Raffel et al. 2020 §2.1).

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


@dataclasses.dataclass(frozen=True)
class PositionScheme:
    """Where a scheme enters the model; see the module docstring."""
    absolute: Callable[..., nn.Module] | None = None  # (num_positions, features, init_std)
    rotary: bool = False
    bias: Callable[[Any], nn.Module] | None = None  # (model config) -> module


POSITIONS: dict[str, PositionScheme] = {
    "learned": PositionScheme(absolute=LearnedPositions),
    "sinusoidal": PositionScheme(absolute=SinusoidalPositions),
    "rope": PositionScheme(rotary=True),
    "alibi": PositionScheme(bias=lambda cfg: AlibiBias(cfg.num_heads)),
    "t5_bias": PositionScheme(bias=lambda cfg: T5Bias(
        cfg.num_heads, cfg.t5_num_buckets, cfg.t5_max_distance, cfg.initializer_range)),
    "none": PositionScheme(),
}
