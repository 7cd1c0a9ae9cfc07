"""The compressed ColBERT index (encoder/retrieval/plaid.py): bit packing, k-means, the
memory per token, and recall of its three-stage search against colbert.py's exact MaxSim."""
import numpy as np
import pytest

from encoder.retrieval import colbert, plaid


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_pack_round_trips(bits):
    rng = np.random.default_rng(bits)
    b = rng.integers(0, 1 << bits, size=(5, 16))
    packed = plaid.pack(b, bits)
    assert packed.shape == (5, 16 * bits // 8) and packed.dtype == np.uint8
    np.testing.assert_array_equal(plaid.unpack(packed, bits), b)


def test_kmeans_finds_separated_clusters():
    rng = np.random.default_rng(0)
    centres = _unit(rng.normal(size=(4, 8)))
    x = _unit(np.repeat(centres, 50, 0) + 0.05 * rng.normal(size=(200, 8))).astype(np.float32)
    c = plaid.kmeans(x, 4, iters=10, seed=1)
    ids = plaid.assign(x, c)
    # each true cluster lands in one centroid, four distinct ones
    groups = [set(ids[i * 50:(i + 1) * 50].tolist()) for i in range(4)]
    assert all(len(g) == 1 for g in groups) and len(set.union(*groups)) == 4


def _corpus(n=300, k=32, seed=0):
    """Documents of 6-20 tokens drawn around 40 topics, queries of 4 tokens from a document's
    topics: late interaction has structure to find."""
    rng = np.random.default_rng(seed)
    topics = _unit(rng.normal(size=(40, k)))
    vecs, masks = [], []
    for _ in range(n):
        t = rng.integers(6, 21)
        v = np.zeros((20, k), np.float32)
        noise = 0.5 / np.sqrt(k) * rng.normal(size=(t, k))
        v[:t] = _unit(topics[rng.integers(0, 40, t)] + noise)
        m = np.zeros(20, np.int32)
        m[:t] = 1
        vecs.append(v)
        masks.append(m)
    qv = np.stack([_unit(vecs[i][:4] + 0.3 / np.sqrt(k) * rng.normal(size=(4, k)))
                   for i in range(min(30, n))])
    return [f"d{i}" for i in range(n)], vecs, masks, qv.astype(np.float32), np.ones((len(qv), 4))


@pytest.mark.parametrize("bits", [2, 4])
def test_compressed_search_recalls_the_exact_top_10(bits):
    ids, vecs, masks, qv, qm = _corpus()
    exact = colbert.search(colbert.build_index(ids, vecs, masks), qv, qm, k=10)[0]
    index = plaid.build(ids, vecs, masks, n_centroids=64, bits=bits)
    got = plaid.search(index, qv, qm, k=10, nprobe=8, ndocs=100)[0]
    recall = plaid.recall_against(exact, got, 10)
    assert recall >= (0.9 if bits == 4 else 0.8), recall
    # memory: a 2-byte centroid id and K bits / 8 bytes a token, against 4 K float32
    assert index.bytes_per_token == 2 + 32 * bits / 8
    assert 4 * 32 / index.bytes_per_token >= (12 if bits == 2 else 7)
    # fewer probes, fewer candidates: recall does not rise
    few = plaid.search(index, qv, qm, k=10, nprobe=1, ndocs=10)[0]
    assert plaid.recall_against(exact, few, 10) <= recall


def test_one_centroid_per_token_is_exact_search():
    """With as many centroids as distinct tokens every residual is 0 (up to the bucket
    weights): the re-ranked scores are the exact MaxSim scores."""
    ids, vecs, masks, qv, qm = _corpus(n=20, k=16)
    tokens = sum(int(m.sum()) for m in masks)
    index = plaid.build(ids, vecs, masks, n_centroids=tokens, bits=8, iters=0)
    exact_ids, exact_s = colbert.search(colbert.build_index(ids, vecs, masks), qv, qm, k=5)
    got_ids, got_s = plaid.search(index, qv, qm, k=5, nprobe=tokens, ndocs=20)
    assert got_ids == exact_ids
    np.testing.assert_allclose(got_s, exact_s, atol=5e-3)


@pytest.mark.parametrize("bits", [3, 5])
def test_odd_bit_widths_pack_whole_bytes(bits):
    rng = np.random.default_rng(bits)
    b = rng.integers(0, 1 << bits, size=(7, 16))
    packed = plaid.pack(b, bits)
    assert packed.shape == (7, 16 * bits // 8)
    np.testing.assert_array_equal(plaid.unpack(packed, bits), b)


def test_each_coordinate_is_quantised_on_its_own_spread():
    """Residual coordinates 100x apart in spread: a table shared by all coordinates would put
    every value of the narrow one in the two middle buckets (error ~ its whole spread); one
    table a coordinate keeps its error a fraction of its spread."""
    rng = np.random.default_rng(0)
    res = rng.normal(size=(4000, 8)).astype(np.float32) * np.array([1.0] * 4 + [0.01] * 4,
                                                                    np.float32)
    cutoffs, weights = plaid.quantiser(res, 2)
    back = weights[np.arange(8), plaid.bucketise(res, cutoffs)]
    err = np.sqrt(np.mean((back - res) ** 2, axis=0)) / res.std(axis=0)
    assert np.all(err < 0.4), err   # 2-bit Lloyd-Max on a Gaussian: ~0.34
    assert weights.shape == (8, 4) and np.all(np.diff(weights, axis=1) > 0)


def test_given_centroids_skip_the_clustering_and_give_the_same_index():
    ids, vecs, masks, qv, qm = _corpus(n=60)
    a = plaid.build(ids, vecs, masks, n_centroids=16, bits=2)
    b = plaid.build(ids, vecs, masks, bits=4, iters=0, centroids=a.centroids)
    np.testing.assert_array_equal(a.codes, b.codes)
    assert b.bytes_per_token == 2 + 32 * 4 / 8
