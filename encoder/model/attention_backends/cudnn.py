"""The `cudnn` backend: cuDNN's fused attention through jax.nn.dot_product_attention, and
its packed layout for packed rows.

The target GPU's compute capability (the mesh's device: encoder/model/sharding.py, not the
host's) picks what cuDNN is handed. Off a GPU the same calls run on XLA, so CPU tests
check the arguments (and cudnn_packed_segments is checked against make_mask).

Axes: B batch, T tokens, H heads, K head dim; M segments a row.
"""
import jax
import jax.numpy as jnp

from encoder.model import sharding
from encoder.model.attention_backends import events
from encoder.model.attention_backends.dense import (HOPPER, cudnn_head_dim_limit,
                                                    local_block_attention)
from encoder.model.attention_backends.pallas import refuse_pallas_gpu, run_pallas_gpu, triton_mha
from encoder.model.attention_pattern import (AttentionPattern, cudnn_packed_segments,
                                             kernel_segment_ids, local_block_size,
                                             local_blocks_apply, packed_segment_counts)


def cudnn_max_segments(length: int) -> int:
    """Segments a row may hand cuDNN's packed layout, M. cuDNN keeps softmax statistics of
    [B * M, H, T] for the backward pass, so M = T would be a T x T buffer per head (3 GiB a
    layer at T = 8,192 for ModernBERT-base); rows with more documents than M take the Triton
    kernel instead (_cudnn_packed)."""
    return min(length, max(16, length // 128))


def _cudnn_packed(q, k, v, pattern):
    """cuDNN flash attention on packed rows, documents as segment offsets (no T x T mask).

    A GPU-only call (it needs cuDNN >= 9 and a Hopper GPU: the target's capability), so it
    runs only when the step is compiled for one, inside the batch shard_map like the Pallas
    kernels. cuDNN takes up to M = cudnn_max_segments(T) segments a row; a device's batch
    holding a row with more runs the Triton kernel (segment ids, exact for any number of
    documents), chosen on the device by lax.cond. Where the Triton kernel cannot serve the
    shapes, M = T.
    """
    from jax._src.cudnn import fused_attention_stablehlo as cudnn_fmha  # private: packed layout
    length = q.shape[1]
    refused = refuse_pallas_gpu(q, None, AttentionPattern())
    limit = cudnn_max_segments(length) if refused is None else length
    if limit < length:
        events.note(f"attention_impl=cudnn: packed rows of up to {limit} documents take "
                    f"cuDNN's packed layout (its softmax statistics are O(M T) a row); a "
                    f"device batch with a row of more takes the Triton kernel (segment ids)")
    else:
        events.note(f"attention_impl=cudnn: packed rows take cuDNN's packed layout with T = "
                    f"{length} segment slots (softmax statistics of T x T a head, for the "
                    f"backward pass): no kernel takes a row of more documents ({refused})")

    def cudnn(q, k, v, padding, documents):
        seqlens, offsets = cudnn_packed_segments(AttentionPattern(padding, documents), length,
                                                 limit)
        return cudnn_fmha.dot_product_attention(
            q, k, v, q_seqlen=seqlens, kv_seqlen=seqlens, q_offsets=offsets,
            kv_offsets=offsets, scale=q.shape[-1] ** -0.5,
            mask_type=cudnn_fmha.MaskType.PADDING, qkv_layout="BTNH")

    def triton(q, k, v, padding, documents):
        return triton_mha(q, k, v, kernel_segment_ids(AttentionPattern(padding, documents)))

    def one(q, k, v, padding, documents):
        if limit >= length:
            return cudnn(q, k, v, padding, documents)
        most = jnp.max(packed_segment_counts(AttentionPattern(padding, documents)))
        return jax.lax.cond(most <= limit, cudnn, triton, q, k, v, padding, documents)
    ref = pattern.padding if pattern.padding is not None else pattern.documents
    padding = pattern.padding if pattern.padding is not None else jnp.ones(ref.shape, jnp.int32)
    documents = (pattern.documents if pattern.documents is not None
                 else jnp.zeros(ref.shape, jnp.int32))
    return sharding.batch_sharded(one, q, k, v, padding, documents)


def run_cudnn(q, k, v, bias, pattern):
    """cuDNN's fused kernel through jax.nn.dot_product_attention.

    Right padding goes in as key lengths, with no mask tensor (the data pipelines and
    tokenizers here pad on the right). Packed documents (no bias, no window) go in as
    cuDNN's segment offsets where the target GPU is a Hopper or later (`_cudnn_packed`).
    cuDNN's own sliding window is causal-only, so a (bidirectional) local layer runs on
    blocks of the row (local_block_attention: the kernel over short rows, an O(T) mask).
    What is left (packed rows before Hopper, an additive bias with documents or a window)
    passes a dense [B, 1, T, T] mask; that is noted once (the compile report lists it).
    """
    length = q.shape[1]
    target = sharding.target_platform()
    implementation = "cudnn" if target == "gpu" else "xla"
    if implementation == "xla":
        events.note(f"attention_impl=cudnn compiled for {target}: no cuDNN there; the same "
                    "jax.nn.dot_product_attention call runs on XLA")
    if bias is None and local_blocks_apply(length, pattern.window):
        return local_block_attention(q, k, v, pattern, implementation)
    if implementation == "cudnn" and pattern.documents is not None and not pattern.window \
            and bias is None:
        cap = sharding.target_capability()
        if cap is not None and cap >= HOPPER:
            events.took(implementation, pattern.window, "packed segments")
            return _cudnn_packed(q, k, v, pattern)
        where = "unknown" if cap is None else f"{cap[0]}.{cap[1]}"
        if refuse_pallas_gpu(q, bias, pattern) is None:
            events.note(f"attention_impl=cudnn: cuDNN's packed layout needs compute capability "
                        f"9.0 (Hopper), the target's is {where}: packed documents take the "
                        "Triton kernel (segment ids)")
            return run_pallas_gpu(q, k, v, bias, pattern)
        events.note(f"attention_impl=cudnn: cuDNN's packed layout needs compute capability "
                    f"9.0 (Hopper), the target's is {where}, and the Triton kernel cannot "
                    "serve the shapes: packed documents pass a dense [B, 1, T, T] mask")
    mask = lengths = None
    if pattern.documents is not None or pattern.window:
        if pattern.window and bias is None:
            events.note(f"attention_impl=cudnn: a local window of {pattern.window} at T = "
                        f"{length} is off its blocks (T under 4 blocks of "
                        f"{local_block_size(pattern.window)}, or not a multiple): a dense "
                        "[B, 1, T, T] mask")
        elif bias is not None:
            events.note("attention_impl=cudnn: an additive bias (alibi, t5_bias, deberta) "
                        "with packed documents or a window: the bias [B|1, H, T, T] and a "
                        "dense [B, 1, T, T] mask")
        mask = pattern.dense(length)
    elif pattern.padding is not None:
        # >= 1: an all-padding row keeps one key (finite; its outputs are never read)
        lengths = jnp.maximum(jnp.sum(pattern.padding.astype(jnp.int32), axis=-1), 1)  # [B]
    if bias is not None:
        bias = bias.astype(q.dtype)
    events.took(implementation, pattern.window, "dense mask" if mask is not None
                or bias is not None else ("key lengths" if lengths is not None else ""))
    return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask,
                                        key_value_seq_lengths=lengths,
                                        implementation=implementation)


def refuse_cudnn(q, bias, pattern) -> str | None:
    """cuDNN flash attention needs half precision and a head dim within the target's limit
    (256 from Hopper, else 128), a multiple of 8."""
    del bias, pattern
    if sharding.target_platform() != "gpu":
        return None  # emulated on XLA: any dtype
    if q.dtype not in (jnp.bfloat16, jnp.float16):
        return f"cuDNN flash attention needs bfloat16 or float16, got {q.dtype}"
    limit = cudnn_head_dim_limit()
    if q.shape[-1] > limit or q.shape[-1] % 8:
        return (f"cuDNN flash attention needs a head dim <= {limit} on this GPU and a multiple "
                f"of 8, got {q.shape[-1]}")
    return None
