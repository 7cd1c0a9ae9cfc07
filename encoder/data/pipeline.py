"""From text to batches: prepared corpora, packing, shuffle, repeat, shard, batch.

`open_pretraining_data` is what a pretraining run reads. Documents mode (the
default) always trains from a prepared corpus (encoder/data/preparation.py): a
folder named in data.train_files is used as it is; plain text and the
embedded corpus are prepared once into the run's cache (keyed by the files,
their sizes and dates, the settings and the tokenizer) and then read the same
way, as random-access packed rows (shards.PackedRows). Pairs mode (NSP/SOP)
still packs in memory from plain text (`build_rows`, with a token cache).
A mixture (data.sources, encoder/data/mixture.py) prepares each source the same way,
once, into its own folder (so packed rows never straddle sources), with the run's one
tokenizer (data.tokenizer, a prepared source's, or one trained on an equal share of every
declared source), and reads them as a `mixture.Mixture`: `batch_iterator` then draws its
rows by the mixture's weights, with the same interface and checkpointed state.
`batch_iterator` wraps any other rows in a grain MapDataset pipeline:

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
import json
import os
import time
from typing import Callable

import grain
import numpy as np
from absl import logging

from encoder.data import corpus, mixture, overlap, packing, preparation, shards
from encoder.data import tokenizer as tokenizer_lib
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


def index_order(n: int, seed: int) -> grain.MapDataset:
    """A single source's stream order as `dataset` reads it: element r is the row the
    stream's r-th read is (shuffled with seed, repeated), computed per index."""
    return grain.MapDataset.range(n).shuffle(seed=seed).repeat(None)


def batch_iterator(rows, batch_size: int, seed: int, shuffle: bool = True,
                   repeat: bool = True, process_index: int = 0, process_count: int = 1,
                   prefetch_threads: int = 0):
    """A checkpointable iterator of this process's numpy batches (get_state / set_state);
    a mixture's rows are drawn by its weights (mixture.MixtureIterator)."""
    if isinstance(rows, mixture.Mixture):
        if not (shuffle and repeat):
            raise ValueError("a mixture is always drawn by its weights (shuffle and repeat); "
                             "read one source's rows for an ordered pass")
        return rows.iterator(batch_size, seed, process_index, process_count)
    ds = dataset(rows, batch_size, seed, shuffle, repeat, process_index, process_count)
    options = grain.ReadOptions(num_threads=prefetch_threads, prefetch_buffer_size=
                                max(1, 2 * prefetch_threads)) if prefetch_threads else None
    return iter(ds.to_iter_dataset(options))


@dataclasses.dataclass
class PretrainingData:
    """What a pretraining run reads: the tokenizer and random-access row sources."""
    tokenizer: Tokenizer
    train: object                  # shards.PackedRows, Rows, or a mixture.Mixture
    valid: object | None           # None: no held-out document exists
    token_counts: np.ndarray       # [V] token frequencies of the train split
    description: str


def _settings(data_cfg, valid_fraction: float) -> preparation.Settings:
    return preparation.Settings(bool(data_cfg.one_doc_per_line), int(data_cfg.max_line_chars),
                            float(valid_fraction), format=data_cfg.get("format", ""),
                            text_field=data_cfg.get("text_field", "text"))


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
    c = shards.PreparedCorpus(out)  # what was skipped, said and checked at every start
    preparation.say_input(c.manifest, not primary, data_cfg.get("max_skipped_share", 0.01),
                          "--config.data.max_skipped_share")
    return c


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


def held_out_rows(data_cfg, tok: Tokenizer, valid_files: str = "", workdir: str = ""):
    """Held-out rows for evaluation: valid_files, else the run's own validation split (a
    mixture's: its sources' held-out splits interleaved by share, read from the prepared
    folders in data.cache_dir or WORKDIR/cache).

    None when the run has no held-out document (never training text instead).
    """
    spec = valid_files or data_cfg.valid_files
    mix = None if spec else mixture.parse(data_cfg)
    if mix is not None:
        cache = data_cfg.cache_dir or (os.path.join(workdir, "cache") if workdir else "")
        return _mixture_held_out(mix, data_cfg, tok, cache)
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

    vocab_size: the size of a tokenizer trained here (none given, none prepared). The
    primary process records what each stream reads in WORKDIR/data_order.json
    (`python -m encoder data` rebuilds any step's rows from it).
    """
    cache = data_cfg.cache_dir or os.path.join(workdir, "cache")
    spec = mixture.parse(data_cfg)
    if data_cfg.pack_mode == "pairs":
        if spec is not None:
            raise ValueError("data.pack_mode='pairs' (NSP/SOP) packs one corpus's lines in "
                             "memory; a mixture (data.sources) is packed by documents "
                             "(pack_mode='documents')")
        return _pairs_in_memory(data_cfg, workdir, vocab_size, cache, pair_task, seed, primary,
                                barrier)
    if data_cfg.pack_mode != "documents":
        raise ValueError(f"Unknown pack mode {data_cfg.pack_mode!r}; valid names: documents, "
                         "pairs")
    if spec is not None:
        return _open_mixture(spec, data_cfg, workdir, vocab_size, cache, primary, barrier)
    if shards.is_prepared(data_cfg.train_files):
        train_c = shards.PreparedCorpus(data_cfg.train_files)
        train_c.require_records("text", "pretraining")  # before the workdir gets a tokenizer
        # what its prepare skipped, said again (prepare said it too; no refusal here: the
        # folder is the input the user chose, reviewed when it was prepared)
        preparation.say_input(train_c.manifest, not primary)
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
    valid_c, valid_split = _valid_corpus(data_cfg, tok, train_c.tokenizer_path, cache, primary,
                                         barrier, (train_c, "valid"))
    _check_held_out(data_cfg, [train_c], [(valid_c, valid_split)], cache, primary)
    train = _rows(train_c, "train", data_cfg, tok)
    if train is None:
        raise ValueError(f"{train_c.folder}: no training document "
                         f"({train_c.manifest['stats']})")
    valid = _rows(valid_c, valid_split, data_cfg, tok)
    description = (f"{train_c.documents('train'):,} train documents from {train_c.folder}; "
                   + (f"{valid_c.documents(valid_split):,} held-out documents "
                      f"({valid_c.folder}, {valid_split} split)" if valid else
                      "no held-out document"))
    if primary:
        record_stream(workdir, data_cfg, {"kind": "rows", "sources": [
            _recorded("train", train_c, train, 1.0)]})
    return PretrainingData(tok, train, valid, train_c.token_counts(), description)


def _check_held_out(data_cfg, trained: list, held: list, cache: str, primary: bool) -> None:
    """Held-out documents ((corpus, split) pairs) that are documents of the trained corpora'
    train splits, by content (encoder/data/overlap.py): refused past its share, said below."""
    held_name = (f"data.valid_files={data_cfg.valid_files}" if data_cfg.valid_files else
                 "the held-out split of " + ", ".join(c.folder for c, _ in held))
    train_name = (data_cfg.train_files or ("the mixture's sources" if len(trained) > 1 else
                                           "the embedded corpus"))
    overlap.check_prepared([(c, "train") for c in trained], held, held_name, train_name, cache,
                           data_cfg.get("max_held_out_overlap", overlap.MAX_SHARE),
                           "--config.data.max_held_out_overlap", quiet=not primary)
    overlap.say(overlap.unit_mismatch([c.manifest for c, _ in held],
                                      [c.manifest for c in trained], held_name, train_name),
                quiet=not primary)


def _valid_corpus(data_cfg, tok: Tokenizer, tok_path: str, cache: str, primary: bool,
                  barrier: Callable[[str], None], own):
    """(corpus, split) of data.valid_files (prepared, or text prepared here), else `own`."""
    if not data_cfg.valid_files:
        return own
    if shards.is_prepared(data_cfg.valid_files):
        valid_c = shards.PreparedCorpus(data_cfg.valid_files)
        valid_c.require_records("text", "pretraining")
        valid_c.check_tokenizer(tok)
        return valid_c, "valid" if valid_c.documents("valid") else "train"
    return _prepared_text(data_cfg.valid_files, data_cfg, 1.0, tok_path, cache, primary,
                          barrier), "valid"


# ---------------------------------------------------------------- mixtures

def _named(source: mixture.Source, e: Exception) -> Exception:
    """e, its message led by the source it concerns (the same type where it allows)."""
    where = f"data.sources.{source.name} ({source.files or 'the embedded corpus'})"
    try:
        return type(e)(f"{where}: {e}")
    except TypeError:
        return ValueError(f"{where}: {e}")


def _source_config(source: mixture.Source, data_cfg):
    """The data section as one source's own: its files as train_files, its format and text
    field where it names them (the section's otherwise)."""
    import ml_collections
    view = ml_collections.ConfigDict(mixture.plain(data_cfg))
    view.update(train_files=source.files or preparation.STDLIB, valid_files="", sources={},
                temperature=0.0)
    if source.format:
        view.format = source.format
    if source.text_field:
        view.text_field = source.text_field
    return view


def _tokenizer_sample(spec: mixture.Spec, data_cfg, held_out: float, cache: str) -> str:
    """A text file of documents sampled from every declared source, an equal share of
    data.tokenizer_sample_chars each (weight 0 included: a source a later phase draws is
    tokenized by this run's tokenizer too), held-out documents left out."""
    path = os.path.join(cache, f"tokenizer-sample-{spec.key()}.txt")
    share = max(1, int(data_cfg.tokenizer_sample_chars) // len(spec.sources))
    os.makedirs(cache, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for source in spec.sources:
            view = _source_config(source, data_cfg)
            try:
                s = _settings(view, held_out)
                units, _ = preparation.plan_units(view.train_files, s,
                                                  flag=f"data.sources.{source.name}.files")
                for doc in preparation.sample_documents(units, s, share):
                    f.write(doc + "\n\n")  # blank-line documents, as prepare reads them
            except (ValueError, OSError) as e:
                raise _named(source, e) from None
    os.replace(tmp, path)
    return path


def _mixture_tokenizer(spec: mixture.Spec, data_cfg, workdir: str, vocab_size: int,
                       cache: str, primary: bool, barrier: Callable[[str], None]) -> str:
    """data.tokenizer; else a prepared source's (installed into the workdir, as a prepared
    train_files' is); else one trained into WORKDIR/tokenizer on every source (once)."""
    if data_cfg.tokenizer:
        return data_cfg.tokenizer
    prepared = [s for s in spec.sources if shards.is_prepared(s.files)]
    if prepared:
        c = shards.PreparedCorpus(prepared[0].files)
        if primary:
            preparation.install_tokenizer(c.tokenizer_path, workdir)
        barrier("tokenizer")
        return c.tokenizer_path
    path = preparation.tokenizer_path(os.path.join(workdir, "tokenizer"),
                                      data_cfg.get("tokenizer_type", "unigram"))
    if primary and not os.path.exists(path):
        held_out = 0.0 if data_cfg.valid_files else data_cfg.valid_fraction
        sample = _tokenizer_sample(spec, data_cfg, held_out, cache)
        s = preparation.Settings(valid_fraction=0.0)
        units, _ = preparation.plan_units(sample, s, flag="data.sources")
        preparation.train_tokenizer(units, s, path, vocab_size, data_cfg.tokenizer_type,
                                    data_cfg.tokenizer_sample_chars,
                                    flag="--config.model.vocab_size")
    barrier("tokenizer")
    return path


def _source_corpus(source: mixture.Source, data_cfg, held_out: float, tok_path: str,
                   tok: Tokenizer, cache: str, primary: bool,
                   barrier: Callable[[str], None]) -> shards.PreparedCorpus:
    """A source's prepared folder: its files as they are when prepared (their tokenizer
    must be the run's), else prepared once into the cache as plain train_files are."""
    try:
        if shards.is_prepared(source.files):
            c = shards.PreparedCorpus(source.files)
            c.require_records("text", "pretraining")
            c.check_tokenizer(tok)
            return c
        view = _source_config(source, data_cfg)
        return _prepared_text(view.train_files, view, held_out, tok_path, cache, primary,
                              barrier)
    except (ValueError, OSError) as e:
        raise _named(source, e) from None


def _open_mixture(spec: mixture.Spec, data_cfg, workdir: str, vocab_size: int, cache: str,
                  primary: bool, barrier: Callable[[str], None]) -> PretrainingData:
    """Each drawn source prepared into its own folder, read as one mixture; the held-out
    rows are every source's held-out split interleaved by the mixture's probabilities
    (or data.valid_files)."""
    tok_path = _mixture_tokenizer(spec, data_cfg, workdir, vocab_size, cache, primary, barrier)
    tok = tokenizer_lib.load(tok_path)
    held_out = 0.0 if data_cfg.valid_files else data_cfg.valid_fraction
    corpora, train, valid, tokens = [], [], [], []
    for source in spec.sources:
        if source.weight <= 0:  # not drawn in this phase: not prepared for it
            corpora.append(None), train.append(None), valid.append(None), tokens.append(0)
            continue
        c = _source_corpus(source, data_cfg, held_out, tok_path, tok, cache, primary, barrier)
        corpora.append(c)
        train.append(_rows(c, "train", data_cfg, tok))
        valid.append(None if data_cfg.valid_files else _rows(c, "valid", data_cfg, tok))
        tokens.append(sum(sh.tokens for sh in c.shards["train"]))
    try:
        probs = mixture.probabilities(spec.weights, tokens, spec.temperature)
        mix = mixture.Mixture(spec.names, tuple(train), probs, spec.on_exhausted,
                              int(data_cfg.seq_len), tuple(tokens))
    except ValueError as e:
        sizes = ", ".join(f"{n}: {t:,} tokens" for n, t in zip(spec.names, tokens))
        raise ValueError(f"{e} ({sizes})") from None
    drawn = [c for c in corpora if c is not None]
    if data_cfg.valid_files:
        valid_c, split = _valid_corpus(data_cfg, tok, tok_path, cache, primary, barrier, None)
        _check_held_out(data_cfg, drawn, [(valid_c, split)], cache, primary)
        held = _rows(valid_c, split, data_cfg, tok)
        held_text = (f"{valid_c.documents(split):,} held-out documents ({valid_c.folder}, "
                     f"{split} split)" if held else "no held-out document")
    elif any(v is not None and len(v) for v in valid):
        # every source's held-out documents against every source's training documents
        _check_held_out(data_cfg, drawn, [(c, "valid") for c in drawn], cache, primary)
        held = mixture.Interleaved(spec.names, valid, probs)
        held_text = (f"{len(held):,} held-out rows of {', '.join(held.names)}, interleaved by "
                     "the mixture's shares")
    else:
        held, held_text = None, "no held-out document"
    counts = sum(c.token_counts() for c in corpora if c is not None)
    if primary:
        record_stream(workdir, data_cfg, {
            "kind": "mixture", "on_exhausted": spec.on_exhausted,
            "temperature": spec.temperature, "sources": [
                _recorded(n, c, r, float(p)) for n, c, r, p in
                zip(spec.names, corpora, train, probs) if c is not None]})
    return PretrainingData(tok, mix, held, counts, _describe_mixture(spec, mix, corpora)
                           + "; " + held_text)


def _mixture_held_out(spec: mixture.Spec, data_cfg, tok: Tokenizer, cache: str):
    """A trained mixture's held-out rows, from the folders its run prepared (none is
    prepared here: a missing one is named)."""
    if not cache:
        raise ValueError("a mixture's held-out rows are read from its prepared sources: give "
                         "the run's workdir (its cache) or data.cache_dir, or "
                         "data.valid_files")
    corpora, tokens = [], []
    for source in spec.sources:
        if source.weight <= 0:
            corpora.append(None), tokens.append(0)
            continue
        try:
            if shards.is_prepared(source.files):
                c = shards.PreparedCorpus(source.files)
            else:
                view = _source_config(source, data_cfg)
                s = _settings(view, data_cfg.valid_fraction)
                units, _ = preparation.plan_units(view.train_files, s,
                                                  flag=f"data.sources.{source.name}.files")
                fp = preparation.plan_fingerprint(view.train_files, units, s, tok.fingerprint())
                c = shards.PreparedCorpus(os.path.join(cache, f"prepared-{fp}"))
            c.check_tokenizer(tok)
        except (ValueError, OSError) as e:
            raise _named(source, e) from None
        corpora.append(c)
        tokens.append(sum(sh.tokens for sh in c.shards["train"]))
    probs = mixture.probabilities(spec.weights, tokens, spec.temperature)
    valid = [None if c is None else _rows(c, "valid", data_cfg, tok) for c in corpora]
    if not any(v is not None for v in valid):
        return None
    return mixture.Interleaved(spec.names, valid, probs)


def _describe_mixture(spec: mixture.Spec, mix: mixture.Mixture, corpora) -> str:
    parts = []
    for source, c, p, n, t in zip(spec.sources, corpora, mix.probs, mix.sizes, mix.tokens):
        if c is None:
            parts.append(f"{source.name} 0% (weight 0)")
            continue
        parts.append(f"{source.name} {100 * p:.1f}% ({n:,} rows, {t:,} tokens, {c.folder}"
                     + (", the embedded corpus: no files given" if not source.files else "")
                     + ")")
    how = (f"weights x tokens^{spec.temperature:g}" if spec.temperature else "weights as given")
    return (f"a mixture of {len(spec.sources)} sources ({how}; a dry source: "
            f"{spec.on_exhausted}): " + ", ".join(parts))


# ---------------------------------------------------------------- the data order on record

DATA_ORDER = "data_order.json"  # WORKDIR/: per data stream, the prepared folders it reads
KEY_EXCLUDES = ("cache_dir",)   # a restart may move the cache; the stream stays the same


def reading_key(data_cfg) -> str:
    """The data section's fields that decide what a stream reads, as a short hash."""
    fields = {k: v for k, v in mixture.plain(data_cfg).items() if k not in KEY_EXCLUDES}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def _recorded(name: str, c: shards.PreparedCorpus, rows, probability: float) -> dict:
    return {"name": name, "folder": os.path.abspath(c.folder), "split": "train",
            "rows": len(rows) if rows is not None else 0,
            "tokens": sum(sh.tokens for sh in c.shards["train"]),
            "probability": probability}


def record_stream(workdir: str, data_cfg, entry: dict) -> None:
    """WORKDIR/data_order.json[streams][reading_key(data_cfg)] = entry (atomic)."""
    path = os.path.join(workdir, DATA_ORDER)
    record = read_data_order(workdir) or {"streams": {}}
    entry = {**entry, "seq_len": int(data_cfg.seq_len),
             "restart_positions": bool(data_cfg.restart_positions)}
    if record["streams"].get(reading_key(data_cfg)) == entry:
        return
    record["streams"][reading_key(data_cfg)] = entry
    os.makedirs(workdir, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, path)


def read_data_order(workdir: str) -> dict | None:
    try:
        with open(os.path.join(workdir, DATA_ORDER)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _pairs_in_memory(data_cfg, workdir, vocab_size, cache, pair_task, seed, primary, barrier):
    """NSP/SOP rows, packed in memory from plain text (prepared corpora hold no lines)."""
    if shards.is_prepared(data_cfg.train_files) or shards.is_prepared(data_cfg.valid_files):
        raise ValueError("data.pack_mode='pairs' (NSP/SOP) reads plain text; a prepared corpus "
                         "keeps documents, not their lines. Use pack_mode='documents' with a "
                         "prepared corpus, or name the text files")
    train_docs, valid_docs, stats = corpus.load_corpus(data_cfg)
    if valid_docs:
        overlap.check_texts(valid_docs, train_docs, f"data.valid_files={data_cfg.valid_files}"
                            if data_cfg.valid_files else "the held-out split",
                            data_cfg.train_files or "the embedded corpus",
                            data_cfg.get("max_held_out_overlap", overlap.MAX_SHARE),
                            "--config.data.max_held_out_overlap", quiet=not primary)
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
