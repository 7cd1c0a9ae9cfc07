"""Prepared pair corpora: retrieval pairs tokenized once into ArrayRecord shards.

    python -m encoder prepare --records=pairs --input=PAIRS.jsonl --out=DIR \\
        --tokenizer=MODEL/tokenizer [--query_prefix="query: " --passage_prefix="passage: "]

The input is what the contrastive task reads from JSONL (encoder/tasks/contrastive.py):
one {"text_a": query, "text_b": positive, "negatives": [texts]} object a line, as
`python -m encoder mine` writes them, or a scored row {"query" (or "text_a"), "passages":
[positive, negatives...], "scores": [a teacher's score per passage]} (`mine --scores`). preparation.py's units, markers, resume and
manifest serve unchanged (a unit is cut at a line start); this module is what a record
holds and how a training row is read back. A line that is not such an object is skipped
and counted (`bad_records`, the first few named by byte offset), never trained on.

A record is one pair: an int32 header [k, hash(text_a), hash(text_b), hash(neg_1..k),
len(a), len(b), len(neg_1..k)], then every text's token ids (the prefix included, no
special tokens) in the corpus's token dtype. A scored pair sets SCORED in its first header
word and holds its 1 + k teacher scores (float32) between the header and the tokens; the
manifest counts them (`scored_pairs`), so a distillation run refuses a corpus that is not
scored throughout before it trains. The prefixes are part of the corpus (its
plan); a run whose `contrastive.*_prefix` differ is refused. The hashes are 31-bit content
ids of the raw texts: the duplicate masks of the loss compare them, as they compare the
JSONL path's ids (a collision, about one per 2^31 pairs of texts in a batch, masks one
true negative).

`PairRows` is the random-access view (a grain data source) the contrastive task trains
on: `read_batch` returns the arrays the task's `featurize` makes from the same lines
(a_*, b_*, n_* [B, K, T], n_mask, the text ids, weight), reading only the batch's records,
so memory does not grow with the corpus.
"""
import hashlib
import json
import math

import numpy as np

from encoder.data import shards

RECORDS = ("text", "pairs")   # --records: what a prepared corpus's record holds
MAX_NAMED = 5                 # bad lines named in the stats (the rest only counted)
SCORED = 1 << 30              # the header's first word: k | SCORED when scores follow


def text_hash(text: str) -> int:
    """A 31-bit content id (non-negative int32; the loss's -1 means "no text")."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=4).digest(),
                          "little") & 0x7FFFFFFF


def read_row(ex: dict) -> str | None:
    """Reads a scored row's query as text_a and its passages as text_b (the first) and
    negatives (the rest), in place; checks the scores (one finite number per passage).
    Returns why the row is refused, or None."""
    if "passages" in ex:
        passages = ex["passages"]
        if not isinstance(passages, list) or not passages or not all(
                isinstance(x, str) for x in passages):
            return "'passages' is not a non-empty list of strings (the first the positive)"
        clash = [k for k in ("text_b", "negatives") if k in ex]
        if clash:
            return (f"a row with 'passages' also holds {clash} (the passages are the "
                    "positive and the negatives)")
        if "text_a" not in ex:
            if not isinstance(ex.get("query"), str):
                return "no string 'query' (or 'text_a')"
            ex["text_a"] = ex.pop("query")
        ex["text_b"], ex["negatives"] = passages[0], list(passages[1:])
        del ex["passages"]
    negs = ex.get("negatives", [])
    if not isinstance(negs, list) or not all(isinstance(x, str) for x in negs):
        return "'negatives' is not a list of strings"
    scores = ex.get("scores")
    if scores is not None:
        if not isinstance(scores, list) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                for x in scores):
            return "'scores' is not a list of finite numbers"
        if len(scores) != 1 + len(negs):
            return (f"{len(scores)} scores for {1 + len(negs)} passages (one teacher score "
                    "per passage, the positive's first)")
    return None


def parse_line(line: str) -> dict | str:
    """The pair of one JSONL line (with its "scores" when scored), or why it is not one."""
    try:
        ex = json.loads(line)
    except json.JSONDecodeError as e:
        return f"not JSON ({e.msg})"
    if not isinstance(ex, dict):
        return "not a JSON object"
    why = read_row(ex)
    if why:
        return why
    for key in ("text_a", "text_b"):
        if not isinstance(ex.get(key), str):
            return f"no string {key!r}"
    out = {"text_a": ex["text_a"], "text_b": ex["text_b"], "negatives": ex.get("negatives", [])}
    if ex.get("scores") is not None:
        out["scores"] = [float(x) for x in ex["scores"]]
    return out


def texts_of(pair: dict, query_prefix: str, passage_prefix: str) -> list[str]:
    """What is tokenized: the query, the positive, the negatives, with their prefixes."""
    return ([query_prefix + pair["text_a"], passage_prefix + pair["text_b"]]
            + [passage_prefix + t for t in pair["negatives"]])


def encode_record(pair: dict, ids: list[list[int]], dtype: str) -> bytes:
    """One pair's record from its texts' token ids (texts_of's order)."""
    raw = [pair["text_a"], pair["text_b"]] + pair["negatives"]
    scores = pair.get("scores")
    k = len(pair["negatives"]) | (SCORED if scores is not None else 0)
    header = np.asarray([k] + [text_hash(t) for t in raw] + [len(x) for x in ids], np.int32)
    body = np.concatenate([np.asarray(x, np.int64) for x in ids]) if ids else np.zeros(0)
    extra = b"" if scores is None else np.asarray(scores, "<f4").tobytes()
    return (header.astype("<i4").tobytes() + extra
            + body.astype(np.dtype(dtype).newbyteorder("<")).tobytes())


def decode_scored(record: bytes, dtype: str):
    """(hashes [2 + k], token ids of each text, scores [1 + k] float32 or None)."""
    word = int(np.frombuffer(record[:4], "<i4")[0])
    k, scored = word & ~SCORED, bool(word & SCORED)
    n = 2 + k
    start = 4 * (1 + 2 * n)
    header = np.frombuffer(record[:start], "<i4")
    hashes, lengths = header[1:1 + n], header[1 + n:]
    scores = None
    if scored:
        scores = np.frombuffer(record[start:start + 4 * (1 + k)], "<f4").astype(np.float32)
        start += 4 * (1 + k)
    body = np.frombuffer(record[start:], np.dtype(dtype).newbyteorder("<"))
    cuts = np.cumsum(lengths)[:-1]
    return hashes.astype(np.int32), [x.astype(np.int64) for x in np.split(body, cuts)], scores


def decode_record(record: bytes, dtype: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """(hashes [2 + k], token ids of each text) of one record."""
    hashes, ids, _ = decode_scored(record, dtype)
    return hashes, ids


def pair_records(lines, tok, query_prefix: str, passage_prefix: str, dtype: str, stats: dict,
                 where=lambda i: f"line {i}"):
    """(line, record, token ids of its texts) of each pair line; bad lines counted in stats
    ("bad_records", named in "skipped" by where(i)), the most negatives in "max_negatives"."""
    good = []
    for i, line in enumerate(lines):
        pair = parse_line(line)
        if isinstance(pair, str):
            stats["bad_records"] = stats.get("bad_records", 0) + 1
            if len(stats.setdefault("skipped", [])) < MAX_NAMED:
                stats["skipped"].append(f"{where(i)}: {pair}")
            continue
        good.append((line, pair))
    texts = [texts_of(p, query_prefix, passage_prefix) for _, p in good]
    flat = tok.encode_batch([t for row in texts for t in row], num_threads=1)
    out, at = [], 0
    for (line, pair), row in zip(good, texts):
        ids = flat[at:at + len(row)]
        at += len(row)
        stats["max_negatives"] = max(stats.get("max_negatives", 0), len(pair["negatives"]))
        stats["scored_records"] = stats.get("scored_records", 0) + ("scores" in pair)
        out.append((line, encode_record(pair, ids, dtype), ids))
    return out


class PairRows(shards.ShardReader):
    """The contrastive task's training rows of a prepared pair corpus (random access)."""

    def __init__(self, corpus: shards.PreparedCorpus, tokenizer, max_len: int,
                 num_negatives: int = 0, split: str = "train", verify_checksums: bool = True,
                 scores: bool = False):
        corpus.require_records("pairs", "the contrastive task")
        corpus.check_tokenizer(tokenizer)
        self.corpus, self.split, self.tok, self.max_len = corpus, split, tokenizer, max_len
        self.shards = corpus.shards[split]
        self.verify_checksums = verify_checksums
        self.starts = np.concatenate([[0], np.cumsum([s.documents for s in self.shards])])
        self.n = int(self.starts[-1])
        most = int(corpus.manifest.get("max_negatives", 0))
        # as featurize: num_negatives slots (0: the corpus's most); none if no row has one
        self.k = (num_negatives or most) if most else 0
        # a missing negative's slot holds the passage prefix alone (featurize encodes "")
        self.empty = tokenizer.encode(corpus.manifest.get("passage_prefix", ""))
        self.scores = scores  # read_batch adds "scores" [B, 1 + k] (the distillation losses)
        self.train_step = False  # read_batch adds a train_step column (the trainer fills it)
        self._readers: dict = {}

    def unscored(self) -> int:
        """Pairs of the corpus (both splits) prepared without teacher scores."""
        total = sum(s.documents for split in self.corpus.shards.values() for s in split)
        return total - int(self.corpus.manifest.get("scored_pairs", 0))

    def __len__(self) -> int:
        return self.n

    def _decoded(self, indices) -> list:
        order = np.asarray(indices, np.int64)
        shard_of = np.searchsorted(self.starts, order, side="right") - 1
        out = [None] * len(order)
        for s in np.unique(shard_of):
            at = np.flatnonzero(shard_of == s)
            local = [int(order[j] - self.starts[s]) for j in at]
            for j, rec in zip(at, self._records(int(s), local)):
                out[j] = decode_scored(rec, self.corpus.dtype)
        return out

    def read_batch(self, indices) -> dict:
        rows = self._decoded(indices)
        ex = self.tok.example_from_ids
        out = {}
        for side, j in (("a", 0), ("b", 1)):
            feats = [ex(list(ids[j]), None, self.max_len) for _, ids, _ in rows]
            out.update({f"{side}_{key}": np.stack([f[key] for f in feats]) for key in feats[0]})
            out[f"{side}_text_id"] = np.asarray([h[j] for h, _, _ in rows], np.int32)
        if self.k:
            n, k = len(rows), self.k
            counts = [min(len(h) - 2, k) for h, _, _ in rows]
            texts = [[list(ids[2 + i]) if i < c else self.empty for i in range(k)]
                     for (_, ids, _), c in zip(rows, counts)]
            feats = [ex(t, None, self.max_len) for row in texts for t in row]
            for key in feats[0]:
                out[f"n_{key}"] = np.stack([f[key] for f in feats]).reshape(n, k, -1)
            out["n_mask"] = np.asarray([[1 if i < c else 0 for i in range(k)] for c in counts],
                                       np.int32)
            out["n_text_id"] = np.asarray([[h[2 + i] if i < c else -1 for i in range(k)]
                                           for (h, _, _), c in zip(rows, counts)], np.int32)
            if self.scores:  # as the task's teacher_scores: 0 in a missing negative's slot
                out["scores"] = np.zeros((n, 1 + k), np.float32)
                for r, ((_, _, sc), c) in enumerate(zip(rows, counts)):
                    if sc is None:
                        raise ValueError(f"row {indices[r]} of {self.corpus.folder} has no "
                                         "teacher scores")
                    out["scores"][r, :1 + c] = sc[:1 + c]
        out["weight"] = np.ones(len(rows), np.float32)  # every row is real
        if self.train_step:
            out["train_step"] = np.zeros(len(rows), np.int32)
        return out
