"""BEIR measures equal trec_eval's (pytrec_eval) on generated runs; BM25 equals bm25s;
exact top-k equals numpy's argsort over 8 devices; the BEIR reader."""
import json
import os

import numpy as np
import pytest

from encoder.retrieval import beir, bm25, search


def _generated(seed=0, n_q=30, n_d=150):
    rng = np.random.default_rng(seed)
    docs = [f"d{i}" for i in range(n_d)]
    qrels, run = {}, {}
    for qi in range(n_q):
        q = f"q{qi}"
        judged = rng.choice(n_d, size=rng.integers(1, min(12, n_d)), replace=False)
        qrels[q] = {docs[j]: int(rng.integers(0, 3)) for j in judged}
        if qi % 7 == 0:
            qrels[q][docs[judged[0]]] = 2  # at least one relevant
        got = rng.choice(n_d, size=rng.integers(5, min(130, n_d)), replace=False)
        # scores rounded to 1 decimal: many ties, broken as trec_eval does
        run[q] = {docs[j]: float(np.round(rng.normal(), 1)) for j in got}
    return run, qrels


@pytest.mark.parametrize("seed", [0, 1])
def test_measures_equal_pytrec_eval(seed):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run, qrels = _generated(seed)
    mean, each = beir.evaluate_run(run, qrels, per_query=True)
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "map", "recall_10",
                                                 "recall_100"}).evaluate(run)
    cut10 = {q: {d: s for d, s in run[q].items() if d in beir.ranked(run[q])[:10]} for q in run}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut10)
    judged = [q for q in qrels if any(g >= 1 for g in qrels[q].values())]
    assert set(each) == set(judged)
    for q in judged:
        np.testing.assert_allclose(each[q]["ndcg_at_10"], ref[q]["ndcg_cut_10"], atol=1e-4)
        np.testing.assert_allclose(each[q]["map"], ref[q]["map"], atol=1e-4)
        np.testing.assert_allclose(each[q]["recall_at_100"], ref[q]["recall_100"], atol=1e-4)
        np.testing.assert_allclose(each[q]["recall_at_10"], ref[q]["recall_10"], atol=1e-4)
        np.testing.assert_allclose(each[q]["mrr_at_10"], rr[q]["recip_rank"], atol=1e-4)
    np.testing.assert_allclose(mean["ndcg_at_10"],
                               np.mean([ref[q]["ndcg_cut_10"] for q in judged]), atol=1e-4)


def test_run_files_round_trip(tmp_path):
    run, _ = _generated(2, n_q=3, n_d=20)
    path = str(tmp_path / "run.trec")
    beir.write_run(path, run)
    back = beir.read_run(path)
    assert {q: beir.ranked(d) for q, d in back.items()} == {q: beir.ranked(d)
                                                            for q, d in run.items()}


def test_exact_topk_equals_numpy_over_eight_devices():
    rng = np.random.default_rng(0)
    q, c = rng.normal(size=(37, 16)), rng.normal(size=(1001, 16))
    s, i = search.exact_topk(q, c, k=25, chunk=40, query_block=16)
    full = q.astype(np.float32) @ c.astype(np.float32).T
    want = np.argsort(-full, axis=1, kind="stable")[:, :25]
    np.testing.assert_array_equal(i, want)
    np.testing.assert_allclose(s, np.take_along_axis(full, want, 1), rtol=1e-5, atol=1e-5)
    s2, i2 = search.exact_topk(q[:3], c[:5], k=10)  # k larger than the corpus
    assert i2.shape == (3, 5)


def test_bm25_equals_bm25s():
    bm25s = pytest.importorskip("bm25s")
    docs = ["the quick brown fox jumps over the lazy dog", "a fox is a quick animal",
            "dogs and cats are animals", "open a file and read its lines",
            "read the lines of a text file", "sockets connect two processes"]
    queries = ["quick fox", "read file lines", "animals dogs", "nothing matches here"]
    ours = bm25.BM25(docs).scores(queries)
    ref = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    ref.index(bm25s.tokenize(docs, stopwords=None, show_progress=False), show_progress=False)
    for qi, q in enumerate(queries):
        toks = bm25s.tokenize([q], stopwords=None, show_progress=False,
                              return_ids=False)[0]
        want = ref.get_scores(toks)
        np.testing.assert_allclose(ours[qi], want, rtol=1e-5, atol=1e-6)


def test_read_beir_skips_and_counts_bad_lines(tmp_path):
    os.makedirs(tmp_path / "qrels")
    with open(tmp_path / "corpus.jsonl", "w") as f:
        f.write(json.dumps({"_id": "d1", "title": "T", "text": "one"}) + "\n{bad\n")
        f.write(json.dumps({"_id": "d2", "text": "two"}) + "\n")
    with open(tmp_path / "queries.jsonl", "w") as f:
        f.write(json.dumps({"_id": "q1", "text": "one?"}) + "\n")
        f.write(json.dumps({"_id": "q9", "text": "unjudged"}) + "\n")
    with open(tmp_path / "qrels" / "test.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    corpus, queries, qrels, skipped = beir.read_beir(str(tmp_path))
    assert [d["_id"] for d in corpus] == ["d1", "d2"] and skipped["corpus"] == 1
    assert [q["_id"] for q in queries] == ["q1"] and qrels == {"q1": {"d1": 1}}
    assert beir.document_text(corpus[0]) == "T one"
    m = beir.evaluate_bm25(corpus, queries, qrels)
    assert m["ndcg_at_10"] == 1.0
    with pytest.raises(FileNotFoundError, match="dev.tsv"):
        beir.read_beir(str(tmp_path), "dev")
