"""From text to batches: tokenize (cached), pack, shuffle, repeat, shard, batch.

`build_rows` turns documents into packed rows, reading and writing a token
cache keyed by a fingerprint of the corpus text and the tokenizer, so a second
run does not tokenize again. `batch_iterator` wraps the rows in a grain
MapDataset pipeline:

    rows -> shuffle(seed) -> repeat -> global batch -> this process's block

Each process keeps a disjoint block of every global batch; together they read
every row, and a step's global batch is the same for any process count. The
iterator's state is a small dict (`get_state`/`set_state`) that the
checkpoint stores, so a restored run sees exactly the batches an
uninterrupted one would have. Masking is not done here: it runs on device,
inside the train step (encoder/objectives/masking.py).
"""
import hashlib
import os
import time

import grain
import numpy as np
from absl import logging

from encoder.data import packing
from encoder.data.tokenizer import Tokenizer


def corpus_fingerprint(docs: list[str], tokenizer: Tokenizer) -> str:
    h = hashlib.sha256(tokenizer.fingerprint().encode())
    for d in docs:
        h.update(hashlib.sha1(d.encode("utf-8")).digest())
    return h.hexdigest()[:20]


def tokenize_documents(docs: list[str], tokenizer: Tokenizer, cache_dir: str | None = None,
                       chunk: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Documents -> (tokens, offsets), read from / written to cache_dir if given."""
    path = None
    if cache_dir:
        path = os.path.join(cache_dir, f"tokens-{corpus_fingerprint(docs, tokenizer)}.npz")
        if os.path.exists(path):
            with np.load(path) as f:
                return f["tokens"], f["offsets"]
    ids: list[list[int]] = []
    for i in range(0, len(docs), chunk):
        ids.extend(tokenizer.encode_batch(docs[i:i + chunk]))
    tokens, offsets = packing.flatten(ids)
    if path:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = path + f".tmp{os.getpid()}.npz"
        np.savez(tmp, tokens=tokens, offsets=offsets)
        os.replace(tmp, path)  # atomic: concurrent runs never read half a file
    return tokens, offsets


def build_rows(docs: list[str], tokenizer: Tokenizer, data_cfg, cache_dir: str | None = None,
               pair_task: str = "none", seed: int = 0) -> dict:
    """Packed rows for the data config's pack_mode."""
    start = time.time()
    if data_cfg.pack_mode == "documents":
        tokens, offsets = tokenize_documents(docs, tokenizer, cache_dir)
        rows = packing.pack_documents(tokens, offsets, data_cfg.seq_len, tokenizer.cls_id,
                                      tokenizer.sep_id, tokenizer.pad_id,
                                      data_cfg.restart_positions)
    elif data_cfg.pack_mode == "pairs":
        lines = [[ln for ln in d.split("\n") if ln.strip()] for d in docs]
        flat = [ln for doc in lines for ln in doc]
        tokens, offsets = tokenize_documents(flat, tokenizer, cache_dir)
        segs, k = [], 0
        for doc in lines:
            segs.append([tokens[offsets[k + j]:offsets[k + j + 1]].tolist()
                         for j in range(len(doc))])
            k += len(doc)
        rows = packing.pack_pairs(segs, data_cfg.seq_len, tokenizer.cls_id, tokenizer.sep_id,
                                  tokenizer.pad_id, pair_task if pair_task != "none" else "nsp",
                                  seed)
    else:
        raise ValueError(f"Unknown pack mode {data_cfg.pack_mode!r}; valid names: documents, pairs")
    logging.info("packed %d rows of %d tokens from %d documents in %.1fs",
                 len(rows["input_ids"]), data_cfg.seq_len, len(docs), time.time() - start)
    return rows


class Rows:
    """Random access over packed rows (a grain data source)."""

    def __init__(self, rows: dict):
        self.rows = rows
        self.n = len(rows["input_ids"])

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.rows.items()}


def dataset(rows: dict, batch_size: int, seed: int, shuffle: bool = True, repeat: bool = True,
            process_index: int = 0, process_count: int = 1) -> grain.MapDataset:
    """The grain pipeline for one process; batch_size is the global batch.

    Every process builds the same global batches (the same shuffle) and keeps
    its contiguous block of batch_size / process_count rows, so the data a
    step sees does not depend on how many processes share it.
    """
    if batch_size % process_count:
        raise ValueError(f"global batch {batch_size} is not divisible by {process_count} "
                         "processes")
    local = batch_size // process_count
    ds = grain.MapDataset.source(Rows(rows))
    if shuffle:
        ds = ds.shuffle(seed=seed)
    if repeat:
        ds = ds.repeat(None)
    ds = ds.batch(batch_size, drop_remainder=repeat)
    if process_count > 1:
        lo = process_index * local
        ds = ds.map(lambda b: {k: v[lo:lo + local] for k, v in b.items()})
    return ds


def batch_iterator(rows: dict, batch_size: int, seed: int, shuffle: bool = True,
                   repeat: bool = True, process_index: int = 0, process_count: int = 1,
                   prefetch_threads: int = 0):
    """A checkpointable iterator of this process's numpy batches (get_state / set_state)."""
    ds = dataset(rows, batch_size, seed, shuffle, repeat, process_index, process_count)
    options = grain.ReadOptions(num_threads=prefetch_threads, prefetch_buffer_size=
                                max(1, 2 * prefetch_threads)) if prefetch_threads else None
    return iter(ds.to_iter_dataset(options))
