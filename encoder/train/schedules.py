"""Learning-rate schedules: one table, name -> builder(train_cfg, num_steps) -> optax.Schedule.

Every schedule warms up linearly from 0 to the peak over `warmup_steps`
(none when 0), then:

  constant      peak
  linear        peak -> end linearly over the remaining steps (BERT)
  cosine        peak -> end along a half cosine (Loshchilov & Hutter 2017)
  inverse_sqrt  peak * sqrt(warmup / step) (Vaswani et al. 2017; T5's rsqrt);
                with no warmup, peak / sqrt(1 + step)
  wsd           warmup-stable-decay (trapezoidal; Zhai et al. 2022, Hägele et al.
                2024): peak until the last D steps, then peak -> end with
                `decay_shape` over D = decay_steps, or decay_fraction * num_steps
                when decay_steps is 0 (ModernBERT's WarmupStableDecayScheduler;
                its decay phase's OneMinusSqrtScheduler is wsd with
                decay_fraction=1.0 and decay_shape=1-sqrt)

`end` = learning_rate * end_learning_rate_fraction. The decay shapes (a
fraction p in [0, 1] of the decay done -> the share of (peak - end) left):

  linear   1 - p
  cosine   (1 + cos(pi p)) / 2
  1-sqrt   1 - sqrt(p)      (Hägele et al. 2024, "Scaling laws and compute-optimal
                             training beyond fixed training durations", §3)

A phase's schedule is evaluated on the phase's own step count (its first step
is 0); encoder/train/phases.py joins the phases' schedules into the run's.
Optional fields are read with .get, so fine-tuning's smaller train config
(encoder/finetune/config.py) builds its linear schedule unchanged.
"""
from typing import Callable

import jax.numpy as jnp
import optax

from encoder import registry


def _linear_shape(p):
    return 1.0 - p


def _cosine_shape(p):
    return 0.5 * (1.0 + jnp.cos(jnp.pi * p))


def _one_minus_sqrt_shape(p):
    return 1.0 - jnp.sqrt(p)


# name -> p in [0, 1] (share of the decay done) -> share of (peak - end) still left
DECAY_SHAPES: dict[str, Callable] = {"linear": _linear_shape, "cosine": _cosine_shape,
                                     "1-sqrt": _one_minus_sqrt_shape}


def _fields(train_cfg):
    peak = float(train_cfg.learning_rate)
    end = peak * float(train_cfg.get("end_learning_rate_fraction", 0.0))
    return peak, end, int(train_cfg.get("warmup_steps", 0))


def _decay(peak: float, end: float, steps: int, shape: str) -> optax.Schedule:
    """peak -> end over `steps` along a decay shape; end from then on."""
    f = registry.lookup(DECAY_SHAPES, shape, "decay shape")
    steps = max(int(steps), 1)

    def schedule(count):
        p = jnp.clip(jnp.asarray(count, jnp.float32) / steps, 0.0, 1.0)
        return end + (peak - end) * f(p)
    return schedule


def constant(train_cfg, num_steps: int) -> optax.Schedule:
    peak, _, _ = _fields(train_cfg)
    return optax.constant_schedule(peak)


def linear(train_cfg, num_steps: int) -> optax.Schedule:
    peak, end, warmup = _fields(train_cfg)
    return optax.linear_schedule(peak, end, max(num_steps - warmup, 1))


def cosine(train_cfg, num_steps: int) -> optax.Schedule:
    peak, end, warmup = _fields(train_cfg)
    return optax.cosine_decay_schedule(peak, max(num_steps - warmup, 1),
                                       alpha=end / peak if peak else 0.0)


def inverse_sqrt(train_cfg, num_steps: int) -> optax.Schedule:
    peak, _, warmup = _fields(train_cfg)
    # Counted from the end of warmup: step s after the start has lr peak * sqrt(w / (w + s)).
    timescale = max(warmup, 1)
    return lambda count: peak * jnp.sqrt(timescale / (timescale + jnp.asarray(count,
                                                                              jnp.float32)))


def wsd_decay_steps(train_cfg, num_steps: int) -> int:
    """D, the decay's length: decay_steps, or decay_fraction * num_steps (rounded), at most
    the steps after warmup."""
    warmup = int(train_cfg.get("warmup_steps", 0))
    d = int(train_cfg.get("decay_steps", 0)) or round(
        float(train_cfg.get("decay_fraction", 0.2)) * num_steps)
    return max(0, min(d, num_steps - warmup))


def wsd(train_cfg, num_steps: int) -> optax.Schedule:
    peak, end, warmup = _fields(train_cfg)
    d = wsd_decay_steps(train_cfg, num_steps)
    stable = num_steps - warmup - d
    decay = _decay(peak, end, d, train_cfg.get("decay_shape", "linear"))
    if stable <= 0:
        return decay
    return optax.join_schedules([optax.constant_schedule(peak), decay], [stable])


# name -> (train_cfg, num_steps) -> the schedule after warmup (count 0 = warmup's end)
SCHEDULES: dict[str, Callable] = {"constant": constant, "linear": linear, "cosine": cosine,
                                  "inverse_sqrt": inverse_sqrt, "wsd": wsd}


def validate(train_cfg) -> None:
    """Unknown names fail here, listing the valid ones; ranges are checked."""
    registry.lookup(SCHEDULES, train_cfg.get("schedule", "linear"), "schedule")
    registry.lookup(DECAY_SHAPES, train_cfg.get("decay_shape", "linear"), "decay shape")
    fraction = float(train_cfg.get("decay_fraction", 0.2))
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"train.decay_fraction must be in [0, 1], got {fraction}")
    if int(train_cfg.get("decay_steps", 0)) < 0:
        raise ValueError(f"train.decay_steps must be >= 0, got {train_cfg.decay_steps}")


def make(train_cfg, num_steps: int | None = None) -> optax.Schedule:
    """The warmed-up schedule over num_steps (default train.num_steps)."""
    validate(train_cfg)
    num_steps = int(train_cfg.num_steps if num_steps is None else num_steps)
    peak, _, warmup = _fields(train_cfg)
    after = SCHEDULES[train_cfg.get("schedule", "linear")](train_cfg, num_steps)
    if warmup <= 0:
        return after
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), after], [warmup])
