"""Bidirectional multi-head self-attention, the patterns that shape it, and its backends.

A layer's pattern (AttentionPattern) is passed as its raw ingredients: the
padding mask, the packed rows' document ids and a static local window
(ModernBERT alternates local and global layers). Each backend builds what it
needs from them, so the O(T^2) boolean mask exists only where a backend needs
one:

  name        kernel                                 pattern it takes
  xla         jax.nn.dot_product_attention on XLA    dense [B, 1, T, T] mask, folded into the bias
  reference   einsums, float32 softmax               dense mask; attention dropout; tests' reference
  cudnn       cuDNN via jax.nn.dot_product_attention key lengths for right padding; documents
                                                     as cuDNN segment offsets (Hopper GPUs);
                                                     a (bidirectional) window on local blocks
  splash      Pallas TPU splash attention            segment ids + a block-sparse local mask
  pallas_gpu  Pallas Triton flash attention (mha)    segment ids (no window, no bias)
  auto        TPU: splash; GPU: cudnn (bf16/fp16, K <= 128; 256 on Hopper); else xla

The platform (native kernel or interpret mode, and `auto`'s choice) is the one the step
is compiled for: the mesh's devices (encoder/model/sharding.py), not the host's; so is a
GPU's compute capability, which jax's own cuDNN checks would read from the host
(`cudnn_checks_for_target`). The Pallas
kernels (and cuDNN's packed call) run inside shard_map over the mesh's batch axes.

A layer a backend cannot serve (an additive position bias, attention dropout,
a sequence length off the kernel's blocks, a dtype it lacks) takes the dense
path and the reason is logged once. What each call was compiled to (the kernel, or
the dense fallback's cuDNN/XLA, or attention dropout's einsum path) is counted by
`paths_taken()` at the point it is dispatched: the benchmark rows and the compile report
name the path that ran, not only the one asked for. Off their platform the Pallas kernels run
in Pallas interpret mode and cudnn runs the same call on XLA, so CPU tests
check every backend against `reference`.

Axes: B batch, T tokens, D model width, H heads, K head dim.
"""
import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import importlib
from typing import Any

from absl import logging
import flax.linen as nn
from flax import struct
import jax
from jax.experimental.pallas.ops.gpu import attention as pallas_gpu_attention
from jax.experimental.pallas.ops.tpu import splash_attention
import jax.numpy as jnp
import numpy as np

from encoder.model import positions as positions_lib
from encoder.model import sharding


@struct.dataclass
class AttentionPattern:
    """Who may attend to whom in one layer, kept as ingredients rather than a built mask.

    A dense [B, 1, T, T] mask costs O(T^2) memory per row; the kernels that
    take segment ids and a window never need it, so each backend builds its
    own form (`dense`, `kernel_segment_ids`). `window` is static (it picks the
    kernel's block-sparsity); 0 means a global layer.
    """
    padding: jnp.ndarray | None = None    # [B, T], 1 for real tokens
    documents: jnp.ndarray | None = None  # [B, T] document ids of packed rows
    window: int = struct.field(pytree_node=False, default=0)  # keeps |i - j| <= window // 2

    def dense(self, length: int) -> jnp.ndarray | None:
        """The boolean [B, 1, T, T] mask of make_mask, or None when nothing is masked."""
        return make_mask(self.padding, self.documents, self.window, length)


def make_mask(attention_mask: jnp.ndarray | None,
              document_ids: jnp.ndarray | None,
              window: int = 0,
              length: int | None = None) -> jnp.ndarray | None:
    """Boolean [B, 1, T, T] mask, or None when nothing is masked.

    attention_mask: [B, T], 1 for real tokens; document_ids: [B, T], a token
    attends only to keys with the same id; window > 0 keeps |i - j| <= window//2.
    """
    mask = None
    if attention_mask is not None:
        real = attention_mask.astype(bool)
        mask = real[:, None, None, :]  # keys must be real
    if document_ids is not None:
        same_doc = document_ids[:, None, :, None] == document_ids[:, None, None, :]
        mask = same_doc if mask is None else mask & same_doc
    if window:
        if length is None:
            raise ValueError("make_mask needs `length` for a local window")
        idx = jnp.arange(length)
        local = jnp.abs(idx[:, None] - idx[None, :]) <= window // 2
        local = local[None, None]
        mask = local if mask is None else mask & local
    return mask


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


def fused_attention(q, k, v, bias=None, mask=None, implementation="auto"):
    """jax.nn.dot_product_attention, choosing cuDNN where it is allowed.

    Off cuDNN, a boolean mask is folded into the additive bias: the XLA path
    would otherwise select on the logits forward and on their gradient
    backward (a select per layer that an add does not need).
    """
    impl = None if implementation == "auto" else implementation
    if impl is None and _cudnn_usable(q, bias):
        impl = "cudnn"
    if mask is not None and impl != "cudnn":
        mask_bias = jnp.where(mask, 0.0, MASKED_BIAS).astype(jnp.float32)
        bias = mask_bias if bias is None else bias + mask_bias
        mask = None
    if bias is not None and impl == "cudnn":
        # cuDNN takes the bias in the compute dtype; XLA adds a float32 bias to its float32
        # logits, so ALiBi/T5/DeBERTa offsets keep their precision under bf16 compute.
        bias = bias.astype(q.dtype)
    _took("cudnn" if impl == "cudnn" else "xla",
          "dense mask" if mask is not None or bias is not None else "")
    cudnn_checks_for_target()
    return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, implementation=impl)


HOPPER = (9, 0)


def cudnn_head_dim_limit() -> int:
    """cuDNN flash attention's largest head dim on the target: 256 from Hopper, else 128."""
    cap = sharding.target_capability()
    return 256 if cap is not None and cap >= HOPPER else 128


def _cudnn_usable(q, bias) -> bool:
    """cuDNN flash attention: NVIDIA GPU (the target's), half precision, head dim within the
    target's limit and a multiple of 8."""
    del bias
    return (sharding.target_platform() == "gpu" and q.dtype in (jnp.bfloat16, jnp.float16)
            and q.shape[-1] <= cudnn_head_dim_limit() and q.shape[-1] % 8 == 0)


_TARGET_CHECKS: list = []  # jax's own cuDNN checks, once replaced (see cudnn_checks_for_target)


def cudnn_checks_for_target() -> None:
    """Makes jax's cuDNN checks read the target GPU, not the host (idempotent).

    jax's cuDNN wrapper asks the host's backend for the GPU's compute capability and cuDNN
    version, when the call is traced and again when its gradient rule runs (later in the
    step's trace). Compiling for a GPU on a machine without one (the compile report), the
    host is a CPU, and Hopper-only layouts (packed documents, head dim 256) are refused
    for an H100 target. The replacements answer from the target's capability
    (sharding.target_capability, set while a step is traced for a mesh) and the CUDA
    compiler's own cuDNN; on a GPU host, or with no GPU target, they defer to jax's.
    """
    if _TARGET_CHECKS or sharding.target_capability() is None or jax.default_backend() == "gpu":
        return
    from jax._src.cudnn import fused_attention_stablehlo as fmha  # private: the checks
    at_least, equal, version = (fmha.check_compute_capability,
                                fmha.is_cuda_compute_capability_equal, fmha.check_cudnn_version)

    def parse(text):
        major, _, minor = text.partition(".")
        return int(major), int(minor or 0)

    def deviceless():
        return sharding.target_capability() if jax.default_backend() != "gpu" else None

    def check_compute_capability(capability):
        cap = deviceless()
        return at_least(capability) if cap is None else cap >= parse(capability)

    def is_cuda_compute_capability_equal(capability):
        cap = deviceless()
        return equal(capability) if cap is None else cap == parse(capability)

    def check_cudnn_version():
        if deviceless() is None:
            return version()
        return importlib.import_module("jax_cuda12_plugin._versions").cudnn_get_version()

    fmha.check_compute_capability = check_compute_capability
    fmha.is_cuda_compute_capability_equal = is_cuda_compute_capability_equal
    fmha.check_cudnn_version = check_cudnn_version
    _TARGET_CHECKS.append((at_least, equal, version))


# ---- backends: each one a runner and the reasons it cannot serve a layer ----

_NOTED: set[str] = set()  # messages already logged: a fallback is said once, not per layer
_RECORDERS: list[list[str]] = []  # open `recording()` blocks: each collects every message
_RAN: list[collections.Counter] = []  # open `paths_taken()` blocks: each counts the paths
_LAYERS: list[dict] = []  # open `layer_paths()` blocks: layer kind -> {path: calls}
_LAYER_KIND: list[str] = []  # the kind of the layer being dispatched ("global", "local 128")


def _note_once(message: str) -> None:
    """Logs a backend choice or fallback once per process (it is decided at trace time)."""
    for recorder in _RECORDERS:
        if message not in recorder:
            recorder.append(message)
    if message not in _NOTED:
        _NOTED.add(message)
        logging.warning("attention: %s", message)


@contextlib.contextmanager
def recording():
    """Collects the backend choices and fallbacks noted while tracing inside the block
    (the compile report lists the patterns a kernel could not serve)."""
    notes: list[str] = []
    _RECORDERS.append(notes)
    try:
        yield notes
    finally:
        _RECORDERS.remove(notes)


def _took(path: str, how: str = "") -> None:
    """Says which kernel one attention call is compiled to, at the point it is dispatched
    (trace time): "splash", "pallas_gpu", "cudnn", "xla", "reference", a Pallas kernel in
    interpret mode as "splash (interpret)", attention dropout's einsum path as
    "reference (attention dropout)". `how` details the call for `layer_paths` ("packed
    segments", "local blocks", "dense mask")."""
    for counter in _RAN:
        counter[path] += 1
    kind = _LAYER_KIND[-1] if _LAYER_KIND else "global"
    for layers in _LAYERS:
        entry = f"{path} ({how})" if how else path
        layers.setdefault(kind, collections.Counter())[entry] += 1


@contextlib.contextmanager
def layer_paths():
    """{layer kind: {path (detail): calls traced}} for the attention traced inside the block:
    which kernel each kind of layer (global; local with its window) took. The compile
    report's `attention_layers` keeps the paths (a scanned group and a rematerialised
    layer are traced more than once, so call counts are not layer counts)."""
    layers: dict = {}
    _LAYERS.append(layers)
    try:
        yield layers
    finally:
        _LAYERS.remove(layers)


@contextlib.contextmanager
def _layer_kind(window: int):
    _LAYER_KIND.append(f"local {window}" if window else "global")
    try:
        yield
    finally:
        _LAYER_KIND.pop()


@contextlib.contextmanager
def paths_taken():
    """Counts the attention paths traced inside the block (path -> calls traced; a scanned
    stack traces its layer group once). What ran, not what was asked: the benchmark rows
    and the compile report read it. Only a trace inside the block counts: a function
    already traced (and cached by jit) before it adds nothing."""
    counts: collections.Counter = collections.Counter()
    _RAN.append(counts)
    try:
        yield counts
    finally:
        _RAN.remove(counts)


def describe_paths(counts) -> str:
    """The paths of a `paths_taken()` block as one field: "splash", "splash + xla", or
    "none traced"."""
    return " + ".join(sorted(counts)) or "none traced"


PAD_SEGMENT = int(np.iinfo(np.int32).min)  # padding's own segment: never a document id


def kernel_segment_ids(pattern: AttentionPattern) -> jnp.ndarray | None:
    """[B, T] int32 segment ids for kernels that mask by id equality, or None.

    Real tokens keep their document id (0 for all when there are none), so a
    real query reads exactly the real keys of its document, as make_mask says.
    Padding becomes its own segment: a padded query reads only padded keys
    (always itself, so every row keeps a key and the softmax stays finite),
    where make_mask lets it read real keys. Either way no real token reads a
    pad, and the outputs at padded positions are never read (heads, pooling and
    losses mask them), so real positions and every gradient agree exactly.
    """
    if pattern.padding is None and pattern.documents is None:
        return None
    ref = pattern.padding if pattern.padding is not None else pattern.documents
    ids = (pattern.documents.astype(jnp.int32) if pattern.documents is not None
           else jnp.zeros(ref.shape, jnp.int32))
    if pattern.padding is not None:
        ids = jnp.where(pattern.padding.astype(bool), ids, PAD_SEGMENT)
    return ids


def _kernel_path(name: str, interpret: bool) -> str:
    return f"{name} (interpret)" if interpret else name


def _interpret(platform: str, name: str) -> bool:
    """Pallas kernels run natively when the step is compiled for their platform (the mesh's
    devices, not the host's: a TPU topology compiled on a CPU gets the real kernel), in
    interpret mode elsewhere (CPU tests)."""
    target = sharding.target_platform()
    if target == platform:
        return False
    _note_once(f"attention_impl={name} is a {platform.upper()} kernel; compiled for "
               f"{target} it runs in Pallas interpret mode (slow: for tests)")
    return True


def _run_xla(q, k, v, bias, pattern):
    """XLA's attention with the dense mask folded into the bias (the pre-backend path)."""
    return fused_attention(q, k, v, bias, pattern.dense(q.shape[1]), "xla")


def _run_dense(q, k, v, bias, pattern):
    """The fallback: fused_attention's own choice (cuDNN on a GPU, else XLA) on the dense
    mask, or on local blocks for a sliding-window layer (no T x T mask)."""
    if bias is None and local_blocks_apply(q.shape[1], pattern.window):
        impl = "cudnn" if _cudnn_usable(q, bias) else "xla"
        return local_block_attention(q, k, v, pattern, impl)
    return fused_attention(q, k, v, bias, pattern.dense(q.shape[1]), "auto")


LOCAL_BLOCK_MULTIPLE = 64


def local_block_size(window: int) -> int:
    """Query block of the blocked sliding window: the half window rounded up to a multiple
    of 64, so a block's keys (its own block and both neighbours) cover every query's window."""
    half = window // 2
    return max(LOCAL_BLOCK_MULTIPLE, -(-half // LOCAL_BLOCK_MULTIPLE) * LOCAL_BLOCK_MULTIPLE)


def local_blocks_apply(length: int, window: int) -> bool:
    """Blocks pay where T holds at least 4 of them (3 blocks of keys per query block, against
    T keys dense) and divides into them."""
    if not window:
        return False
    block = local_block_size(window)
    return length % block == 0 and length >= 4 * block


def _neighbours(x, fill):
    """[B, n, C, ...] -> [B, n, 3C, ...]: each block beside the block before and after it
    (`fill` past the row's ends)."""
    pad = [(0, 0), (1, 1)] + [(0, 0)] * (x.ndim - 2)
    xp = jnp.pad(x, pad, constant_values=fill)
    return jnp.concatenate([xp[:, :-2], xp[:, 1:-1], xp[:, 2:]], axis=2)


def local_block_mask(pattern: AttentionPattern, batch: int, length: int) -> jnp.ndarray:
    """[B, n, 1, C, 3C] boolean mask of the blocked sliding window: |i - j| <= window // 2,
    keys real and of the query's document, as make_mask says, except that every query
    also reads itself (a padded query would otherwise read nothing: a fully masked row's
    softmax is not finite in every kernel; its output is never read)."""
    block = local_block_size(pattern.window)
    n = length // block
    qpos = jnp.arange(length).reshape(n, block)                                   # [n, C]
    kpos = (jnp.arange(-block, 2 * block)[None] + block * jnp.arange(n)[:, None])  # [n, 3C]
    mask = ((jnp.abs(qpos[:, :, None] - kpos[:, None, :]) <= pattern.window // 2)
            & (kpos[:, None, :] >= 0) & (kpos[:, None, :] < length))[None]         # [1, n, C, 3C]
    if pattern.padding is not None:
        real = _neighbours(pattern.padding.astype(bool).reshape(batch, n, block), False)
        mask = mask & real[:, :, None, :]
    if pattern.documents is not None:
        docs = pattern.documents.astype(jnp.int32).reshape(batch, n, block)
        mask = mask & (docs[:, :, :, None] == _neighbours(docs, -1)[:, :, None, :])
    mask = mask | (qpos[:, :, None] == kpos[:, None, :])[None]
    return jnp.broadcast_to(mask, (batch, n, block, 3 * block))[:, :, None]


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
    kb, vb = (_neighbours(blocks(x), 0).reshape(batch * n, 3 * block, heads, head_dim)
              for x in (k, v))
    mask = local_block_mask(pattern, batch, length).reshape(batch * n, 1, block, 3 * block)
    _took(implementation, "local blocks")
    cudnn_checks_for_target()
    out = jax.nn.dot_product_attention(qb, kb, vb, mask=mask, implementation=implementation)
    return out.reshape(batch, length, heads, head_dim)


def _run_reference(q, k, v, bias, pattern):
    _took("reference")
    return reference_attention(q, k, v, bias, pattern.dense(q.shape[1]))


def cudnn_max_segments(length: int) -> int:
    """Segments a row may hand cuDNN's packed layout, M. cuDNN keeps softmax statistics of
    [B * M, H, T] for the backward pass, so M = T would be a T x T buffer per head (3 GiB a
    layer at T = 8,192 for ModernBERT-base); rows with more documents than M take the Triton
    kernel instead (_cudnn_packed)."""
    return min(length, max(16, length // 128))


def packed_segment_counts(pattern: AttentionPattern) -> jnp.ndarray:
    """[B] segments per row, as cudnn_packed_segments counts them."""
    return jnp.sum(_segment_edges(pattern)[0], axis=1)


def _segment_edges(pattern: AttentionPattern):
    """(starts, ends) bool [B, T]: where each maximal run of one document's real tokens
    begins and ends."""
    ref = pattern.padding if pattern.padding is not None else pattern.documents
    real = (pattern.padding.astype(bool) if pattern.padding is not None
            else jnp.ones(ref.shape, bool))  # [B, T]
    docs = (pattern.documents.astype(jnp.int32) if pattern.documents is not None
            else jnp.zeros(ref.shape, jnp.int32))
    prev_real = jnp.pad(real[:, :-1], ((0, 0), (1, 0)))
    prev_doc = jnp.pad(docs[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    starts = real & (~prev_real | (docs != prev_doc))  # [B, T]
    next_real = jnp.pad(real[:, 1:], ((0, 0), (0, 1)))
    next_doc = jnp.pad(docs[:, 1:], ((0, 0), (0, 1)), constant_values=-1)
    ends = real & (~next_real | (docs != next_doc))  # [B, T]
    return starts, ends


def cudnn_packed_segments(pattern: AttentionPattern, length: int, max_segments: int = 0):
    """cuDNN's packed layout of a row's documents: (seqlens [B, M], offsets [B, M + 1]).

    M = max_segments (default T: no row is ever cut short); the arrays are O(M) per row
    where a dense mask is O(T^2). A row with more segments than M is cut short: the caller
    routes such rows elsewhere (packed_segment_counts). A segment is a maximal run of real
    tokens of one document (packing lays documents out contiguously); padding belongs to
    none, so a padded query reads nothing (its outputs are never read). Unused entries
    are -1, as cuDNN's sequence packing asks (jax._src.cudnn.fused_attention_stablehlo).
    """
    size = max_segments or length
    starts, ends = _segment_edges(pattern)

    def row(s, e):
        first = jnp.nonzero(s, size=size, fill_value=-1)[0]  # [M]
        last = jnp.nonzero(e, size=size, fill_value=-1)[0]
        lens = jnp.where(first >= 0, last - first + 1, -1)
        return lens, jnp.concatenate([first, jnp.full((1,), -1, first.dtype)])
    seqlens, offsets = jax.vmap(row)(starts, ends)
    return seqlens.astype(jnp.int32), offsets.astype(jnp.int32)  # [B, M], [B, M + 1]


def _cudnn_packed(q, k, v, pattern):
    """cuDNN flash attention on packed rows, documents as segment offsets (no T x T mask).

    A GPU-only call (it needs cuDNN >= 9 and a Hopper GPU: the target's capability, see
    cudnn_checks_for_target), so it runs only when the step is compiled for one, inside the
    batch shard_map like the Pallas kernels. cuDNN takes up to M = cudnn_max_segments(T)
    segments a row; a device's batch holding a row with more runs the Triton kernel
    (segment ids, exact for any number of documents), chosen on the device by lax.cond.
    Where the Triton kernel cannot serve the shapes, M = T.
    """
    from jax._src.cudnn import fused_attention_stablehlo as cudnn_fmha  # private: packed layout
    length = q.shape[1]
    refused = _refuse_pallas_gpu(q, None, AttentionPattern())
    limit = cudnn_max_segments(length) if refused is None else length
    if limit < length:
        _note_once(f"attention_impl=cudnn: packed rows of up to {limit} documents take "
                   f"cuDNN's packed layout (its softmax statistics are O(M T) a row); a "
                   f"device batch with a row of more takes the Triton kernel (segment ids)")
    else:
        _note_once(f"attention_impl=cudnn: packed rows take cuDNN's packed layout with T = "
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
        ids = kernel_segment_ids(AttentionPattern(padding, documents))
        return pallas_gpu_attention.mha(q, k, v, ids, sm_scale=q.shape[-1] ** -0.5)

    def one(q, k, v, padding, documents):
        if limit >= length:
            return cudnn(q, k, v, padding, documents)
        most = jnp.max(packed_segment_counts(AttentionPattern(padding, documents)))
        return jax.lax.cond(most <= limit, cudnn, triton, q, k, v, padding, documents)
    cudnn_checks_for_target()
    ref = pattern.padding if pattern.padding is not None else pattern.documents
    padding = pattern.padding if pattern.padding is not None else jnp.ones(ref.shape, jnp.int32)
    documents = (pattern.documents if pattern.documents is not None
                 else jnp.zeros(ref.shape, jnp.int32))
    return sharding.batch_sharded(one, q, k, v, padding, documents)


def _run_cudnn(q, k, v, bias, pattern):
    """cuDNN's fused kernel through jax.nn.dot_product_attention.

    Right padding goes in as key lengths, with no mask tensor (the data pipelines and
    tokenizers here pad on the right). Packed documents (no bias, no window) go in as
    cuDNN's segment offsets where the target GPU is a Hopper or later (`_cudnn_packed`).
    cuDNN's own sliding window is causal-only, so a (bidirectional) local layer runs on
    blocks of the row (local_block_attention: the kernel over short rows, an O(T) mask).
    What is left (packed rows before Hopper, an additive bias with documents or a window)
    passes a dense [B, 1, T, T] mask; that is noted once (the compile report lists it).
    Off a GPU the same calls run on XLA, so CPU tests check the arguments (and
    cudnn_packed_segments is checked against make_mask).
    """
    length = q.shape[1]
    target = sharding.target_platform()
    implementation = "cudnn" if target == "gpu" else "xla"
    if implementation == "xla":
        _note_once(f"attention_impl=cudnn compiled for {target}: no cuDNN there; the same "
                   "jax.nn.dot_product_attention call runs on XLA")
    if bias is None and local_blocks_apply(length, pattern.window):
        return local_block_attention(q, k, v, pattern, implementation)
    if implementation == "cudnn" and pattern.documents is not None and not pattern.window \
            and bias is None:
        cap = sharding.target_capability()
        if cap is not None and cap >= HOPPER:
            _took(implementation, "packed segments")
            return _cudnn_packed(q, k, v, pattern)
        where = "unknown" if cap is None else f"{cap[0]}.{cap[1]}"
        if _refuse_pallas_gpu(q, bias, pattern) is None:
            _note_once(f"attention_impl=cudnn: cuDNN's packed layout needs compute capability "
                       f"9.0 (Hopper), the target's is {where}: packed documents take the "
                       "Triton kernel (segment ids)")
            return _run_pallas_gpu(q, k, v, bias, pattern)
        _note_once(f"attention_impl=cudnn: cuDNN's packed layout needs compute capability "
                   f"9.0 (Hopper), the target's is {where}, and the Triton kernel cannot "
                   "serve the shapes: packed documents pass a dense [B, 1, T, T] mask")
    mask = lengths = None
    if pattern.documents is not None or pattern.window:
        if pattern.window and bias is None:
            _note_once(f"attention_impl=cudnn: a local window of {pattern.window} at T = "
                       f"{length} is off its blocks (T under 4 blocks of "
                       f"{local_block_size(pattern.window)}, or not a multiple): a dense "
                       "[B, 1, T, T] mask")
        elif bias is not None:
            _note_once("attention_impl=cudnn: an additive bias (alibi, t5_bias, deberta) with "
                       "packed documents or a window: the bias [B|1, H, T, T] and a dense "
                       "[B, 1, T, T] mask")
        mask = pattern.dense(length)
    elif pattern.padding is not None:
        # >= 1: an all-padding row keeps one key (finite; its outputs are never read)
        lengths = jnp.maximum(jnp.sum(pattern.padding.astype(jnp.int32), axis=-1), 1)  # [B]
    if bias is not None:
        bias = bias.astype(q.dtype)
    _took(implementation, "dense mask" if mask is not None or bias is not None
          else ("key lengths" if lengths is not None else ""))
    cudnn_checks_for_target()
    return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask,
                                        key_value_seq_lengths=lengths,
                                        implementation=implementation)


def _refuse_cudnn(q, bias, pattern) -> str | None:
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


def _run_splash(q, k, v, bias, pattern):
    """Splash attention (Pallas TPU): segment ids and a block-sparse local window, no T x T mask.

    The kernel does not scale the logits: q is scaled by 1/sqrt(K) first, in float32. It
    runs inside shard_map over the mesh's batch axes (sharding.batch_sharded): a Mosaic
    call cannot be partitioned by XLA, so each chip runs it on its own rows.
    """
    del bias  # refused
    _, length, heads, head_dim = q.shape
    interpret = _interpret("tpu", "splash")
    _took(_kernel_path("splash", interpret))
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


def _refuse_splash(q, bias, pattern) -> str | None:
    del pattern
    if bias is not None:
        return "splash attention takes no additive bias (alibi, t5_bias, deberta)"
    if q.shape[1] % SPLASH_BLOCKS[-1]:
        return f"splash attention needs T a multiple of {SPLASH_BLOCKS[-1]}, got {q.shape[1]}"
    if q.dtype not in (jnp.float32, jnp.bfloat16):
        return f"splash attention runs in float32 or bfloat16, got {q.dtype}"
    return None


PALLAS_GPU_BLOCKS = (128, 32)  # mha's default forward and backward blocks (each min'd with T)
PALLAS_GPU_MAX_HEAD_DIM = 128


def _run_pallas_gpu(q, k, v, bias, pattern):
    """Pallas Triton flash attention (jax's ops.gpu.attention.mha) with segment ids, inside
    shard_map over the batch axes."""
    del bias  # refused
    interpret = _interpret("gpu", "pallas_gpu")
    _took(_kernel_path("pallas_gpu", interpret))
    ids = kernel_segment_ids(pattern)  # [B, T]

    def local(q, k, v, *ids):  # this device's rows: GSPMD would gather the global batch
        return pallas_gpu_attention.mha(q, k, v, ids[0] if ids else None,
                                        sm_scale=q.shape[-1] ** -0.5, interpret=interpret)
    return sharding.batch_sharded(local, q, k, v, *(() if ids is None else (ids,)))


def _refuse_pallas_gpu(q, bias, pattern) -> str | None:
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


@dataclasses.dataclass(frozen=True)
class Backend:
    """run(q, k, v, bias, pattern) -> [B, T, H, K]; refuse(q, bias, pattern) -> a reason or None.

    refuse reads only static facts (shapes, dtypes, the platform, whether a
    bias or window exists), so the choice is made once at trace time.
    """
    run: Any
    refuse: Any = lambda q, bias, pattern: None


ATTENTION_BACKENDS: dict[str, Backend] = {
    "xla": Backend(_run_xla),
    "reference": Backend(_run_reference),
    "cudnn": Backend(_run_cudnn, _refuse_cudnn),
    "splash": Backend(_run_splash, _refuse_splash),
    "pallas_gpu": Backend(_run_pallas_gpu, _refuse_pallas_gpu),
}
ATTENTION_IMPLEMENTATIONS = ("auto", *ATTENTION_BACKENDS)


def choose_backend(implementation: str, q, bias, pattern: AttentionPattern) -> str:
    """`auto`: splash on TPU, cuDNN on GPU in half precision, else XLA, where each can serve.

    pallas_gpu is never chosen by auto: cuDNN is NVIDIA's tuned kernel, and the
    two have not been measured against each other here.
    """
    if implementation != "auto":
        return implementation
    platform = sharding.target_platform()
    if platform == "tpu":
        reason = _refuse_splash(q, bias, pattern)
        if reason is None:
            return "splash"
        _note_once(f"attention_impl=auto on tpu: {reason}; using xla")
    if platform == "gpu":
        reason = _refuse_cudnn(q, bias, pattern)
        if reason is None:
            return "cudnn"
        _note_once(f"attention_impl=auto on gpu: {reason}; using xla (dense)")
    return "xla"


def attend(q, k, v, bias=None, pattern: AttentionPattern | None = None,
           implementation: str = "auto"):
    """softmax(q k^T / sqrt(K) + bias) v [B, T, H, K] under `pattern`, by the named backend.

    A layer the backend cannot serve takes the dense-mask path, and the reason
    is logged once: never a silently different computation.
    """
    pattern = AttentionPattern() if pattern is None else pattern
    with _layer_kind(pattern.window):
        name = choose_backend(implementation, q, bias, pattern)
        backend = ATTENTION_BACKENDS[name]
        reason = backend.refuse(q, bias, pattern)
        if reason is not None:
            _note_once(f"attention_impl={name} cannot serve this layer: {reason}; "
                       "falling back to the dense-mask path (local blocks for a window)")
            return _run_dense(q, k, v, bias, pattern)
        return backend.run(q, k, v, bias, pattern)


class SelfAttention(nn.Module):
    """Multi-head self-attention with a fused QKV projection."""
    cfg: Any  # model config

    @nn.compact
    def __call__(self, x, positions, bias=None, mask=None, deterministic=True,
                 rope_theta=None, relative=None):
        """mask: this layer's AttentionPattern (or None: every token attends to every token).

        rope_theta: this layer's RoPE base (ModernBERT's local layers use their own).

        relative: DeBERTa's (table [2S, D], index [B, T, T]) from the Encoder's
        DisentangledPositions, or None.
        """
        cfg = self.cfg
        dtype = jnp.dtype(cfg.dtype)
        heads, head_dim = cfg.num_heads, cfg.hidden_size // cfg.num_heads
        init = nn.initializers.normal(cfg.initializer_range)
        qkv_proj = nn.DenseGeneral(
            features=(3, heads, head_dim), use_bias=cfg.use_bias, dtype=dtype,
            kernel_init=nn.with_logical_partitioning(init, ("embed", None, "heads", "kv")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (None, "heads", "kv")),
            name="qkv")
        qkv = qkv_proj(x)  # [B, T, 3, H, K]
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [B, T, H, K]
        if positions_lib.POSITIONS[cfg.position].rotary:
            theta = rope_theta or cfg.rope_theta
            q = positions_lib.apply_rope(q, positions, theta)
            k = positions_lib.apply_rope(k, positions, theta)
        if relative is not None:
            # DeBERTa (He et al. 2021 §3.1): the shared relative embeddings go through this
            # layer's own query/key projections (v2's share_att_key), dropped out per layer.
            table, index = relative  # [2S, D], [B, T, T]
            table = nn.Dropout(cfg.dropout, name="relative_dropout")(table, deterministic)
            pos = qkv_proj(table)  # [2S, 3, H, K]
            q, bias = positions_lib.disentangled_attention(q, k, pos[:, 0], pos[:, 1], index, bias)

        heads_names = ("batch", "length", "act_heads", "act_kv")
        q, k, v = (sharding.constrain(x, heads_names) for x in (q, k, v))  # [B, T, H, K]
        pattern = AttentionPattern() if mask is None else mask
        use_dropout = cfg.attention_dropout > 0 and not deterministic
        if use_dropout:
            # No kernel here drops attention probabilities: training with attention dropout
            # takes the einsum path (dense mask) whatever the backend.
            if cfg.attention_impl != "reference":
                _note_once(f"attention_dropout={cfg.attention_dropout}: no kernel applies it; "
                           f"attention_impl={cfg.attention_impl} uses the dense reference path "
                           "while dropout is active")
            drop = nn.Dropout(cfg.attention_dropout)
            with _layer_kind(pattern.window):
                _took("reference (attention dropout)")
            out = reference_attention(q, k, v, bias, pattern.dense(q.shape[1]),
                                      dropout=lambda p: drop(p, deterministic=False))
        else:
            out = attend(q, k, v, bias, pattern, cfg.attention_impl)  # [B, T, H, K]
        out = sharding.constrain(out, heads_names)
        return nn.DenseGeneral(
            features=cfg.hidden_size, axis=(-2, -1), use_bias=cfg.use_bias, dtype=dtype,
            kernel_init=nn.with_logical_partitioning(init, ("heads", "kv", "embed")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            name="out")(out)  # [B, T, D]
