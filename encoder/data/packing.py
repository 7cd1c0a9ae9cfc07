"""Packing tokenized documents into fixed-length rows.

`pack_documents` (RoBERTa's FULL-SENTENCES style, Liu et al. 2019 §4.2): the
documents, each followed by [SEP], form one token stream cut into chunks of
seq_len - 1, each chunk led by [CLS]. Every row is exactly seq_len tokens
(only the stream's last row is padded), nothing is dropped, and each token
carries a row-local document id (1, 2, ...; 0 = padding) so attention can be
kept inside a document, plus its position (restarting per document if asked).

`pack_pairs` builds BERT's NSP / ALBERT's SOP rows: [CLS] A [SEP] B [SEP] with
segment ids 0/1 and a pair label (NSP: 1 = B is a random segment; SOP: 1 = A
and B swapped), half of them negatives.

Rows are a dict of int32 arrays [N, T]: input_ids, segment_ids,
attention_mask, document_ids, positions (+ pair_labels [N] for pairs).
"""
import numpy as np

from encoder.data.tokenizer import truncate_longest_first


def flatten(docs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Ragged token lists -> (tokens [sum], offsets [n+1])."""
    lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens = np.fromiter((t for d in docs for t in d), dtype=np.int32, count=int(offsets[-1]))
    return tokens, offsets


def pack_documents(tokens: np.ndarray, offsets: np.ndarray, seq_len: int, cls_id: int,
                   sep_id: int, pad_id: int, restart_positions: bool = False) -> dict:
    """Full-sentences packing of flattened documents; see the module docstring."""
    if seq_len < 2:
        raise ValueError(f"seq_len must be >= 2, got {seq_len}")
    lengths = np.diff(offsets)
    keep = lengths > 0
    doc_len = lengths[keep] + 1  # each document is followed by [SEP]
    n_docs = len(doc_len)
    if n_docs == 0:
        raise ValueError("no non-empty document to pack")
    # The stream: doc tokens with [SEP] after each; doc index per stream token.
    stream_len = int(doc_len.sum())
    stream = np.empty(stream_len, np.int32)
    ends = np.cumsum(doc_len)
    sep_pos = ends - 1
    is_sep = np.zeros(stream_len, bool)
    is_sep[sep_pos] = True
    stream[~is_sep] = np.concatenate([tokens[offsets[i]:offsets[i + 1]]
                                      for i in np.flatnonzero(keep)])
    stream[is_sep] = sep_id
    doc_of = np.repeat(np.arange(n_docs, dtype=np.int64), doc_len)
    start_of = np.repeat(ends - doc_len, doc_len)

    body = seq_len - 1
    n_rows = -(-stream_len // body)
    pad = n_rows * body - stream_len
    real = np.concatenate([np.ones(stream_len, bool), np.zeros(pad, bool)]).reshape(n_rows, body)
    stream = np.concatenate([stream, np.full(pad, pad_id, np.int32)]).reshape(n_rows, body)
    doc_of = np.concatenate([doc_of, np.full(pad, -1)]).reshape(n_rows, body)
    idx = np.arange(n_rows * body).reshape(n_rows, body)
    start_of = np.concatenate([start_of, np.zeros(pad, np.int64)]).reshape(n_rows, body)

    first_doc = doc_of[:, :1]
    doc_ids = np.where(real, doc_of - first_doc + 1, 0)
    if restart_positions:
        # Offset within the document's part of this row; [CLS] is position 0.
        row_start = idx[:, :1]
        pos = idx - np.maximum(start_of, row_start) + np.where(start_of <= row_start, 1, 0)
        pos = np.where(real, pos, 0)
    else:
        pos = np.broadcast_to(np.arange(1, seq_len), (n_rows, body))
    cls = np.full((n_rows, 1), cls_id, np.int32)
    return {
        "input_ids": np.concatenate([cls, stream], 1).astype(np.int32),
        "segment_ids": np.zeros((n_rows, seq_len), np.int32),
        "attention_mask": np.concatenate([np.ones((n_rows, 1), bool), real], 1).astype(np.int32),
        "document_ids": np.concatenate([np.ones((n_rows, 1), np.int64), doc_ids], 1
                                       ).astype(np.int32),
        "positions": np.concatenate([np.zeros((n_rows, 1), np.int64), pos], 1).astype(np.int32),
    }


def unpack_documents(rows: dict, cls_id: int, sep_id: int) -> list[list[int]]:
    """Inverse of pack_documents (rows in order): the documents' token lists."""
    ids = rows["input_ids"][:, 1:][rows["attention_mask"][:, 1:].astype(bool)]
    docs, current = [], []
    for t in ids.tolist():
        if t == sep_id:
            docs.append(current)
            current = []
        else:
            current.append(t)
    if current:
        docs.append(current)
    return docs


def pack_pairs(segments: list[list[list[int]]], seq_len: int, cls_id: int, sep_id: int,
               pad_id: int, task: str, seed: int) -> dict:
    """NSP/SOP rows from documents given as lists of segments (e.g. lines).

    Consecutive segments of a document are gathered up to seq_len - 3 tokens
    and split at a random segment boundary into A and B. NSP negatives replace
    B with a segment from another document; SOP negatives swap A and B.
    """
    if task not in ("nsp", "sop"):
        raise ValueError(f"Unknown pair task {task!r}; valid names: nsp, sop")
    rng = np.random.default_rng(seed)
    budget = seq_len - 3
    all_segments = [s for doc in segments for s in doc if s]
    rows = []
    for d, doc in enumerate(segments):
        doc = [s for s in doc if s]
        i = 0
        while i < len(doc):
            chunk, n = [], 0
            while i < len(doc) and (n < budget or not chunk):
                chunk.append(doc[i])
                n += len(doc[i])
                i += 1
            if len(chunk) < 2 and task == "sop":
                continue
            cut = int(rng.integers(1, len(chunk))) if len(chunk) > 1 else 1
            a = [t for s in chunk[:cut] for t in s]
            b = [t for s in chunk[cut:] for t in s]
            label = int(rng.random() < 0.5)
            if task == "nsp" and (label or not b):
                b = list(all_segments[int(rng.integers(len(all_segments)))])
                label = 1
            elif task == "sop" and label:
                a, b = b, a
            if not a or not b:
                continue
            a, b = truncate_longest_first(a, b, budget)
            rows.append((a, b, label))
    if not rows:
        raise ValueError("no sentence pair could be built from the corpus")
    n = len(rows)
    out = {k: np.full((n, seq_len), v, np.int32) for k, v in
           (("input_ids", pad_id), ("segment_ids", 0), ("attention_mask", 0),
            ("document_ids", 0), ("positions", 0))}
    labels = np.zeros(n, np.int32)
    for r, (a, b, label) in enumerate(rows):
        ids = [cls_id] + a + [sep_id] + b + [sep_id]
        m = len(ids)
        out["input_ids"][r, :m] = ids
        out["segment_ids"][r, len(a) + 2:m] = 1
        out["attention_mask"][r, :m] = 1
        out["document_ids"][r, :m] = 1
        out["positions"][r, :m] = np.arange(m)
        labels[r] = label
    out["pair_labels"] = labels
    return out
