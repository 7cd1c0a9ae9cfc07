"""Evaluation in BEIR's format, with trec_eval's measures.

A BEIR folder (Thakur et al. 2021) holds corpus.jsonl ({_id, title, text}),
queries.jsonl ({_id, text}) and qrels/{dev,test}.tsv (query-id, corpus-id, score, with
a header line). A run is {query id: {doc id: score}} (what TREC run files hold:
`qid Q0 docid rank score tag`). The measures are trec_eval's, computed as it computes
them (so pytrec_eval on the same run gives the same numbers, tests/retrieval):

  ndcg_at_10   ndcg_cut_10: gain = the judged grade, discount log2(rank + 1), the ideal
               from every judged document of the query
  mrr_at_10    recip_rank on the run cut at 10
  recall_at_k  recall_k: relevant documents in the top k / relevant documents judged
  map          mean average precision over the whole run

trec_eval orders a query's documents by score, ties by document id descending; a
document is relevant at grade >= 1. Means run over the judged queries that have a
relevant document (a query missing from the run scores 0: trec_eval -c).

Dense models are scored at each Matryoshka dimension (prefix, re-normalised), BM25 beside
them (bm25.py), ColBERT models through colbert.py's index.
"""
import csv
import json
import os

import numpy as np

from encoder.retrieval import bm25 as bm25_lib, search

K_RECALL = (10, 100)


class BeirDataError(ValueError):
    """A bad line of a BEIR file (named file:line)."""


def _read_jsonl(path: str, needs: tuple) -> tuple[list[dict], int]:
    """Rows with the fields `needs`; malformed lines are skipped and counted."""
    rows, skipped = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                skipped += 1
                continue
            if not isinstance(row, dict) or any(not isinstance(row.get(k), str) for k in needs):
                skipped += 1
                continue
            rows.append(row)
    return rows, skipped


def read_qrels(path: str) -> dict:
    """query id -> {doc id: grade} from a BEIR qrels TSV (header optional)."""
    qrels: dict = {}
    with open(path, encoding="utf-8", newline="") as f:
        for line_no, row in enumerate(csv.reader(f, delimiter="\t"), 1):
            if not row or (line_no == 1 and row[0] == "query-id"):
                continue
            if len(row) < 3:
                raise BeirDataError(f"{path}:{line_no}: expected query-id, corpus-id, score; "
                                    f"found {len(row)} columns")
            try:
                grade = int(float(row[2]))
            except ValueError:
                raise BeirDataError(f"{path}:{line_no}: score {row[2]!r} is not a number") from None
            qrels.setdefault(row[0], {})[row[1]] = grade
    return qrels


def read_beir(folder: str, split: str = "test"):
    """(corpus, queries, qrels, skipped) of a BEIR folder; queries kept only when judged."""
    for name in ("corpus.jsonl", "queries.jsonl", os.path.join("qrels", f"{split}.tsv")):
        if not os.path.exists(os.path.join(folder, name)):
            raise FileNotFoundError(f"{folder}: no {name} (BEIR's layout: corpus.jsonl, "
                                    "queries.jsonl, qrels/{dev,test}.tsv)")
    corpus, s1 = _read_jsonl(os.path.join(folder, "corpus.jsonl"), ("_id", "text"))
    queries, s2 = _read_jsonl(os.path.join(folder, "queries.jsonl"), ("_id", "text"))
    qrels = read_qrels(os.path.join(folder, "qrels", f"{split}.tsv"))
    queries = [q for q in queries if q["_id"] in qrels]
    return corpus, queries, qrels, {"corpus": s1, "queries": s2}


def document_text(doc: dict) -> str:
    """"title text", as BEIR's and MTEB's sentence-transformers paths join them."""
    return (doc.get("title", "") + " " + doc["text"]).strip()


# ------------------------------------------------------------------ measures

def ranked(docs: dict) -> list:
    """A query's document ids in trec_eval's order: score descending, then id descending."""
    return [d for d, _ in sorted(docs.items(), key=lambda x: (-x[1], _neg(x[0])))]


def _neg(s: str):
    # descending string order as an ascending key
    return tuple(-ord(c) for c in s) + (1,)


def query_measures(docs: dict, rel: dict, ks=K_RECALL) -> dict:
    order = ranked(docs)
    relevant = {d for d, g in rel.items() if g >= 1}
    n_rel = len(relevant)
    hits = [d in relevant for d in order]
    out = {}
    gains = [max(rel.get(d, 0), 0) for d in order[:10]]
    dcg = sum(g / np.log2(i + 2) for i, g in enumerate(gains))
    ideal = sorted((g for g in rel.values() if g > 0), reverse=True)[:10]
    idcg = sum(g / np.log2(i + 2) for i, g in enumerate(ideal))
    out["ndcg_at_10"] = dcg / idcg if idcg > 0 else 0.0
    first = next((i for i, h in enumerate(hits[:10]) if h), None)
    out["mrr_at_10"] = 0.0 if first is None else 1.0 / (first + 1)
    for k in ks:
        out[f"recall_at_{k}"] = sum(hits[:k]) / n_rel if n_rel else 0.0
    found, ap = 0, 0.0
    for i, h in enumerate(hits):
        if h:
            found += 1
            ap += found / (i + 1)
    out["map"] = ap / n_rel if n_rel else 0.0
    return out


def evaluate_run(run: dict, qrels: dict, ks=K_RECALL, per_query: bool = False):
    """Means of the measures over judged queries with a relevant document."""
    queries = sorted(q for q, rel in qrels.items() if any(g >= 1 for g in rel.values()))
    if not queries:
        raise ValueError("no query has a relevant document in the relevance judgements")
    each = {q: query_measures(run.get(q, {}), qrels[q], ks) for q in queries}
    mean = {m: float(np.mean([v[m] for v in each.values()])) for m in next(iter(each.values()))}
    return (mean, each) if per_query else mean


def write_run(path: str, run: dict, tag: str = "encoder") -> None:
    """A TREC run file: qid Q0 docid rank score tag."""
    with open(path, "w") as f:
        for q in sorted(run):
            for r, d in enumerate(ranked(run[q]), 1):
                f.write(f"{q} Q0 {d} {r} {run[q][d]:.6f} {tag}\n")


def read_run(path: str) -> dict:
    run: dict = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5:
                run.setdefault(parts[0], {})[parts[2]] = float(parts[4])
    return run


# ------------------------------------------------------------------ systems

def run_from_topk(query_ids: list, doc_ids: list, scores, rows) -> dict:
    return {q: {doc_ids[j]: float(s) for s, j in zip(srow, irow)}
            for q, srow, irow in zip(query_ids, scores, rows)}


def run_from_rankings(rankings: dict) -> dict:
    """A run from ranked id lists (best first): scores that keep each list's order, so
    trec_eval's sort gives the list back (ties cannot arise)."""
    return {q: {d: float(-i) for i, d in enumerate(docs)} for q, docs in rankings.items()}


def _unit(x):
    x = np.asarray(x, np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def dense_runs(query_vecs, doc_vecs, query_ids, doc_ids, dims=(), k: int = 100,
               devices=None) -> dict:
    """{dim: run} by exact inner-product top-k of the re-normalised prefix vectors."""
    width = np.asarray(doc_vecs).shape[1]
    runs = {}
    for d in sorted(set(dims) | {width}, reverse=True):
        s, i = search.exact_topk(_unit(np.asarray(query_vecs)[:, :d]),
                                 _unit(np.asarray(doc_vecs)[:, :d]), k, devices=devices)
        runs[d] = run_from_topk(query_ids, doc_ids, s, i)
    return runs


def evaluate_dense(encode_queries, encode_docs, corpus, queries, qrels, dims=(), k: int = 100):
    """{dim: measures}: encode_* map texts to [N, D] vectors (the width is the first dim)."""
    d = encode_docs([document_text(x) for x in corpus])
    q = encode_queries([x["text"] for x in queries])
    runs = dense_runs(q, d, [x["_id"] for x in queries], [x["_id"] for x in corpus], dims, k)
    return {dim: evaluate_run(run, qrels) for dim, run in runs.items()}


def bm25_run(corpus, queries, k: int = 100) -> dict:
    index = bm25_lib.BM25([document_text(x) for x in corpus])
    s, i = index.topk([x["text"] for x in queries], k)
    return run_from_topk([x["_id"] for x in queries], [x["_id"] for x in corpus], s, i)


def evaluate_bm25(corpus, queries, qrels, k: int = 100) -> dict:
    return evaluate_run(bm25_run(corpus, queries, k), qrels)
