"""The in-batch loss: hand values, masks, and 8 devices (data=4 x fsdp=2) == 1 device."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.retrieval import losses
from encoder.train import partitioning

from helpers_retrieval import batch_of, init, loss_fn, task_of, tiny_cfg


def _nll(scores, i, keep):
    s = np.asarray(scores, np.float64)[keep]
    pos = np.asarray(scores, np.float64)[i]
    return -(pos - np.log(np.sum(np.exp(s))))


def test_in_batch_loss_by_hand_with_negatives_and_duplicates():
    rng = np.random.default_rng(0)
    b, k, d = 3, 1, 4
    q = losses.normalize(rng.normal(size=(b, d)))
    p = losses.normalize(rng.normal(size=(b, d)))
    n = losses.normalize(rng.normal(size=(b, k, d)))
    q_ids, p_ids = np.array([0, 1, 2]), np.array([10, 10, 12])  # rows 0, 1: one positive text
    n_ids = np.array([[12], [20], [21]])                       # row 0's negative = row 2's positive
    w = np.ones(b, np.float32)
    got = losses.in_batch_loss(q, p, w, 20.0, n, np.ones((b, k)), q_ids, p_ids, n_ids)
    cand = np.concatenate([np.asarray(p), np.asarray(n).reshape(-1, d)])
    s = 20.0 * np.asarray(q) @ cand.T                        # [3, 6]
    keeps = [[0, 2, 3, 4, 5], [1, 2, 3, 4, 5], [0, 1, 2, 4, 5]]  # row 0: no p1; row 1: no p0;
    # row 2: its own positive text is row 0's negative (column 3) -> masked
    want = np.mean([_nll(s[i], i, keeps[i]) for i in range(b)])
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_symmetric_and_padded_rows():
    rng = np.random.default_rng(1)
    q = losses.normalize(rng.normal(size=(4, 8)))
    p = losses.normalize(rng.normal(size=(4, 8)))
    w = np.array([1, 1, 1, 0], np.float32)  # row 3 is padding: neither query nor candidate
    got = losses.in_batch_loss(q, p, w, 10.0, symmetric=True)
    s = 10.0 * np.asarray(q) @ np.asarray(p).T
    fwd = np.mean([_nll(s[i], i, [0, 1, 2]) for i in range(3)])
    back = np.mean([_nll(s.T[i], i, [0, 1, 2]) for i in range(3)])
    np.testing.assert_allclose(got, 0.5 * (fwd + back), rtol=1e-5)


def test_matryoshka_by_hand():
    q = jnp.array([[3.0, 4.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
    p = jnp.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    seen = {}

    def at(qq, pp, nn_):
        seen[qq.shape[-1]] = (np.asarray(qq), np.asarray(pp))
        return jnp.sum(qq * pp)

    total, parts = losses.matryoshka_loss(at, q, p, None, (4, 2), (1.0, 0.5))
    # dim 4: q rows (0.6, 0.8, 0, 0), (0, .707, .707, 0); dots 0.6, 0.707
    # dim 2: q rows (0.6, 0.8), (0, 1); p rows (1, 0), (0, 0) -> dots 0.6, 0
    np.testing.assert_allclose(parts[4], 0.6 + np.sqrt(0.5), rtol=1e-6)
    np.testing.assert_allclose(parts[2], 0.6, rtol=1e-6)
    np.testing.assert_allclose(total, parts[4] + 0.5 * parts[2], rtol=1e-6)
    with pytest.raises(ValueError, match="not in"):
        losses.matryoshka_loss(at, q, p, None, (8,))


def test_learned_temperature_is_clamped():
    assert float(losses.scale_of(jnp.float32(10.0), 0.05)) == pytest.approx(100.0, rel=1e-4)
    assert float(losses.scale_of(None, 0.05)) == pytest.approx(20.0)


def test_eight_devices_equal_one_device_loss_and_gradients():
    """The global batch's loss and gradients on a data=4 x fsdp=2 mesh (negatives from every
    device through the jit's gather) equal one device's, to 1e-5."""
    devices = jax.devices()
    assert len(devices) == 8
    task = task_of(symmetric=True, learn_temperature=True, matryoshka_dims="32,16")
    cfg = tiny_cfg()
    model, params, boxed = init(task, cfg)
    batch = batch_of(b=16)
    f = jax.value_and_grad(loss_fn(task, model))

    one = jax.device_put((params, batch), devices[0])
    loss1, grad1 = jax.jit(f)(*one)

    mesh = partitioning.make_mesh({"data": 4, "fsdp": 2}, devices)
    p_shard = partitioning.param_shardings(boxed, mesh)
    b_shard = partitioning.batch_sharding(mesh)
    sharded = (jax.device_put(params, p_shard),
               {k: jax.device_put(v, b_shard) for k, v in batch.items()})
    loss8, grad8 = jax.jit(partitioning.traced_under(f, mesh), in_shardings=(p_shard, b_shard),
                           out_shardings=partitioning.replicated(mesh))(*sharded)
    assert len(sharded[1]["b_input_ids"].sharding.device_set) == 8
    np.testing.assert_allclose(loss8, loss1, rtol=1e-5, atol=1e-6)
    flat1, flat8 = jax.tree.leaves(grad1), jax.tree.leaves(grad8)
    assert len(flat1) == len(flat8) and "logit_scale" in grad1
    for g1, g8 in zip(flat1, flat8):  # to 1e-5 of each tensor's largest entry
        g1, g8 = np.asarray(g1), np.asarray(g8)
        assert np.max(np.abs(g8 - g1)) <= 1e-5 * max(np.max(np.abs(g1)), 1e-3)
    assert float(jnp.abs(grad1["logit_scale"])) > 0


def _train_loss(task, model):
    def f(params, batch, rng):
        out = task.forward(model, params, batch, deterministic=False, rngs={"dropout": rng})
        return task.loss(out, batch)
    return f


def test_cached_step_gradients_equal_the_full_batch():
    """GradCache: chunks of 4 rows embedded under checkpoint, the loss over all 16 rows,
    backprop chunk by chunk: the full batch's loss and gradients (1e-5)."""
    cfg = tiny_cfg()  # dropout 0: the two schemes draw different masks otherwise
    full, cached = task_of(), task_of(cache_chunk=4)
    model, params, _ = init(full, cfg)
    batch = {k: jnp.asarray(v) for k, v in batch_of(b=16).items()}
    key = jax.random.key(1)
    l_full, g_full = jax.jit(jax.value_and_grad(_train_loss(full, model)))(params, batch, key)
    l_cached, g_cached = jax.jit(jax.value_and_grad(_train_loss(cached, model)))(
        params, batch, key)
    np.testing.assert_allclose(l_cached, l_full, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(g_full), jax.tree.leaves(g_cached)):
        a, b = np.asarray(a), np.asarray(b)
        assert np.max(np.abs(a - b)) <= 1e-5 * max(np.max(np.abs(a)), 1e-3)
    with pytest.raises(ValueError, match="does not divide"):
        _train_loss(task_of(cache_chunk=5), model)(params, batch, key)


def test_cached_step_holds_less_memory():
    """At equal batch the cached step's compiled temp memory is a fraction of the plain one's."""
    cfg = tiny_cfg(max_position=64)
    full, cached = task_of(), task_of(cache_chunk=8)
    model, params, _ = init(full, cfg)
    b, t = 128, 64
    spec = {f"{s}_{k}": jax.ShapeDtypeStruct((b, t), jnp.int32)
            for s in "ab" for k in ("input_ids", "segment_ids", "attention_mask")}
    spec["weight"] = jax.ShapeDtypeStruct((b,), jnp.float32)
    key = jax.eval_shape(lambda: jax.random.key(0))

    def temp(task):
        c = jax.jit(jax.grad(_train_loss(task, model))).lower(params, spec, key).compile()
        return c.memory_analysis().temp_size_in_bytes

    plain, small = temp(full), temp(cached)
    assert small < 0.5 * plain, (small, plain)
