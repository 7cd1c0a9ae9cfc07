"""`encoder mine` on a titled BEIR corpus: a document reads "title text"
while a pair's text_b is the text alone (api_retrieval's train.jsonl and corpus.jsonl), so
the positive must be found by its text, at every row that holds it, and never be mined as
its own hard negative."""
import json

import numpy as np

from encoder.jobs import mine

from helpers import write_jsonl

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "mod.f",
         "mod.g", "mod.h", "mod.k", "mod.m"]


def _bag_of_words(texts):
    out = np.zeros((len(texts), len(WORDS)), np.float32)
    for i, t in enumerate(texts):
        for w in t.split():
            out[i, WORDS.index(w)] += 1.0
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_a_titled_positive_is_no_negative(tmp_path, monkeypatch):
    monkeypatch.setattr(mine, "encoder_of", lambda *a, source=False, **k: (
        (_bag_of_words, "mean", None) if source else (_bag_of_words, "mean")))
    write_jsonl(tmp_path / "pairs.jsonl", [{"text_a": "alpha beta", "text_b": "alpha beta gamma"}])
    write_jsonl(tmp_path / "corpus.jsonl", [
        {"_id": "f", "title": "mod.f", "text": "alpha beta gamma"},    # the positive
        {"_id": "h", "title": "mod.h", "text": "alpha beta gamma"},    # its text, another title
        {"_id": "g", "title": "mod.g", "text": "alpha delta epsilon"},
        {"_id": "k", "title": "mod.k", "text": "beta zeta"},
        {"_id": "m", "title": "mod.m", "text": "eta theta"}])
    out = tmp_path / "triples.jsonl"
    stats = mine.mine_file("unused", str(tmp_path / "pairs.jsonl"), str(out),
                           str(tmp_path / "corpus.jsonl"), num_negatives=2, range_max=5)
    negatives = [json.loads(line)["negatives"] for line in open(out)]
    assert negatives == [["mod.k beta zeta", "mod.g alpha delta epsilon"]], negatives
    assert stats["dropped"]["positive"] == 2, stats
