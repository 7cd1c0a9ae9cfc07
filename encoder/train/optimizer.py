"""Optimizers as names (one table), sharing the clipping and the weight-decay mask; the
parameter EMA; the learning-rate schedule (encoder/train/schedules.py).

    optimizer      the update rule
    adamw          optax.adamw (Loshchilov & Hutter 2019)
    stable_adamw   AdamW with per-tensor update clipping (Wortsman et al. 2023, "Stable and
                   low-precision training for large-scale vision-language models", Alg. 2;
                   ModernBERT's optimizer): each tensor's Adam step is divided by
                   max(1, RMS_t), RMS_t = sqrt(mean(g_t^2 / max(v_hat_t, eps^2)))
    lion           optax.lion (Chen et al. 2023), with train.b1 / train.b2

Every optimizer is chain(clip_by_global_norm(clip_norm) | identity, rule, [ema]); the
decay mask (decay_mask: kernels and embedding tables only) is the same for all.
`train.decoupled_weight_decay` makes the decay independent of the peak learning rate
(optimi's / ModernBERT's "fully decoupled" decay: p -= wd * lr_t / lr_peak * p).

StableAdamW's RMS is a mean over the whole tensor computed inside the jitted step on the
global (sharded) array, so under FSDP XLA reduces across the shards: the per-shard
flattening that breaks ModernBERT's PyTorch version under FSDP does not arise here
(tests/train/test_optimizers.py: 8 devices, data=4 x fsdp=2, equal 1 device to 1e-5).

The EMA (train.ema_decay > 0) is an optax transform at the end of the chain whose state is
ema_t = d ema_{t-1} + (1 - d) params_t (ema_0 = the initial params): it lives in the
optimizer state, so it is sharded like the parameters (its leaves have their shapes),
saved with every checkpoint, carried by init_state=full, and read by `ema_params`.

A wall-clock budget (train.time_budget_s > 0; cramming's budget schedules, Geiping &
Goldstein 2023) keeps the schedule's shape but reads it on a clock: the rule is built at
learning rate 1 and `scale_by_clock` multiplies its step by schedule(p * num_steps), where
p = elapsed / budget lives in the optimizer state (a replicated scalar) and the training
loop sets it before every step (`set_clock`). warmup_steps and decay_steps are therefore
read as shares of train.num_steps, and num_steps is the schedule's horizon, not a count
the run must reach.
"""
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from encoder import registry
from encoder.train import schedules

SCHEDULES = tuple(schedules.SCHEDULES)


def learning_rate_schedule(train_cfg) -> optax.Schedule:
    """The configured schedule over train.num_steps (warmup included)."""
    return schedules.make(train_cfg)


def decay_mask(params):
    """True for matrices (kernels, embedding tables); False for biases and norm gains."""
    def is_decayed(path, _):
        return getattr(path[-1], "key", None) in ("kernel", "embedding")
    return jax.tree_util.tree_map_with_path(is_decayed, params)


def scale_by_stable_adam(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """Adam's bias-corrected direction, each tensor's divided by max(1, RMS_t) (see module
    docstring). The state is optax's ScaleByAdamState, so it shards as Adam's does."""
    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=zeros,
                                      nu=jax.tree.map(jnp.zeros_like, params))

    def update(updates, state, params=None):
        del params
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), state.nu, updates)
        count = optax.safe_int32_increment(state.count)
        t = count.astype(jnp.float32)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t

        def step(g, m, v):
            m_hat, v_hat = m / c1, v / c2
            rms = jnp.sqrt(jnp.mean(jnp.square(g) / jnp.maximum(v_hat, eps * eps)))
            return m_hat / (jnp.sqrt(v_hat) + eps) / jnp.maximum(1.0, rms)

        return (jax.tree.map(step, updates, mu, nu),
                optax.ScaleByAdamState(count=count, mu=mu, nu=nu))

    return optax.GradientTransformation(init, update)


class EmaState(NamedTuple):
    ema: Any  # a tree like params


def ema_of_params(decay: float) -> optax.GradientTransformation:
    """Keeps ema_t = decay * ema_{t-1} + (1 - decay) * (params + updates); updates pass
    through unchanged (it must be the chain's last transform)."""
    def init(params):
        return EmaState(ema=jax.tree.map(lambda p: jnp.asarray(p, jnp.float32), params))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("ema_of_params needs the parameters (tx.update(g, s, params))")
        new = optax.apply_updates(params, updates)
        ema = jax.tree.map(lambda e, p: decay * e + (1 - decay) * p, state.ema, new)
        return updates, EmaState(ema=ema)

    return optax.GradientTransformation(init, update)


class ClockState(NamedTuple):
    progress: jax.Array  # f32[]: the share of the time budget spent before this step


def scale_by_clock(lr_of_progress: Callable) -> optax.GradientTransformation:
    """Multiplies the updates by lr_of_progress(progress); progress is set by the host."""
    def init(params):
        del params
        return ClockState(progress=jnp.zeros([], jnp.float32))

    def update(updates, state, params=None):
        del params
        lr = lr_of_progress(state.progress)
        return jax.tree.map(lambda u: u * lr, updates), state

    return optax.GradientTransformation(init, update)


def set_clock(opt_state, progress: float):
    """opt_state with every ClockState's progress set (a float in [0, 1])."""
    is_clock = lambda x: isinstance(x, ClockState)  # noqa: E731
    value = jnp.asarray(progress, jnp.float32)
    return jax.tree.map(lambda x: ClockState(progress=value) if is_clock(x) else x,
                        opt_state, is_leaf=is_clock)


def clock_schedule(schedule: optax.Schedule, num_steps: int) -> Callable:
    """The learning rate at a share p of the time budget: the step schedule at p * steps."""
    return lambda p: schedule(jnp.asarray(p, jnp.float32) * num_steps)


def ema_params(opt_state):
    """The EMA tree held in an optimizer state, or None when the run keeps none."""
    is_ema = lambda x: isinstance(x, EmaState)  # noqa: E731
    found = [s for s in jax.tree_util.tree_leaves(opt_state, is_leaf=is_ema) if is_ema(s)]
    return found[0].ema if found else None


def _weight_decay(train_cfg, peak: float | None) -> float:
    wd = float(train_cfg.weight_decay)
    if train_cfg.get("decoupled_weight_decay", False):
        peak = float(train_cfg.learning_rate if peak is None else peak)
        return wd / peak if peak else 0.0
    return wd


def _adamw(train_cfg, lr, wd):
    return optax.adamw(lr, b1=train_cfg.b1, b2=train_cfg.b2, eps=train_cfg.eps,
                       weight_decay=wd, mask=decay_mask)


def _stable_adamw(train_cfg, lr, wd):
    return optax.chain(scale_by_stable_adam(train_cfg.b1, train_cfg.b2, train_cfg.eps),
                       optax.add_decayed_weights(wd, decay_mask),
                       optax.scale_by_learning_rate(lr))


def _lion(train_cfg, lr, wd):
    return optax.lion(lr, b1=train_cfg.b1, b2=train_cfg.b2, weight_decay=wd, mask=decay_mask)


# name -> (train_cfg, learning rate schedule, weight decay) -> the update rule
OPTIMIZERS: dict[str, Callable] = {"adamw": _adamw, "stable_adamw": _stable_adamw,
                                   "lion": _lion}


def validate(train_cfg) -> None:
    registry.lookup(OPTIMIZERS, train_cfg.get("optimizer", "adamw"), "optimizer")
    schedules.validate(train_cfg)
    d = float(train_cfg.get("ema_decay", 0.0))
    if not 0.0 <= d < 1.0:
        raise ValueError(f"train.ema_decay must be in [0, 1) (0: no EMA), got {d}")
    budget = float(train_cfg.get("time_budget_s", 0.0))
    if budget < 0 or budget != budget:
        raise ValueError(f"train.time_budget_s must be >= 0 (0: no budget), got {budget}")


def make_optimizer(train_cfg, schedule: optax.Schedule | None = None,
                   peak_learning_rate: float | None = None) -> optax.GradientTransformation:
    """clip -> the named rule -> EMA (when train.ema_decay > 0).

    schedule: the learning rate by step (default: train's own schedule; a phased run
    passes the joined schedule of its phases, encoder/train/phases.py).
    peak_learning_rate: what decoupled weight decay divides by (default train.learning_rate).
    With train.time_budget_s > 0 the rule runs at learning rate 1 and `scale_by_clock`
    applies the schedule at the budget's share spent (module docstring).
    """
    validate(train_cfg)
    lr = learning_rate_schedule(train_cfg) if schedule is None else schedule
    on_clock = float(train_cfg.get("time_budget_s", 0.0)) > 0
    rule = OPTIMIZERS[train_cfg.get("optimizer", "adamw")](
        train_cfg, 1.0 if on_clock else lr, _weight_decay(train_cfg, peak_learning_rate))
    parts = [optax.clip_by_global_norm(train_cfg.clip_norm) if train_cfg.clip_norm > 0
             else optax.identity(), rule]
    if on_clock:
        parts.append(scale_by_clock(clock_schedule(lr, int(train_cfg.num_steps))))
    if float(train_cfg.get("ema_decay", 0.0)) > 0:
        parts.append(ema_of_params(float(train_cfg.ema_decay)))
    return optax.chain(*parts)
