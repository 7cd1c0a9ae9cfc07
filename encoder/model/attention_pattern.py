"""Who may attend to whom: one layer's AttentionPattern and every form a backend takes it in.

A pattern is kept as its ingredients (the padding mask, the packed rows' document ids and
a static local window), never as a built [B, 1, T, T] mask: each backend asks for the
form it needs, so the O(T^2) boolean mask exists only where a backend needs one.

  form                          built by                 taken by
  dense boolean [B, 1, T, T]    make_mask (.dense)       xla, reference, every fallback
  segment ids [B, T]            kernel_segment_ids       splash, pallas_gpu
  blocks of the local window    local_block_mask         a local layer on cuDNN or XLA
  segment lengths and offsets   cudnn_packed_segments    cuDNN's packed layout

Which layers are local is ModernBERT's alternation (layer_is_global).

Axes: B batch, T tokens; blocks: n blocks of C queries, 3C keys each.
"""
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct


@struct.dataclass
class AttentionPattern:
    """Who may attend to whom in one layer, kept as ingredients rather than a built mask.

    `window` is static (it picks a kernel's block-sparsity); 0 means a global layer.
    """
    padding: jnp.ndarray | None = None    # [B, T], 1 for real tokens
    documents: jnp.ndarray | None = None  # [B, T] document ids of packed rows
    window: int = struct.field(pytree_node=False, default=0)  # keeps |i - j| <= window // 2

    def dense(self, length: int) -> jnp.ndarray | None:
        """The boolean [B, 1, T, T] mask of make_mask, or None when nothing is masked."""
        return make_mask(self.padding, self.documents, self.window, length)


def layer_is_global(cfg, index: int) -> bool:
    """ModernBERT's alternation: with a window, layers 0, k, 2k... are global.

    global_every=0 makes every layer local.
    """
    if not cfg.local_window:
        return True
    return cfg.global_every > 0 and index % cfg.global_every == 0


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


# ---- segment ids: the kernels that mask by id equality ----

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


# ---- the local window in blocks: O(T * 3C), not O(T^2) ----

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


def neighbours(x, fill):
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
        real = neighbours(pattern.padding.astype(bool).reshape(batch, n, block), False)
        mask = mask & real[:, :, None, :]
    if pattern.documents is not None:
        docs = pattern.documents.astype(jnp.int32).reshape(batch, n, block)
        mask = mask & (docs[:, :, :, None] == neighbours(docs, -1)[:, :, None, :])
    mask = mask | (qpos[:, :, None] == kpos[:, None, :])[None]
    return jnp.broadcast_to(mask, (batch, n, block, 3 * block))[:, :, None]


# ---- packed documents as segment lengths and offsets (cuDNN's packed layout) ----

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


def packed_segment_counts(pattern: AttentionPattern) -> jnp.ndarray:
    """[B] segments per row, as cudnn_packed_segments counts them."""
    return jnp.sum(_segment_edges(pattern)[0], axis=1)


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
