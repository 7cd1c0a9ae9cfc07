"""A compressed late-interaction index (ColBERTv2's residual compression, PLAID's search).

Build (Santhanam et al. 2022, ColBERTv2 §3.3): every real token vector of the corpus
(unit, K wide) is assigned to its nearest of C centroids (spherical k-means seeded by
k-means++, run on a sample of the tokens, each step one jitted matmul over a chunk); its
residual (vector minus centroid) is cut into 2^b buckets per coordinate by cutoffs at the
quantiles of that coordinate's residuals, and each bucket is read back as the mean value
that quantile range holds (its `weights`; one table per coordinate where ColBERTv2 keeps
one for all). A token is stored as its centroid id (uint16 up to 65,536 centroids, else
int32) plus K b-bit bucket ids packed into bytes: K b / 8 + 2 bytes instead of 4 K
(float32), e.g. 34 bytes for K = 128 at 2 bits, 15x smaller.

Search (Santhanam et al. 2022, PLAID §4), for each query:
  1. candidates: the documents holding a token in one of the `nprobe` centroids nearest to
     any query token (an inverted list centroid -> documents);
  2. centroid interaction: each candidate scored by MaxSim with every token replaced by its
     centroid; the best `ndocs` kept;
  3. re-ranking: their tokens decompressed (centroid + bucket weights, re-normalised) and
     scored by exact MaxSim; the top k returned.
Recall against colbert.py's exact search is what the tests and the notes measure.

Axes: M tokens of the corpus, C centroids, K token width, N documents, Tq query tokens.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


def _unit(x):
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


@jax.jit
def _assign(x, c):
    """Nearest centroid by inner product of unit vectors: ([M] ids, [M] scores)."""
    s = jnp.einsum("mk,ck->mc", x, c, precision=jax.lax.Precision.HIGHEST)
    return jnp.argmax(s, axis=1).astype(jnp.int32), jnp.max(s, axis=1)


def assign(x: np.ndarray, c: np.ndarray, chunk: int = 65536) -> np.ndarray:
    out = [np.asarray(_assign(jnp.asarray(x[s:s + chunk]), jnp.asarray(c))[0])
           for s in range(0, len(x), chunk)]
    return np.concatenate(out) if out else np.zeros(0, np.int32)


PLUS_PLUS_MAX = 2048


def plus_plus(x: np.ndarray, n: int, rng) -> np.ndarray:
    """k-means++ seeding (Arthur & Vassilvitskii 2007) on cosine distance 1 - <x, c>, over at
    most 64 n of the rows: each next centroid drawn with probability ~ distance^2."""
    if len(x) > 64 * n:
        x = x[rng.choice(len(x), 64 * n, replace=False)]
    c = [x[rng.integers(len(x))]]
    dist = np.maximum(1.0 - x @ c[0], 0.0)
    for _ in range(1, n):
        p = dist ** 2
        total = p.sum()
        j = rng.choice(len(x), p=p / total) if total > 0 else rng.integers(len(x))
        c.append(x[j])
        dist = np.minimum(dist, np.maximum(1.0 - x @ x[j], 0.0))
    return np.asarray(c, np.float32)


def kmeans(x: np.ndarray, n: int, iters: int = 10, seed: int = 0,
           sample: int = 262144) -> np.ndarray:
    """[n, K] unit centroids by spherical k-means on (a sample of) the unit rows of x."""
    rng = np.random.default_rng(seed)
    if len(x) > sample:
        x = x[rng.choice(len(x), sample, replace=False)]
    n = min(n, len(x))
    # k-means++ is n sequential passes over 64 n rows: past a few thousand centroids that is
    # slower than the k-means itself, so distinct random rows seed it (faiss's default)
    c = plus_plus(x, n, rng) if n <= PLUS_PLUS_MAX else x[rng.choice(len(x), n, replace=False)]
    for _ in range(iters):
        ids = assign(x, c)
        sums = np.zeros_like(c)
        np.add.at(sums, ids, x)
        empty = np.linalg.norm(sums, axis=1) == 0
        sums[empty] = c[empty]  # an empty cluster keeps its centroid
        c = _unit(sums)
    return c


def pack(buckets: np.ndarray, bits: int) -> np.ndarray:
    """[M, K] bucket ids < 2^bits -> [M, K bits / 8] uint8, bit planes packed row by row
    (any bits of 1-8 whose K bits is a whole number of bytes)."""
    b = np.asarray(buckets, np.uint8)
    planes = (b[:, :, None] >> np.arange(bits, dtype=np.uint8)) & np.uint8(1)   # [M, K, b]
    return np.packbits(planes.reshape(len(b), -1), axis=1, bitorder="little")


def unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    flat = np.unpackbits(packed, axis=1, bitorder="little").reshape(len(packed), -1, bits)
    return np.sum(flat.astype(np.uint8) << np.arange(bits, dtype=np.uint8), axis=2,
                  dtype=np.uint8)


QUANTILE_SAMPLE = 262144  # residual rows the bucket tables are read from


def quantiser(res: np.ndarray, bits: int):
    """Per coordinate k: cutoffs [K, 2^b - 1] at the quantiles of that coordinate's residuals
    and weights [K, 2^b], the mean residual each bucket holds (0 for an empty one). One table
    per coordinate, not one for all: a coordinate whose spread differs from the rest (one of
    MiniLM's residual coordinates is constant) keeps its own buckets. On MiniLM's tokens the
    gain is small: recall@10 against exact 0.889 -> 0.895 at 2 bits, 0.931 -> 0.934 at 3
    (3,000 passages, BUILD_NOTES)."""
    levels = 1 << bits
    cutoffs = np.quantile(res, np.arange(1, levels) / levels, axis=0).T.astype(np.float32)
    buckets = bucketise(res, cutoffs)
    weights = np.zeros((res.shape[1], levels), np.float32)
    for b in range(levels):
        hit = buckets == b
        n = hit.sum(axis=0)
        total = np.where(hit, res, np.float32(0)).sum(axis=0)
        weights[:, b] = np.where(n > 0, total / np.maximum(n, 1), 0.0)
    return cutoffs, weights


def bucketise(res: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """[M, K] residuals -> [M, K] bucket ids by each coordinate's cutoffs (rows a chunk at a
    time: the comparison is [rows, K, 2^b - 1] booleans, kept near 128 MiB)."""
    out = np.empty(res.shape, np.uint8)
    chunk = max(1, 2**27 // max(cutoffs.size, 1))
    for s in range(0, len(res), chunk):
        out[s:s + chunk] = np.sum(res[s:s + chunk, :, None] >= cutoffs[None], axis=2)
    return out


@dataclasses.dataclass
class Index:
    ids: list                  # document ids, in corpus order
    centroids: np.ndarray      # [C, K] float32
    codes: np.ndarray          # [M] uint16 / int32: each token's centroid
    residuals: np.ndarray      # [M, K bits / 8] uint8: packed bucket ids
    cutoffs: np.ndarray        # [K, 2^b - 1] bucket boundaries, per coordinate
    weights: np.ndarray        # [K, 2^b] the value each bucket decodes to, per coordinate
    bits: int
    doc_of: np.ndarray         # [M] int32: each token's document
    starts: np.ndarray         # [N + 1] each document's first token
    ivf: list                  # C arrays: the documents holding a token of centroid c

    @property
    def nbytes(self) -> int:
        """What the search keeps in memory per corpus: codes, residuals, token -> document
        map and offsets, centroids, buckets, inverted lists."""
        return int(self.codes.nbytes + self.residuals.nbytes + self.doc_of.nbytes
                   + self.starts.nbytes + self.centroids.nbytes + self.cutoffs.nbytes
                   + self.weights.nbytes + sum(a.nbytes for a in self.ivf))

    @property
    def bytes_per_token(self) -> float:
        """The per-token part: centroid id + packed residual."""
        m = max(len(self.codes), 1)
        return (self.codes.nbytes + self.residuals.nbytes) / m

    def decompress(self, rows: np.ndarray) -> np.ndarray:
        """[R, K] unit vectors of the given token rows."""
        buckets = unpack(self.residuals[rows], self.bits)
        res = self.weights[np.arange(self.weights.shape[0]), buckets]          # [R, K]
        return _unit(self.centroids[self.codes[rows]] + res).astype(np.float32)


def build(ids: list, vectors: list, masks: list, n_centroids: int = 0, bits: int = 2,
          iters: int = 10, seed: int = 0, centroids: np.ndarray | None = None) -> Index:
    """An Index of per-document token vectors ([Td_i, K] unit) and masks ([Td_i]).
    n_centroids 0: 2^floor(log2(16 sqrt(M))) (ColBERTv2's rule); `centroids` ([C, K] unit,
    another index's) skip the k-means: one clustering serves several bit widths."""
    if bits not in range(1, 9):
        raise ValueError(f"bits must be 1 to 8, got {bits}")
    lens = np.asarray([int(np.sum(np.asarray(m) > 0)) for m in masks], np.int64)
    width = np.asarray(vectors[0]).shape[-1] if len(vectors) else 1
    x = np.empty((int(lens.sum()), width), np.float32)  # the real tokens, filled in place
    at = 0
    for v, m, n in zip(vectors, masks, lens):
        x[at:at + n] = np.asarray(v)[np.asarray(m) > 0]
        at += n
    x = _unit(x)
    if x.shape[1] * bits % 8:
        raise ValueError(f"token width {x.shape[1]} x {bits} bits is not a whole number of "
                         "bytes")
    if not n_centroids:
        n_centroids = int(2 ** np.floor(np.log2(16 * np.sqrt(max(len(x), 1)))))
    c = kmeans(x, n_centroids, iters, seed) if centroids is None else \
        np.asarray(centroids, np.float32)
    codes = assign(x, c)
    sample = np.random.default_rng(seed).choice(len(x), min(len(x), QUANTILE_SAMPLE),
                                                replace=False)
    cutoffs, weights = quantiser(x[sample] - c[codes[sample]], bits)
    chunk = 65536  # residuals, buckets and bits a chunk of tokens at a time
    packed = np.concatenate([pack(bucketise(x[s:s + chunk] - c[codes[s:s + chunk]], cutoffs),
                                  bits) for s in range(0, len(x), chunk)]) if len(x) else \
        np.zeros((0, width * bits // 8), np.uint8)
    doc_of = np.repeat(np.arange(len(lens), dtype=np.int32), lens)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(c) + 1))
    ivf = [np.unique(doc_of[order[bounds[j]:bounds[j + 1]]]).astype(np.int32)
           for j in range(len(c))]
    dtype = np.uint16 if len(c) <= 1 << 16 else np.int32
    return Index(list(ids), c.astype(np.float32), codes.astype(dtype), packed,
                 cutoffs, weights, bits, doc_of,
                 np.concatenate([[0], np.cumsum(lens)]).astype(np.int64), ivf)


def _maxsim_per_doc(sims: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """[Tq, R] query-token x token similarities, the R tokens in runs of `lens` (>= 1) per
    document -> [len(lens)] the sum over query tokens of the max over each run's tokens."""
    if not len(lens):
        return np.zeros(0, np.float32)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    return np.maximum.reduceat(sims, starts, axis=1).sum(axis=0)


def _rows(index: Index, docs: np.ndarray):
    """The token rows of `docs` (contiguous per document) and each document's token count."""
    lens = np.diff(index.starts)[docs]
    first = np.repeat(index.starts[docs] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    return first + np.arange(int(lens.sum())), lens


def search(index: Index, qv: np.ndarray, qm: np.ndarray, k: int = 10, nprobe: int = 4,
           ndocs: int = 256):
    """Each query's top-k (ids [Q] lists, scores [Q] lists) by the three stages above."""
    out_ids, out_scores = [], []
    for v, m in zip(np.asarray(qv, np.float32), np.asarray(qm)):
        q = _unit(v[m > 0])                                              # [Tq, K]
        cs = q @ index.centroids.T                                       # [Tq, C]
        probe = np.unique(np.argsort(-cs, axis=1)[:, :nprobe])
        cand = np.unique(np.concatenate([index.ivf[c] for c in probe])) if len(probe) else \
            np.zeros(0, np.int32)
        if not len(cand):
            out_ids.append([])
            out_scores.append([])
            continue
        rows, lens = _rows(index, cand)
        approx = _maxsim_per_doc(cs[:, index.codes[rows]], lens)
        keep_docs = cand[np.argsort(-approx, kind="stable")[:ndocs]]
        rows, lens = _rows(index, keep_docs)
        exact = _maxsim_per_doc(q @ index.decompress(rows).T, lens)
        top = np.argsort(-exact, kind="stable")[:k]
        out_ids.append([index.ids[keep_docs[j]] for j in top])
        out_scores.append([float(exact[j]) for j in top])
    return out_ids, out_scores


def recall_against(exact_ids: list, approx_ids: list, k: int = 10) -> float:
    """Mean over queries of |top-k approx & top-k exact| / |top-k exact|."""
    vals = [len(set(a[:k]) & set(e[:k])) / max(len(e[:k]), 1)
            for e, a in zip(exact_ids, approx_ids)]
    return float(np.mean(vals)) if vals else 0.0
