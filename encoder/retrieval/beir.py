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
import sys

import numpy as np

from encoder.retrieval import bm25 as bm25_lib, search

K_RECALL = (10, 100)


class BeirDataError(ValueError):
    """A bad line of a BEIR file (named file:line), or ids that do not line up across the
    files (with counts and the first offender's file:line)."""


def _id(value):
    """A BEIR id as the qrels name it (text): JSON ints are read as their digits (an int
    _id never matched the qrels' "5" and scored as a miss); None for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def read_jsonl_rows(path: str, needs: tuple, strict: bool = False) -> tuple[list, list, int]:
    """(rows, their line numbers, lines skipped) of a BEIR JSONL file: rows with an `_id`
    (text, or an integer read as text) and the string fields `needs`. strict: a malformed
    line raises BeirDataError naming file:line; else it is skipped and counted."""
    rows, lines, skipped = [], [], 0
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                if strict:
                    raise BeirDataError(f"{path}:{line_no}: not valid JSON ({e.msg})") from None
                skipped += 1
                continue
            ok = isinstance(row, dict) and _id(row.get("_id")) is not None and all(
                isinstance(row.get(k), str) for k in needs if k != "_id")
            if not ok:
                if strict:
                    raise BeirDataError(f"{path}:{line_no}: needs _id (text or an integer) and "
                                        f"{' and '.join(k for k in needs if k != '_id')} "
                                        "(text)")
                skipped += 1
                continue
            row["_id"] = _id(row["_id"])
            rows.append(row)
            lines.append(line_no)
    return rows, lines, skipped


def _read_jsonl(path: str, needs: tuple) -> tuple[list[dict], int]:
    """Rows with the fields `needs`; malformed lines are skipped and counted."""
    rows, _, skipped = read_jsonl_rows(path, needs)
    return rows, skipped


def read_qrels(path: str, lines: dict | None = None) -> dict:
    """query id -> {doc id: grade} from a BEIR qrels TSV (header optional). Grades are
    integers (BEIR's 0, 1, 2; "1.0" reads as 1): a grade written as text or a fraction
    is refused with how many lines have one and the first's file:line, as is one pair
    judged twice with two grades. lines, when given, gets (query, doc) -> line number."""
    qrels: dict = {}
    where: dict = {}
    bad, twice = [], []
    with open(path, encoding="utf-8", newline="") as f:
        for line_no, row in enumerate(csv.reader(f, delimiter="\t"), 1):
            if not row or (line_no == 1 and row[0] == "query-id"):
                continue
            if len(row) < 3:
                raise BeirDataError(f"{path}:{line_no}: expected query-id, corpus-id, score; "
                                    f"found {len(row)} columns")
            try:
                value = float(row[2])
                ok = value.is_integer()
            except ValueError:
                ok = False
            if not ok:
                bad.append((line_no, row[2]))
                continue
            q, d, grade = row[0], row[1], int(value)
            if d in qrels.get(q, {}) and qrels[q][d] != grade:
                twice.append((line_no, q, d, qrels[q][d], grade))
            qrels.setdefault(q, {})[d] = grade
            where.setdefault((q, d), line_no)
    if bad:
        line_no, value = bad[0]
        raise BeirDataError(f"{path}:{line_no}: score {value!r} is not an integer grade "
                            f"({len(bad)} line{'s' if len(bad) > 1 else ''} like it); the "
                            "qrels' third column is the relevance grade: 0, 1, 2, ...")
    if twice:
        line_no, q, d, a, b = twice[0]
        raise BeirDataError(f"{path}:{line_no}: query {q!r} judges document {d!r} again, "
                            f"grade {b} after {a} ({len(twice)} pair(s) judged twice with "
                            "different grades): keep one judgement per pair")
    if lines is not None:
        lines.update(where)
    return qrels


# A minority of judgements naming ids the corpus (or the queries) lack is scored as misses
# and reported in a warning the result table repeats; from this share on it is refused.
UNKNOWN_REFUSED = 0.5


def _duplicates(path: str, rows: list, lines: list, what: str) -> None:
    first: dict = {}
    dups = []
    for row, line_no in zip(rows, lines):
        if row["_id"] in first:
            dups.append((line_no, row["_id"], first[row["_id"]]))
        else:
            first[row["_id"]] = line_no
    if dups:
        line_no, i, was = dups[0]
        raise BeirDataError(f"{path}:{line_no}: {what} id {i!r} again (first at line {was}); "
                            f"{len(dups)} repeated {what} id{'s' if len(dups) > 1 else ''}: each "
                            "_id once (which of two texts would be scored is undefined)")


def check_ids(files: dict, corpus: list, corpus_lines: list, queries: list,
              query_lines: list, qrels: dict, qrels_lines: dict) -> list[str]:
    """Refuses ids that do not line up across a BEIR task's files; returns warnings.

    Refused (BeirDataError with counts and the first offender's file:line): a document or
    query id given twice; relevance judgements of which UNKNOWN_REFUSED or more name
    documents absent from the corpus (or queries absent from the queries file), since
    those score as misses, e.g. nDCG@10 0.00 when every one is unknown; qrels with no
    relevant judgement at all. A smaller share of unknown ids is a warning (returned)."""
    _duplicates(files["corpus"], corpus, corpus_lines, "document")
    _duplicates(files["queries"], queries, query_lines, "query")
    relevant = [(q, d) for q, rel in qrels.items() for d, g in rel.items() if g >= 1]
    if not relevant:
        raise BeirDataError(f"{files['qrels']}: no judgement has a grade of 1 or more: no "
                            "query has a relevant document to find")
    doc_ids, query_ids = {d["_id"] for d in corpus}, {q["_id"] for q in queries}
    warnings = []
    for what, unknown, source in (
            ("documents", [p for p in relevant if p[1] not in doc_ids], files["corpus"]),
            ("queries", [p for p in relevant if p[0] not in query_ids], files["queries"])):
        if not unknown:
            continue
        first = min(unknown, key=lambda p: qrels_lines.get(p, 0))
        name = first[1] if what == "documents" else first[0]
        text = (f"{files['qrels']}:{qrels_lines.get(first, '?')}: {len(unknown)} of "
                f"{len(relevant)} relevant judgements name {what} absent from {source} "
                f"(first: {name!r}); they count as misses")
        if len(unknown) >= UNKNOWN_REFUSED * len(relevant):
            raise BeirDataError(text + ": the scores would measure the missing ids, not the "
                                "model; check that the qrels belong to this corpus and "
                                "queries (ids are compared as text)")
        warnings.append(text)
    return warnings


def read_files(files: dict, strict: bool = True):
    """(corpus, queries, qrels, skipped, warnings) of a BEIR task's files {corpus, queries,
    qrels}, every id checked (check_ids); queries kept only when judged."""
    corpus, corpus_lines, s1 = read_jsonl_rows(files["corpus"], ("_id", "text"), strict)
    queries, query_lines, s2 = read_jsonl_rows(files["queries"], ("_id", "text"), strict)
    qrels_lines: dict = {}
    qrels = read_qrels(files["qrels"], qrels_lines)
    warnings = check_ids(files, corpus, corpus_lines, queries, query_lines, qrels,
                         qrels_lines)
    queries = [q for q in queries if q["_id"] in qrels]
    return corpus, queries, qrels, {"corpus": s1, "queries": s2}, warnings


def read_beir(folder: str, split: str = "test"):
    """(corpus, queries, qrels, skipped) of a BEIR folder; queries kept only when judged.
    Malformed lines are skipped and counted; ids are checked (check_ids): skipped['warnings']
    holds what did not line up but was not refused, also printed."""
    for name in ("corpus.jsonl", "queries.jsonl", os.path.join("qrels", f"{split}.tsv")):
        if not os.path.exists(os.path.join(folder, name)):
            raise FileNotFoundError(f"{folder}: no {name} (BEIR's layout: corpus.jsonl, "
                                    "queries.jsonl, qrels/{dev,test}.tsv)")
    files = {"corpus": os.path.join(folder, "corpus.jsonl"),
             "queries": os.path.join(folder, "queries.jsonl"),
             "qrels": os.path.join(folder, "qrels", f"{split}.tsv")}
    corpus, queries, qrels, skipped, warnings = read_files(files, strict=False)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr, flush=True)
    return corpus, queries, qrels, {**skipped, "warnings": warnings}


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
