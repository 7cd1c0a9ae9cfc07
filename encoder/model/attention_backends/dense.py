"""The dense backends: `xla` and `reference`, and the path every backend falls back to.

`xla` is jax.nn.dot_product_attention on XLA with the dense [B, 1, T, T] mask folded into
the bias; `reference` is the float32-softmax einsums every test checks the others against
(and the only path that applies attention dropout). A layer a kernel cannot serve takes
`run_dense`: cuDNN on a GPU target, else XLA, on the dense mask, or on blocks of the row
for a local window (no T x T mask).

Axes: B batch, T tokens, H heads, K head dim; blocks: n blocks of C queries, 3C keys.
"""
import jax
import jax.numpy as jnp

from encoder.model import sharding
from encoder.model.attention_backends import events
from encoder.model.attention_pattern import (AttentionPattern, local_block_mask,
                                             local_block_size, local_blocks_apply, neighbours)


def reference_attention(q, k, v, bias=None, mask=None, dropout=None):
    """softmax(q k^T / sqrt(K) + bias) v with the softmax in float32.

    q, k, v: [B, T, H, K]; bias: [B, H, T, T] float; mask: [B, 1|H, T, T] bool.
    dropout: optional function applied to the attention probabilities.
    """
    scale = q.shape[-1] ** -0.5
    logits = jnp.einsum("bqhk,bshk->bhqs", q, k).astype(jnp.float32) * scale
    if bias is not None:
        logits = logits + bias
    if mask is not None:
        logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1)
    if dropout is not None:
        probs = dropout(probs)
    return jnp.einsum("bhqs,bshk->bqhk", probs.astype(v.dtype), v)


MASKED_BIAS = -1e9  # finite: a fully masked row softmaxes to uniform, never NaN
HOPPER = (9, 0)


def cudnn_head_dim_limit() -> int:
    """cuDNN flash attention's largest head dim on the target: 256 from Hopper, else 128."""
    cap = sharding.target_capability()
    return 256 if cap is not None and cap >= HOPPER else 128


def cudnn_usable(q, bias) -> bool:
    """cuDNN flash attention: NVIDIA GPU (the target's), half precision, head dim within the
    target's limit and a multiple of 8."""
    del bias
    return (sharding.target_platform() == "gpu" and q.dtype in (jnp.bfloat16, jnp.float16)
            and q.shape[-1] <= cudnn_head_dim_limit() and q.shape[-1] % 8 == 0)


def fused_attention(q, k, v, bias=None, mask=None, implementation="auto", window=0):
    """jax.nn.dot_product_attention, choosing cuDNN where it is allowed.

    Off cuDNN, a boolean mask is folded into the additive bias: the XLA path
    would otherwise select on the logits forward and on their gradient
    backward (a select per layer that an add does not need). `window` only names
    the layer's kind to the trace's observers (the mask already holds it).
    """
    impl = None if implementation == "auto" else implementation
    if impl is None and cudnn_usable(q, bias):
        impl = "cudnn"
    if mask is not None and impl != "cudnn":
        mask_bias = jnp.where(mask, 0.0, MASKED_BIAS).astype(jnp.float32)
        bias = mask_bias if bias is None else bias + mask_bias
        mask = None
    if bias is not None and impl == "cudnn":
        # cuDNN takes the bias in the compute dtype; XLA adds a float32 bias to its float32
        # logits, so ALiBi/T5/DeBERTa offsets keep their precision under bf16 compute.
        bias = bias.astype(q.dtype)
    events.took("cudnn" if impl == "cudnn" else "xla", window,
                "dense mask" if mask is not None or bias is not None else "")
    return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, implementation=impl)


def local_block_attention(q, k, v, pattern: AttentionPattern, implementation: str):
    """A bidirectional sliding-window layer (ModernBERT's local layers) as attention within
    blocks: queries in blocks of C >= window / 2, each reading its own and the neighbouring
    blocks' 3C keys under local_block_mask. Memory and work O(T * 3C), not O(T^2); the
    attention itself is a fused kernel call (cuDNN on a GPU, whose own sliding window is
    causal-only) over B * T / C short rows."""
    batch, length, heads, head_dim = q.shape
    block = local_block_size(pattern.window)
    n = length // block

    def blocks(x):  # [B, T, H, K] -> [B, n, C, H, K]
        return x.reshape(batch, n, block, heads, head_dim)
    qb = blocks(q).reshape(batch * n, block, heads, head_dim)
    kb, vb = (neighbours(blocks(x), 0).reshape(batch * n, 3 * block, heads, head_dim)
              for x in (k, v))
    mask = local_block_mask(pattern, batch, length).reshape(batch * n, 1, block, 3 * block)
    events.took(implementation, pattern.window, "local blocks")
    out = jax.nn.dot_product_attention(qb, kb, vb, mask=mask, implementation=implementation)
    return out.reshape(batch, length, heads, head_dim)


def run_xla(q, k, v, bias, pattern):
    """XLA's attention with the dense mask folded into the bias."""
    return fused_attention(q, k, v, bias, pattern.dense(q.shape[1]), "xla", pattern.window)


def run_reference(q, k, v, bias, pattern):
    events.took("reference", pattern.window)
    return reference_attention(q, k, v, bias, pattern.dense(q.shape[1]))


def run_dense(q, k, v, bias, pattern):
    """The fallback: fused_attention's own choice (cuDNN on a GPU, else XLA) on the dense
    mask, or on local blocks for a sliding-window layer (no T x T mask)."""
    if bias is None and local_blocks_apply(q.shape[1], pattern.window):
        impl = "cudnn" if cudnn_usable(q, bias) else "xla"
        return local_block_attention(q, k, v, pattern, impl)
    return fused_attention(q, k, v, bias, pattern.dense(q.shape[1]), "auto", pattern.window)
