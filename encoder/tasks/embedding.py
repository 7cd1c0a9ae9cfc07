"""The embedding benchmark in MTEB's conventions: frozen sentence vectors, no fine-tuning.

STS: Spearman correlation between the cosine similarity of each pair's two
vectors and the gold score (MTEB's main STS score, cos_sim spearman).
Retrieval (BEIR's layout: corpus.jsonl {_id, title, text}, queries.jsonl
{_id, text}, qrels/test.tsv query-id, corpus-id, score): documents are
embedded as "title text" (as MTEB's sentence-transformers path joins them),
ranked by cosine similarity to each query, and scored with nDCG@10 (MTEB's
main retrieval score), MRR@10, recall@{1, 10, 100} and MAP, trec_eval's measures
(encoder/retrieval/beir.py). A model is read as a retriever (encoder/retrieval/
retriever.py): a contrastive run's prefixes, nDCG@10 at each of its Matryoshka dims
(ndcg_at_10_dim{d}), MaxSim for a ColBERT head.

Vectors come from encoder/eval/embeddings.py's embed_texts (the `embed` job's
pooling and L2 normalisation), so a contrastively fine-tuned workdir or an
imported sentence encoder is scored the way MTEB scores it. `encode` may also
return scipy sparse rows (the bag-of-words baseline's TF-IDF vectors).
"""
import json
import os

import numpy as np

from encoder.tasks import readers as tasks_lib
from encoder.eval import metrics
from encoder.tasks import catalog

RECALL_AT = (1, 10, 100)


def encoder_fn(model_cfg, params, tokenizer, pooling: str, max_len: int,
               batch_size: int = 64):
    """texts -> [N, D] unit vectors."""
    from encoder.eval import embeddings  # jax: only a model's suite needs it

    def encode(texts):
        return embeddings.embed_texts(model_cfg, params, tokenizer, list(texts), pooling,
                                      max_len, batch_size)
    return encode


def read_sts(path: str, max_eval: int = 0) -> list[dict]:
    """Pairs {text_a, text_b, label: number}; a subset (fixed seed) when max_eval is set."""
    examples = tasks_lib.read_jsonl(path, "regression")
    for ex in examples:
        if "text_b" not in ex or isinstance(ex.get("label"), bool) or not isinstance(
                ex.get("label"), (int, float)):
            raise tasks_lib.TaskDataError(f"{ex['_where']}: an STS pair needs text_a, text_b "
                                          "and a numeric label")
    return catalog.subsample(examples, max_eval, 0)


def sts_scores(encode, examples: list[dict]) -> dict:
    a = encode([ex["text_a"] for ex in examples])  # [N, D]
    b = encode([ex["text_b"] for ex in examples])  # [N, D]
    return {"cosine_spearman": metrics.cosine_spearman(a, b, [ex["label"] for ex in examples])}


def read_retrieval(files: dict, max_eval: int = 0, seed: int = 0):
    """(corpus, queries, qrels), read and checked by encoder/retrieval/beir.py (a malformed
    line, a repeated id, a grade that is not an integer, or qrels that mostly name ids the
    corpus or queries lack are refused naming file:line). max_eval keeps that many judged
    queries and shrinks the corpus to their relevant documents plus 8x as many others
    (smoke runs only: the full benchmark keeps every document)."""
    from encoder.retrieval import beir
    corpus, queries, qrels, _, _ = beir.read_files(files, strict=True)
    if max_eval and len(queries) > max_eval:
        queries = catalog.subsample(queries, max_eval, seed)
        qrels = {q["_id"]: qrels[q["_id"]] for q in queries}
        relevant = {d for rel in qrels.values() for d in rel}
        others = [d for d in corpus if d["_id"] not in relevant]
        corpus = [d for d in corpus if d["_id"] in relevant] + catalog.subsample(
            others, 8 * max_eval, seed)
    return corpus, queries, qrels


def check_retrieval(task) -> list[str]:
    """A retrieval task's files checked before anything is scored (refusals raise); the
    warnings, each naming the task, for the report's notes."""
    from encoder.retrieval import beir
    return [f"{task.name}: {w}" for w in beir.read_files(task.files, strict=True)[4]]


def rank(query_vecs: np.ndarray, doc_vecs: np.ndarray, doc_ids: list, k: int) -> list[list]:
    """Each query's top-k document ids by cosine similarity of unit vectors, best first."""
    sims = query_vecs @ doc_vecs.T  # [Q, N]
    sims = sims.toarray() if hasattr(sims, "toarray") else np.asarray(sims)  # sparse rows
    k = min(k, doc_vecs.shape[0])
    top = np.argsort(-sims, axis=1, kind="stable")[:, :k]  # [Q, k]
    return [[doc_ids[j] for j in row] for row in top]


def document_texts(corpus: list[dict]) -> list[str]:
    return [(d.get("title", "") + " " + d["text"]).strip() for d in corpus]


def ranking_scores(rankings: dict, qrels: dict) -> dict:
    """beir.py's trec_eval measures of ranked id lists (query id -> ids, best first)."""
    from encoder.retrieval import beir
    return beir.evaluate_run(beir.run_from_rankings(rankings), qrels, RECALL_AT)


def retrieval_scores(encode, corpus, queries, qrels) -> dict:
    """A method with one vector space for queries and documents (the bag-of-words
    baseline's sparse TF-IDF rows included), ranked by cosine (ties: corpus order)."""
    docs = encode(document_texts(corpus))
    q = encode([x["text"] for x in queries])
    ranked = rank(q, docs, [d["_id"] for d in corpus], max(RECALL_AT))
    return ranking_scores({x["_id"]: r for x, r in zip(queries, ranked)}, qrels)


def evaluate(task, encode, max_eval: int = 0, retriever=None) -> dict:
    """{metric: value} of one embedding task (catalog.SuiteTask of kind sts or retrieval).
    retriever: a model's encoder/retrieval/retriever.py view (its prefixes, Matryoshka
    dims, ColBERT head) for a retrieval task; else `encode` serves both sides."""
    if task.kind == "sts":
        return sts_scores(encode, read_sts(task.files["test"], max_eval))
    if task.kind == "retrieval":
        if retriever is not None:
            from encoder.retrieval import retriever as retriever_lib
            return retriever_lib.evaluate(retriever, *read_retrieval(task.files, max_eval),
                                          ks=RECALL_AT)
        return retrieval_scores(encode, *read_retrieval(task.files, max_eval))
    raise ValueError(f"{task.name}: not an embedding task ({task.kind})")


def cached(path: str, key: dict, compute):
    """compute() once per key: a finished evaluation is read back, not redone."""
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        if saved.get("key") == key:
            return saved["metrics"]
    result = compute()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump({"key": key, "metrics": result}, f, indent=1)
    os.replace(path + ".tmp", path)
    return result
