"""The blocked sliding window (a local layer as attention within blocks, what cuDNN runs on a
GPU where its own window is causal-only) against the float32 reference, on CPU (XLA runs
the same call): outputs and gradients at real tokens, packed documents crossing block
edges, padding, and a block that is all padding."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.model import attention_pattern
from encoder.model.attention_backends import dense
from encoder.model.attention_pattern import AttentionPattern

B, T, H, K = 2, 512, 2, 16
TOL = 1e-5


def pattern(window):
    # documents of odd lengths, so their edges fall inside blocks; row 1 ends in 150 pads
    lengths = ((100, 77, 200, 135), (250, 112))
    docs = np.zeros((B, T), np.int32)
    for r, ns in enumerate(lengths):
        docs[r, :sum(ns)] = np.repeat(np.arange(1, len(ns) + 1), ns)
    return AttentionPattern(jnp.asarray(docs > 0, jnp.int32), jnp.asarray(docs), window)


def loss_and_grads(fn, q, k, v, real, cot):
    def loss(q, k, v):
        out = fn(q, k, v)
        return jnp.sum(jnp.where(real[:, :, None, None], out * cot, 0.0)), out
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)


@pytest.mark.parametrize("window", [128, 256])
def test_local_blocks_equal_the_dense_window(window):
    p = pattern(window)
    rng = np.random.default_rng(0)
    q, k, v, cot = (jnp.asarray(rng.normal(size=(B, T, H, K)), jnp.float32) for _ in range(4))
    real = p.padding.astype(bool)
    assert attention_pattern.local_blocks_apply(T, window)
    (_, ref), ref_grads = loss_and_grads(
        lambda q, k, v: dense.reference_attention(q, k, v, mask=p.dense(T)), q, k, v,
        real, cot)
    (_, out), grads = loss_and_grads(
        lambda q, k, v: dense.local_block_attention(q, k, v, p, "xla"), q, k, v, real, cot)
    assert bool(jnp.isfinite(out).all())  # the all-padding block too
    np.testing.assert_allclose(np.asarray(out)[np.asarray(real)],
                               np.asarray(ref)[np.asarray(real)], atol=TOL)
    for g, rg in zip(grads, ref_grads):
        np.testing.assert_allclose(g, rg, atol=TOL)


def test_the_block_mask_is_linear_in_t_and_keeps_the_window():
    p = pattern(128)
    mask = attention_pattern.local_block_mask(p, B, T)
    block = attention_pattern.local_block_size(128)
    assert block == 64 and mask.shape == (B, T // block, 1, block, 3 * block)
    assert mask.size == B * T * 3 * block  # O(T * 3C), where dense is B * T * T
    # every real (query, key) pair the dense mask allows is in the blocks exactly once
    dense = np.asarray(p.dense(T))[:, 0]
    kept = np.asarray(mask)[:, :, 0]
    real = np.asarray(p.padding, bool)
    assert kept.reshape(B, -1).sum(axis=1)[0] == dense[0][real[0]].sum()
    assert kept.reshape(B, -1).sum(axis=1)[1] >= dense[1][real[1]].sum()  # + pads' own diagonal


def test_windows_that_blocks_do_not_pay_for_keep_the_dense_path():
    assert not attention_pattern.local_blocks_apply(128, 32)   # under 4 blocks: dense is as small
    assert not attention_pattern.local_blocks_apply(520, 128)  # T not a multiple of the block
    assert not attention_pattern.local_blocks_apply(8192, 0)   # a global layer
    assert attention_pattern.local_block_size(300) == 192      # half window 150, rounded up to 64s
