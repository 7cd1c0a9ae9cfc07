"""Held-out means held out: how much of a held-out split is training data, by content.

A held-out figure means what its label says only when its rows were not trained on. A
path says nothing about that (a byte copy of the training file, a file of training
documents, a dev file assembled from training rows), so overlap is measured by content:

* text (task rows, documents in memory): the text with every whitespace run made one
  space, hashed (8 bytes of BLAKE2b: a million held-out rows against a billion training
  rows expect 5e-5 false matches; a collision can only count a row as shared, never
  hide one);
* a prepared corpus: each document's record, its token ids, hashed the same way. Both
  tokenizers here split at whitespace runs (sentencepiece collapses them, WordPiece
  splits on them), so equal ids are equal text up to whitespace.

The held-out side is hashed into a set (it is the small side); the training side is
streamed past it once: memory grows with the held-out split, never with the corpus.

`MAX_SHARE`: more than 1% of the held-out rows found in training is refused in one line
with the count and the share; fewer are said (with the count) and kept. Each command
names the setting that accepts more (data.max_held_out_overlap, --max_held_out_overlap):
a task whose splits share a few short rows by nature is the user's call, said each time.
One shared row in a hundred moves a held-out accuracy by at most one point: past that,
the figure is no longer the held-out one its label names.
"""
import dataclasses
import hashlib
import json
import os
import sys
from typing import Iterable, Iterator

from encoder.errors import UsageError

MAX_SHARE = 0.01
READ_CHUNK = 4096  # records per read call when a prepared split is streamed


class HeldOutOverlap(UsageError):
    """A held-out split whose rows are, past MAX_SHARE, training rows."""


def normalise(text: str) -> str:
    """Whitespace runs as one space, none at the ends (case and punctuation kept)."""
    return " ".join(text.split())


def text_key(text: str) -> bytes:
    return hashlib.blake2b(normalise(text).encode("utf-8"), digest_size=8).digest()


def record_key(record: bytes) -> bytes:
    """A prepared document's key: its stored token ids (one dtype per tokenizer)."""
    return hashlib.blake2b(record, digest_size=8).digest()


@dataclasses.dataclass(frozen=True)
class Overlap:
    """How many of a held-out split's rows are training rows."""
    held_out: str       # the held-out split as the user named it (a flag, a folder)
    training: str       # the training data it was measured against
    rows: int           # held-out rows measured (rows with no text not counted)
    shared: int         # of them, rows whose content is also a training row
    first: str = ""     # where the first shared held-out row is (file:line), when known
    unit: str = "rows"  # "rows" or "documents"

    @property
    def share(self) -> float:
        return self.shared / self.rows if self.rows else 0.0


def measure(held_keys: list, train_keys: Iterable[bytes]) -> tuple[int, int, int]:
    """(held-out rows, how many of them are in training, index of the first or -1).

    held_keys: one key per held-out row in order (None: a row with nothing to compare);
    train_keys is consumed once and left early when every held-out key was found."""
    wanted = {k for k in held_keys if k is not None}
    found: set = set()
    if wanted:
        for k in train_keys:
            if k in wanted:
                found.add(k)
                if len(found) == len(wanted):
                    break
    rows = sum(k is not None for k in held_keys)
    shared = sum(k in found for k in held_keys if k is not None)
    first = next((i for i, k in enumerate(held_keys) if k is not None and k in found), -1)
    return rows, shared, first


def verdict(o: Overlap, max_share: float = MAX_SHARE, accept: str = "") -> str | None:
    """Raises HeldOutOverlap past max_share; else the line to say when any row is shared
    (None when none is). accept: the setting that tolerates a larger share, named in the
    refusal."""
    if not o.shared:
        return None
    where = f"; the first: {o.first}" if o.first else ""
    what = (f"{o.held_out}: {o.shared:,} of {o.rows:,} held-out {o.unit} "
            f"({o.share:.1%}) are also training {o.unit} of {o.training} (same text, "
            f"whitespace aside{where})")
    if o.share > max_share:
        raise HeldOutOverlap(
            f"{what}; more than {max_share:.0%} shared: its figures would be partly training "
            f"figures. Remove those {o.unit} from the held-out data, give held-out data of "
            "its own" + (f", or accept a larger share with {accept}=SHARE" if accept else ""))
    return (f"{what}; kept (at most {max_share:.0%} is accepted): its figures include "
            "them")


def say(line: str | None, quiet: bool = False) -> None:
    """On stderr: stdout is a command's result (JSON lines, a table) for pipes to read."""
    if line and not quiet:
        print(f"held-out: {line}", file=sys.stderr, flush=True)


# ------------------------------------------------------------- documents in memory

def check_texts(held_out: list[str], training: Iterable[str], held_name: str,
                train_name: str, max_share: float = MAX_SHARE, accept: str = "",
                quiet: bool = False) -> Overlap:
    """Overlap of held-out documents with training documents (verdict's refusal past
    max_share)."""
    rows, shared, _ = measure([text_key(t) for t in held_out],
                              (text_key(t) for t in training))
    o = Overlap(held_name, train_name, rows, shared, unit="documents")
    say(verdict(o, max_share, accept), quiet)
    return o


# ------------------------------------------------------------- prepared corpora

def split_keys(corpus, split: str) -> Iterator[bytes]:
    """Each document's key of one split of a prepared corpus, shard by shard (each shard
    checked against the manifest first: a truncated one is named, as training names it)."""
    from array_record.python import array_record_module
    corpus.verify(split)
    for shard in corpus.shards[split]:
        path = os.path.join(corpus.folder, shard.file)
        reader = array_record_module.ArrayRecordReader(path, "readahead_buffer_size:0")
        try:
            n = reader.num_records()
            for lo in range(0, n, READ_CHUNK):
                for record in reader.read(lo, min(n, lo + READ_CHUNK)):
                    yield record_key(record)
        finally:
            reader.close()


def _identity(parts) -> str:
    """A short name for (corpus, split) pairs by their shards' checksums (the manifest's)."""
    h = hashlib.sha256()
    for corpus, split in parts:
        h.update(split.encode())
        for shard in corpus.shards[split]:
            h.update(shard.sha256.encode())
    return h.hexdigest()[:16]


def _cached(cache: str, name: str) -> dict | None:
    try:
        with open(os.path.join(cache, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _store(cache: str, name: str, record: dict) -> None:
    """Written atomically; a cache that cannot be written costs a re-read, nothing else."""
    try:
        os.makedirs(cache, exist_ok=True)
        tmp = os.path.join(cache, f".{name}.tmp{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(record, f)
        os.replace(tmp, os.path.join(cache, name))
    except OSError:
        pass


def _document_rules(manifests: list) -> set:
    return {bool((m.get("settings") or {}).get("one_doc_per_line")) for m in manifests
            if isinstance(m, dict) and "settings" in m}


def unit_mismatch(held: list, training: list, held_name: str, train_name: str) -> str | None:
    """The line to say when held-out and training documents were cut by different rules
    (one a line against blank-line blocks, from the prepared folders' manifests): the
    document keys cannot meet, so shared lines are not measured, whatever the count said."""
    h, t = _document_rules(held), _document_rules(training)
    if not h or not t or h & t:
        return None
    rule = {True: "one document a line", False: "documents cut at blank lines"}
    return (f"{held_name} has {rule[h.pop()]}, {train_name} has {rule[t.pop()]}: their "
            "overlap was measured by whole document, so lines they share are not seen; its "
            "figures may include training text. Prepare both with the same rule "
            "(--one_doc_per_line / data.one_doc_per_line)")


def check_prepared(training: list, held_out: list, held_name: str, train_name: str,
                   cache: str = "", max_share: float = MAX_SHARE, accept: str = "",
                   quiet: bool = False) -> Overlap:
    """Overlap of prepared held-out splits with prepared training splits ((corpus, split)
    pairs, one tokenizer): the held-out documents' keys in memory, the training splits
    streamed. The counts are kept in cache/overlap-<shards>.json, so a restart on the same
    shards reads nothing again; the verdict is given every time."""
    name = f"overlap-{_identity(training)}-{_identity(held_out)}.json"
    record = _cached(cache, name) if cache else None
    if record is None:
        held = [k for corpus, split in held_out for k in split_keys(corpus, split)]
        train = (k for corpus, split in training for k in split_keys(corpus, split))
        rows, shared, _ = measure(held, train)
        record = {"rows": rows, "shared": shared}
        if cache and not quiet:
            _store(cache, name, record)
    o = Overlap(held_name, train_name, record["rows"], record["shared"], unit="documents")
    say(verdict(o, max_share, accept), quiet)
    return o


def check_tokenized(held_out: list[str], tokenizer, training: list, held_name: str,
                    train_name: str, max_share: float = MAX_SHARE, accept: str = "") -> Overlap:
    """Held-out documents as text against prepared training splits: each document tokenized
    and stored as a prepared corpus stores it (its record), then compared by record."""
    from encoder.data import shards
    dtype = shards.token_dtype(tokenizer.vocab_size)
    keys = [record_key(shards.encode_record(ids, dtype)) if ids else None
            for ids in (tokenizer.encode(d) for d in held_out)]
    rows, shared, _ = measure(keys, (k for corpus, split in training
                                     for k in split_keys(corpus, split)))
    o = Overlap(held_name, train_name, rows, shared, unit="documents")
    say(verdict(o, max_share, accept))
    return o
