"""Prepared corpora on disk, and packed rows read from them by random access.

A prepared corpus (written by encoder/data/preparation.py) is a folder:

    manifest.json            what it holds: tokenizer, splits, shards, counts, command
    tokenizer/               the tokenizer it was made with (sp.model or a WordPiece folder)
    shards/{split}-NNNNN.array_record    one record per tokenized document
    shards/{split}-NNNNN.offsets.npy     int64 [docs + 1]: each document's start in
                                         the shard's token stream (tokens + one [SEP])
    token_counts.npy         int64 [V]: token frequencies of the train split

Records hold a document's token ids as little-endian `token_dtype` (uint16
when the vocabulary fits, else int32), without special tokens, so one
prepared corpus serves every seq_len and both position layouts.

`PackedRows` is the random-access view a run trains on: row r is the r-th
seq_len - 1 tokens of the split's stream of documents, each followed by
[SEP], led by [CLS] (FULL-SENTENCES packing, Liu et al. 2019 §4.2) -- exactly
the rows packing.pack_documents builds from the same documents in memory.
Locating a row reads only the offsets index (memory-mapped) and the one to
three records it spans, so memory and start-up time do not grow with the
corpus, and each host reads only the rows of its own batch blocks.
"""
import bisect
import dataclasses
import hashlib
import json
import os

import numpy as np

MANIFEST = "manifest.json"
PLAN = "plan.json"          # written first by prepare: the plan a rerun is checked against
UNITS = "units"             # units/NNNNN.json: one marker per finished unit
FORMAT = "encoder-prepared-corpus"
VERSION = 1
SPLITS = ("train", "valid")


class CorpusError(ValueError):
    """A prepared corpus that cannot be read as its manifest says."""


def is_prepared(path: str) -> bool:
    return bool(path) and "," not in path and os.path.isfile(os.path.join(path, MANIFEST))


def incomplete_reason(folder: str) -> str | None:
    """Why a folder that looks prepared (plan, unit markers, shards) but has no manifest
    cannot be read: what is there, what is missing, how to finish. None if it does not."""
    if os.path.isfile(os.path.join(folder, MANIFEST)):
        return None
    plan = os.path.join(folder, PLAN)
    units_dir = os.path.join(folder, UNITS)
    has_shards = os.path.isdir(os.path.join(folder, "shards")) and any(
        n.endswith(".array_record") for n in os.listdir(os.path.join(folder, "shards")))
    if not (os.path.isfile(plan) or os.path.isdir(units_dir) or has_shards):
        return None
    done = len([n for n in os.listdir(units_dir) if n.endswith(".json")]) \
        if os.path.isdir(units_dir) else 0
    total, command = "?", ""
    try:
        with open(plan) as f:
            p = json.load(f)
        total = p.get("units", "?")
        command = p.get("command", "")
    except (OSError, ValueError):
        pass
    again = f" ({command})" if command else ""
    return (f"{folder} is an unfinished prepared corpus: {done} of {total} units done and no "
            f"{MANIFEST} (a prepare that was stopped, or a multi-machine prepare whose other "
            f"machines have not finished). Finish it: run the same prepare command again"
            f"{again} on every --machine_index, or once with --num_machines=1")


def file_sha256(path: str, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def token_dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 1 << 16 else "int32"


def encode_record(ids, dtype: str) -> bytes:
    return np.asarray(ids, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()


def decode_record(record: bytes, dtype: str) -> np.ndarray:
    return np.frombuffer(record, dtype=np.dtype(dtype).newbyteorder("<")).astype(np.int32)


@dataclasses.dataclass
class Shard:
    """One shard file of a split, as the manifest lists it."""
    file: str
    index: str
    documents: int
    tokens: int
    bytes: int
    sha256: str

    @property
    def stream_tokens(self) -> int:
        return self.tokens + self.documents  # each document is followed by [SEP]


class PreparedCorpus:
    """The manifest of a prepared folder, checked; opens shards on demand."""

    def __init__(self, folder: str):
        self.folder = folder
        path = os.path.join(folder, MANIFEST)
        why = incomplete_reason(folder)
        if why:
            raise CorpusError(why)
        if not os.path.isfile(path):
            raise CorpusError(f"{folder}: not a prepared corpus (no {MANIFEST}); make one with "
                              "python -m encoder prepare --input=FILES --out=DIR")
        try:
            with open(path) as f:
                self.manifest = json.load(f)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path}: not valid JSON ({e})") from None
        if self.manifest.get("format") != FORMAT or self.manifest.get("version") != VERSION:
            raise CorpusError(f"{path}: expected format {FORMAT!r} version {VERSION}, found "
                              f"{self.manifest.get('format')!r} version "
                              f"{self.manifest.get('version')}")
        self.dtype = self.manifest["token_dtype"]
        self.shards = {s: [Shard(**d) for d in self.manifest["splits"][s]["shards"]]
                       for s in SPLITS}

    @property
    def records(self) -> str:
        """What a record holds: "text" (a document's tokens) or "pairs" (encoder/data/pairs.py)."""
        return self.manifest.get("records", "text")

    def require_records(self, kind: str, reader: str) -> None:
        """Refuses a corpus of another record kind, naming what reads it."""
        if self.records != kind:
            users = {"text": "pretraining (data.train_files)",
                     "pairs": "the contrastive task (data.train_file)"}
            raise CorpusError(f"{self.folder} is a prepared corpus of {self.records} records, "
                              f"which {users.get(self.records, 'no job')} reads; {reader} "
                              f"reads {kind} records")

    @property
    def tokenizer_path(self) -> str:
        return os.path.join(self.folder, self.manifest["tokenizer"]["path"])

    @property
    def tokenizer_fingerprint(self) -> str:
        return self.manifest["tokenizer"]["fingerprint"]

    def documents(self, split: str) -> int:
        return sum(s.documents for s in self.shards[split])

    def token_counts(self) -> np.ndarray:
        return np.load(os.path.join(self.folder, self.manifest["token_counts"]))

    def check_tokenizer(self, tokenizer) -> None:
        if tokenizer.fingerprint() != self.tokenizer_fingerprint:
            raise CorpusError(
                f"{self.folder} was tokenized with tokenizer {self.tokenizer_fingerprint} "
                f"({self.manifest['tokenizer']['source']}), but this run's tokenizer is "
                f"{tokenizer.fingerprint()}; use the corpus's own tokenizer "
                f"({self.tokenizer_path}) or prepare the text again")

    def verify(self, split: str, checksums: bool = False) -> None:
        """Every listed shard exists with its size (and checksum); raises naming the file."""
        for shard in self.shards[split]:
            for name in (shard.file, shard.index):
                if not os.path.isfile(os.path.join(self.folder, name)):
                    raise CorpusError(f"{self.folder}: shard file {name} is listed in the "
                                      "manifest but missing")
            path = os.path.join(self.folder, shard.file)
            size = os.path.getsize(path)
            if size != shard.bytes:
                raise CorpusError(f"{path}: {size} bytes, the manifest says {shard.bytes} "
                                  "(truncated or replaced); prepare the corpus again")
            if checksums and file_sha256(path) != shard.sha256:
                raise CorpusError(f"{path}: checksum differs from the manifest (corrupted)")
            offsets = np.load(os.path.join(self.folder, shard.index), mmap_mode="r")
            if len(offsets) != shard.documents + 1 or int(offsets[-1]) != shard.stream_tokens:
                raise CorpusError(f"{os.path.join(self.folder, shard.index)}: index does not "
                                  f"match the manifest ({shard.documents} documents)")


    def verify_all(self) -> list[str]:
        """Everything training relies on; raises CorpusError on the first fault, else returns
        what was checked: the tokenizer (present, its fingerprint), the token dtype for its
        vocabulary, every shard (size, checksum, record count, offsets: int64, from 0,
        increasing, ending at the listed tokens), the split totals and token_counts."""
        from encoder.data import tokenizer as tokenizer_lib
        m = self.manifest
        tok_path = self.tokenizer_path
        if not os.path.exists(tok_path):
            raise CorpusError(f"{tok_path}: the corpus's tokenizer is missing")
        tok = tokenizer_lib.load(tok_path)
        if tok.fingerprint() != self.tokenizer_fingerprint:
            raise CorpusError(f"{tok_path}: tokenizer fingerprint {tok.fingerprint()}, but the "
                              f"shards were tokenized with {self.tokenizer_fingerprint} (the "
                              "tokenizer was replaced); prepare the corpus again")
        if m["tokenizer"].get("vocab_size") != tok.vocab_size or self.dtype != token_dtype(
                tok.vocab_size):
            raise CorpusError(f"{self.folder}: token_dtype {self.dtype} / vocab_size "
                              f"{m['tokenizer'].get('vocab_size')} do not fit the tokenizer's "
                              f"{tok.vocab_size} pieces")
        from array_record.python import array_record_module
        checked = 0
        for split in SPLITS:
            self.verify(split, checksums=True)
            listed = m["splits"][split]
            if listed["documents"] != self.documents(split) or listed["tokens"] != sum(
                    s.tokens for s in self.shards[split]):
                raise CorpusError(f"{self.folder}: the {split} split's totals differ from its "
                                  "shards' (the manifest was edited)")
            for shard in self.shards[split]:
                index = os.path.join(self.folder, shard.index)
                offsets = np.load(index, mmap_mode="r")
                if offsets.dtype != np.int64 or (len(offsets) and int(offsets[0]) != 0) or (
                        np.diff(offsets) < 2).any():
                    raise CorpusError(f"{index}: offsets must be int64, start at 0 and grow by "
                                      "at least 2 per document (tokens + [SEP])")
                path = os.path.join(self.folder, shard.file)
                reader = array_record_module.ArrayRecordReader(path)
                try:
                    n = reader.num_records()
                finally:
                    reader.close()
                if n != shard.documents:
                    raise CorpusError(f"{path}: {n} records, the manifest lists "
                                      f"{shard.documents} documents")
                checked += 1
        counts = self.token_counts()
        if counts.shape != (tok.vocab_size,) or int(counts.sum()) != m["splits"]["train"][
                "tokens"]:
            raise CorpusError(f"{os.path.join(self.folder, m['token_counts'])}: shape "
                              f"{counts.shape} and sum {int(counts.sum())}, expected "
                              f"({tok.vocab_size},) and {m['splits']['train']['tokens']}")
        return [f"tokenizer {self.tokenizer_fingerprint} ({tok.vocab_size} pieces, "
                f"{self.dtype})", f"{checked} shards: size, checksum, records, offsets",
                "split totals", "token_counts"]


class ShardReader:
    """Random access to the records of one split's shards: each shard opened on first use,
    its checksum checked then; a damaged shard is named in one CorpusError. Users set
    self.corpus and self.shards and init self._readers = {}."""

    def __getstate__(self):  # readers are reopened in another process
        return {**self.__dict__, "_readers": {}, "_offsets": {}}

    def _reader(self, s: int):
        if s not in self._readers:
            from array_record.python import array_record_module
            path = os.path.join(self.corpus.folder, self.shards[s].file)
            # The checksum at first open (one read of the shard, ~30 ms per 16 MB), not at
            # start-up: start-up stays independent of the corpus's size, and a damaged
            # shard of the right size is named before any of its records is trained on.
            if self.verify_checksums and file_sha256(path) != self.shards[s].sha256:
                raise CorpusError(f"{path}: checksum differs from the manifest (corrupted); "
                                  "run the same prepare command again to redo it")
            try:
                self._readers[s] = array_record_module.ArrayRecordReader(
                    path, "readahead_buffer_size:0")
            except Exception as e:  # riegeli reports a damaged footer as a plain error
                raise CorpusError(f"{path}: cannot be opened as an ArrayRecord shard "
                                  f"({str(e).splitlines()[0]})") from None
        return self._readers[s]

    def _records(self, s: int, ids: list[int]) -> list[bytes]:
        """Records ids of shard s, in one read call."""
        try:
            return self._reader(s).read(ids)
        except CorpusError:
            raise
        except Exception as e:
            path = os.path.join(self.corpus.folder, self.shards[s].file)
            raise CorpusError(f"{path}: records {ids} cannot be read "
                              f"({str(e).splitlines()[0]}); the shard is corrupted") from None


class PackedRows(ShardReader):
    """Random access to the FULL-SENTENCES rows of one split (a grain data source)."""

    def __init__(self, corpus: PreparedCorpus, split: str, seq_len: int, cls_id: int,
                 sep_id: int, pad_id: int, restart_positions: bool = False,
                 verify_checksums: bool = True):
        if seq_len < 2:
            raise ValueError(f"seq_len must be >= 2, got {seq_len}")
        corpus.require_records("text", "pretraining")
        self.corpus, self.split = corpus, split
        self.shards = corpus.shards[split]
        self.seq_len, self.body = seq_len, seq_len - 1
        self.cls_id, self.sep_id, self.pad_id = cls_id, sep_id, pad_id
        self.restart_positions = restart_positions
        self.verify_checksums = verify_checksums
        self.starts = np.concatenate([[0], np.cumsum([s.stream_tokens for s in self.shards])])
        self.total = int(self.starts[-1])
        self.n = -(-self.total // self.body)
        self._readers: dict = {}
        self._offsets: dict = {}

    def __len__(self) -> int:
        return self.n

    def _shard_offsets(self, s: int) -> np.ndarray:
        if s not in self._offsets:
            path = os.path.join(self.corpus.folder, self.shards[s].index)
            self._offsets[s] = np.load(path, mmap_mode="r")
        return self._offsets[s]

    def _documents(self, s: int, ids: list[int]) -> list[np.ndarray]:
        """Documents ids of shard s, in one read call (a row spans a few documents)."""
        return [decode_record(r, self.corpus.dtype) for r in self._records(s, ids)]

    def _spans(self, lo: int, hi: int) -> list[tuple[int, int, int, int]]:
        """(shard, document, stream start, stream end) of every document meeting [lo, hi)."""
        s = bisect.bisect_right(self.starts, lo) - 1
        offsets = self._shard_offsets(s)
        i = int(np.searchsorted(offsets, lo - self.starts[s], side="right")) - 1
        spans, cur = [], lo
        while cur < hi:
            if i == len(offsets) - 1:  # past this shard's last document: the next shard
                s, i = s + 1, 0
                offsets = self._shard_offsets(s)
            a = int(self.starts[s] + offsets[i])
            b = int(self.starts[s] + offsets[i + 1])
            spans.append((s, i, a, b))
            cur, i = min(b, hi), i + 1
        return spans

    def __getitem__(self, r: int) -> dict:
        if not 0 <= r < self.n:
            raise IndexError(f"row {r} of {self.n}")
        lo, hi = r * self.body, min((r + 1) * self.body, self.total)
        ids = np.full(self.body, self.pad_id, np.int32)
        doc_ids = np.zeros(self.body, np.int32)
        pos = (np.arange(1, self.seq_len, dtype=np.int32) if not self.restart_positions
               else np.zeros(self.body, np.int32))
        spans = self._spans(lo, hi)
        docs: list[np.ndarray] = []
        for shard in dict.fromkeys(sp[0] for sp in spans):
            docs += self._documents(shard, [sp[1] for sp in spans if sp[0] == shard])
        cur = lo
        for k, ((_, _, a, b), doc) in enumerate(zip(spans, docs), start=1):
            end = min(b, hi)
            ids[cur - lo:end - lo] = np.append(doc, self.sep_id)[cur - a:end - a]
            doc_ids[cur - lo:end - lo] = k
            if self.restart_positions:
                at = np.arange(cur, end)
                pos[cur - lo:end - lo] = at - lo + 1 if a <= lo else at - a
            cur = end
        real = np.arange(self.body) < hi - lo
        return {
            "input_ids": np.concatenate([[self.cls_id], ids]).astype(np.int32),
            "segment_ids": np.zeros(self.seq_len, np.int32),
            "attention_mask": np.concatenate([[1], real]).astype(np.int32),
            "document_ids": np.concatenate([[1], doc_ids]).astype(np.int32),
            "positions": np.concatenate([[0], pos]).astype(np.int32),
        }

    def read_batch(self, indices) -> dict:
        rows = [self[int(i)] for i in indices]
        return {k: np.stack([r[k] for r in rows]) for k in rows[0]}

    def records_of(self, r: int) -> list[tuple[str, int]]:
        """(shard file, record) of each document row r holds a part of, in order."""
        lo, hi = r * self.body, min((r + 1) * self.body, self.total)
        return [(self.shards[s].file, d) for s, d, _, _ in self._spans(lo, hi)]
