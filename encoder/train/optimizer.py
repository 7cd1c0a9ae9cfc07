"""AdamW with warmup + decay, clipping, and no decay on biases and norms."""
import jax
import optax

SCHEDULES = ("linear", "cosine", "constant")


def learning_rate_schedule(train_cfg) -> optax.Schedule:
    """Linear warmup to the peak, then linear / cosine decay (or constant)."""
    peak, warmup, total = train_cfg.learning_rate, train_cfg.warmup_steps, train_cfg.num_steps
    end = peak * train_cfg.end_learning_rate_fraction
    decay_steps = max(total - warmup, 1)
    if train_cfg.schedule == "linear":
        decay = optax.linear_schedule(peak, end, decay_steps)
    elif train_cfg.schedule == "cosine":
        decay = optax.cosine_decay_schedule(peak, decay_steps, alpha=end / peak if peak else 0.0)
    elif train_cfg.schedule == "constant":
        decay = optax.constant_schedule(peak)
    else:
        raise ValueError(f"Unknown schedule {train_cfg.schedule!r}; valid names: "
                         f"{', '.join(SCHEDULES)}")
    if warmup <= 0:
        return decay
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), decay], [warmup])


def decay_mask(params):
    """True for matrices (kernels, embedding tables); False for biases and norm gains."""
    def is_decayed(path, _):
        return getattr(path[-1], "key", None) in ("kernel", "embedding")
    return jax.tree_util.tree_map_with_path(is_decayed, params)


def make_optimizer(train_cfg) -> optax.GradientTransformation:
    tx = optax.chain(
        optax.clip_by_global_norm(train_cfg.clip_norm) if train_cfg.clip_norm > 0
        else optax.identity(),
        optax.adamw(learning_rate_schedule(train_cfg), b1=train_cfg.b1, b2=train_cfg.b2,
                    eps=train_cfg.eps, weight_decay=train_cfg.weight_decay, mask=decay_mask),
    )
    return tx
