"""Learned sparse retrieval (SPLADE, Formal et al. 2021): the MLM head as a vocabulary-sized
weight vector, its regularisers, an inverted index and its exact search.

Representation (SPLADE v2, "max" pooling): w_j = max over the text's real tokens i of
log(1 + ReLU(logit_ij)), one weight per vocabulary entry j, from the MLM head every
pretrained model here has (model.py's `mlm_head`, tied to the token embeddings). The score
of a query and a document is the dot product of their weights: the loss's logit as it is
(no temperature). Query side (contrastive.sparse_query): `expand` (the same function as
documents) or `terms` (no expansion: the weights kept only at the query's own token ids).

Regularisers (contrastive.sparse_regularizer), each side with its own weight
(flops_query_weight, flops_doc_weight):
  flops  sum over j of (mean over the batch's rows of w_ij)^2 (Paria et al. 2020): the
         expected number of multiplications of a query-document dot product, relaxed;
  l1     the mean over rows of sum_j |w_ij|.
A weight ramps up quadratically over flops_warmup_steps: lambda_t = lambda min(1,
t / warmup)^2 (SPLADE's schedule), t the train step (the batch's `train_step` column,
filled in by the trainer's step).

Index: an exact inverted index over the vocabulary: the documents' weights as a CSC
matrix [N, V], column j holding term j's postings (document rows and weights), each
document's `top_terms` largest weights kept (0: every non-zero). Search scores a block of
queries by accumulating the postings of their terms (a sparse product) and keeps the
top-k, ties by lower corpus row. The non-zero terms of every query and document are
counted: the cost a sparse score is read beside.

Axes: B rows, T tokens, V vocabulary, N documents, Q queries.
"""
import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

QUERY_SIDES = ("expand", "terms")
REGULARIZERS = ("flops", "l1")


def real_vocab(cfg) -> int:
    """The tokenizer's vocabulary among the model's rows (padding rows hold no term)."""
    return cfg.get("real_vocab_size", 0) or cfg.vocab_size


def splade_pool(logits, attention_mask):
    """[B, V] max over real tokens of log(1 + ReLU(logits [B, T, V]))."""
    w = jnp.log1p(jax.nn.relu(logits.astype(jnp.float32)))
    w = jnp.where(attention_mask[:, :, None] > 0, w, 0.0)
    return jnp.max(w, axis=1)


def term_mask(input_ids, attention_mask, vocab: int):
    """[B, V] 1 at each id the row's real tokens hold (the query's own terms)."""
    b = input_ids.shape[0]
    rows = jnp.broadcast_to(jnp.arange(b)[:, None], input_ids.shape)
    return jnp.zeros((b, vocab), jnp.float32).at[rows, input_ids].max(
        (attention_mask > 0).astype(jnp.float32))


def query_weights(w, input_ids, attention_mask, side: str):
    """The query side's weights [B, V] under contrastive.sparse_query."""
    if side == "expand":
        return w
    if side == "terms":
        return w * term_mask(input_ids, attention_mask, w.shape[-1])
    raise ValueError(f"contrastive.sparse_query must be one of {QUERY_SIDES}, got {side!r}")


def flops(w, weight):
    """sum_j (mean over real rows of w_ij)^2; w [R, V], weight [R]."""
    real = (weight > 0).astype(jnp.float32)
    mean = jnp.sum(w * real[:, None], axis=0) / jnp.maximum(jnp.sum(real), 1.0)
    return jnp.sum(mean * mean)


def l1(w, weight):
    """Mean over real rows of sum_j |w_ij|."""
    real = (weight > 0).astype(jnp.float32)
    return jnp.sum(jnp.sum(jnp.abs(w), axis=-1) * real) / jnp.maximum(jnp.sum(real), 1.0)


REGULARIZER = {"flops": flops, "l1": l1}


def ramp(step, warmup: int):
    """SPLADE's quadratic warmup of a regulariser's weight: min(1, step / warmup)^2."""
    if not warmup:
        return jnp.float32(1.0)
    return jnp.minimum(1.0, jnp.asarray(step, jnp.float32) / warmup) ** 2


def regularization(q, docs, q_weight, d_weight, rule: str, lam_q: float, lam_d: float,
                   step=0, warmup: int = 0):
    """lambda_q(t) reg(queries) + lambda_d(t) reg(documents); q [B, V], docs [R, V]."""
    fn = REGULARIZER[rule]
    return ramp(step, warmup) * (lam_q * fn(q, q_weight) + lam_d * fn(docs, d_weight))


# ------------------------------------------------------------------ index and search

def to_csr(w: np.ndarray, top_terms: int = 0) -> sp.csr_matrix:
    """Rows of weights [N, V] as CSR, each row's top_terms largest kept (0: all non-zero)."""
    w = np.asarray(w, np.float32)
    if top_terms and top_terms < w.shape[1]:
        cut = np.argpartition(-w, top_terms - 1, axis=1)[:, :top_terms]
        kept = np.zeros_like(w)
        np.put_along_axis(kept, cut, np.take_along_axis(w, cut, 1), 1)
        w = kept
    return sp.csr_matrix(w)


@dataclasses.dataclass
class Index:
    """An inverted index: postings [N, V] in CSC (column j: term j's documents)."""
    ids: list
    postings: sp.csc_matrix

    @property
    def nbytes(self) -> int:
        p = self.postings
        return int(p.data.nbytes + p.indices.nbytes + p.indptr.nbytes)

    def terms_per_doc(self) -> np.ndarray:
        return np.diff(self.postings.tocsr().indptr)


def build_index(ids: list, docs: sp.spmatrix) -> Index:
    return Index(list(ids), sp.csc_matrix(docs, dtype=np.float32))


def search(index: Index, queries: sp.spmatrix, k: int = 100, block: int = 256):
    """(scores [Q, k], rows [Q, k]) by exact accumulation over the queries' postings."""
    queries = sp.csr_matrix(queries, dtype=np.float32)
    n = index.postings.shape[0]
    k = min(k, n)
    by_term = index.postings.T.tocsr()  # [V, N]: row j = term j's postings
    out_s, out_i = [], []
    for s in range(0, queries.shape[0], block):
        sc = np.asarray((queries[s:s + block] @ by_term).toarray(), np.float32)  # [q, N]
        idx = np.argsort(-sc, axis=1, kind="stable")[:, :k]
        out_s.append(np.take_along_axis(sc, idx, 1))
        out_i.append(idx)
    if not out_s:
        return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
    return np.concatenate(out_s), np.concatenate(out_i)


def nonzero(m: sp.spmatrix) -> np.ndarray:
    return np.diff(sp.csr_matrix(m).indptr)


def run_and_costs(encode_queries, encode_docs, corpus_texts, doc_ids, query_texts,
                  query_ids, k: int = 100, top_terms: int = 0):
    """(run, costs): a BEIR run by the inverted index, and its costs: mean non-zero terms
    per query and per document (the index's, after top_terms), the index's bytes (postings'
    weights float32, rows int32, column pointers) per passage, queries per second."""
    index = build_index(doc_ids, to_csr_rows(encode_docs(corpus_texts), top_terms))
    start = time.perf_counter()
    q = encode_queries(query_texts)
    s, rows = search(index, q, k)
    seconds = time.perf_counter() - start
    run = {qid: {index.ids[j]: float(v) for v, j in zip(srow, irow)}
           for qid, srow, irow in zip(query_ids, s, rows)}
    costs = {"query_terms": float(np.mean(nonzero(q))) if q.shape[0] else 0.0,
             "doc_terms": float(np.mean(index.terms_per_doc())) if len(doc_ids) else 0.0,
             "index_bytes": index.nbytes,
             "bytes_per_passage": index.nbytes / max(len(doc_ids), 1),
             "queries_per_s": len(query_ids) / max(seconds, 1e-9)}
    return run, costs


def to_csr_rows(m, top_terms: int = 0) -> sp.csr_matrix:
    """A CSR matrix of an encoder's output (already sparse, or dense rows)."""
    if sp.issparse(m):
        if not top_terms:
            return sp.csr_matrix(m)
        return sp.vstack([to_csr(m[i:i + 256].toarray(), top_terms)
                          for i in range(0, m.shape[0], 256)]).tocsr()
    return to_csr(m, top_terms)
