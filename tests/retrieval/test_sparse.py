"""SPLADE (encoder/retrieval/sparse.py): the pooled log-saturated MLM weights, the query
side, FLOPS / L1 with their warmup, the inverted index against brute force, the task's
loss (cached path included), the trainer's train_step, and the retriever's sparse scores
with their costs."""
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from encoder.retrieval import losses, retriever, sparse
from helpers_retrieval import batch_of, init, task_of, tiny_cfg


def test_splade_pool_by_hand():
    logits = jnp.array([[[1.0, -2.0, 0.5], [3.0, 0.0, -1.0], [9.0, 9.0, 9.0]]])  # [1, 3, 3]
    mask = jnp.array([[1, 1, 0]])  # the third token is padding
    want = [[np.log1p(3.0), 0.0, np.log1p(0.5)]]
    np.testing.assert_allclose(sparse.splade_pool(logits, mask), want, rtol=1e-6)


def test_query_terms_keep_only_the_querys_own_ids():
    w = jnp.arange(1.0, 7.0).reshape(1, 6)
    ids, mask = jnp.array([[2, 4, 4, 1]]), jnp.array([[1, 1, 1, 0]])  # id 1 is padding
    np.testing.assert_allclose(sparse.query_weights(w, ids, mask, "terms"),
                               [[0, 0, 3, 0, 5, 0]])
    np.testing.assert_allclose(sparse.query_weights(w, ids, mask, "expand"), w)
    with pytest.raises(ValueError, match="sparse_query"):
        sparse.query_weights(w, ids, mask, "binary")


def test_flops_l1_and_the_quadratic_warmup_by_hand():
    w = jnp.array([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0], [7.0, 7.0, 7.0]])
    weight = jnp.array([1.0, 1.0, 0.0])  # the third row is padding
    # column means over real rows: 2, 0, 1 -> 4 + 0 + 1
    assert float(sparse.flops(w, weight)) == pytest.approx(5.0)
    assert float(sparse.l1(w, weight)) == pytest.approx(3.0)
    assert [float(sparse.ramp(t, 10)) for t in (0, 5, 10, 20)] == [0.0, 0.25, 1.0, 1.0]
    assert float(sparse.ramp(0, 0)) == 1.0
    got = sparse.regularization(w, w[:2], weight, jnp.ones(2), "flops", 0.1, 0.01, 5, 10)
    assert float(got) == pytest.approx(0.25 * (0.1 * 5.0 + 0.01 * 5.0))


def test_inverted_index_search_equals_brute_force_and_keeps_top_terms():
    rng = np.random.default_rng(0)
    docs = rng.random((60, 40)) * (rng.random((60, 40)) < 0.2)
    queries = rng.random((7, 40)) * (rng.random((7, 40)) < 0.3)
    index = sparse.build_index([f"d{i}" for i in range(60)], sparse.to_csr(docs))
    s, rows = sparse.search(index, sp.csr_matrix(queries), k=10, block=3)
    brute = queries @ docs.T
    order = np.argsort(-brute, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(rows, order)
    np.testing.assert_allclose(s, np.take_along_axis(brute, order, 1), rtol=1e-5)
    kept = sparse.to_csr(docs, top_terms=3).toarray()
    assert (np.count_nonzero(kept, axis=1) <= 3).all()
    for i in range(60):  # the three largest of each row, exactly
        big = np.sort(docs[i])[::-1][:3]
        np.testing.assert_allclose(np.sort(kept[i][kept[i] > 0])[::-1], big[big > 0])
    assert index.nbytes == (index.postings.data.nbytes + index.postings.indices.nbytes
                            + index.postings.indptr.nbytes)


def _sparse_batch(b=8, k=2, seed=0, vocab=64):
    return {k_: jnp.asarray(v) for k_, v in batch_of(b=b, k=k, seed=seed, vocab=vocab).items()}


def test_task_loss_is_in_batch_dot_products_plus_flops():
    cfg = tiny_cfg()
    task = task_of(head="sparse", flops_query_weight=0.01, flops_doc_weight=0.002,
                   mask_duplicates=False)
    model, params, _ = init(task, cfg)
    assert "mlm_head" in params
    batch = _sparse_batch()
    out = task.forward(model, params, batch)
    q, p, n = out["a"]["sparse"], out["b"]["sparse"], out["n"]["sparse"]
    assert q.shape == (8, cfg.vocab_size) and float(jnp.min(q)) >= 0
    got = float(task.loss(out, batch))
    w = batch["weight"]
    ib = losses.in_batch_loss(q, p, w, 1.0, n, batch["n_mask"])
    docs = jnp.concatenate([p, n.reshape(-1, n.shape[-1])])
    d_w = jnp.concatenate([w, batch["n_mask"].reshape(-1).astype(jnp.float32)])
    want = ib + 0.01 * sparse.flops(q, w) + 0.002 * sparse.flops(docs, d_w)
    np.testing.assert_allclose(got, float(want), rtol=1e-5)
    # with a warmup the regulariser follows the batch's train step
    warm = task_of(head="sparse", flops_query_weight=0.01, flops_doc_weight=0.002,
                   mask_duplicates=False, flops_warmup_steps=10)
    at = lambda t: float(warm.loss(out, {**batch, "train_step": jnp.full(8, t)}))  # noqa: E731
    np.testing.assert_allclose(at(0), float(ib), rtol=1e-5)
    np.testing.assert_allclose(at(5) - at(0), 0.25 * (got - float(ib)), rtol=1e-4)
    with pytest.raises(ValueError, match="train_step"):
        warm.loss(out, batch)


def test_terms_query_side_in_the_forward():
    cfg = tiny_cfg()
    task = task_of(head="sparse", sparse_query="terms")
    model, params, _ = init(task, cfg)
    batch = _sparse_batch()
    q = np.asarray(task.forward(model, params, batch)["a"]["sparse"])
    ids, mask = np.asarray(batch["a_input_ids"]), np.asarray(batch["a_attention_mask"])
    for i in range(8):
        own = set(ids[i][mask[i] > 0].tolist())
        assert set(np.flatnonzero(q[i]).tolist()) <= own


def test_cached_sparse_step_equals_the_full_batch():
    cfg = tiny_cfg()
    extra = dict(head="sparse", flops_query_weight=0.01, flops_doc_weight=0.01)
    full, cached = task_of(**extra), task_of(cache_chunk=4, **extra)
    model, params, _ = init(full, cfg)
    batch = _sparse_batch(b=16)
    key = jax.random.key(1)

    def f(task):
        def loss(p):
            out = task.forward(model, p, batch, deterministic=False, rngs={"dropout": key})
            return task.loss(out, batch)
        return jax.jit(jax.value_and_grad(loss))(params)

    (l1, g1), (l2, g2) = f(full), f(cached)
    np.testing.assert_allclose(l2, l1, rtol=1e-6)
    assert float(jnp.abs(g1["mlm_head"]["output_bias"]).sum()) > 0
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        a, b = np.asarray(a), np.asarray(b)
        assert np.max(np.abs(a - b)) <= 1e-5 * max(np.max(np.abs(a)), 1e-3)


def test_the_trainer_fills_in_train_step():
    import optax
    from encoder.train import trainer
    seen = []

    def loss_fn(params, batch, rng):
        seen.append(batch["train_step"])
        return jnp.sum(params["w"] * batch["train_step"]), {"loss": jnp.float32(0)}

    step = jax.jit(trainer.make_step(loss_fn, optax.sgd(1.0)))
    state = trainer.TrainState(jnp.int32(7), {"w": jnp.float32(0)}, optax.sgd(1.0).init(
        {"w": jnp.float32(0)}))
    new, _ = step(state, {"train_step": jnp.zeros(4, jnp.int32)}, jax.random.key(0))
    # grad of sum(w * step) is 4 * 7; sgd(1.0) moves w by -28
    assert float(new.params["w"]) == pytest.approx(-28.0)


@pytest.fixture(scope="module")
def beir_task(text_corpus):
    from encoder.data import corpus as corpus_lib, tokenizer as tokenizer_lib
    docs = [d for d in corpus_lib.stdlib_documents()[:400] if len(d) > 60][:40]
    corpus = [{"_id": f"d{i}", "title": "", "text": d[20:200]} for i, d in enumerate(docs)]
    queries = [{"_id": f"q{i}", "text": d[:40]} for i, d in enumerate(docs[:12])]
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(12)}
    return corpus, queries, qrels, tokenizer_lib.load(text_corpus[1])


def test_a_sparse_head_is_scored_by_its_index_with_its_costs(beir_task):
    from encoder.retrieval import beir
    corpus, queries, qrels, tok = beir_task
    cfg = tiny_cfg(vocab_size=tok.vocab_size, max_position=64)
    task = task_of(head="sparse")
    _, params, _ = init(task, cfg)
    run = {"pooling": "mean", "contrastive": dict(head="sparse", sparse_top_terms=50)}
    src = types.SimpleNamespace(model_cfg=cfg, params=params, tokenizer=tok, run_config=run)
    view = retriever.of_source(src, max_len=32)
    assert view.sparse is not None and view.top_terms == 50
    got = retriever.evaluate(view, corpus, queries, qrels)
    assert {"ndcg_at_10", "recall_at_100", "query_terms", "doc_terms", "bytes_per_passage",
            "queries_per_s"} <= set(got)
    assert 0 < got["doc_terms"] <= 50 and got["query_terms"] > 0
    # brute force over the same weights gives the same measures
    d = sparse.to_csr(view.sparse([beir.document_text(x) for x in corpus]).toarray(), 50)
    q = view.sparse([x["text"] for x in queries], "", True)
    s = (q @ d.T).toarray()
    order = np.argsort(-s, axis=1, kind="stable")
    want = beir.evaluate_run({x["_id"]: {corpus[j]["_id"]: float(s[i, j]) for j in order[i]}
                              for i, x in enumerate(queries)}, qrels, retriever.RECALL_AT)
    assert got["ndcg_at_10"] == pytest.approx(want["ndcg_at_10"])
    assert got["doc_terms"] == pytest.approx(float(np.mean(np.diff(d.indptr))))


def test_the_suites_retriever_table_scores_each_method_side_by_side(beir_task, tmp_path):
    import json
    from encoder.studies.suite import frozen
    from encoder.studies.suite.options import SuiteOptions
    corpus, queries, qrels, tok = beir_task
    folder = tmp_path / "task"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t1\n" for q, rel in qrels.items() for d in rel))
    files = {"corpus": str(folder / "corpus.jsonl"), "queries": str(folder / "queries.jsonl"),
             "qrels": str(folder / "qrels" / "test.tsv")}
    task = types.SimpleNamespace(name="tiny_retrieval", files=files)
    cfg = tiny_cfg(vocab_size=tok.vocab_size, max_position=64)
    _, params, _ = init(task_of(head="sparse"), cfg)
    src = types.SimpleNamespace(model_cfg=cfg, params=params, tokenizer=tok,
                                run_config={"pooling": "mean", "contrastive": {}})
    opts = SuiteOptions(init_from="x", workdir=str(tmp_path),
                        retriever="bm25,dense,colbert,plaid,sparse")
    frozen.check_methods(opts)
    with pytest.raises(ValueError, match="expected a comma-separated list"):
        frozen.check_methods(SuiteOptions(init_from="x", workdir="w", retriever="dense,splade"))
    (tmp_path / "embeddings" / "tiny_retrieval").mkdir(parents=True)
    table = frozen.retriever_table(task, src, opts, {"max_eval": 0}, 32, 0, str(tmp_path),
                                   {"k": 1})
    assert list(table) == ["bm25", "dense", "colbert", "plaid", "sparse"]
    for m in table.values():
        assert 0 <= m["ndcg_at_10"] <= 1 and m["bytes_per_passage"] > 0
        assert m["queries_per_s"] > 0
    assert table["sparse"]["doc_terms"] > 0 and "doc_terms" not in table["dense"]
    # dense: float32 vectors of the model's width; BM25 a row of the exact measures
    assert table["dense"]["bytes_per_passage"] == 4 * cfg.hidden_size
    from encoder.retrieval import beir
    assert table["bm25"]["ndcg_at_10"] == pytest.approx(
        beir.evaluate_bm25(corpus, queries, qrels)["ndcg_at_10"])
    md = (tmp_path / "embeddings" / "tiny_retrieval" / "retrievers.md").read_text()
    assert md.count("\n| ") == 6 and "terms/doc" in md
    assert 0 < table["plaid"]["recall_vs_exact_at_10"] <= 1
    assert table["plaid"]["bytes_per_token"] < table["plaid"]["float32_bytes_per_token"] / 8


@pytest.mark.parametrize("head", ["dense", "sparse"])
def test_dev_scoring_ranks_each_positive_among_the_splits(head):
    """The task's score: recall@1 / MRR@10 / nDCG@10 of each query's own positive among the
    split's distinct positives, by the head's own similarity (SPLADE: dot products)."""
    cfg = tiny_cfg()
    task = task_of(head=head)
    model, params, _ = init(task, cfg)
    batch = _sparse_batch()
    out = task.forward(model, params, batch)
    examples = [{"text_b": f"p{i}"} for i in range(8)]
    metrics, preds = task.score(jax.tree.map(np.asarray, out), examples,
                                {k: np.asarray(v) for k, v in batch.items()}, None)
    key = "sparse" if head == "sparse" else "pooled"
    a, b = np.asarray(out["a"][key]), np.asarray(out["b"][key])
    if head == "dense":
        a, b = a / np.linalg.norm(a, axis=1, keepdims=True), b / np.linalg.norm(b, axis=1,
                                                                             keepdims=True)
    sims = a @ b.T
    want = np.mean(np.argmax(sims, axis=1) == np.arange(8))
    assert metrics["recall_at_1"] == pytest.approx(want)
    assert [p["nearest"] for p in preds] == np.argmax(sims, axis=1).tolist()
    assert 0 <= metrics["ndcg_at_10"] <= 1 and metrics["mrr_at_10"] >= metrics["recall_at_1"]
