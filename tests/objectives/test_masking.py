"""Statistics and invariants of the on-device 80/10/10 corruption."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.objectives import masking

V, SPECIAL = 1000, (0, 1, 2, 3, 4)


def _batch(rng, b=512, t=256):
    ids = rng.integers(5, V, size=(b, t)).astype(np.int32)
    ids[:, 0] = 2
    ids[:, 100] = 3
    am = np.ones((b, t), np.int32)
    lengths = rng.integers(150, t + 1, size=b)
    am[np.arange(t)[None] >= lengths[:, None]] = 0
    ids[am == 0] = 0
    return jnp.asarray(ids), jnp.asarray(am)


def _corrupt(ids, am, mode="token", table=None, seed=0, rate=0.15):
    return jax.jit(lambda r: masking.corrupt(
        r, ids, am, rate=rate, max_predictions=int(ids.shape[1] * rate) + 2, mask_id=4,
        vocab_size=V, special_ids=SPECIAL, mode=mode, word_start_table=table))(
        jax.random.key(seed))


def test_masked_fraction_and_80_10_10_split():
    ids, am = _batch(np.random.default_rng(0))
    out = _corrupt(ids, am)
    cand = np.asarray(masking.candidates_mask(ids, am, SPECIAL))
    n = cand.sum()
    assert n > 100_000
    sel = np.asarray(out["masked"])
    frac = sel.sum() / n
    # Selection count per row is floor(rate*n + u): unbiased; binomial sd is an upper bound.
    sd = np.sqrt(0.15 * 0.85 / n)
    assert abs(frac - 0.15) < 4 * sd, (frac, sd)
    corrupted, orig = np.asarray(out["input_ids"])[sel], np.asarray(ids)[sel]
    m = sel.sum()
    p_mask = (corrupted == 4).mean()
    p_same = (corrupted == orig).mean()
    # A random replacement equals the original with prob 1/(V-5); count it as "random".
    p_rand = 1 - p_mask - p_same + (0.1 / (V - 5))
    for p, target in ((p_mask, 0.8), (p_rand, 0.1), (p_same, 0.1 + 0.1 / (V - 5))):
        assert abs(p - target) < 4 * np.sqrt(target * (1 - target) / m), (p, target)
    # Unselected tokens are untouched; specials and padding never selected.
    np.testing.assert_array_equal(np.asarray(out["input_ids"])[~sel], np.asarray(ids)[~sel])
    assert not sel[~cand].any()
    # Slots: weights mark exactly the selected positions, labels are originals.
    pos, w = np.asarray(out["mlm_positions"]), np.asarray(out["mlm_weights"]).astype(bool)
    rows = np.repeat(np.arange(pos.shape[0])[:, None], pos.shape[1], 1)
    assert sel[rows[w], pos[w]].all() and w.sum() == sel.sum()
    np.testing.assert_array_equal(np.asarray(out["mlm_labels"])[w], np.asarray(ids)[rows[w], pos[w]])


def test_fresh_mask_every_step():
    ids, am = _batch(np.random.default_rng(1), b=4)
    a, b = _corrupt(ids, am, seed=0), _corrupt(ids, am, seed=1)
    assert not np.array_equal(a["masked"], b["masked"])
    np.testing.assert_array_equal(a["masked"], _corrupt(ids, am, seed=0)["masked"])


@pytest.mark.parametrize("mode", ["whole_word", "span"])
def test_whole_units_are_never_split(mode):
    rng = np.random.default_rng(2)
    ids, am = _batch(rng, b=256)
    table = rng.random(V) < 0.5  # half the vocabulary starts words
    table[:5] = True
    out = _corrupt(ids, am, mode=mode, table=jnp.asarray(table))
    sel = np.asarray(out["masked"])
    cand = np.asarray(masking.candidates_mask(ids, am, SPECIAL))
    starts = table[np.asarray(ids)]
    # Within a word (continuation pieces), selection equals the word start's.
    cont = cand & ~starts
    cont[:, 0] = False
    prev_cand = np.pad(cand[:, :-1], ((0, 0), (1, 0)))
    inner = cont & prev_cand
    assert inner.sum() > 1000
    np.testing.assert_array_equal(sel[inner], np.roll(sel, 1, axis=1)[inner])
    frac = sel.sum() / cand.sum()
    assert 0.10 < frac <= 0.151
    if mode == "span":
        # Runs of masked words are longer than single words on average.
        word_runs = np.diff(np.flatnonzero(np.diff(np.concatenate([[0], sel.ravel(), [0]]))))[::2]
        assert word_runs.mean() > 4
