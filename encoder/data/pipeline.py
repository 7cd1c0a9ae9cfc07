"""From text to batches: prepared corpora, packing, shuffle, repeat, shard, batch.

`open_pretraining_data` is what a pretraining run reads. Documents mode (the
default) always trains from a prepared corpus (encoder/data/preparation.py): a
folder named in data.train_files is used as it is; plain text and the
embedded corpus are prepared once into the run's cache (keyed by the files,
their sizes and dates, the settings and the tokenizer) and then read the same
way, as random-access packed rows (shards.PackedRows). Pairs mode (NSP/SOP)
still packs in memory from plain text (`build_rows`, with a token cache).
`batch_iterator` wraps any rows in a grain MapDataset pipeline:

    row indices -> shuffle(seed) -> repeat -> global batch -> this process's block -> rows

Each process keeps a disjoint block of every global batch; together they read
every row, and a step's global batch is the same for any process count. The
iterator's state is a small dict (`get_state`/`set_state`) that the
checkpoint stores, so a restored run sees exactly the batches an
uninterrupted one would have. Masking is not done here: it runs on device,
inside the train step (encoder/objectives/masking.py).
"""
import dataclasses
import hashlib
import os
import time
from typing import Callable

import grain
import numpy as np
from absl import logging

from encoder.data import corpus, packing, preparation, shards, tokenizer as tokenizer_lib
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
    """Random access over in-memory packed rows (a grain data source)."""

    def __init__(self, rows: dict):
        self.rows = rows
        self.n = len(next(iter(rows.values())))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.rows.items()}

    def read_batch(self, indices) -> dict:
        return {k: v[np.asarray(indices)] for k, v in self.rows.items()}


def as_source(rows):
    """A dict of row arrays, or already a random-access source (shards.PackedRows)."""
    return Rows(rows) if isinstance(rows, dict) else rows


def dataset(rows, batch_size: int, seed: int, shuffle: bool = True, repeat: bool = True,
            process_index: int = 0, process_count: int = 1) -> grain.MapDataset:
    """The grain pipeline for one process; batch_size is the global batch.

    Shuffling and batching act on row indices, so every process computes the
    same global batches (the same shuffle, lazy and O(1) in memory) and then
    reads only its contiguous block of batch_size / process_count rows: the
    data a step sees does not depend on how many processes share it, and no
    host reads another host's rows.
    """
    if batch_size % process_count:
        raise ValueError(f"global batch {batch_size} is not divisible by {process_count} "
                         "processes")
    source = as_source(rows)
    local = batch_size // process_count
    lo = process_index * local
    ds = grain.MapDataset.range(len(source))
    if shuffle:
        ds = ds.shuffle(seed=seed)
    if repeat:
        ds = ds.repeat(None)
    ds = ds.batch(batch_size, drop_remainder=repeat)
    return ds.map(lambda idx: source.read_batch(np.asarray(idx)[lo:lo + local]))


def batch_iterator(rows, batch_size: int, seed: int, shuffle: bool = True,
                   repeat: bool = True, process_index: int = 0, process_count: int = 1,
                   prefetch_threads: int = 0):
    """A checkpointable iterator of this process's numpy batches (get_state / set_state)."""
    ds = dataset(rows, batch_size, seed, shuffle, repeat, process_index, process_count)
    options = grain.ReadOptions(num_threads=prefetch_threads, prefetch_buffer_size=
                                max(1, 2 * prefetch_threads)) if prefetch_threads else None
    return iter(ds.to_iter_dataset(options))


@dataclasses.dataclass
class PretrainingData:
    """What a pretraining run reads: the tokenizer and random-access row sources."""
    tokenizer: Tokenizer
    train: object                  # shards.PackedRows or Rows
    valid: object | None           # None: no held-out document exists
    token_counts: np.ndarray       # [V] token frequencies of the train split
    description: str


def _settings(data_cfg, valid_fraction: float) -> preparation.Settings:
    return preparation.Settings(bool(data_cfg.one_doc_per_line), int(data_cfg.max_line_chars),
                            float(valid_fraction))


def _prepared_text(spec: str, data_cfg, valid_fraction: float, tok_path: str, cache: str,
                   primary: bool, barrier: Callable[[str], None]) -> shards.PreparedCorpus:
    """Plain text (or 'stdlib') prepared once into cache/prepared-<plan fingerprint>."""
    s = _settings(data_cfg, valid_fraction)
    units, _ = preparation.plan_units(spec, s, flag="--config.data." + (
        "train_files" if spec in (data_cfg.train_files, preparation.STDLIB) else "valid_files"))
    fp = preparation.plan_fingerprint(spec, units, s, tokenizer_lib.load(tok_path).fingerprint())
    out = os.path.join(cache, f"prepared-{fp}")
    if primary and not shards.is_prepared(out):
        start = time.time()
        manifest = preparation.prepare(spec, out, s, tokenizer=tok_path,
                                   num_workers=min(len(units), os.cpu_count() or 1))
        logging.info("prepared %s into %s in %.1fs: %s", spec, out, time.time() - start,
                     preparation.summary(manifest))
    barrier(f"prepared-{fp}")
    return shards.PreparedCorpus(out)


def _workdir_tokenizer(data_cfg, workdir: str, vocab_size: int, primary: bool,
                       barrier: Callable[[str], None]) -> str:
    """data.tokenizer, or a sentencepiece model trained into WORKDIR/tokenizer (once)."""
    if data_cfg.tokenizer:
        return data_cfg.tokenizer
    path = preparation.tokenizer_path(os.path.join(workdir, "tokenizer"),
                                      data_cfg.get("tokenizer_type", "unigram"))
    if primary and not os.path.exists(path):
        held_out = 0.0 if data_cfg.valid_files else data_cfg.valid_fraction
        s = _settings(data_cfg, held_out)
        units, _ = preparation.plan_units(data_cfg.train_files or preparation.STDLIB, s,
                                      flag="--config.data.train_files")
        preparation.train_tokenizer(units, s, path, vocab_size, data_cfg.tokenizer_type,
                                    data_cfg.tokenizer_sample_chars,
                                    flag="--config.model.vocab_size")
    barrier("tokenizer")
    return path


def held_out_rows(data_cfg, tok: Tokenizer, valid_files: str = ""):
    """Held-out rows for evaluation: valid_files, else the run's own validation split.

    None when the run has no held-out document (never training text instead).
    """
    spec = valid_files or data_cfg.valid_files
    if shards.is_prepared(spec) or (not spec and shards.is_prepared(data_cfg.train_files)):
        c = shards.PreparedCorpus(spec or data_cfg.train_files)
        c.check_tokenizer(tok)
        return _rows(c, "valid" if c.documents("valid") or not spec else "train", data_cfg, tok)
    if spec:
        docs = list(corpus.read_documents(corpus.expand_paths(spec), data_cfg.one_doc_per_line,
                                          data_cfg.max_line_chars))
    else:
        docs = corpus.load_corpus(data_cfg)[1]
    return Rows(build_rows(docs, tok, data_cfg)) if docs else None


def _rows(c: shards.PreparedCorpus, split: str, data_cfg, tok: Tokenizer):
    if not c.documents(split):
        return None
    c.verify(split)
    return shards.PackedRows(c, split, data_cfg.seq_len, tok.cls_id, tok.sep_id, tok.pad_id,
                             data_cfg.restart_positions)


def open_pretraining_data(data_cfg, workdir: str, vocab_size: int, pair_task: str = "none",
                          seed: int = 0, primary: bool = True,
                          barrier: Callable[[str], None] = lambda name: None
                          ) -> PretrainingData:
    """The run's tokenizer and train/valid rows; the primary process prepares, all read.

    vocab_size: the size of a tokenizer trained here (none given, none prepared).
    """
    cache = data_cfg.cache_dir or os.path.join(workdir, "cache")
    if data_cfg.pack_mode == "pairs":
        return _pairs_in_memory(data_cfg, workdir, vocab_size, cache, pair_task, seed, primary,
                                barrier)
    if data_cfg.pack_mode != "documents":
        raise ValueError(f"Unknown pack mode {data_cfg.pack_mode!r}; valid names: documents, "
                         "pairs")
    if shards.is_prepared(data_cfg.train_files):
        train_c = shards.PreparedCorpus(data_cfg.train_files)
        train_c.require_records("text", "pretraining")  # before the workdir gets a tokenizer
        tok = tokenizer_lib.load(data_cfg.tokenizer or train_c.tokenizer_path)
        train_c.check_tokenizer(tok)
        if primary and not data_cfg.tokenizer:  # the workdir carries its tokenizer, as always
            preparation.install_tokenizer(train_c.tokenizer_path, workdir)
        barrier("tokenizer")
    else:
        tok_path = _workdir_tokenizer(data_cfg, workdir, vocab_size, primary, barrier)
        tok = tokenizer_lib.load(tok_path)
        held_out = 0.0 if data_cfg.valid_files else data_cfg.valid_fraction
        train_c = _prepared_text(data_cfg.train_files or preparation.STDLIB, data_cfg, held_out,
                                 tok_path, cache, primary, barrier)
    valid_c, valid_split = train_c, "valid"
    if data_cfg.valid_files:
        if shards.is_prepared(data_cfg.valid_files):
            valid_c = shards.PreparedCorpus(data_cfg.valid_files)
            valid_c.require_records("text", "pretraining")
            valid_c.check_tokenizer(tok)
            valid_split = "valid" if valid_c.documents("valid") else "train"
        else:
            valid_c = _prepared_text(data_cfg.valid_files, data_cfg, 1.0, train_c.tokenizer_path,
                                     cache, primary, barrier)
    train = _rows(train_c, "train", data_cfg, tok)
    if train is None:
        raise ValueError(f"{train_c.folder}: no training document "
                         f"({train_c.manifest['stats']})")
    valid = _rows(valid_c, valid_split, data_cfg, tok)
    description = (f"{train_c.documents('train'):,} train documents from {train_c.folder}; "
                   + (f"{valid_c.documents(valid_split):,} held-out documents "
                      f"({valid_c.folder}, {valid_split} split)" if valid else
                      "no held-out document"))
    return PretrainingData(tok, train, valid, train_c.token_counts(), description)


def _pairs_in_memory(data_cfg, workdir, vocab_size, cache, pair_task, seed, primary, barrier):
    """NSP/SOP rows, packed in memory from plain text (prepared corpora hold no lines)."""
    if shards.is_prepared(data_cfg.train_files) or shards.is_prepared(data_cfg.valid_files):
        raise ValueError("data.pack_mode='pairs' (NSP/SOP) reads plain text; a prepared corpus "
                         "keeps documents, not their lines. Use pack_mode='documents' with a "
                         "prepared corpus, or name the text files")
    train_docs, valid_docs, stats = corpus.load_corpus(data_cfg)
    logging.info("corpus: %d train / %d valid documents (%s)", len(train_docs), len(valid_docs),
                 stats.summary())
    tok = tokenizer_lib.load(_workdir_tokenizer(data_cfg, workdir, vocab_size, primary, barrier))
    train = build_rows(train_docs, tok, data_cfg, cache, pair_task, seed)
    valid = build_rows(valid_docs, tok, data_cfg, cache, pair_task, seed + 1) if valid_docs \
        else None
    counts = np.bincount(train["input_ids"][train["attention_mask"].astype(bool)],
                         minlength=tok.vocab_size)
    return PretrainingData(tok, Rows(train), Rows(valid) if valid else None, counts,
                           f"{len(train_docs):,} train / {len(valid_docs):,} held-out documents "
                           "(pairs, in memory)")
