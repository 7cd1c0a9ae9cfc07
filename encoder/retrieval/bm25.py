"""The BM25 row: Okapi BM25 (Robertson & Zaragoza 2009) with Lucene's idf, as bm25s's
default ("lucene", k1 = 1.5, b = 0.75) and its default tokenizer (lower case, words of
two or more word characters, no stemming, no stop words).

    score(q, d) = sum over q's terms t of idf(t) * tf(t, d)
                  / (tf(t, d) + k1 (1 - b + b |d| / avgdl)),

(Lucene since 8.0 drops Okapi's constant (k1 + 1) factor: the same ranking.)
    idf(t) = log(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

The corpus is one sparse [N, V] matrix of per-term weights, so scoring Q queries is
one sparse product and the top-k a partial sort per query.
"""
import re

import numpy as np
import scipy.sparse as sp

TOKEN = re.compile(r"(?u)\b\w\w+\b")


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


class BM25:
    def __init__(self, docs: list[str], k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b
        self.vocab: dict[str, int] = {}
        rows, cols, vals, lengths = [], [], [], []
        for i, doc in enumerate(docs):
            toks = tokenize(doc)
            lengths.append(len(toks))
            counts: dict[int, int] = {}
            for t in toks:
                j = self.vocab.setdefault(t, len(self.vocab))
                counts[j] = counts.get(j, 0) + 1
            rows += [i] * len(counts)
            cols += list(counts)
            vals += list(counts.values())
        n, v = len(docs), max(len(self.vocab), 1)
        tf = sp.csr_matrix((np.asarray(vals, np.float64), (rows, cols)), shape=(n, v))
        df = np.bincount(np.asarray(cols, np.int64), minlength=v).astype(np.float64)
        self.idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5))
        dl = np.asarray(lengths, np.float64)
        norm = k1 * (1.0 - b + b * dl / max(dl.mean() if n else 1.0, 1e-12))  # [N]
        tf = tf.tocoo()
        w = self.idf[tf.col] * tf.data / (tf.data + norm[tf.row])
        self.weights = sp.csr_matrix((w, (tf.row, tf.col)), shape=(n, v))  # [N, V]

    def query_matrix(self, queries: list[str]):
        """[Q, V] query term counts (terms unseen in the corpus dropped)."""
        rows, cols = [], []
        for i, q in enumerate(queries):
            for t in tokenize(q):
                j = self.vocab.get(t)
                if j is not None:
                    rows.append(i)
                    cols.append(j)
        return sp.csr_matrix((np.ones(len(rows)), (rows, cols)),
                             shape=(len(queries), self.weights.shape[1]))

    def scores(self, queries: list[str]) -> np.ndarray:
        """[Q, N] BM25 scores."""
        return np.asarray((self.query_matrix(queries) @ self.weights.T).toarray())

    def topk(self, queries: list[str], k: int, block: int = 256):
        """(scores [Q, k], rows [Q, k]) best first, ties by lower row."""
        out_s, out_i = [], []
        for s in range(0, len(queries), block):
            sc = self.scores(queries[s:s + block])
            kk = min(k, sc.shape[1])
            idx = np.argsort(-sc, axis=1, kind="stable")[:, :kk]
            out_s.append(np.take_along_axis(sc, idx, 1))
            out_i.append(idx)
        return np.concatenate(out_s), np.concatenate(out_i)
