"""Mining: the exact top-k's candidates, the positive dropped, the margins and max_score."""
import numpy as np
import pytest

from encoder.retrieval import mining


def _unit(x):
    x = np.asarray(x, np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _setup():
    # one query along e0; corpus scores (cosine) 0.99 (the positive), 0.98, 0.9, 0.7, 0.5, 0.1
    cos = np.array([0.99, 0.98, 0.9, 0.7, 0.5, 0.1])
    corpus = _unit(np.stack([cos, np.sqrt(1 - cos ** 2), np.zeros(6)], 1))
    texts = ["pos", "near-dup", "hard", "medium", "easy", "far"]
    q = np.array([[1.0, 0.0, 0.0]], np.float32)
    return q, corpus[:1], corpus, texts, [{"text_a": "query", "text_b": "pos"}]


def test_positive_dropped_and_top_by_score():
    q, pos, corpus, texts, pairs = _setup()
    negs, stats = mining.mine(q, pos, corpus, texts, pairs, [0], num_negatives=3)
    assert negs == [["near-dup", "hard", "medium"]] and stats["dropped"]["positive"] == 1


def test_margins_and_max_score():
    q, pos, corpus, texts, pairs = _setup()
    negs, stats = mining.mine(q, pos, corpus, texts, pairs, [0], 2, absolute_margin=0.05)
    assert negs == [["hard", "medium"]] and stats["dropped"]["absolute_margin"] == 1
    # relative 0.1: threshold 0.99 - 0.099 = 0.891 -> 0.98 and 0.9 dropped
    negs, stats = mining.mine(q, pos, corpus, texts, pairs, [0], 2, relative_margin=0.1)
    assert negs == [["medium", "easy"]] and stats["dropped"]["relative_margin"] == 2
    negs, stats = mining.mine(q, pos, corpus, texts, pairs, [0], 5, max_score=0.6)
    assert negs == [["easy", "far"]] and stats["pairs_short_of_negatives"] == 1
    negs, _ = mining.mine(q, pos, corpus, texts, pairs, [0], 2, range_min=3)
    assert negs == [["medium", "easy"]]  # ranks 0-2 skipped (positive among them)
    # the positive found by its text when it is not a corpus row
    negs, _ = mining.mine(q, pos, corpus, texts, pairs, [-1], 1)
    assert negs == [["near-dup"]]
    with pytest.raises(ValueError, match="positive"):
        mining.mine(q, pos, corpus, texts, pairs, [0], 0)


def test_many_queries_match_numpy_top_k():
    rng = np.random.default_rng(0)
    corpus = _unit(rng.normal(size=(300, 8)))
    q = _unit(rng.normal(size=(20, 8)))
    texts = [f"t{i}" for i in range(300)]
    pairs = [{"text_a": f"q{i}", "text_b": texts[i]} for i in range(20)]
    negs, _ = mining.mine(q, corpus[:20], corpus, texts, pairs, list(range(20)), 4)
    order = np.argsort(-(q @ corpus.T), axis=1, kind="stable")
    for i in range(20):
        want = [texts[j] for j in order[i] if j != i][:4]
        assert negs[i] == want
