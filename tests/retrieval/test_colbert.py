"""ColBERT: MaxSim against hand values, the index's exact search against brute force, the
head and its loss."""
import jax
import jax.numpy as jnp
import numpy as np

from encoder.retrieval import colbert

from helpers_retrieval import batch_of, init, loss_fn, task_of, tiny_cfg


def test_maxsim_by_hand():
    q = np.array([[[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]])  # 3 query tokens, the last padding
    qm = np.array([[1, 1, 0]])
    d = np.array([[[0.6, 0.8], [1.0, 0.0], [0.0, -1.0]],
                  [[0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]])
    dm = np.array([[1, 1, 1], [1, 0, 0]])
    got = np.asarray(colbert.maxsim_scores((q, qm), (d, dm)))
    # doc 0: token 0 of q: max(0.6, 1, 0) = 1; token 1: max(0.8, 0, -1) = 0.8 -> 1.8
    # doc 1: token 0: 0 (only its first token is real); token 1: 1 -> 1.0
    np.testing.assert_allclose(got, [[1.8, 1.0]], atol=1e-6)
    assert colbert.maxsim_numpy(q[0], qm[0], d[0], dm[0]) == 1.8


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_index_search_is_exact_maxsim():
    rng = np.random.default_rng(0)
    lens = rng.integers(2, 9, size=50)
    vecs = [_unit(rng.normal(size=(n, 8))).astype(np.float32) for n in lens]
    masks = [np.ones(n, np.int32) for n in lens]
    index = colbert.build_index([f"d{i}" for i in range(50)], vecs, masks, block=16)
    qv = _unit(rng.normal(size=(5, 4, 8))).astype(np.float32)
    qm = np.ones((5, 4), np.int32)
    qm[0, 3] = 0
    ids, scores = colbert.search(index, qv, qm, k=7)
    for i in range(5):
        brute = [colbert.maxsim_numpy(qv[i], qm[i], v.astype(np.float16), m)
                 for v, m in zip(vecs, masks)]
        want = np.argsort(-np.asarray(brute), kind="stable")[:7]
        assert ids[i] == [f"d{j}" for j in want]
        np.testing.assert_allclose(scores[i], np.asarray(brute)[want], atol=1e-4)
    ids_c, _ = colbert.search(index, qv, qm, k=3, candidates=50)  # every doc a candidate
    assert ids_c == [row[:3] for row in ids]


def test_colbert_head_and_loss():
    task = task_of(head="colbert", colbert_dim=16, symmetric=True)
    model, params, _ = init(task, tiny_cfg())
    assert params["colbert"]["kernel"].shape == (32, 16)
    batch = {k: jnp.asarray(v) for k, v in batch_of(b=8).items()}
    out = jax.jit(lambda p, b: task.forward(model, p, b))(params, batch)  # eager: 50 s
    tok = np.asarray(out["a"]["tokens"])
    np.testing.assert_allclose(np.linalg.norm(tok, axis=-1), 1.0, atol=1e-5)
    loss, grads = jax.jit(jax.value_and_grad(loss_fn(task, model)))(params, batch)
    assert np.isfinite(float(loss)) and float(jnp.abs(grads["colbert"]["kernel"]).max()) > 0
