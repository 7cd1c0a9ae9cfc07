"""A trained model as a retriever (encoder/retrieval/retriever.py), as the suite scores it:
the run's prefixes on each side, nDCG@10 at each Matryoshka dim, MaxSim for a ColBERT
head, all in beir.py's trec_eval measures (MAP included)."""
import types

import numpy as np
import pytest

from encoder.data import corpus as corpus_lib, tokenizer as tokenizer_lib
from encoder.eval import embeddings
from encoder.retrieval import beir, colbert, retriever
from helpers_retrieval import init, task_of, tiny_cfg


@pytest.fixture(scope="module")
def beir_task(text_corpus):
    docs = [d for d in corpus_lib.stdlib_documents()[:400] if len(d) > 60][:40]
    corpus = [{"_id": f"d{i}", "title": "" if i % 3 else "t", "text": d[20:200]}
              for i, d in enumerate(docs)]
    queries = [{"_id": f"q{i}", "text": d[:40]} for i, d in enumerate(docs[:12])]
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(12)}
    return corpus, queries, qrels, tokenizer_lib.load(text_corpus[1])


def _source(tok, head="dense", **contrastive):
    cfg = tiny_cfg(vocab_size=tok.vocab_size, max_position=64)
    task = task_of(head=head, colbert_dim=8 if head == "colbert" else 0, **contrastive)
    _, params, _ = init(task, cfg)
    run = {"pooling": "mean", "contrastive": dict(head=head, **contrastive,
                                                  colbert_dim=8 if head == "colbert" else 0)}
    return types.SimpleNamespace(model_cfg=cfg, params=params, tokenizer=tok, run_config=run)


def test_prefixes_and_matryoshka_dims_are_the_runs(beir_task):
    corpus, queries, qrels, tok = beir_task
    src = _source(tok, query_prefix="query: ", passage_prefix="passage: ",
                  matryoshka_dims="32,8")
    view = retriever.of_source(src, max_len=32)
    assert view.dims == (32, 8) and view.tokens is None
    np.testing.assert_allclose(view.encode_queries(["abc def"]), embeddings.embed_texts(
        src.model_cfg, src.params, tok, ["query: abc def"], "mean", 32), atol=1e-6)
    got = retriever.evaluate(view, corpus, queries, qrels)
    assert set(got) == {"ndcg_at_10", "mrr_at_10", "recall_at_1", "recall_at_10",
                        "recall_at_100", "map", "ndcg_at_10_dim8"}
    # the same numbers from beir.py's own dense path, given the prefixed encoders
    want = beir.evaluate_dense(view.encode_queries, view.encode_docs, corpus, queries, qrels,
                               dims=(8,))
    assert got["ndcg_at_10"] == pytest.approx(want[32]["ndcg_at_10"])
    assert got["map"] == pytest.approx(want[32]["map"])
    assert got["ndcg_at_10_dim8"] == pytest.approx(want[8]["ndcg_at_10"])
    # without the prefixes the model's numbers differ: the prefixes are really applied
    plain = retriever.evaluate(retriever.of_source(_source(tok, matryoshka_dims="32,8"),
                                                   max_len=32), corpus, queries, qrels)
    assert plain != got


def test_a_colbert_head_is_scored_by_maxsim_over_the_whole_corpus(beir_task):
    corpus, queries, qrels, tok = beir_task
    src = _source(tok, head="colbert")
    view = retriever.of_source(src, max_len=32)
    assert view.tokens is not None
    run = retriever.colbert_run(view, corpus, queries, k=100)
    dv, dm = view.tokens([beir.document_text(x) for x in corpus])
    qv, qm = view.tokens([x["text"] for x in queries])
    for qi, q in enumerate(queries):  # every document scored, by numpy's MaxSim
        want = {d["_id"]: colbert.maxsim_numpy(qv[qi], qm[qi], dv[j], dm[j])
                for j, d in enumerate(corpus)}
        assert set(run[q["_id"]]) == set(want)
        for d, s in run[q["_id"]].items():
            assert s == pytest.approx(want[d], abs=2e-3)  # the index keeps float16 vectors
    got = retriever.evaluate(view, corpus, queries, qrels)
    assert got == pytest.approx(beir.evaluate_run(run, qrels, retriever.RECALL_AT))
    assert "ndcg_at_10_dim8" not in got
