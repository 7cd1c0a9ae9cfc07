"""Late interaction (ColBERT, Khattab & Zaharia 2020): MaxSim scoring, an index, a search.

MaxSim(q, d) = sum over the query's real tokens i of max over the document's real
tokens j of <q_i, d_j>, with unit token vectors (§3.3). The index keeps every
document's token vectors (float16, padded to the longest document of its block) and
a pooled vector per document; search is exact MaxSim over the candidates a first
stage proposes (the mean token vector's top-k, PLAID's centroid idea at its
simplest) or over the whole corpus when `candidates` is 0. That evaluates a
BEIR-size corpus on one machine: memory is N x T x K half floats, time one matmul per
block.

Axes: Q queries, N documents, Tq / Td tokens, K token width.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


def maxsim_scores(q, d):
    """[Q, N] MaxSim of q = (vectors [Q, Tq, K], mask [Q, Tq]) against d = (vectors
    [N, Td, K], mask [N, Td]); the losses' `score` for a ColBERT head."""
    qv, qm = q
    dv, dm = d
    sims = jnp.einsum("qik,njk->qnij", qv.astype(jnp.float32), dv.astype(jnp.float32))
    sims = jnp.where(dm[None, :, None, :] > 0, sims, -jnp.inf)
    best = jnp.max(sims, axis=-1)                                        # [Q, N, Tq]
    best = jnp.where(jnp.isfinite(best), best, 0.0)                      # a document with no token
    return jnp.sum(jnp.where(qm[:, None, :] > 0, best, 0.0), axis=-1)     # [Q, N]


def maxsim_numpy(qv, qm, dv, dm) -> float:
    """One pair's MaxSim, in numpy float64 (the reference the tests and exports check)."""
    qv = np.asarray(qv, np.float64)[np.asarray(qm) > 0]
    dv = np.asarray(dv, np.float64)[np.asarray(dm) > 0]
    if not len(qv) or not len(dv):
        return 0.0
    return float(np.sum(np.max(qv @ dv.T, axis=1)))


@dataclasses.dataclass
class Index:
    """Token vectors of a corpus, in blocks of equal padded length."""
    ids: list                 # document ids, in corpus order
    blocks: list              # (start row, vectors [n, Td, K] float16, mask [n, Td] int8)
    centroids: np.ndarray     # [N, K] float32 unit mean token vectors (the first stage)

    @property
    def size(self) -> int:
        return len(self.ids)


def build_index(ids: list, vectors: list, masks: list, block: int = 1024) -> Index:
    """An Index from per-document token vectors ([Td_i, K]) and masks ([Td_i])."""
    blocks, cents = [], []
    for s in range(0, len(ids), block):
        vs, ms = vectors[s:s + block], masks[s:s + block]
        t = max(int(np.sum(m > 0)) for m in ms) if ms else 1
        k = vs[0].shape[-1]
        arr = np.zeros((len(vs), max(t, 1), k), np.float16)
        msk = np.zeros((len(vs), max(t, 1)), np.int8)
        for i, (v, m) in enumerate(zip(vs, ms)):
            real = np.asarray(v)[np.asarray(m) > 0]
            arr[i, :len(real)] = real
            msk[i, :len(real)] = 1
            c = real.mean(0) if len(real) else np.zeros(k)
            cents.append(c / max(np.linalg.norm(c), 1e-12))
        blocks.append((s, arr, msk))
    return Index(list(ids), blocks, np.asarray(cents, np.float32).reshape(len(ids), -1))


_maxsim = jax.jit(maxsim_scores)


def search(index: Index, qv: np.ndarray, qm: np.ndarray, k: int = 100, candidates: int = 0,
           query_block: int = 64):
    """Each query's top-k documents by exact MaxSim: (ids [Q] lists, scores [Q] lists).

    candidates > 0: MaxSim only over the top `candidates` documents of the centroid
    stage (each query's mean token vector against the documents'); 0: every document.
    """
    qv, qm = np.asarray(qv, np.float32), np.asarray(qm)
    out_ids, out_scores = [], []
    for s in range(0, len(qv), query_block):
        v, m = qv[s:s + query_block], qm[s:s + query_block]
        t = max(int(np.max(np.sum(m > 0, axis=1), initial=0)), 1)  # the block's real length:
        v, m = v[:, :t], m[:, :t]  # padding adds nothing to MaxSim but [Q, N, Tq, Td] memory
        if candidates:
            qc = (v * m[..., None]).sum(1)
            qc /= np.maximum(np.linalg.norm(qc, axis=-1, keepdims=True), 1e-12)
            cand = np.argsort(-(qc @ index.centroids.T), axis=1, kind="stable")[:, :candidates]
        full = np.full((len(v), index.size), -np.inf, np.float32)
        for start, arr, msk in index.blocks:
            rows = slice(start, start + len(arr))
            if candidates:
                need = np.unique(cand[(cand >= start) & (cand < start + len(arr))])
                if not len(need):
                    continue
                sc = np.asarray(_maxsim((v, m), (arr[need - start], msk[need - start])))
                keep = np.zeros((len(v), len(need)), bool)
                for qi in range(len(v)):
                    keep[qi] = np.isin(need, cand[qi])
                full[:, need] = np.where(keep, sc, -np.inf)
            else:
                full[:, rows] = np.asarray(_maxsim((v, m), (arr, msk)))
        top = np.argsort(-full, axis=1, kind="stable")[:, :min(k, index.size)]
        for qi, row in enumerate(top):
            row = [j for j in row if np.isfinite(full[qi, j])]
            out_ids.append([index.ids[j] for j in row])
            out_scores.append([float(full[qi, j]) for j in row])
    return out_ids, out_scores
