"""Text in, a prepared corpus out: tokenize once, in parallel, into ArrayRecord shards.

    python -m encoder prepare --input=FILES --out=DIR [--tokenizer=PATH | --vocab_size=N]
        [--num_workers=N] [--machine_index=I --num_machines=M] [--engine=local|beam]
        [--records=pairs --query_prefix=... --passage_prefix=...]

--records=pairs prepares JSONL retrieval pairs for the contrastive task instead of text
(encoder/data/pairs.py: the record, and the rows read back).

FILES are what `data.train_files` takes (comma-separated files, folders,
globs; `stdlib` for the embedded corpus), in any format formats.py reads (text,
compressed text, JSONL, Parquet, Arrow, MDS, token ids; detected per file or stated
with --format, the text in --text_field). The job is cut into units of about
--shard_mb MB of text, each cut placed at a document start (or a row group, record
batch, MDS shard; a compressed file is one piece), so every unit is independent: a
unit reads its pieces as a stream, tokenizes (token ids are checked against the
tokenizer's vocabulary and written as they are), splits
train/valid by content hash (corpus.is_validation) and writes one shard per
split plus a `units/NNNNN.json` marker that is the unit's proof of completion.
Units run in worker processes (--num_workers), on several machines (unit i
goes to machine i % M) or as a Beam pipeline (prepare_beam.py); whoever
finds every marker present writes `manifest.json`. A killed prepare started
again redoes only the units without a marker, so no document is lost or
written twice. Memory is bounded by one unit's tokenize buffer per worker,
whatever the corpus size. See shards.py for the format.

Without --tokenizer a sentencepiece model is trained first, on documents
sampled evenly over the whole corpus (windows spread across its bytes,
validation documents left out).
"""
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import sys
import time
from typing import Iterator

import numpy as np

from encoder import errors
from encoder.data import corpus, formats, pairs, shards, tokenizer as tokenizer_lib

STDLIB = "stdlib"           # --input naming the embedded corpus
TOKENIZE_CHUNK = 256        # documents per encode_batch call
# 64 records per compressed chunk: a random read then costs ~20 us whatever the shard's
# size; one record per chunk costs O(records in the file) per read (~340 us at 119k
# records) and triples the file size (BUILD_NOTES.md).
WRITER_OPTIONS = "group_size:64"


@dataclasses.dataclass(frozen=True)
class Piece:
    """Bytes [start, end) of a lines file (a compressed one whole), blocks [start, end) of a
    table, MDS folder or token array (formats.py: row groups, batches, shards, rows), or
    documents [start, end) of the embedded corpus."""
    path: str
    start: int
    end: int
    format: str = "text"     # formats.READERS' key
    compression: str = ""
    size: int = 0            # a block piece's bytes (a byte range's are end - start)
    ids: bool = False        # token ids, not text

    def source(self) -> formats.Source:
        return formats.Source(self.path, self.format, self.compression, self.ids)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything that decides a prepared corpus's content (its plan fingerprint)."""
    one_doc_per_line: bool = False
    max_line_chars: int = 100_000
    valid_fraction: float = 0.05
    shard_mb: float = 16.0
    records: str = "text"       # "pairs": retrieval pairs (encoder/data/pairs.py), a line each
    query_prefix: str = ""      # pairs: put before each query / passage when tokenized
    passage_prefix: str = ""
    format: str = ""            # formats.FORMAT_NAMES; "": each source's own (detected)
    text_field: str = "text"    # the JSONL field / table or MDS column read


PAIR_FIELDS = ("records", "query_prefix", "passage_prefix")
FORMAT_DEFAULTS = {"format": "", "text_field": "text"}


def settings_dict(s: Settings) -> dict:
    """The settings a plan and manifest record; a text corpus's without the pair fields and
    the format fields at their defaults, so a corpus prepared before those fields existed
    keeps its plan."""
    d = dataclasses.asdict(s)
    if s.records == "text":
        for k in PAIR_FIELDS:
            d.pop(k)
    for k, v in FORMAT_DEFAULTS.items():
        if d[k] == v:
            d.pop(k)
    return d


def read_options(s: Settings, flag: str = "--input") -> formats.Options:
    """How formats.py reads the input under these settings (flag: how the user named it)."""
    pair_lines = s.records == "pairs"  # JSON lines read as lines: pairs.py parses them
    return formats.Options(s.one_doc_per_line, s.max_line_chars, s.text_field,
                           "text" if pair_lines else s.format, json_as_text=pair_lines,
                           flag=flag)


# ---------------------------------------------------------------- planning

def plan_units(spec: str, s: Settings, flag: str = "--input"
               ) -> tuple[list[tuple[Piece, ...]], corpus.CorpusStats]:
    """Cuts the input into units of about s.shard_mb MB, each cut at a document start of a
    lines file or between the blocks of the other formats (formats.py).

    flag: how the caller's user named `spec` (errors say it)."""
    budget = max(1, int(s.shard_mb * 2**20))
    stats = corpus.CorpusStats()
    units, current, used = [], [], 0
    if spec == STDLIB:
        docs = _stdlib()
        i0 = 0
        for i, d in enumerate(docs):
            used += len(d.encode("utf-8"))
            if used >= budget:
                units.append((Piece(STDLIB, i0, i + 1),))
                i0, used = i + 1, 0
        if i0 < len(docs):
            units.append((Piece(STDLIB, i0, len(docs)),))
        stats.files = 1
        return units, stats
    opts = read_options(s, flag)
    for src in formats.sources_of(corpus.expand_paths(spec), opts, stats):
        stats.files += 1
        if not formats.splittable(src):  # blocks: row groups, batches, shards, a whole stream
            for start, end, nbytes in formats.READERS[src.format].blocks(src, opts):
                last = current[-1] if current else None
                if last and last.path == src.path and last.end == start:
                    current[-1] = dataclasses.replace(last, end=end, size=last.size + nbytes)
                else:
                    current.append(_piece(src, start, end, nbytes))
                used += nbytes
                if used >= budget:
                    units.append(tuple(current))
                    current, used = [], 0
            continue
        path = src.path
        size, pos = os.path.getsize(path), 0
        with open(path, "rb") as f:
            while size - pos > budget - used:
                cut = formats.cut(src, f, pos + budget - used, pos + 2 * budget, opts)
                if cut is None or cut >= size:
                    break
                if cut > pos:
                    current.append(_piece(src, pos, cut))
                units.append(tuple(current))
                current, used, pos = [], 0, cut
        current.append(_piece(src, pos, size))
        used += size - pos
        if used >= budget:
            units.append(tuple(current))
            current, used = [], 0
    if current:
        units.append(tuple(current))
    if not units:
        raise shards.CorpusError(f"no readable text in {flag}={spec!r} ({stats.summary()})")
    return units, stats


def _piece(src: formats.Source, start: int, end: int, size: int = 0) -> Piece:
    return Piece(src.path, start, end, src.format, src.compression, size, src.ids)


_STDLIB_DOCS: list[str] = []


def _stdlib() -> list[str]:
    if not _STDLIB_DOCS:
        _STDLIB_DOCS.extend(corpus.stdlib_documents())
    return _STDLIB_DOCS


def piece_bytes(p: Piece) -> int:
    return p.size or p.end - p.start


def unit_bytes(unit) -> int:
    return sum(len(d.encode("utf-8")) for p in unit if p.path == STDLIB
               for d in _stdlib()[p.start:p.end]) + sum(
        piece_bytes(p) for p in unit if p.path != STDLIB)


def read_unit(unit, s: Settings, stats: corpus.CorpusStats,
              vocab_size: int | None = None) -> Iterator:
    """The unit's documents: str, or arrays of token ids (checked below vocab_size when
    given: ids are written as they are, so an id from another tokenizer is refused)."""
    opts = read_options(s)
    for p in unit:
        if p.path == STDLIB:
            for d in _stdlib()[p.start:p.end]:
                stats.documents += 1
                yield d
        elif p.ids and vocab_size is not None:
            for i, ids in enumerate(formats.read(p.source(), opts, stats, p.start, p.end)):
                formats.check_ids(ids, vocab_size, f"{p.path} (blocks {p.start}-{p.end}, "
                                                   f"document {i})")
                yield ids
        else:
            yield from formats.read(p.source(), opts, stats, p.start, p.end)


def _stat(path: str) -> tuple[int, int]:
    """(date, size) of an input: an MDS folder's by its index.json."""
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "index.json")):
        path = os.path.join(path, "index.json")
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size


def plan_fingerprint(spec: str, units, s: Settings, tok_fingerprint: str) -> str:
    h = hashlib.sha256(json.dumps([settings_dict(s), tok_fingerprint]).encode())
    for unit in units:
        for p in unit:
            st = _stat(p.path) if p.path != STDLIB else (sys.version,)
            # a plain text piece as before formats existed, so its cached corpus is kept
            kind = [] if (p.format, p.compression) == ("text", "") else [p.format,
                                                                         p.compression]
            h.update(json.dumps([os.path.abspath(p.path), p.start, p.end, *st, *kind]).encode())
    return h.hexdigest()[:20]


# ---------------------------------------------------------------- the tokenizer

def sample_documents(units, s: Settings, sample_chars: int, seed: int = 0) -> Iterator[str]:
    """Training documents spread evenly over the corpus, about sample_chars in all.

    The corpus's bytes are cut into equal strata; from a random point of each
    stratum whole documents are read (validation documents skipped) until the
    stratum's share is reached. A corpus within the budget is read whole. Token ids
    are never a tokenizer's sample.
    """
    pieces = [p for unit in units for p in unit if not p.ids]
    total = sum(unit_bytes((p,)) for p in pieces)
    keep = lambda d: not corpus.is_validation(d, s.valid_fraction)  # noqa: E731
    if total <= sample_chars:
        for unit in units:
            yield from filter(keep, (d for d in read_unit(tuple(p for p in unit if not p.ids),
                                                          s, corpus.CorpusStats())))
        return
    rng = random.Random(seed)
    n = max(1, min(4096, sample_chars // 16384))
    share, owed = sample_chars / n, 0.0
    starts = np.cumsum([0] + [unit_bytes((p,)) for p in pieces])
    opts = read_options(s)
    cursors: dict = {}
    for w in range(n):
        at = int((w + rng.random() * 0.5) * total / n)
        k = int(np.searchsorted(starts, at, side="right")) - 1
        p = pieces[k]
        offset = p.start + at - int(starts[k])
        if p.path == STDLIB:  # offsets count bytes; find the document there
            sizes = np.cumsum([len(d.encode("utf-8")) for d in _stdlib()[p.start:p.end]])
            first = p.start + int(np.searchsorted(sizes, offset - p.start, side="right"))
            docs = iter(_stdlib()[first:p.end])
        elif formats.splittable(p.source()):
            with open(p.path, "rb") as f:
                begin = formats.cut(p.source(), f, offset, p.end, opts) if offset > 0 else 0
            if begin is None:
                owed += share
                continue
            docs = formats.read(p.source(), opts, corpus.CorpusStats(), begin,
                                os.path.getsize(p.path))
        else:  # a compressed stream or blocks: one forward cursor per piece
            cursor = cursors.setdefault(p, _Cursor(p, opts))
            docs = cursor.docs_from(at - int(starts[k]))
        got, want = 0, share + owed
        for d in filter(keep, docs):
            yield d
            got += len(d)
            if got >= want:
                break
        owed = max(0.0, want - got)  # a window cut short by a file's end: the next reads more


class _Cursor:
    """Reads one unsplittable piece (a compressed stream, or blocks of a table, an MDS
    folder) at byte positions that only grow, as a sample's windows come: it jumps to the
    block holding a position and skips documents up to it, never rereading a stream."""

    def __init__(self, p: Piece, opts: formats.Options):
        self.p, self.opts = p, opts
        src = p.source()
        self.blocks = [(p.start, p.end, piece_bytes(p))] if src.compression else \
            [b for b in formats.READERS[src.format].blocks(src, opts)
             if p.start <= b[0] < p.end]
        self.starts = np.cumsum([0] + [b[2] for b in self.blocks])
        self.block, self.pos, self.it = -1, 0, iter(())

    def _open(self, k: int):
        src, base = self.p.source(), int(self.starts[k])
        if src.compression:  # positions in decompressed bytes, as the piece's size
            return formats.stream_positions(src, self.opts)
        pos = base

        def positioned():
            nonlocal pos
            for d in formats.read(src, self.opts, corpus.CorpusStats(), self.blocks[k][0],
                                  self.p.end):
                pos += len(d)
                yield pos, d
        return positioned()

    def docs_from(self, offset: int) -> Iterator[str]:
        k = max(0, int(np.searchsorted(self.starts, offset, side="right")) - 1)
        jump = not self.p.source().compression and int(self.starts[k]) > self.pos
        if self.block < 0 or jump:  # a later block: start there (blocks read independently)
            self.block, self.pos, self.it = k, int(self.starts[k]), self._open(k)
        for pos, d in self.it:
            self.pos = pos
            if pos >= offset:
                yield d


# sentencepiece's refusal of a vocabulary smaller than the sample's characters (+ its own
# pieces): "Vocabulary size is smaller than required_chars. 30 vs 93."
_TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def tokenizer_path(folder: str, tokenizer_type: str) -> str:
    """Where a tokenizer of this type trained into folder is read from (sp.model, or the
    tokenizer.json of a byte-level BPE)."""
    return os.path.join(folder, tokenizer_lib.tokenizer_type(tokenizer_type).filename)


def train_tokenizer(units, s: Settings, model_path: str, vocab_size: int,
                    tokenizer_type: str = "unigram", sample_chars: int = 4_000_000,
                    flag: str = "--vocab_size") -> str:
    """Trains OUT's sentencepiece model on a sample of the units; a vocabulary sentencepiece
    refuses is one line naming `flag` (the command's vocabulary flag) and the least size
    that holds the sample's characters."""
    ids = [p.path for unit in units for p in unit if p.ids]
    if ids:  # a tokenizer trained here is not the one that made them
        given = "--config.data.tokenizer" if flag.startswith("--config.") else "--tokenizer"
        raise errors.UsageError(f"the input holds token ids ({ids[0]}): a tokenizer trained "
                                f"here would not be the one that made them; give "
                                f"{given}=PATH, the tokenizer that did")
    prefix = model_path[:-len(".model")] if model_path.endswith(".model") else model_path
    folder = os.path.dirname(os.path.abspath(model_path))
    new_folder = not os.path.exists(folder)
    if tokenizer_lib.tokenizer_type(tokenizer_type).filename != "sp.model":  # byte_bpe
        tokenizer_lib.train_tokenizer(tokenizer_type, sample_documents(units, s, sample_chars),
                                      folder, vocab_size, sample_chars)
        return model_path
    try:
        path = tokenizer_lib.train_sentencepiece(sample_documents(units, s, sample_chars),
                                                 prefix, vocab_size, tokenizer_type,
                                                 sample_chars)
        got = tokenizer_lib.load(path).vocab_size
        if got < vocab_size:  # sentencepiece stops where the sample has no more pieces
            print(f"tokenizer: {got:,} pieces, fewer than {flag}={vocab_size}: the training "
                  f"sample (at most {sample_chars:,} characters) holds no more", flush=True)
        return path
    except RuntimeError as e:  # sentencepiece's trainer reports every refusal so
        if new_folder and os.path.isdir(folder) and not os.listdir(folder):
            os.rmdir(folder)  # the folder train_sentencepiece made for it, left empty
        text = errors.one_line(str(e))
        m = _TOO_SMALL.search(text)
        if m:
            raise errors.UsageError(
                f"{flag}={vocab_size}: the tokenizer needs at least {m.group(2)} pieces (the "
                "characters of the training sample, 99.95% coverage, plus its special pieces); "
                f"give {flag}={m.group(2)} or more") from None
        raise errors.UsageError(f"{flag}={vocab_size}: sentencepiece could not train a "
                                f"tokenizer: {text.split('] ', 1)[-1]}") from None
    except ValueError as e:
        if "empty corpus" not in str(e):
            raise
        stats = corpus.CorpusStats()
        for unit in units:
            for _ in read_unit(unit, s, stats):
                pass
        raise shards.CorpusError(f"no training document to train a tokenizer on "
                                 f"(valid_fraction={s.valid_fraction}: {stats.summary()})"
                                 ) from None


def install_tokenizer(source: str, out: str) -> str:
    """Copies a .model file or a tokenizer.json folder (or its tokenizer.json) into
    OUT/tokenizer; returns its path there."""
    dest_dir = os.path.join(out, "tokenizer")
    os.makedirs(dest_dir, exist_ok=True)
    if os.path.basename(source) == "tokenizer.json":
        source = os.path.dirname(source) or "."
    if os.path.isdir(source):
        for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json",
                     "special_tokens_map.json"):
            if os.path.exists(os.path.join(source, name)):
                shutil.copy(os.path.join(source, name), os.path.join(dest_dir, name))
        return dest_dir
    dest = os.path.join(dest_dir, "sp.model")
    if os.path.abspath(source) != os.path.abspath(dest):
        shutil.copy(source, dest)
    return dest


# ---------------------------------------------------------------- one unit

_TOKENIZERS: dict = {}


def _tokenizer(path: str):
    if path not in _TOKENIZERS:
        _TOKENIZERS[path] = tokenizer_lib.load(path)
    return _TOKENIZERS[path]


def _marker_path(out: str, unit_id: int) -> str:
    return os.path.join(out, "units", f"{unit_id:05d}.json")


def _atomic_json(path: str, obj) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def process_unit(job: tuple) -> dict:
    """Tokenizes one unit into a train and a valid shard; writes its marker last."""
    from array_record.python import array_record_module
    unit_id, unit, s, tok_path, out = job
    tok = _tokenizer(tok_path)
    dtype = shards.token_dtype(tok.vocab_size)
    stats = corpus.CorpusStats()
    empty = 0
    counts = np.zeros(tok.vocab_size, np.int64)
    os.makedirs(os.path.join(out, "shards"), exist_ok=True)
    part = {}
    for split in shards.SPLITS:
        tmp = os.path.join(out, "shards", f".{split}-{unit_id:05d}.tmp{os.getpid()}")
        part[split] = dict(tmp=tmp, writer=array_record_module.ArrayRecordWriter(
            tmp, WRITER_OPTIONS), offsets=[0], tokens=0)

    extra: dict = {}  # pairs: bad_records and the named skips, max_negatives

    def records(docs):
        """(document, record, its token ids) of each document worth a record."""
        nonlocal empty
        if s.records == "pairs":
            return [(doc, rec, [t for x in ids for t in x]) for doc, rec, ids in
                    pairs.pair_records(docs, tok, s.query_prefix, s.passage_prefix, dtype,
                                       extra, where=lambda i: f"{docs[i][:60]!r}")]
        out = []
        texts = [d for d in docs if isinstance(d, str)]
        encoded = iter(tok.encode_batch(texts, num_threads=1) if texts else ())
        for doc in docs:  # token ids of a pre-tokenized source are written as they are
            ids = next(encoded) if isinstance(doc, str) else doc.astype(np.int64).tolist()
            if ids:
                out.append((doc, shards.encode_record(ids, dtype), ids))
            else:
                empty += 1
        return out

    def flush(docs):
        train_ids = []
        for doc, record, ids in records(docs):
            p = part["valid" if corpus.is_validation(doc, s.valid_fraction) else "train"]
            p["writer"].write(record)
            p["offsets"].append(p["offsets"][-1] + len(ids) + 1)
            p["tokens"] += len(ids)
            if p is part["train"]:
                train_ids.extend(ids)
        counts[:] += np.bincount(np.asarray(train_ids, np.int64), minlength=tok.vocab_size)

    buffer = []
    for doc in read_unit(unit, s, stats, tok.vocab_size):
        buffer.append(doc)
        if len(buffer) == TOKENIZE_CHUNK:
            flush(buffer)
            buffer = []
    flush(buffer)
    for what in extra.pop("skipped", []):
        stats.skip(f"a line that is no pair: {what}")
    result = {"unit": unit_id, "bytes_in": unit_bytes(unit), "shards": {},
              "stats": {**dataclasses.asdict(stats), "files": 0, "empty_documents": empty}}
    if s.records == "pairs":
        result["stats"]["bad_records"] = extra.get("bad_records", 0)
        result["max_negatives"] = extra.get("max_negatives", 0)
        result["scored_pairs"] = extra.get("scored_records", 0)  # pairs.py's teacher scores
    for split, p in part.items():
        p["writer"].close()
        name = f"shards/{split}-{unit_id:05d}"
        os.replace(p["tmp"], os.path.join(out, name + ".array_record"))
        tmp_index = os.path.join(out, name + f".offsets.tmp{os.getpid()}.npy")
        np.save(tmp_index, np.asarray(p["offsets"], np.int64))
        os.replace(tmp_index, os.path.join(out, name + ".offsets.npy"))
        path = os.path.join(out, name + ".array_record")
        result["shards"][split] = dataclasses.asdict(shards.Shard(
            file=name + ".array_record", index=name + ".offsets.npy",
            documents=len(p["offsets"]) - 1, tokens=p["tokens"], bytes=os.path.getsize(path),
            sha256=shards.file_sha256(path)))
    counts_name = f"units/{unit_id:05d}.counts.npy"
    os.makedirs(os.path.join(out, "units"), exist_ok=True)
    np.save(os.path.join(out, counts_name), counts)
    result["counts"] = counts_name
    _atomic_json(_marker_path(out, unit_id), result)
    return result


def _finished(out: str, unit_id: int, thorough: bool = False) -> dict | None:
    """The unit's marker if it and the files it lists are intact (sizes, the offsets index's
    length and the counts file; thorough: the shards' checksums too)."""
    path = _marker_path(out, unit_id)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            marker = json.load(f)
        if not os.path.exists(os.path.join(out, marker["counts"])):
            return None
        for sh in marker["shards"].values():
            file = os.path.join(out, sh["file"])
            if not os.path.exists(file) or os.path.getsize(file) != sh["bytes"]:
                return None
            offsets = np.load(os.path.join(out, sh["index"]), mmap_mode="r")
            if len(offsets) != sh["documents"] + 1:
                return None
            if thorough and shards.file_sha256(file) != sh["sha256"]:
                return None
    except (OSError, ValueError, KeyError):  # a torn marker or index: the unit is redone
        return None
    return marker


# ---------------------------------------------------------------- the whole job

@dataclasses.dataclass
class Job:
    """A planned prepare: its units, settings, tokenizer and output folder."""
    spec: str
    out: str
    units: list
    settings: Settings
    tokenizer_path: str
    plan_stats: corpus.CorpusStats
    fingerprint: str

    def pending(self, machine_index: int = 0, num_machines: int = 1,
                thorough: bool = True) -> list[int]:
        """This machine's units without an intact marker (thorough: checksums checked, so a
        damaged shard of the right size is redone too)."""
        return [i for i in range(len(self.units))
                if i % num_machines == machine_index
                and _finished(self.out, i, thorough) is None]

    def jobs(self, ids) -> list[tuple]:
        return [(i, self.units[i], self.settings, self.tokenizer_path, self.out) for i in ids]


KIND = "prepared-corpus"  # the ownership marker's kind (encoder/errors.py)


def check_settings(s: Settings, vocab_size: int | None = None, machine_index: int = 0,
                   num_machines: int = 1) -> None:
    """Ranges, up front (before anything is read or written)."""
    if not 0.0 <= s.valid_fraction <= 1.0:  # 1: a held-out corpus (pipeline's valid_files)
        raise errors.UsageError(f"--valid_fraction={s.valid_fraction}: expected 0 <= x < 1 "
                                "(the held-out share of documents)")
    if s.max_line_chars < 1:
        raise errors.UsageError(f"--max_line_chars={s.max_line_chars}: expected >= 1")
    if not s.shard_mb > 0:
        raise errors.UsageError(f"--shard_mb={s.shard_mb}: expected > 0")
    if vocab_size is not None and vocab_size <= len(tokenizer_lib.SPECIAL_TOKENS):
        raise errors.UsageError(f"--vocab_size={vocab_size}: expected more than the "
                                f"{len(tokenizer_lib.SPECIAL_TOKENS)} special tokens")
    if s.format not in ("",) + formats.FORMAT_NAMES:
        raise errors.UsageError(f"--format={s.format!r}: expected one of "
                                f"{', '.join(formats.FORMAT_NAMES)} (or empty: each file's "
                                "own, detected)")
    if not s.text_field:
        raise errors.UsageError("--text_field is empty: name the field or column that holds "
                                "the text (or the token ids)")
    if s.records == "pairs" and (s.format or s.text_field != "text"):
        raise errors.UsageError("--format and --text_field are for text records; "
                                "--records=pairs reads JSONL pair files")
    if s.records not in pairs.RECORDS:
        raise errors.UsageError(f"--records={s.records!r}: expected one of {pairs.RECORDS}")
    if s.records != "pairs" and (s.query_prefix or s.passage_prefix):
        raise errors.UsageError("--query_prefix and --passage_prefix are for --records=pairs")
    if s.records == "pairs" and not s.one_doc_per_line:
        raise errors.UsageError("--records=pairs reads one JSON object a line "
                                "(one_doc_per_line=True)")
    if num_machines < 1 or not 0 <= machine_index < num_machines:
        raise errors.UsageError(f"--machine_index={machine_index} --num_machines={num_machines}"
                                f": expected num_machines >= 1 and 0 <= machine_index < "
                                "num_machines")


def _owned(out: str) -> bool:
    """An earlier prepare's folder from before the ownership marker: its plan.json."""
    return os.path.isfile(os.path.join(out, shards.PLAN))


def check_out(spec: str, out: str) -> None:
    """--out is new, empty or an earlier prepare's; never an input or inside one."""
    errors.check_output(out, KIND, "--out", legacy=_owned)
    if spec == STDLIB:
        return
    for item in filter(None, (x.strip() for x in spec.split(","))):
        if os.path.exists(item) and (errors.inside(out, item) or errors.inside(item, out)):
            raise errors.NotOurs(f"--out={out} is, contains or lies inside the input {item}: "
                                 "a rerun would read the corpus's own files as text; choose "
                                 "a folder outside the input")


def _files_of(units) -> dict:
    """path -> [size, mtime_ns] of every input file (what a rerun compares)."""
    out = {}
    for unit in units:
        for p in unit:
            if p.path != STDLIB and p.path not in out:
                st = os.stat(p.path)
                out[os.path.abspath(p.path)] = [st.st_size, st.st_mtime_ns]
    return out


def _request(spec: str, s: Settings, tokenizer: str, tok_fp: str | None, vocab_size: int,
             tokenizer_type: str, sample_chars: int) -> dict:
    """The settings a prepare was asked for (a rerun must ask for the same)."""
    # A given tokenizer by content, not path: the same model under another path is the same.
    tok = ({"given": tok_fp} if tokenizer else
           {"trained": {"vocab_size": vocab_size, "type": tokenizer_type,
                        "sample_chars": sample_chars}})
    return {"input": spec, **{f"settings.{k}": v for k, v in settings_dict(s).items()},
            "tokenizer": tok}


def plan_diff(old: dict, request: dict, files: dict) -> list[str]:
    """What a rerun changes against an existing plan.json, one line each."""
    lines = []
    was = old.get("request", {})
    for k in sorted(set(was) | set(request)):
        if was.get(k, "<absent>") != request.get(k, "<absent>"):
            lines.append(f"{k}: {was.get(k, '<absent>')} -> {request.get(k, '<absent>')}")
    before = old.get("files", {})
    lines += [f"file added: {p}" for p in sorted(set(files) - set(before))]
    lines += [f"file removed: {p}" for p in sorted(set(before) - set(files))]
    lines += [f"file changed: {p} (size or date)" for p in sorted(set(before) & set(files))
              if before[p] != files[p]]
    return lines


def _ids_sources(units) -> list[formats.Source]:
    return sorted({p.source() for unit in units for p in unit if p.ids}, key=lambda x: x.path)


def _tokenizer_for_ids(units, tokenizer: str) -> str:
    """The tokenizer of a pre-tokenized input: the one given, else the one its tokens.json
    names (one for all its sources); never assumed."""
    sources = _ids_sources(units)
    if tokenizer or not sources:
        return tokenizer
    named = {formats.named_tokenizer(src) for src in sources}
    if len(named) == 1 and "" not in named:
        return named.pop()
    raise errors.UsageError(
        f"{sources[0].path} holds token ids and names no tokenizer found here (a "
        f"{formats.TOKENS_META} beside it with \"tokenizer\": PATH): give --tokenizer=PATH, "
        "the tokenizer that made them")


def plan(spec: str, out: str, s: Settings, tokenizer: str = "", vocab_size: int = 32768,
         tokenizer_type: str = "unigram", sample_chars: int = 4_000_000,
         may_train_tokenizer: bool = True, command: str = "") -> Job:
    """Plans the units, puts the tokenizer in OUT/tokenizer, checks a resumed plan.

    Every check (ranges, the folder's owner, a rerun's settings against plan.json) comes
    before the first write: a refused prepare changes nothing on disk.
    """
    check_settings(s, None if tokenizer else vocab_size)
    check_out(spec, out)
    units, plan_stats = plan_units(spec, s)
    tokenizer = _tokenizer_for_ids(units, tokenizer)
    tok_path = tokenizer_path(os.path.join(out, "tokenizer"), tokenizer_type)
    given_fp = None
    if tokenizer:
        given = tokenizer_lib.load(tokenizer)
        given_fp = given.fingerprint()
        for src in _ids_sources(units):
            formats.check_tokenizer(src, given, tokenizer)
    request = _request(spec, s, tokenizer, given_fp, vocab_size, tokenizer_type, sample_chars)
    files = _files_of(units)
    plan_file = os.path.join(out, shards.PLAN)
    old = None
    if os.path.exists(plan_file):
        with open(plan_file) as f:
            old = json.load(f)
        if "request" in old:
            diff = plan_diff(old, request, files)
            if diff:
                raise errors.UsageError(
                    f"--out={out} holds a prepare of different input or settings; nothing "
                    "was written. Changed:\n  " + "\n  ".join(diff) + "\nUse a new --out, give "
                    "the same settings, or delete the folder to start over")
    if not tokenizer and not os.path.exists(tok_path) and not may_train_tokenizer:
        raise errors.UsageError(f"{out} has no tokenizer yet: pass --tokenizer=PATH, or train "
                                "it first with --tokenizer_only (one machine)")
    if old is not None and "request" not in old:  # a plan from before requests were kept
        fp = plan_fingerprint(spec, units, s, given_fp or (
            _tokenizer(tok_path).fingerprint() if os.path.exists(tok_path) else ""))
        if old["fingerprint"] != fp:
            raise errors.UsageError(
                f"{out} holds a prepare of different input or settings (plan "
                f"{old['fingerprint']}, now {fp}: the files, their sizes or dates, the "
                "tokenizer or a setting changed); use a new --out, or delete the folder")
    # ---- checked: from here on, writes
    created = not os.path.exists(out)
    errors.mark_output(out, KIND)
    if tokenizer:
        tok_path = install_tokenizer(tokenizer, out)
    elif not os.path.exists(tok_path):
        try:
            train_tokenizer(units, s, tok_path, vocab_size, tokenizer_type, sample_chars)
        except Exception:  # refused (a vocabulary too small): leave no half-made folder
            errors.discard_if_untouched(out, created)
            raise
    _TOKENIZERS.pop(tok_path, None)  # a file replaced at the same path is read afresh
    fp = plan_fingerprint(spec, units, s, _tokenizer(tok_path).fingerprint())
    if old is not None and old["fingerprint"] != fp:
        raise shards.CorpusError(
            f"{tok_path} is not the tokenizer {out} was planned with (plan {old['fingerprint']}"
            f", now {fp}): it was replaced by hand; delete {out} and prepare again")
    if old is None:
        _atomic_json(plan_file, {"fingerprint": fp, "input": spec, "units": len(units),
                                 "settings": settings_dict(s), "request": request,
                                 "files": files, "command": command})
    return Job(spec, out, units, s, tok_path, plan_stats, fp)


class Progress:
    """Units, documents, tokens, MB/s and ETA on one line of stderr."""

    def __init__(self, job: Job, todo: list[int], enabled: bool = True):
        self.total_bytes = sum(unit_bytes(job.units[i]) for i in todo)
        self.units, self.done = len(todo), 0
        self.bytes = self.docs = self.tokens = 0
        self.t0, self.last = time.time(), 0.0
        self.enabled = enabled

    def update(self, marker: dict) -> None:
        self.done += 1
        self.bytes += marker["bytes_in"]
        self.docs += sum(s["documents"] for s in marker["shards"].values())
        self.tokens += sum(s["tokens"] for s in marker["shards"].values())
        now = time.time()
        if self.enabled and (now - self.last > 0.5 or self.done == self.units):
            self.last = now
            rate = self.bytes / max(now - self.t0, 1e-9)
            eta = (self.total_bytes - self.bytes) / max(rate, 1e-9)
            sys.stderr.write(f"\r[prepare] {self.done}/{self.units} units, {self.docs:,} docs, "
                             f"{self.tokens:,} tokens, {rate / 2**20:.1f} MB/s, ETA {eta:.0f}s ")
            if self.done == self.units:
                sys.stderr.write("\n")
            sys.stderr.flush()


def run_units(job: Job, ids: list[int], num_workers: int, progress: bool = True) -> None:
    """Processes units in this process (1 worker) or in a spawn pool of num_workers."""
    bar = Progress(job, ids, progress)
    if num_workers <= 1 or len(ids) <= 1:
        for j in job.jobs(ids):
            bar.update(process_unit(j))
        return
    import multiprocessing
    # spawn: safe beside JAX's threads, and the workers import no JAX at all.
    with multiprocessing.get_context("spawn").Pool(min(num_workers, len(ids))) as pool:
        for marker in pool.imap_unordered(process_unit, job.jobs(ids)):
            bar.update(marker)


def finalize(job: Job, command: str = "") -> dict | None:
    """Writes manifest.json from the unit markers once every unit is done (else None)."""
    markers = [_finished(job.out, i) for i in range(len(job.units))]
    if any(m is None for m in markers):
        return None
    tok = _tokenizer(job.tokenizer_path)
    splits = {}
    for split in shards.SPLITS:
        listed = [m["shards"][split] for m in markers if m["shards"][split]["documents"]]
        splits[split] = {"documents": sum(x["documents"] for x in listed),
                         "tokens": sum(x["tokens"] for x in listed), "shards": listed}
    stats = dataclasses.asdict(job.plan_stats)
    stats["empty_documents"] = 0
    counts = np.zeros(tok.vocab_size, np.int64)
    for m in markers:
        corpus.add_stats(stats, m["stats"])
        counts += np.load(os.path.join(job.out, m["counts"]))
    if not splits["train"]["documents"] and job.settings.valid_fraction < 1.0:
        raise shards.CorpusError(
            f"{job.out}: no training document, so no corpus (no manifest written): "
            f"{splits['valid']['documents']} held-out documents at valid_fraction="
            f"{job.settings.valid_fraction}; {corpus.summarize(stats)}")
    np.save(os.path.join(job.out, "token_counts.npy"), counts)
    manifest = {
        "format": shards.FORMAT, "version": shards.VERSION,
        "tokenizer": {"path": os.path.relpath(job.tokenizer_path, job.out),
                      "fingerprint": tok.fingerprint(), "vocab_size": tok.vocab_size,
                      "source": job.tokenizer_path},
        "token_dtype": shards.token_dtype(tok.vocab_size),
        "input": job.spec, "settings": settings_dict(job.settings),
        "plan": job.fingerprint, "units": len(job.units), "splits": splits, "stats": stats,
        "token_counts": "token_counts.npy", "command": command,
        "input_format": job.settings.format, "text_field": job.settings.text_field,
        "source_formats": source_formats(job.units),
    }
    if job.settings.records == "pairs":  # what encoder/data/pairs.PairRows reads back
        manifest.update(records="pairs", query_prefix=job.settings.query_prefix,
                        passage_prefix=job.settings.passage_prefix,
                        max_negatives=max(m.get("max_negatives", 0) for m in markers),
                        scored_pairs=sum(m.get("scored_pairs", 0) for m in markers))
    _atomic_json(os.path.join(job.out, shards.MANIFEST), manifest)
    return manifest


def prepare(spec: str, out: str, s: Settings = Settings(), tokenizer: str = "",
            vocab_size: int = 32768, num_workers: int = 1, tokenizer_type: str = "unigram",
            sample_chars: int = 4_000_000, machine_index: int = 0, num_machines: int = 1,
            progress: bool = False, command: str = "") -> dict | None:
    """Plans, runs this machine's pending units and writes the manifest when all are done.

    A rerun on a finished corpus checks every unit (sizes, checksums): a missing or
    damaged shard is redone (the manifest is removed meanwhile, so nobody reads a corpus
    with a hole), whether or not the manifest was there."""
    check_settings(s, None if tokenizer else vocab_size, machine_index, num_machines)
    manifest_path = os.path.join(out, shards.MANIFEST)
    if os.path.exists(manifest_path) and not os.path.exists(os.path.join(out, shards.PLAN)):
        raise errors.NotOurs(f"{out}: a manifest without plan.json; not a folder this command "
                             "made")
    job = plan(spec, out, s, tokenizer, vocab_size, tokenizer_type, sample_chars,
               may_train_tokenizer=num_machines == 1, command=command)
    todo = job.pending(machine_index, num_machines)
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
        if manifest.get("plan") == job.fingerprint and not todo:
            return manifest
        os.remove(manifest_path)  # ours (plan.json above); rewritten once the units are done
    run_units(job, todo, num_workers, progress)
    return finalize(job, command)


def source_formats(units) -> dict:
    """How many sources were read in each format ('jsonl.gz': compressed JSON lines)."""
    seen = {}
    for unit in units:
        for p in unit:
            if p.path != STDLIB:
                seen[p.path] = p.format + ({"gzip": ".gz", "zstd": ".zst", "bz2": ".bz2",
                                            "xz": ".xz"}[p.compression] if p.compression else "")
    counts: dict = {}
    for kind in seen.values():
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


def input_report(manifest: dict) -> list[str]:
    """What a prepared corpus's input was read as, and what of it was skipped or repaired
    with its share of the input: the console lines every command that prepares prints."""
    lines = []
    kinds = manifest.get("source_formats") or {}
    if kinds and set(kinds) != {"text"}:
        field = manifest.get("text_field", "text")
        lines.append("read " + ", ".join(f"{n} {k}" for k, n in kinds.items()) + " source"
                     + ("s" if sum(kinds.values()) > 1 else "")
                     + (f" (field {field!r})" if set(kinds) - {"text", "tokens"} else ""))
    return lines + corpus.skip_report(manifest.get("stats", {}))


def say_input(manifest: dict, quiet: bool = False, max_share: float | None = None,
              field: str = "") -> None:
    """Prints input_report's lines ("input: ..."; quiet: not this process's to say); with
    max_share, refuses a corpus whose dropped or damaged share is over it, naming field
    (the setting that accepts more)."""
    for line in [] if quiet else input_report(manifest):
        print(f"input: {line}", flush=True)
    if max_share is not None:
        corpus.check_dropped(manifest.get("stats", {}), max_share, field)


def summary(manifest: dict) -> str:
    sp = manifest["splits"]
    st = manifest["stats"]
    what = "pairs" if manifest.get("records") == "pairs" else "documents"
    return (f"prepared {sp['train']['documents']:,} train / {sp['valid']['documents']:,} valid "
            f"{what}, {sp['train']['tokens']:,} / {sp['valid']['tokens']:,} tokens in "
            f"{len(sp['train']['shards'])} + {len(sp['valid']['shards'])} shards; "
            + corpus.summarize(st))


def prepare_with_beam(spec: str, out: str, s: Settings, tokenizer: str = "",
                      vocab_size: int = 32768, tokenizer_type: str = "unigram",
                      sample_chars: int = 4_000_000, beam_options: str = "",
                      command: str = "") -> dict | None:
    """The same plan, units and manifest as `prepare`, with Beam distributing the units."""
    try:
        import apache_beam  # noqa: F401
    except ImportError:
        raise errors.UsageError("--engine=beam needs Apache Beam (pip install apache-beam); "
                                "or use --engine=local") from None
    from encoder.data import prepare_beam
    job = plan(spec, out, s, tokenizer, vocab_size, tokenizer_type, sample_chars,
               command=command)
    todo = job.pending()
    if todo:
        prepare_beam.run(job.jobs(todo), process_unit, beam_options)
    return finalize(job, command)
