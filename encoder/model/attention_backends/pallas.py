"""The Pallas kernels: `splash` (TPU splash attention) and `pallas_gpu` (jax's Triton flash
attention, ops.gpu.attention.mha). Both mask by segment ids (no T x T mask) and run inside
shard_map over the mesh's batch axes: a Mosaic call cannot be partitioned by XLA, and a
Triton call left to GSPMD gathers its operands to the whole global batch.

Each runs natively where the step is compiled for its platform (the mesh's devices, not
the host's: a TPU topology compiled on a CPU gets the real kernel) and in Pallas interpret
mode elsewhere, which is how CPU tests check them against `reference`.

Axes: B batch, T tokens, H heads, K head dim.
"""
import concurrent.futures
import functools

import jax
from jax.experimental.pallas.ops.gpu import attention as pallas_gpu_attention
from jax.experimental.pallas.ops.tpu import splash_attention
import jax.numpy as jnp

from encoder.model import sharding
from encoder.model.attention_backends import events
from encoder.model.attention_pattern import kernel_segment_ids


def interpret_mode(platform: str, name: str) -> bool:
    """Whether a `platform` kernel runs in Pallas interpret mode: where the step is compiled
    for another platform (CPU tests), said once."""
    target = sharding.target_platform()
    if target == platform:
        return False
    events.note(f"attention_impl={name} is a {platform.upper()} kernel; compiled for "
                f"{target} it runs in Pallas interpret mode (slow: for tests)")
    return True


def _kernel_path(name: str, interpret: bool) -> str:
    return f"{name} (interpret)" if interpret else name


# ---- splash (TPU) ----

SPLASH_BLOCKS = (512, 256, 128)  # the largest that divides T; the kernel's lanes need 128 |


@functools.lru_cache(maxsize=None)
def _splash_kernel(length: int, heads: int, window: int, interpret: bool):
    """A splash kernel for [H, T, K] inputs; cached: the block-sparsity is computed on the host.

    The local window is a LocalMask, so kv blocks wholly outside it are skipped
    (O(T w) work); documents and padding come per call as segment ids.
    """
    shape = (length, length)
    one = (splash_attention.LocalMask(shape, (window // 2, window // 2), 0) if window
           else splash_attention.FullMask(shape))
    block = next(b for b in SPLASH_BLOCKS if length % b == 0)
    sizes = splash_attention.BlockSizes(
        block_q=block, block_kv=block, block_kv_compute=block,
        block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
        block_q_dq=block, block_kv_dq=block)
    def build():
        return splash_attention.make_splash_mha(
            splash_attention.MultiHeadMask([one] * heads), block_sizes=sizes,
            head_shards=1, q_seq_shards=1, interpret=interpret)

    # Built on a fresh thread, where no trace is active (JAX's trace state is per thread):
    # the cached kernel's mask tables must be concrete constants, never tracers of the
    # transformation that first asked (ensure_compile_time_eval misses flax's nn.scan).
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(build).result()


def run_splash(q, k, v, bias, pattern):
    """Splash attention (Pallas TPU): segment ids and a block-sparse local window, no T x T mask.

    The kernel does not scale the logits: q is scaled by 1/sqrt(K) first, in float32. Each
    chip runs it on its own rows (sharding.batch_sharded).
    """
    del bias  # refused
    _, length, heads, head_dim = q.shape
    interpret = interpret_mode("tpu", "splash")
    events.took(_kernel_path("splash", interpret), pattern.window)
    kernel = _splash_kernel(length, heads, pattern.window, interpret)
    q = (q.astype(jnp.float32) * head_dim ** -0.5).astype(q.dtype)
    ids = kernel_segment_ids(pattern)  # [B, T]

    def local(q, k, v, *ids):  # this chip's rows
        qh, kh, vh = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))  # [b, H, T, K]
        if not ids:
            out = jax.vmap(kernel)(qh, kh, vh)
        else:
            out = jax.vmap(lambda q1, k1, v1, s: kernel(
                q1, k1, v1, segment_ids=splash_attention.SegmentIds(s, s)))(qh, kh, vh, ids[0])
        return jnp.swapaxes(out, 1, 2)  # [b, T, H, K]
    return sharding.batch_sharded(local, q, k, v, *(() if ids is None else (ids,)))


def refuse_splash(q, bias, pattern) -> str | None:
    del pattern
    if bias is not None:
        return "splash attention takes no additive bias (alibi, t5_bias, deberta)"
    if q.shape[1] % SPLASH_BLOCKS[-1]:
        return f"splash attention needs T a multiple of {SPLASH_BLOCKS[-1]}, got {q.shape[1]}"
    if q.dtype not in (jnp.float32, jnp.bfloat16):
        return f"splash attention runs in float32 or bfloat16, got {q.dtype}"
    return None


# ---- pallas_gpu (Triton) ----

PALLAS_GPU_BLOCKS = (128, 32)  # mha's default forward and backward blocks (each min'd with T)
PALLAS_GPU_MAX_HEAD_DIM = 128


def triton_mha(q, k, v, segment_ids, interpret: bool = False):
    """jax's Triton flash attention on [B, T, H, K] rows, softmax scale 1/sqrt(K)."""
    return pallas_gpu_attention.mha(q, k, v, segment_ids, sm_scale=q.shape[-1] ** -0.5,
                                    interpret=interpret)


def run_pallas_gpu(q, k, v, bias, pattern):
    """Pallas Triton flash attention with segment ids, inside shard_map over the batch axes."""
    del bias  # refused
    interpret = interpret_mode("gpu", "pallas_gpu")
    events.took(_kernel_path("pallas_gpu", interpret), pattern.window)
    ids = kernel_segment_ids(pattern)  # [B, T]

    def local(q, k, v, *ids):  # this device's rows: GSPMD would gather the global batch
        return triton_mha(q, k, v, ids[0] if ids else None, interpret)
    return sharding.batch_sharded(local, q, k, v, *(() if ids is None else (ids,)))


def refuse_pallas_gpu(q, bias, pattern) -> str | None:
    length, head_dim = q.shape[1], q.shape[-1]
    if bias is not None:
        return "pallas_gpu attention takes no additive bias (alibi, t5_bias, deberta)"
    if pattern.window:
        return "pallas_gpu attention has no local window"
    if any(length % min(b, length) for b in PALLAS_GPU_BLOCKS):
        return (f"pallas_gpu attention needs T a multiple of its blocks {PALLAS_GPU_BLOCKS}, "
                f"got {length}")
    if head_dim < 16:
        return f"pallas_gpu attention (Triton dots) needs a head dim >= 16, got {head_dim}"
    if head_dim > PALLAS_GPU_MAX_HEAD_DIM:
        # its 128-row blocks of q, k and v at head dim 256 ask 320 KiB of shared memory; an
        # H100 has 227 KiB a block (the CUDA compiler refuses it: tests/e2e/test_gpu_compile)
        return (f"pallas_gpu attention's blocks exceed a GPU's shared memory above head dim "
                f"{PALLAS_GPU_MAX_HEAD_DIM}, got {head_dim}")
    return None
