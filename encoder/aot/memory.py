"""What a step must hold that cannot fit, found before anything is prepared or compiled.

Exact per-device memory comes from compiling the step (`encoder bench --mode=compile`); a
run cannot wait for that, so this module checks one lower bound a user can read: dense
attention materialises each layer's scores, rows x heads x T x T in float32 (the softmax
runs in float32), at least once per layer in the forward pass. When that alone exceeds
the device's memory the run is refused with the figure, instead of dying of an
out-of-memory error minutes later.
"""
import os

import jax

DENSE = ("xla", "reference")


def device_memory_bytes(device) -> int | None:
    """The memory one device can hold: the accelerator's limit, or this host's RAM (the
    cgroup's limit where one is set) for a CPU device."""
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        return stats.get("bytes_limit")
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit.isdigit():
            ram = min(ram, int(limit))
    except OSError:
        pass
    return ram


def dense_attention(model_cfg, platform: str) -> bool:
    """Whether the step's attention materialises T x T scores: always on CPU; on an
    accelerator with an XLA backend asked for, or attention dropout (kernels have none)."""
    impl = model_cfg.get("attention_impl", "auto")
    return platform == "cpu" or impl in DENSE or float(model_cfg.attention_dropout) > 0


def attention_scores_bytes(model_cfg, rows_per_device: int, seq_len: int) -> int:
    """One layer's float32 attention scores on one device: rows x H x T x T x 4 bytes."""
    return int(rows_per_device) * int(model_cfg.num_heads) * int(seq_len) ** 2 * 4


def _size(n: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def check_fits(model_cfg, batch_size: int, grad_accum_steps: int, seq_len: int,
               devices=None, where: str = "") -> None:
    """Refuses a step whose dense attention scores of one layer alone exceed a device's
    memory, naming the figure and what to change."""
    devices = list(devices if devices is not None else jax.devices())
    platform = devices[0].platform
    if not dense_attention(model_cfg, platform):
        return
    available = device_memory_bytes(devices[0])
    if not available:
        return
    rows = max(1, batch_size // max(grad_accum_steps, 1) // len(devices))
    need = attention_scores_bytes(model_cfg, rows, seq_len)
    if need <= available:
        return
    raise ValueError(
        f"{where}data.seq_len={seq_len} cannot fit: one layer's attention scores alone are "
        f"{_size(need)} per device ({rows} rows x {model_cfg.num_heads} heads x {seq_len}^2 "
        f"x 4 bytes, dense attention on {platform}); a device here holds {_size(available)}. "
        "Lower data.seq_len or train.batch_size (or raise train.grad_accum_steps)"
        + (", or run where an attention kernel serves it (splash on TPU, cudnn on GPU)"
           if platform == "cpu" else ", or use attention_impl=auto without attention dropout"))
