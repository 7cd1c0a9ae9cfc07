"""Token-level probes: a tag that the word itself decides is read off the embeddings, a tag
that needs the sentence is not, and shuffled tags teach the probe nothing."""
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.tasks import readers as tasks_lib
from encoder.jobs import probe
from encoder.model import models
from encoder.model.encoder import Encoder, encoder_params
from toy_tasks import FILLERS, word_decided_tags

VOCAB = FILLERS + ["alpha", "key", "marker", "long", "word"]


class WordTokenizer:
    """One piece per word, except words joined by '_' (one piece per part): enough for
    tasks.featurize_tagging, with multi-piece words to exercise the first-piece rule."""
    pad_id, unk_id, cls_id, sep_id = 0, 1, 2, 3

    def encode(self, text):
        return [5 + VOCAB.index(p) for w in text.split() for p in w.split("_")]


@pytest.fixture
def rope_cfg(tiny_cfg):
    tiny_cfg.position = "rope"  # layer 0 = token identity alone: no position embeddings
    return tiny_cfg


def _needs_context(n, seed):
    """'key' is B-X only when 'marker' stands somewhere before it; every sentence holds
    'key' three times and 'marker' once (in its second half: about a quarter of the keys
    are tagged), so the same word is tagged and untagged."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = [str(w) for w in rng.permutation(list(rng.choice(FILLERS, 9)) + ["key"] * 3)]
        words.insert(int(rng.integers(6, len(words) + 1)), "marker")
        seen = 0
        tags = []
        for w in words:
            seen |= w == "marker"
            tags.append("B-X" if w == "key" and seen else "O")
        out.append({"tokens": words, "tags": tags, "_where": f"ctx:{i}"})
    return out


def test_features_are_each_words_first_piece_whatever_the_batch(rope_cfg):
    params = probe.random_params(rope_cfg, 0)
    tok = WordTokenizer()
    ex = word_decided_tags(5, 3)
    feats, order = probe.layer_token_features(rope_cfg, params, tok, ex, 32, batch_size=4)
    assert feats.shape == (rope_cfg.num_layers + 1, sum(len(e["tokens"]) for e in ex),
                           rope_cfg.hidden_size)
    assert order == [(r, w) for r, e in enumerate(ex) for w in range(len(e["tokens"]))]
    # the same rows as the encoder's own hidden states at featurize_tagging's first pieces
    arrays, word_pos = tasks_lib.featurize_tagging(
        ex, tok, 32, tasks_lib.LabelSet.from_examples(ex, "tagging"))
    _, aux = Encoder(models.freeze(rope_cfg)).apply(
        {"params": encoder_params(params)}, jnp.asarray(arrays["input_ids"]),
        jnp.asarray(arrays["segment_ids"]), jnp.asarray(arrays["attention_mask"]),
        return_all=True)
    hs = np.asarray(jnp.stack(aux["hidden_states"]))  # [L+1, B, T, D]
    want = np.stack([hs[:, r, word_pos[r][w]] for r, w in order], 1)
    np.testing.assert_allclose(feats, want, atol=1e-5)
    # a drawn subset (the probe's max_words draw) gives the same rows, in (example, word) order
    some, some_order = probe.layer_token_features(rope_cfg, params, tok, ex, 32, 4, max_words=2,
                                                  rng=np.random.default_rng(3))
    assert len(some_order) == 2 and some_order == sorted(some_order)
    np.testing.assert_allclose(some, want[:, [order.index(k) for k in some_order]], atol=1e-5)
    # words past max_len have no row
    _, short = probe.layer_token_features(rope_cfg, params, tok, ex[:1], 6)
    assert short == [(0, w) for w in range(len(short))] and len(short) < len(ex[0]["tokens"])


def test_a_word_decided_tag_is_read_off_the_embeddings(rope_cfg):
    params = probe.random_params(rope_cfg, 0)
    result = probe.probe_tagging_task(rope_cfg, params, WordTokenizer(), word_decided_tags(300, 0),
                                      word_decided_tags(80, 1), max_len=32, max_tokens=2000)
    assert len(result["layers"]) == len(result["control"]) == rope_cfg.num_layers + 1
    assert result["layers"][0] > 0.97  # entity F1 of 'alpha' from its embedding alone
    assert max(result["control"]) < 0.3  # shuffled tags: nothing to find


def test_a_tag_that_needs_the_sentence_is_not_in_the_embeddings(rope_cfg):
    params = probe.random_params(rope_cfg, 0)
    tok = WordTokenizer()
    free = probe.probe_tagging_task(rope_cfg, params, tok, word_decided_tags(300, 0),
                                    word_decided_tags(80, 1), max_len=32, max_tokens=2000)
    dev = _needs_context(80, 1)
    ctx = probe.probe_tagging_task(rope_cfg, params, tok, _needs_context(300, 0), dev,
                                   max_len=32, max_tokens=2000)
    # every 'key' has the same embedding, tagged or not: at layer 0 the probe can do no
    # better than one guess for all of them (all O: F1 0; all B-X: precision p, recall 1)
    keys = [t for ex in dev for w, t in zip(ex["tokens"], ex["tags"]) if w == "key"]
    p = keys.count("B-X") / len(keys)
    assert ctx["layers"][0] <= 2 * p / (1 + p) + 0.01
    assert ctx["layers"][0] < free["layers"][0] - 0.4


