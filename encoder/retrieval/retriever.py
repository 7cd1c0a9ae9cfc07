"""A trained model used as a retriever, the way it was trained.

A source (encoder/checkpoints/sources.py's Pretrained: a contrastive workdir, any other
workdir, an imported `hf:DIR`) carries its run's contrastive options (options.of_run):
queries and documents get the run's prefixes, the pooled vectors are scored at the full
width and at each Matryoshka dimension (re-normalised prefixes), a ColBERT head's
token vectors are scored by MaxSim (colbert.py's index and exact search), and a sparse
(SPLADE) head's vocabulary weights by sparse.py's inverted index, with the run's query side
and top terms per document. Scores are
beir.py's trec_eval measures. The suite's retrieval tasks, `benchmarks/beir_eval.py` and
the mining command read a model through `of_source`.

Metric keys: ndcg_at_10, mrr_at_10, recall_at_{1,10,100}, map (the model's own scoring:
MaxSim for ColBERT, the inverted index for SPLADE, else the full width), and
ndcg_at_10_dim{d} at each smaller Matryoshka dimension. A sparse model adds its costs:
query_terms and doc_terms (mean non-zero terms), index_bytes, bytes_per_passage,
queries_per_s (sparse.run_and_costs).
"""
import dataclasses
import time
from typing import Callable

import jax

from encoder.eval import embeddings, inference
from encoder.model import models
import numpy as np
import scipy.sparse as sp

from encoder.retrieval import beir, bm25 as bm25_lib, colbert, model as retrieval_model
from encoder.retrieval import options as options_lib, search
from encoder.retrieval import sparse as sparse_lib

RECALL_AT = (1, 10, 100)


@dataclasses.dataclass
class Retriever:
    """texts -> vectors for each side, and what the model is scored at."""
    encode_queries: Callable      # texts -> [N, D] unit vectors
    encode_docs: Callable
    dims: tuple = ()              # Matryoshka dimensions (besides the full width)
    tokens: Callable | None = None  # ColBERT: texts -> ([N, T, K] unit vectors, [N, T] mask)
    query_prefix: str = ""
    passage_prefix: str = ""
    pooling: str = "mean"
    sparse: Callable | None = None  # SPLADE: (texts, prefix, query) -> CSR weights [N, V]
    top_terms: int = 0              # SPLADE: each document's largest terms kept in the index
    compressed: bool = False        # ColBERT tokens searched in plaid.py's compressed index


def of_source(src, pooling: str = "", max_len: int = 128, batch_size: int = 64,
              shard=None, params=None) -> Retriever:
    """The source as a retriever: its run's pooling (unless given), prefixes, dims, head.
    params: the parameters to use (default src.params; e.g. on a device mesh)."""
    run = src.run_config
    o = options_lib.of_run(run)
    pooling = pooling or (run.get("pooling", "mean") if run is not None else "mean")
    params = src.params if params is None else params
    cfg, tok = src.model_cfg, src.tokenizer

    def dense(prefix):
        def encode(texts):
            return embeddings.embed_texts(cfg, params, tok, [prefix + t for t in texts],
                                          pooling, max_len, batch_size, shard)
        return encode

    tokens_fn = None
    if o.head == "colbert":
        if "colbert" not in params:
            raise ValueError("the parameters scored hold no 'colbert' projection, but the "
                             "run's head is ColBERT (a random-init control of a ColBERT run "
                             "is not built)")
        module = retrieval_model.Retriever(models.freeze(cfg), 0, pooling,
                                           colbert_dim=o.colbert_dim)
        variables = {k: params[k] for k in ("encoder", "head", "colbert") if k in params}
        fn = jax.jit(lambda v, b: module.apply({"params": v}, b["input_ids"], b["segment_ids"],
                                               b["attention_mask"])[0]["tokens"])

        def _tokens(texts, prefix=""):
            arrays = inference.encode_texts(tok, [prefix + t for t in texts], max_len)
            return inference.predict(fn, variables, arrays, batch_size, shard), \
                arrays["attention_mask"]
        tokens_fn = _tokens
    sparse_fn = None
    if o.head == "sparse":
        sparse_fn = sparse_encoder(src, params, pooling, o.sparse_query, max_len, batch_size,
                                   shard)
    return Retriever(dense(o.query_prefix), dense(o.passage_prefix), o.matryoshka_dims,
                     tokens_fn, o.query_prefix, o.passage_prefix, pooling, sparse_fn,
                     o.sparse_top_terms)


def sparse_encoder(src, params, pooling: str, query_side: str, max_len: int,
                   batch_size: int = 64, shard=None):
    """(texts, prefix, query: bool) -> CSR [N, V] SPLADE weights, a batch at a time (the
    [B, V] rows never held for the whole corpus); queries under the run's query side."""
    if "mlm_head" not in params:
        raise ValueError("the parameters scored hold no 'mlm_head', but the run's head is "
                         "sparse (SPLADE reads the MLM head)")
    module = retrieval_model.Retriever(models.freeze(src.model_cfg), 0, pooling, sparse=True)
    variables = {k: params[k] for k in ("encoder", "head", "mlm_head") if k in params}

    def weights(v, b, query):
        w = module.apply({"params": v}, b["input_ids"], b["segment_ids"],
                         b["attention_mask"])[0]["sparse"]
        if query:
            w = sparse_lib.query_weights(w, b["input_ids"], b["attention_mask"], query_side)
        return w

    fns = {q: jax.jit(lambda v, b, q=q: weights(v, b, q)) for q in (False, True)}

    def encode(texts, prefix="", query=False):
        arrays = inference.encode_texts(src.tokenizer, [prefix + t for t in texts], max_len)
        rows = []
        for batch in inference.padded_batches(arrays, batch_size):
            keep = int(batch["weight"].sum())
            b = shard(batch) if shard is not None else batch
            rows.append(sp.csr_matrix(np.asarray(jax.device_get(fns[query](variables, b)))
                                      [:keep]))
        vocab = sparse_lib.real_vocab(src.model_cfg)
        if not rows:
            return sp.csr_matrix((0, vocab), dtype=np.float32)
        return sp.vstack(rows).tocsr()[:, :vocab]
    return encode


def sparse_run(r: Retriever, corpus, queries, k: int = 100):
    """(run, costs) by the inverted index (sparse.py)."""
    return sparse_lib.run_and_costs(
        lambda texts: r.sparse(texts, r.query_prefix, True),
        lambda texts: r.sparse(texts, r.passage_prefix, False),
        [beir.document_text(x) for x in corpus], [x["_id"] for x in corpus],
        [x["text"] for x in queries], [x["_id"] for x in queries], k, r.top_terms)


def colbert_run(r: Retriever, corpus, queries, k: int = 100) -> dict:
    """A run by exact MaxSim over the whole corpus (colbert.py's index)."""
    dv, dm = r.tokens([beir.document_text(x) for x in corpus], r.passage_prefix)
    index = colbert.build_index([x["_id"] for x in corpus], list(dv), list(dm))
    qv, qm = r.tokens([x["text"] for x in queries], r.query_prefix)
    ids, scores = colbert.search(index, qv, qm, k)
    return {q["_id"]: dict(zip(i, s)) for q, i, s in zip(queries, ids, scores)}


def evaluate(r: Retriever, corpus, queries, qrels, k: int = 100, ks=RECALL_AT) -> dict:
    """{metric: value} on a BEIR task (module docstring's keys)."""
    if r.sparse is not None:
        run, costs = sparse_run(r, corpus, queries, k)
        return {**beir.evaluate_run(run, qrels, ks), **costs}
    if r.tokens is not None:
        return beir.evaluate_run(colbert_run(r, corpus, queries, k), qrels, ks)
    docs = r.encode_docs([beir.document_text(x) for x in corpus])
    q = r.encode_queries([x["text"] for x in queries])
    runs = beir.dense_runs(q, docs, [x["_id"] for x in queries], [x["_id"] for x in corpus],
                           r.dims, k)
    width = max(runs)
    out = beir.evaluate_run(runs[width], qrels, ks)
    for d in sorted(runs, reverse=True):
        if d != width:
            out[f"ndcg_at_10_dim{d}"] = beir.evaluate_run(runs[d], qrels, ks)["ndcg_at_10"]
    return out


# ------------------------------------------------------------------ one method at a time

# the suite's --retriever names; plaid: the ColBERT tokens in plaid.py's compressed index
METHODS = ("bm25", "dense", "colbert", "plaid", "sparse")
# the suite's compressed index: 3-bit residuals (100k passages, MiniLM's 384-d tokens: recall@10
# against exact 0.96 at 10.5x smaller than float32; 2 bits: 0.92 at 15.7x; BUILD_NOTES)
PLAID = dict(bits=3, nprobe=4, ndocs=256)


def as_method(src, method: str, pooling: str = "", max_len: int = 128, batch_size: int = 64,
              params=None) -> Retriever | None:
    """The source scored by one method, whatever head it was trained with (None: bm25):
    dense   its pooled vectors (the run's prefixes and Matryoshka dims);
    colbert MaxSim over its ColBERT projection, or over its encoder's own unit token
            vectors when it has none (late interaction without a trained projection);
    sparse  SPLADE weights from its MLM head (refused without one)."""
    if method not in METHODS:
        raise ValueError(f"--retriever={method!r}: expected one of {', '.join(METHODS)}")
    if method == "bm25":
        return None
    view = of_source(src, pooling, max_len, batch_size, params=params)
    params = src.params if params is None else params
    if method == "dense":
        return dataclasses.replace(view, tokens=None, sparse=None)
    if method in ("colbert", "plaid"):
        tokens = view.tokens or encoder_tokens(src, params, max_len, batch_size)
        return dataclasses.replace(view, tokens=tokens, sparse=None,
                                   compressed=method == "plaid")
    if view.sparse is None:  # a dense or ColBERT run read through its MLM head
        o = options_lib.of_run(src.run_config)
        view = dataclasses.replace(view, sparse=sparse_encoder(
            src, params, view.pooling, o.sparse_query, max_len, batch_size),
            top_terms=o.sparse_top_terms)
    return dataclasses.replace(view, tokens=None)


def encoder_tokens(src, params, max_len: int, batch_size: int = 64):
    """(texts, prefix) -> ([N, T, D] unit token vectors of the encoder, [N, T] mask)."""
    from encoder.model.encoder import Encoder
    enc = Encoder(models.freeze(src.model_cfg))
    fn = jax.jit(lambda v, b: losses_unit(enc.apply({"params": v}, b["input_ids"],
                                                    b["segment_ids"], b["attention_mask"])[0]))

    def tokens(texts, prefix=""):
        arrays = inference.encode_texts(src.tokenizer, [prefix + t for t in texts], max_len)
        return inference.predict(fn, params["encoder"], arrays, batch_size), \
            arrays["attention_mask"]
    return tokens


def losses_unit(x):
    import jax.numpy as jnp
    x = x.astype(jnp.float32)
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def evaluate_costs(r: Retriever | None, corpus, queries, qrels, k: int = 100,
                   ks=RECALL_AT) -> dict:
    """evaluate's measures and the method's costs: index_bytes and bytes_per_passage (what
    its index holds: BM25's and SPLADE's postings, dense float32 vectors, ColBERT's float16
    token vectors, masks and first-stage vectors), queries_per_s (encoding the queries and
    searching, one process), and SPLADE's non-zero terms. r None: BM25."""
    doc_texts = [beir.document_text(x) for x in corpus]
    q_texts, q_ids = [x["text"] for x in queries], [x["_id"] for x in queries]
    d_ids = [x["_id"] for x in corpus]
    if r is not None and r.sparse is not None:
        return evaluate(r, corpus, queries, qrels, k, ks)
    if r is None:
        index = bm25_lib.BM25(doc_texts)
        w = index.weights
        nbytes = int(w.data.nbytes + w.indices.nbytes + w.indptr.nbytes)
        start = time.perf_counter()
        s, i = index.topk(q_texts, k)
        seconds = time.perf_counter() - start
        run = beir.run_from_topk(q_ids, d_ids, s, i)
        out = beir.evaluate_run(run, qrels, ks)
    elif r.tokens is not None and r.compressed:
        return plaid_costs(r, corpus, queries, qrels, k, ks)
    elif r.tokens is not None:
        dv, dm = r.tokens(doc_texts, r.passage_prefix)
        index = colbert.build_index(d_ids, list(dv), list(dm))
        nbytes = int(sum(a.nbytes + m.nbytes for _, a, m in index.blocks)
                     + index.centroids.nbytes)
        start = time.perf_counter()
        qv, qm = r.tokens(q_texts, r.query_prefix)
        ids, scores = colbert.search(index, qv, qm, k)
        seconds = time.perf_counter() - start
        out = beir.evaluate_run({q: dict(zip(i, s)) for q, i, s in zip(q_ids, ids, scores)},
                                qrels, ks)
    else:
        docs = r.encode_docs(doc_texts)
        nbytes = int(np.asarray(docs, np.float32).nbytes)
        start = time.perf_counter()
        qv = r.encode_queries(q_texts)
        s, i = search.exact_topk(beir._unit(qv), beir._unit(docs), k)
        seconds = time.perf_counter() - start
        out = beir.evaluate_run(beir.run_from_topk(q_ids, d_ids, s, i), qrels, ks)
    return {**out, "index_bytes": nbytes, "bytes_per_passage": nbytes / max(len(corpus), 1),
            "queries_per_s": len(queries) / max(seconds, 1e-9)}


def plaid_costs(r: Retriever, corpus, queries, qrels, k: int = 100, ks=RECALL_AT) -> dict:
    """The compressed index's measures and costs, and recall_vs_exact_at_10: how much of
    exact MaxSim's top 10 (colbert.py over the same token vectors) it finds."""
    from encoder.retrieval import plaid
    d_ids, q_ids = [x["_id"] for x in corpus], [x["_id"] for x in queries]
    dv, dm = r.tokens([beir.document_text(x) for x in corpus], r.passage_prefix)
    index = plaid.build(d_ids, list(dv), list(dm), bits=PLAID["bits"])
    start = time.perf_counter()
    qv, qm = r.tokens([x["text"] for x in queries], r.query_prefix)
    ids, scores = plaid.search(index, qv, qm, k, PLAID["nprobe"], PLAID["ndocs"])
    seconds = time.perf_counter() - start
    exact = colbert.search(colbert.build_index(d_ids, list(dv), list(dm)), qv, qm, 10)[0]
    out = beir.evaluate_run({q: dict(zip(i, s)) for q, i, s in zip(q_ids, ids, scores)},
                            qrels, ks)
    return {**out, "index_bytes": index.nbytes,
            "bytes_per_passage": index.nbytes / max(len(corpus), 1),
            "bytes_per_token": index.bytes_per_token,
            "float32_bytes_per_token": 4.0 * index.centroids.shape[1],
            "recall_vs_exact_at_10": plaid.recall_against(exact, ids, 10),
            "queries_per_s": len(queries) / max(seconds, 1e-9)}


def bm25_scores(corpus, queries, qrels, k: int = 100, ks=RECALL_AT) -> dict:
    """The BM25 row in the same measures."""
    return beir.evaluate_run(beir.bm25_run(corpus, queries, k), qrels, ks)
