"""Hard negatives mined by a model: exact top-k, the positive and likely false negatives
dropped (as sentence-transformers' mine_hard_negatives, NV-Retriever's margins).

For each pair (query, positive) the corpus's candidates are its exact top-k by inner
product of unit vectors (search.exact_topk). Walking them best first, from rank
`range_min`, a candidate is dropped when it is the positive itself (its corpus row or
its text, or the query's text), or a likely false negative:

  absolute_margin m   score + m > positive score      (m = 0: no closer than the positive)
  relative_margin r   score > pos - |pos| r           (NV-Retriever's 5%: r = 0.05)
  max_score s         score > s                       (too close to the query to be wrong)

and the first `num_negatives` survivors are kept. Every drop is counted by reason.
"""
import numpy as np

from encoder.retrieval import search

REASONS = ("positive", "absolute_margin", "relative_margin", "max_score")


def candidates(num_negatives: int, range_min: int = 0, range_max: int = 0) -> int:
    """The top-k searched per pair (k = range_max, else range_min + 4 num_negatives + 1),
    the options checked (the command calls it before it reads or embeds anything)."""
    if num_negatives <= 0:
        raise ValueError(f"num_negatives must be positive, got {num_negatives}")
    if range_min < 0 or range_max < 0:
        raise ValueError(f"range_min and range_max must be >= 0, got {range_min} and "
                         f"{range_max}")
    k = range_max or (range_min + 4 * num_negatives + 1)
    if k <= range_min:
        raise ValueError(f"range_max {range_max} must exceed range_min {range_min}")
    return k


def mine(query_vecs, positive_vecs, corpus_vecs, corpus_texts: list, pairs: list,
         positive_rows: list, num_negatives: int = 5, range_min: int = 0,
         range_max: int = 0, absolute_margin: float | None = None,
         relative_margin: float | None = None, max_score: float | None = None,
         devices=None, with_scores: bool = False):
    """(negatives: one list of texts per pair, stats), and with_scores each pair's
    [positive's, each kept negative's] inner products as a third value. pairs: {"text_a", "text_b"};
    positive_rows: each pair's positive's corpus row, or a list of its rows (a titled
    corpus can hold its text under several titles); -1 or []: not in the corpus."""
    k = candidates(num_negatives, range_min, range_max)
    q = np.asarray(query_vecs, np.float32)
    pos = np.sum(q * np.asarray(positive_vecs, np.float32), axis=-1)  # [P]
    scores, rows = search.exact_topk(q, corpus_vecs, k, devices=devices)
    dropped = dict.fromkeys(REASONS, 0)
    out, short, kept_scores = [], 0, []
    for i, pair in enumerate(pairs):
        kept, sims = [], [float(pos[i])]
        own = positive_rows[i]
        own = {int(own)} if np.ndim(own) == 0 else {int(r) for r in own}
        for s, j in zip(scores[i, range_min:], rows[i, range_min:]):
            text = corpus_texts[j]
            if int(j) in own or text == pair["text_b"] or text == pair["text_a"]:
                dropped["positive"] += 1
                continue
            if absolute_margin is not None and s + absolute_margin > pos[i]:
                dropped["absolute_margin"] += 1
                continue
            if relative_margin is not None and s > pos[i] - abs(pos[i]) * relative_margin:
                dropped["relative_margin"] += 1
                continue
            if max_score is not None and s > max_score:
                dropped["max_score"] += 1
                continue
            if text in kept:
                continue
            kept.append(text)
            sims.append(float(s))
            if len(kept) == num_negatives:
                break
        short += len(kept) < num_negatives
        out.append(kept)
        kept_scores.append(sims)
    stats = {"pairs": len(pairs), "candidates_per_pair": int(k - range_min),
             "dropped": dropped, "pairs_short_of_negatives": short,
             "mean_positive_score": float(np.mean(pos)) if len(pos) else 0.0}
    return (out, stats, kept_scores) if with_scores else (out, stats)
