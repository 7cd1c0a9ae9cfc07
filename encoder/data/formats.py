"""Sources by format: one table from a format name to the reader of its sources.

A source is what one reader reads: a text or JSON-lines file (plain, or gzip / zstd / bz2 /
xz compressed and decompressed as a stream), a Parquet file, an Arrow IPC file (what
`datasets.Dataset.save_to_disk` writes; its folder's state.json names them), an MDS folder
(mosaicml-streaming's index.json and shards, read here from its documented layout: the
package pulls torch and torchvision into whatever imports it), or a .npy array of token ids.

A reader cuts its source into blocks that read independently (the units of a prepare:
byte ranges cut at document starts, Parquet row groups, Arrow record batches, MDS shards,
rows of ids; a compressed stream is one block) and streams a block's documents, str or an
int array of token ids, never holding a whole file, counting what it reads and skips in
CorpusStats (below; corpus.py names it too).

The format comes from the content's own marks (Parquet and Arrow magic, the .npy header,
an MDS index.json, a datasets state.json), else the extension, else a sniff of the first
lines; or it is stated (data.format, prepare --format). A file whose content contradicts
its reading (JSON records read as text, text read as JSONL, a Parquet file read as text) is
refused in one line naming the format to use; compression is always found by content.
"""
import bz2
import dataclasses
import gzip
import io
import json
import lzma
import os
from typing import Callable, Iterable, Iterator

import numpy as np

from encoder.data import shards

FORMAT_NAMES = ("text", "jsonl", "parquet", "arrow", "mds", "tokens")
HEAD_BYTES = 1 << 16        # what detection reads of a file (decompressed, if compressed)
SNIFF_LINES = 5             # complete first lines that decide "JSON records or text"
TABLE_BATCH_ROWS = 1024     # rows per Arrow batch read from a Parquet row group
NPY_BLOCK_BYTES = 1 << 20   # rows of a .npy token array grouped into blocks of this size
TOKENS_META = "tokens.json"  # a pre-tokenized source's metadata: its tokenizer, vocab, dtype
RATIO_BYTES = 1 << 19      # a compressed file's input read to estimate its text's size
JSONL_LINE_FACTOR = 64      # a JSON line may hold this many max_line_chars (a whole record)

Doc = str | np.ndarray


class FormatError(shards.CorpusError):
    """A source whose content contradicts the format it is read as."""


@dataclasses.dataclass(frozen=True)
class Options:
    """How documents are read; the same for every source of one input."""
    one_doc_per_line: bool = False
    max_line_chars: int = 100_000
    text_field: str = "text"
    stated: str = ""            # the format the user stated; "" detects each source's
    json_as_text: bool = False  # pair records are JSON lines read as lines by their reader
    flag: str = "--input"       # how the user named the input (errors say it)

    @property
    def format_flag(self) -> str:
        return "--config.data.format" if self.flag.startswith("--config.") else "--format"

    @property
    def field_flag(self) -> str:
        return ("--config.data.text_field" if self.flag.startswith("--config.")
                else "--text_field")

    def field(self) -> str:
        """The column read: text_field, whose default names input_ids for stated tokens."""
        return "input_ids" if self.stated == "tokens" and self.text_field == "text" \
            else self.text_field


@dataclasses.dataclass(frozen=True)
class Source:
    path: str               # the file; an MDS source's folder
    format: str             # a key of READERS
    compression: str = ""   # a key of COMPRESSIONS (text and jsonl)
    ids: bool = False       # its documents are token ids, not text


# ------------------------------------------------------------------ the readers' tally

BINARY_SNIFF_BYTES = 8192
NAMED_SKIPS = 5  # skipped inputs named (not only counted), the first few


@dataclasses.dataclass
class CorpusStats:
    files: int = 0
    documents: int = 0
    lines: int = 0
    skipped_binary_files: int = 0
    skipped_empty_files: int = 0
    skipped_long_lines: int = 0
    repaired_lines: int = 0  # had undecodable bytes, replaced with U+FFFD
    bytes: int = 0           # input bytes looked at (decompressed; skipped files whole)
    skipped_bytes: int = 0   # of which dropped: skipped files, long lines, bad records
    repaired_bytes: int = 0  # of which damaged: the lines that had U+FFFD put in
    records: int = 0         # JSONL lines / table rows / MDS samples read
    skipped_records: int = 0  # no usable text in the field, not an object, not JSON
    empty_records: int = 0   # an empty text: nothing to train on, nothing lost
    damaged_files: int = 0   # a compressed stream or table that ended in an error
    skipped: list = dataclasses.field(default_factory=list)  # the first few, by name

    def skip(self, what: str) -> None:
        if len(self.skipped) < NAMED_SKIPS:
            self.skipped.append(what)

    def summary(self) -> str:
        return summarize(dataclasses.asdict(self))


def summarize(stats: dict) -> str:
    """key=value counts, then the first skipped inputs by name."""
    text = ", ".join(f"{k}={v}" for k, v in stats.items() if k != "skipped")
    if stats.get("skipped"):
        text += "; skipped: " + "; ".join(stats["skipped"])
    repaired, lines = stats.get("repaired_lines", 0), stats.get("lines", 0)
    if repaired and repaired * 10 >= max(lines, 1):  # a stray byte is repaired; not a file
        text += (f"; WARNING: {repaired} of {lines} lines were not UTF-8 (their bytes became "
                 "U+FFFD): the text is likely in another encoding; convert it to UTF-8 "
                 "(e.g. iconv -f latin1 -t utf-8 FILE) and prepare again")
    return text


def add_stats(total: dict, part: dict) -> dict:
    """Sums two stats dicts (the counts add, the named skips concatenate, capped)."""
    for k, v in part.items():
        if k == "skipped":
            total[k] = (total.get(k, []) + list(v))[:NAMED_SKIPS]
        else:
            total[k] = total.get(k, 0) + v
    return total


# ------------------------------------------------------------------ plain text lines

def _is_binary(path: str) -> bool:
    with open(path, "rb") as f:
        return b"\x00" in f.read(BINARY_SNIFF_BYTES)


def _binary_reason(path: str) -> str:
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return f"{path} (UTF-16 text: convert it to UTF-8)"
    return f"{path} (binary: NUL bytes)"


def raw_lines(f, end: float, max_bytes: int, pos: int = 0
              ) -> Iterator[tuple[bytes | None, int, int]]:
    """(line, its length, where it starts) of a binary stream from `pos` up to byte `end`;
    the line is None when it is over max_bytes.

    A too-long line is consumed in bounded pieces, never held whole in memory.
    """
    while pos < end:
        raw = f.readline(max_bytes + 1)
        if not raw:
            return
        start, n = pos, len(raw)
        if n > max_bytes and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = f.readline(1 << 20)
                n += len(raw)
            pos += n
            yield None, n, start
        else:
            pos += n
            yield raw, n, start


def decode(raw: bytes, stats: CorpusStats) -> str:
    """UTF-8, its bad bytes replaced with U+FFFD and the line counted as repaired."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        line = raw.decode("utf-8", errors="replace")
        stats.repaired_lines += 1
        stats.repaired_bytes += len(raw)
    return line.rstrip("\r\n")


def read_range(path: str, start: int, end: int, one_doc_per_line: bool = False,
               max_line_chars: int = 100_000,
               stats: CorpusStats | None = None) -> Iterator[str]:
    """Documents of bytes [start, end) of one text file.

    start and end must be document starts (or 0 and the file size): then the
    documents of consecutive ranges are exactly those of the whole file
    (prepare.py snaps its cut points so).
    """
    stats = stats if stats is not None else CorpusStats()
    with open(path, "rb") as f:
        f.seek(start)
        yield from line_documents(raw_lines(f, end, 4 * max_line_chars + 2, start), path,
                                  one_doc_per_line, max_line_chars, stats)


def line_documents(lines: Iterable[tuple[bytes | None, int, int]], path: str,
                   one_doc_per_line: bool, max_line_chars: int,
                   stats: CorpusStats) -> Iterator[str]:
    """Documents of raw_lines' lines: blank-line blocks, or one a line."""
    block: list[str] = []
    for raw, n, at in lines:
        stats.bytes += n
        line = None if raw is None else decode(raw, stats)
        if line is None or len(line) > max_line_chars:
            stats.skipped_long_lines += 1
            stats.skipped_bytes += n
            stats.skip(f"{path}: a line over max_line_chars={max_line_chars} "
                       f"(at byte {at}, {n:,} bytes)")
            continue
        stats.lines += 1
        if one_doc_per_line:
            if line.strip():
                stats.documents += 1
                yield line.strip()
        elif line.strip():
            block.append(line.strip())
        elif block:
            stats.documents += 1
            yield "\n".join(block)
            block = []
    if block:
        stats.documents += 1
        yield "\n".join(block)


def usable(path: str, stats: CorpusStats) -> bool:
    """False (and counted) for empty and binary files."""
    if os.path.getsize(path) == 0:
        stats.skipped_empty_files += 1
        stats.skip(f"{path} (empty)")
        return False
    if _is_binary(path):
        skip_binary(path, _binary_reason(path), stats)
        return False
    return True


def skip_binary(path: str, reason: str, stats: CorpusStats) -> None:
    """A binary file skipped whole: counted with its bytes, named."""
    size = os.path.getsize(path)
    stats.skipped_binary_files += 1
    stats.bytes += size
    stats.skipped_bytes += size
    stats.skip(reason)


# ------------------------------------------------------------------ compression

class _ZstdFrames(io.RawIOBase):
    """zstd frames one after another, decompressed; input that ends inside a frame is an
    error (zstandard's stream_reader would end there in silence)."""

    def __init__(self, raw):
        import zstandard
        self.raw, self.new = raw, zstandard.ZstdDecompressor().decompressobj
        self.d, self.in_frame = self.new(), False
        self.pending, self.at = memoryview(b""), 0  # output not yet read, from `at`

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while self.at == len(self.pending):
            chunk = self.raw.read(1 << 17)
            if not chunk:
                if self.in_frame:
                    raise ZstdError("the file ends inside a zstd frame (truncated)")
                return 0
            out = [self.d.decompress(chunk)]
            self.in_frame = True
            while self.d.eof:  # a frame ended: the rest of the chunk starts the next
                rest, self.d = self.d.unused_data, self.new()
                self.in_frame = bool(rest)
                if not rest:
                    break
                out.append(self.d.decompress(rest))
            self.pending, self.at = memoryview(b"".join(out)), 0
        n = min(len(buf), len(self.pending) - self.at)
        buf[:n] = self.pending[self.at:self.at + n]
        self.at += n
        return n


def _zstd_open(raw):
    return io.BufferedReader(_ZstdFrames(raw), 1 << 20)


# name -> (content magic, file suffixes, opener of a decompressing stream over a raw file)
COMPRESSIONS: dict[str, tuple[bytes, tuple[str, ...], Callable]] = {
    "gzip": (b"\x1f\x8b", (".gz", ".gzip"), lambda raw: gzip.GzipFile(fileobj=raw)),
    "zstd": (b"\x28\xb5\x2f\xfd", (".zst", ".zstd"), _zstd_open),
    "bz2": (b"BZh", (".bz2",), lambda raw: bz2.BZ2File(raw)),
    "xz": (b"\xfd7zXZ\x00", (".xz",), lambda raw: lzma.LZMAFile(raw)),
}
try:
    from zstandard import ZstdError
except ImportError:  # zstandard absent: no zstd stream is ever opened
    ZstdError = OSError
# what a decompressing stream raises on a damaged file
STREAM_ERRORS = (EOFError, OSError, lzma.LZMAError, ZstdError)


def compression_of(head: bytes) -> str:
    for name, (magic, _, _) in COMPRESSIONS.items():
        if head.startswith(magic) and (name != "bz2" or head[3:4] in b"123456789"):
            return name
    return ""


def _strip_suffix(path: str) -> str:
    low = path.lower()
    for _, suffixes, _ in COMPRESSIONS.values():
        for suffix in suffixes:
            if low.endswith(suffix):
                return path[:-len(suffix)]
    return path


class _Stream:
    """A file's decompressed bytes; raw.tell() is how far into the file they come from."""

    def __init__(self, path: str, compression: str):
        self.raw = open(path, "rb")
        self.f = COMPRESSIONS[compression][2](self.raw) if compression else self.raw

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.f is not self.raw:
            self.f.close()
        self.raw.close()


def _head(path: str, compression: str = "", n: int = HEAD_BYTES) -> bytes:
    with _Stream(path, compression) as s:
        return s.f.read(n)


# ------------------------------------------------------------------ detection

MAGIC = ((b"PAR1", "parquet"), (b"ARROW1", "arrow"), (b"\xff\xff\xff\xff", "arrow"),
         (b"\x93NUMPY", "tokens"))
EXTENSIONS = {".txt": "text", ".text": "text", ".md": "text", ".rst": "text",
              ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
              ".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".npy": "tokens",
              ".mds": "mds"}
FORMAT_WORDS = {"text": "text", "jsonl": "JSON lines", "parquet": "Parquet",
                "arrow": "Arrow", "mds": "MDS", "tokens": "token ids (.npy)"}


def magic_format(head: bytes) -> str:
    return next((fmt for magic, fmt in MAGIC if head.startswith(magic)), "")


def extension_format(path: str) -> str:
    return EXTENSIONS.get(os.path.splitext(_strip_suffix(path))[1].lower(), "")


def json_lines(head: bytes, whole: bool = False) -> bool | None:
    """Whether a file's first lines are JSON objects (None: too few lines to tell); whole:
    the head is the whole file, so its last line is complete too."""
    lines = head.split(b"\n")
    lines = [ln for ln in (lines if whole else lines[:-1]) if ln.strip()][:SNIFF_LINES]
    if not lines:
        return head.lstrip().startswith(b"{") or None
    for line in lines:
        try:
            if not isinstance(json.loads(line), dict):
                return False
        except ValueError:
            return False
    return True


def _first_record_keys(head: bytes) -> str:
    try:
        return ", ".join(json.loads(head.split(b"\n", 1)[0]))[:80]
    except (ValueError, TypeError):
        return ""


def _refuse(path: str, found: str, read_as: str, opts: Options, why: str = "") -> FormatError:
    """One line: what the file is, what it was read as, the format to give."""
    why = f" ({why})" if why else ""
    return FormatError(f"{path} is {FORMAT_WORDS[found]}{why}, not {FORMAT_WORDS[read_as]}: "
                       f"give {opts.format_flag}={found}"
                       + (f", or leave {opts.format_flag} empty to read each file in its own "
                          "format" if opts.stated else f" (or rename it to the extension of "
                          f"{FORMAT_WORDS[found]})"))


def detect(path: str, opts: Options, stats: CorpusStats) -> Source | None:
    """One file's source, None when it is skipped (empty, binary; counted and named)."""
    if os.path.getsize(path) == 0:
        stats.skipped_empty_files += 1
        stats.skip(f"{path} (empty)")
        return None
    raw_head = _head(path, n=16)
    compression = compression_of(raw_head)
    by_magic = "" if compression else magic_format(raw_head)
    by_name = extension_format(path)
    stated = opts.stated
    if by_name == "mds" and not by_magic:
        folder = os.path.dirname(path) or "."
        if not os.path.exists(os.path.join(folder, "index.json")):
            raise FormatError(f"{path} is an MDS shard, and its folder {folder} has no "
                              "index.json (copied without it?): an MDS folder is read through "
                              "its index; copy index.json beside the shards")
        raise FormatError(f"{path} is an MDS shard: give its folder (with index.json) as the "
                          "input, not its shards")
    if by_magic:  # a container's own mark: the content says what it is
        if stated and stated != by_magic and not (stated == "tokens" and by_magic in
                                                   ("parquet", "arrow")):
            raise _refuse(path, by_magic, stated, opts)
        return _checked(Source(path, by_magic), opts)
    if by_name in ("parquet", "arrow", "tokens"):
        raise FormatError(f"{path} is named as {FORMAT_WORDS[by_name]} but has not its mark "
                          "(a damaged or renamed file): check the file")
    try:
        head = _head(path, compression)
    except STREAM_ERRORS as e:
        stats.damaged_files += 1
        skip_binary(path, f"{path} ({compression} stream damaged: {e})", stats)
        return None
    if b"\x00" in head[:BINARY_SNIFF_BYTES]:
        reason = "UTF-16 text: convert it to UTF-8" if head[:2] in (b"\xff\xfe", b"\xfe\xff") \
            else "binary: NUL bytes"
        skip_binary(path, f"{path} ({compression + ', ' if compression else ''}"
                           f"{reason})", stats)
        return None
    looks_json = json_lines(head, whole=len(head) < HEAD_BYTES)
    fmt = stated or by_name or ("jsonl" if looks_json else "text")
    if fmt in ("parquet", "arrow", "mds", "tokens"):
        raise _refuse(path, "jsonl" if looks_json else "text", fmt, opts)
    if fmt == "text" and looks_json and not opts.json_as_text:
        keys = _first_record_keys(head)
        raise _refuse(path, "jsonl", "text", opts, f"records like {{{keys}}}" if keys else "")
    if fmt == "jsonl" and looks_json is False:
        if head.lstrip().startswith(b"["):
            raise FormatError(f"{path} is one JSON array, not JSON lines: write one record a "
                              f"line (e.g. jq -c '.[]' FILE > FILE.jsonl)")
        if head.lstrip().startswith(b"{"):
            raise FormatError(f"{path} is one JSON document, not JSON lines (a record a "
                              "line): convert it (jq -c), or leave it out of the input")
        raise _refuse(path, "text", "jsonl", opts, "its first lines are not JSON objects")
    return Source(path, fmt, compression)


def _checked(src: Source, opts: Options) -> Source:
    """A table's or shard folder's source with its column checked: text, or token ids."""
    ids = READERS[src.format].column_kind(src, opts) == "ids"
    if opts.stated == "tokens" and not ids:
        raise FormatError(f"{src.path}: column {opts.field()!r} holds text, not token ids: "
                          f"give {opts.format_flag}={src.format}")
    return dataclasses.replace(src, ids=ids)


def _column_error(path: str, field: str, columns: dict, opts: Options) -> FormatError:
    listed = ", ".join(f"{k} ({v})" for k, v in columns.items())
    return FormatError(f"{path} has no column {field!r} (columns: {listed}): give "
                       f"{opts.field_flag}=NAME, the one that holds the text or token ids")


# ------------------------------------------------------------------ folders as sources

def _json_file(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def sources_of(files: list[str], opts: Options, stats: CorpusStats) -> list[Source]:
    """Groups expanded files into sources: an MDS folder (index.json) and a datasets folder
    (state.json) are one source each, their metadata never read as data; every other file
    is detected alone. In path order."""
    files = sorted(set(files))
    owned: set[str] = set()
    found: list[Source] = []
    indexes = sorted((f for f in files if os.path.basename(f) == "index.json"),
                     key=lambda f: f.count(os.sep))
    roots: list[str] = []
    for index in indexes:
        folder = os.path.dirname(index)
        if any(_inside(folder, r) for r in roots):
            continue  # a merged index's subfolder: its shards are the root's
        obj = _json_file(index)
        if obj is None or not isinstance(obj.get("shards"), list):
            continue
        roots.append(folder)
        if opts.stated not in ("", "mds", "tokens"):
            raise _refuse(folder, "mds", opts.stated, opts, "an index.json of shards")
        found.append(_checked(Source(folder, "mds"), opts))
    owned.update(f for f in files if any(_inside(os.path.dirname(f), r) for r in roots))
    for f in files:
        base, folder = os.path.basename(f), os.path.dirname(f)
        if base == "dataset_dict.json" and f not in owned:
            splits = ", ".join(sorted(d for d in os.listdir(folder)
                                      if os.path.isdir(os.path.join(folder, d))))
            raise FormatError(f"{folder} is a datasets DatasetDict (splits: {splits}): give "
                              f"one split's folder, e.g. {os.path.join(folder, 'train')}")
        if base == "state.json" and f not in owned:
            state = _json_file(f)
            if state is None or not isinstance(state.get("_data_files"), list):
                continue
            if opts.stated not in ("", "arrow", "tokens"):
                raise _refuse(folder, "arrow", opts.stated, opts, "a datasets folder")
            owned.update(x for x in files if os.path.dirname(x) == folder)
            for entry in state["_data_files"]:
                found.append(_checked(Source(os.path.join(folder, entry["filename"]), "arrow"),
                                      opts))
    for f in files:
        if f in owned or os.path.basename(f) == TOKENS_META:
            continue  # a source's own files, or a pre-tokenized folder's metadata
        src = detect(f, opts, stats)
        if src is not None:
            found.append(src)
    return sorted(found, key=lambda s: s.path)


# ------------------------------------------------------------------ the readers
# Every reader has: blocks(src, opts) -> [(start, end, bytes)] that read independently
# (lines readers instead cut byte ranges at document starts: `cut`), read(src, start, end,
# opts, stats) -> documents, and column_kind(src, opts) -> "text" | "ids".

@dataclasses.dataclass(frozen=True)
class Reader:
    blocks: Callable[[Source, Options], list[tuple[int, int, int]]]
    read: Callable[[Source, int, int, Options, CorpusStats], Iterator[Doc]]
    column_kind: Callable[[Source, Options], str] = lambda src, opts: "text"
    seekable: bool = False   # positions are byte offsets a reader can start from (`cut`)


# ---- text and JSON lines

def _line_bound(src: Source, opts: Options) -> int:
    return (JSONL_LINE_FACTOR * opts.max_line_chars if src.format == "jsonl"
            else 4 * opts.max_line_chars + 2)


def next_doc_start(f, offset: int, limit: int, one_doc_per_line: bool,
                   max_line_chars: int) -> int | None:
    """The first document start at or after offset of a plain file (None if none before
    limit): a line start, or with blank-line documents a line right after a blank one."""
    f.seek(offset - 1)
    f.readline()                      # to the first line that starts at or after offset
    pos = f.tell()
    if one_doc_per_line:
        return pos
    seen_blank = False
    while pos < limit:
        raw = f.readline(4 * max_line_chars + 2)
        if not raw:
            return None
        text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not text.strip() and len(text) <= max_line_chars:
            seen_blank = True
        elif seen_blank:
            return pos                # a non-blank line right after a blank one
        pos += len(raw)
    return None


def cut(src: Source, f, offset: int, limit: int, opts: Options) -> int | None:
    """A lines source's next document start at or after offset (JSON lines: a line)."""
    return next_doc_start(f, offset, limit, opts.one_doc_per_line or src.format == "jsonl",
                          opts.max_line_chars)


def _whole_file(src: Source, opts: Options) -> list[tuple[int, int, int]]:
    """One block; a compressed file's bytes estimated decompressed (from its head's ratio),
    so that units and a tokenizer's sample weigh it by its text."""
    size = os.path.getsize(src.path)
    if not src.compression:
        return [(0, size, size)]
    out = 0
    with _Stream(src.path, src.compression) as s:
        while out < 64 * RATIO_BYTES:  # to the end, or past the decompressor's read-ahead
            try:
                got = len(s.f.read(1 << 20))
            except STREAM_ERRORS:  # damaged: the reader counts and names it, not the estimate
                break
            out += got
            if not got or RATIO_BYTES <= s.raw.tell() < size:
                break
        used = s.raw.tell()
    return [(0, size, max(size, int(size * out / max(used, 1))))]


def _read_text(src: Source, start: int, end: int, opts: Options,
               stats: CorpusStats) -> Iterator[str]:
    if not src.compression:
        yield from read_range(src.path, start, end, opts.one_doc_per_line,
                                     opts.max_line_chars, stats)
        return
    with _Stream(src.path, src.compression) as s:
        yield from _guarded(src, stats, line_documents(
            raw_lines(s.f, float("inf"), _line_bound(src, opts)), src.path,
            opts.one_doc_per_line, opts.max_line_chars, stats))


def _guarded(src: Source, stats: CorpusStats, docs: Iterator[Doc]) -> Iterator[Doc]:
    """A stream's documents up to a read error (a truncated or corrupt file), then counted."""
    try:
        yield from docs
    except STREAM_ERRORS as e:
        stats.damaged_files += 1
        stats.skip(f"{src.path} (read error, the rest skipped: {e})")


def _record_text(obj, field: str) -> tuple[str | None, str]:
    """A JSON record's text, or None and why not."""
    if not isinstance(obj, dict):
        return None, f"not a JSON object ({type(obj).__name__})"
    if field not in obj:
        return None, f"no field {field!r} (fields: {', '.join(list(obj)[:8])})"
    value = obj[field]
    if not isinstance(value, str):
        return None, f"field {field!r} is {type(value).__name__}, not text"
    return value, ""


def _read_jsonl(src: Source, start: int, end: int, opts: Options,
                stats: CorpusStats) -> Iterator[str]:
    with _Stream(src.path, src.compression) as s:
        if src.compression:
            lines = raw_lines(s.f, float("inf"), _line_bound(src, opts))
        else:
            s.f.seek(start)
            lines = raw_lines(s.f, end, _line_bound(src, opts), start)
        yield from _jsonl_docs(src, lines, opts, stats)


def _jsonl_docs(src: Source, lines, opts: Options, stats: CorpusStats) -> Iterator[str]:
    """The texts of JSON-lines records; a line that is no record with text is counted."""
    field = opts.field()
    for raw, n, at in _guarded(src, stats, lines):
        stats.bytes += n
        if raw is None:
            stats.skipped_long_lines += 1
            stats.skipped_bytes += n
            stats.skip(f"{src.path}: a JSON line over {JSONL_LINE_FACTOR} x max_line_chars"
                       f" (at byte {at}, {n:,} bytes)")
            continue
        line = decode(raw, stats)
        stats.lines += 1
        if not line.strip():
            continue
        stats.records += 1
        try:
            text, why = _record_text(json.loads(line), field)
        except ValueError as e:
            text, why = None, f"not JSON ({e})"
        if text is None:
            stats.skipped_records += 1
            stats.skipped_bytes += n
            stats.skip(f"{src.path}: record at byte {at}: {why}")
            continue
        text = text.strip()
        if not text:
            stats.empty_records += 1
            continue
        stats.documents += 1
        yield text


# ---- columns of Arrow tables (Parquet and Arrow files)

def _kind_of_type(t) -> str | None:
    import pyarrow as pa
    if pa.types.is_string(t) or pa.types.is_large_string(t) or \
            getattr(pa.types, "is_string_view", lambda _: False)(t):
        return "text"
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and \
            pa.types.is_integer(t.value_type):
        return "ids"
    return None


def _schema_kind(path: str, schema, opts: Options) -> str:
    field = opts.field()
    if field not in schema.names:
        raise _column_error(path, field, {f.name: str(f.type) for f in schema}, opts)
    kind = _kind_of_type(schema.field(field).type)
    if kind is None:
        raise FormatError(f"{path}: column {field!r} is {schema.field(field).type}, neither "
                          f"text nor a list of token ids: give {opts.field_flag}=NAME")
    return kind


def _column_docs(column, src: Source, stats: CorpusStats, where: str) -> Iterator[Doc]:
    """The documents of one Arrow column chunk: str, or int64 id arrays; nulls counted."""
    import pyarrow as pa
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    for chunk in chunks:
        stats.records += len(chunk)
        nulls = chunk.null_count
        if nulls:
            stats.skipped_records += nulls
            stats.skip(f"{src.path}: {nulls} null values in {where}")
        if _kind_of_type(chunk.type) == "ids":
            offsets = chunk.offsets.to_numpy()
            values = chunk.values.to_numpy(zero_copy_only=False)
            stats.bytes += values.nbytes
            valid = chunk.is_valid().to_numpy(zero_copy_only=False)
            for i in range(len(chunk)):
                if not valid[i]:
                    continue
                ids = values[offsets[i]:offsets[i + 1]]
                if not len(ids):
                    stats.empty_records += 1
                    continue
                stats.documents += 1
                yield ids
            continue
        import pyarrow.compute as pc
        stats.bytes += int(pc.sum(pc.binary_length(chunk)).as_py() or 0)
        for text in chunk.to_pylist():
            if text is None:
                continue
            text = text.strip()
            if not text:
                stats.empty_records += 1
                continue
            stats.documents += 1
            yield text


def _parquet(path: str):
    import pyarrow.parquet as pq
    return pq.ParquetFile(path, memory_map=True)


def _parquet_blocks(src: Source, opts: Options) -> list[tuple[int, int, int]]:
    meta = _parquet(src.path).metadata
    field = opts.field()
    out = []
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        size = sum(rg.column(j).total_uncompressed_size for j in range(rg.num_columns)
                   if rg.column(j).path_in_schema.split(".")[0] == field)
        out.append((i, i + 1, max(size, 1)))
    return out


def _read_parquet(src: Source, start: int, end: int, opts: Options,
                  stats: CorpusStats) -> Iterator[Doc]:
    pf = _parquet(src.path)
    field = opts.field()
    for rg in range(start, end):
        for batch in pf.iter_batches(batch_size=TABLE_BATCH_ROWS, row_groups=[rg],
                                     columns=[field], use_threads=False):
            yield from _column_docs(batch.column(0), src, stats, f"row group {rg}")


def _arrow(path: str):
    """An Arrow IPC file (random access) or stream (what datasets writes), memory-mapped."""
    import pyarrow as pa
    source = pa.memory_map(path, "r")
    if source.read(6) == b"ARROW1":
        source.seek(0)
        return pa.ipc.open_file(source)
    source.seek(0)
    return pa.ipc.open_stream(source)


def _arrow_batches(path: str, start: int = 0, end: int | None = None):
    reader = _arrow(path)
    if hasattr(reader, "num_record_batches"):
        for i in range(start, reader.num_record_batches if end is None else end):
            yield i, reader.get_batch(i)
        return
    for i, batch in enumerate(reader):  # a stream: batches before start are only mapped
        if end is not None and i >= end:
            return
        if i >= start:
            yield i, batch


def _arrow_blocks(src: Source, opts: Options) -> list[tuple[int, int, int]]:
    field = opts.field()
    return [(i, i + 1, max(b.column(field).nbytes, 1)) for i, b in _arrow_batches(src.path)]


def _read_arrow(src: Source, start: int, end: int, opts: Options,
                stats: CorpusStats) -> Iterator[Doc]:
    field = opts.field()
    for i, batch in _arrow_batches(src.path, start, end):
        yield from _column_docs(batch.column(field), src, stats, f"record batch {i}")


# ---- MDS: mosaicml-streaming's shard folders
# index.json: {"version": 2, "shards": [{"format": "mds", "column_names", "column_encodings",
# "column_sizes" (bytes, null: variable), "samples", "compression" ("zstd[:level]", ...),
# "raw_data": {"basename", "bytes"}, "zip_data": {"basename", "bytes"} | null}, ...]}.
# A shard: uint32 sample count n, uint32 offsets[n + 1] (from the file's start), a JSON copy
# of the shard's config, then the samples; a sample is the uint32 sizes of its variable
# columns, then every column's bytes, columns in column_names order.

MDS_DECOMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "zstd": lambda b: _zstd_bytes(b), "gz": gzip.decompress, "bz2": bz2.decompress,
    "br": lambda b: _optional("brotli", "br").decompress(b),
    "snappy": lambda b: _optional("snappy", "snappy").decompress(b),
}
NDARRAY_DTYPES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16",
                  32: "uint32", 33: "int32", 34: "float32", 64: "uint64", 65: "int64",
                  66: "float64"}
NDARRAY_SHAPE_DTYPES = {0: "uint8", 1: "uint16", 2: "uint32", 3: "uint64"}


def _zstd_bytes(data: bytes) -> bytes:
    import zstandard
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data),
                                                    read_across_frames=True) as r:
        return r.read()


def _optional(module: str, what: str):
    try:
        return __import__(module)
    except ImportError:
        raise FormatError(f"MDS shards compressed with {what} need the {module} package "
                          f"(pip install {module}); or write them with zstd") from None


def _mds_index(folder: str) -> list[dict]:
    obj = _json_file(os.path.join(folder, "index.json")) or {}
    shards_ = obj.get("shards", [])
    for i, sh in enumerate(shards_):
        _check_mds_entry(folder, i, sh)
        if sh.get("format") != "mds":
            raise FormatError(f"{folder}: shards of format {sh.get('format')!r} (mosaicml-"
                              "streaming's JSON or CSV shards); only MDS shards are read")
    return shards_


# what the readers below take from each shard entry of index.json: (path, type)
MDS_ENTRY_FIELDS = (("column_names", list), ("column_encodings", list),
                    ("raw_data", dict), ("raw_data.basename", str), ("raw_data.bytes", int))


def _check_mds_entry(folder: str, i: int, sh) -> None:
    """One line for an index.json the readers could not use (hand-written or from another
    tool), before a KeyError deep in a reader."""
    where = f"{folder}/index.json: shards[{i}]"
    if not isinstance(sh, dict):
        raise FormatError(f"{where} is {type(sh).__name__}, not an object: not an MDS index")
    for path, kind in MDS_ENTRY_FIELDS:
        value = sh
        for key in path.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if not isinstance(value, kind) or isinstance(value, bool):
            raise FormatError(f"{where} has no {kind.__name__} {path!r} (got {value!r}): "
                              "not an index mosaicml-streaming writes; rewrite the folder "
                              "with streaming.MDSWriter")
    if len(sh["column_names"]) != len(sh["column_encodings"]):
        raise FormatError(f"{where}: {len(sh['column_names'])} column_names but "
                          f"{len(sh['column_encodings'])} column_encodings")


def _mds_column(folder: str, shard: dict, opts: Options) -> tuple[int, str]:
    field = opts.field()
    names = shard["column_names"]
    if field not in names:
        raise _column_error(folder, field, dict(zip(names, shard["column_encodings"])), opts)
    return names.index(field), shard["column_encodings"][names.index(field)]


def _mds_kind(encoding: str, folder: str, field: str, opts: Options) -> str:
    base = encoding.split(":")[0]
    if base == "str":
        return "text"
    if base == "json":  # a string or a list of ids: which, the format or the name says
        return "ids" if opts.stated == "tokens" or field == "input_ids" else "text"
    if base == "ndarray":
        return "ids"
    if base == "bytes":
        return "ids" if _tokens_meta(folder).get("dtype") else "bytes"
    return "other"


def _mds_column_kind(src: Source, opts: Options) -> str:
    shards_ = _mds_index(src.path)
    if not shards_:
        raise FormatError(f"{src.path}/index.json lists no shard")
    col, encoding = _mds_column(src.path, shards_[0], opts)
    kind = _mds_kind(encoding, src.path, opts.field(), opts)
    if kind == "bytes":
        raise FormatError(f"{src.path}: column {opts.field()!r} is raw bytes: name their "
                          f"integer type in {TOKENS_META} beside index.json "
                          '({"dtype": "uint32", "tokenizer": ...}) to read them as token ids')
    if kind == "other":
        raise FormatError(f"{src.path}: column {opts.field()!r} is {encoding}, neither text "
                          f"nor token ids: give {opts.field_flag}=NAME")
    return kind


def _mds_blocks(src: Source, opts: Options) -> list[tuple[int, int, int]]:
    return [(i, i + 1, max(int(sh["raw_data"]["bytes"]), 1))
            for i, sh in enumerate(_mds_index(src.path))]


def _mds_shard_bytes(folder: str, shard: dict) -> bytes:
    raw = os.path.join(folder, shard["raw_data"]["basename"])
    if os.path.exists(raw):
        with open(raw, "rb") as f:
            return f.read()
    z = shard.get("zip_data")
    if not z:
        raise FormatError(f"{folder}: shard {shard['raw_data']['basename']} is missing")
    algo = (shard.get("compression") or "").split(":")[0]
    if algo not in MDS_DECOMPRESS:
        raise FormatError(f"{folder}: shards compressed with {algo!r}; read are "
                          f"{', '.join(MDS_DECOMPRESS)}")
    path = os.path.join(folder, z["basename"])
    if not os.path.exists(path):
        raise FormatError(f"{folder}: shard {z['basename']} is missing")
    with open(path, "rb") as f:
        return MDS_DECOMPRESS[algo](f.read())


def _ndarray(data: memoryview, encoding: str) -> np.ndarray:
    """mosaicml-streaming's NDArray encoding: [dtype byte] [ndim|shape-dtype byte, shape]
    values, the bracketed parts present only when the encoding does not fix them."""
    args = encoding.split(":")[1:]
    i = 0
    if args:
        dtype = args[0]
    else:
        dtype, i = NDARRAY_DTYPES[data[0]], 1
    if len(args) > 1:
        shape = tuple(int(x) for x in args[1].split(","))
    else:
        ndim, shape_dtype = data[i] >> 2, NDARRAY_SHAPE_DTYPES[data[i] % 4]
        i += 1
        n = ndim * np.dtype(shape_dtype).itemsize
        shape = tuple(np.frombuffer(data[i:i + n], shape_dtype).tolist())
        i += n
    return np.frombuffer(data[i:], dtype).reshape(shape)


def _mds_value(data: memoryview, encoding: str, folder: str, stats: CorpusStats):
    base = encoding.split(":")[0]
    if base == "str":
        return decode(bytes(data), stats)
    if base == "json":
        return json.loads(bytes(data).decode("utf-8"))
    if base == "ndarray":
        return _ndarray(data, encoding)
    return np.frombuffer(data, _tokens_meta(folder)["dtype"])  # bytes of ids


def _read_mds(src: Source, start: int, end: int, opts: Options,
              stats: CorpusStats) -> Iterator[Doc]:
    shards_ = _mds_index(src.path)
    for k in range(start, end):
        shard = shards_[k]
        col, encoding = _mds_column(src.path, shard, opts)
        sizes = shard["column_sizes"]
        variable = [j for j, size in enumerate(sizes) if size is None]
        data = memoryview(_mds_shard_bytes(src.path, shard))
        n = int(np.frombuffer(data[:4], np.uint32)[0])
        offsets = np.frombuffer(data[4:8 + 4 * n], np.uint32)
        for s in range(n):
            sample = data[offsets[s]:offsets[s + 1]]
            var = np.frombuffer(sample[:4 * len(variable)], np.uint32)
            lengths = list(sizes)
            for j, size in zip(variable, var):
                lengths[j] = int(size)
            at = 4 * len(variable) + sum(lengths[:col])
            stats.records += 1
            stats.bytes += lengths[col]
            value = _mds_value(sample[at:at + lengths[col]], encoding, src.path, stats)
            doc = _mds_doc(value, src, stats, f"shard {k} sample {s}")
            if doc is not None:
                yield doc


def _mds_doc(value, src: Source, stats: CorpusStats, where: str) -> Doc | None:
    if isinstance(value, str) and not src.ids:
        value = value.strip()
        if not value:
            stats.empty_records += 1
            return None
    elif isinstance(value, (list, np.ndarray)) and src.ids:
        value = np.asarray(value)
        if value.ndim != 1 or not np.issubdtype(value.dtype, np.integer):
            stats.skipped_records += 1
            stats.skip(f"{src.path}: {where}: not a 1-D array of integer ids")
            return None
        if not len(value):
            stats.empty_records += 1
            return None
    else:
        stats.skipped_records += 1
        stats.skip(f"{src.path}: {where}: a {type(value).__name__}, not "
                   f"{'token ids' if src.ids else 'text'}")
        return None
    stats.documents += 1
    return value


# ---- token ids in .npy arrays: [N, L], a document a row

def _tokens_meta(folder: str) -> dict:
    """The pre-tokenized source's metadata beside it ({} when none)."""
    return _json_file(os.path.join(folder, TOKENS_META)) or {}


def _npy(path: str) -> np.ndarray:
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        raise FormatError(f"{path}: not an array of token ids ({e})") from None
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.integer):
        raise FormatError(f"{path}: a {arr.ndim}-D {arr.dtype} array; token ids are read from "
                          "a 2-D integer array, a document a row (pad_id in tokens.json "
                          "strips a row's padding), or from MDS input_ids")
    return arr


def _npy_blocks(src: Source, opts: Options) -> list[tuple[int, int, int]]:
    arr = _npy(src.path)
    row = max(arr.shape[1] * arr.dtype.itemsize, 1)
    step = max(1, NPY_BLOCK_BYTES // row)
    return [(i, min(i + step, arr.shape[0]), row * (min(i + step, arr.shape[0]) - i))
            for i in range(0, arr.shape[0], step)]


def _read_npy(src: Source, start: int, end: int, opts: Options,
              stats: CorpusStats) -> Iterator[np.ndarray]:
    arr = _npy(src.path)
    pad = _tokens_meta(os.path.dirname(src.path)).get("pad_id")
    for i in range(start, end, 1024):
        chunk = np.asarray(arr[i:min(i + 1024, end)])
        stats.bytes += chunk.nbytes
        for ids in chunk:
            stats.records += 1
            if pad is not None:
                keep = np.flatnonzero(ids != pad)
                ids = ids[:keep[-1] + 1] if len(keep) else ids[:0]
            if not len(ids):
                stats.empty_records += 1
                continue
            stats.documents += 1
            yield ids


READERS: dict[str, Reader] = {
    "text": Reader(_whole_file, _read_text, seekable=True),
    "jsonl": Reader(_whole_file, _read_jsonl, seekable=True),
    "parquet": Reader(_parquet_blocks, _read_parquet,
                      lambda src, o: _schema_kind(src.path, _parquet(src.path).schema_arrow, o)),
    "arrow": Reader(_arrow_blocks, _read_arrow,
                    lambda src, o: _schema_kind(src.path, _arrow(src.path).schema, o)),
    "mds": Reader(_mds_blocks, _read_mds, _mds_column_kind),
    "tokens": Reader(_npy_blocks, _read_npy, lambda src, o: "ids"),
}
assert set(READERS) == set(FORMAT_NAMES)


def splittable(src: Source) -> bool:
    """Byte ranges of it read independently (a plain lines file; not a compressed one)."""
    return READERS[src.format].seekable and not src.compression


def read(src: Source, opts: Options, stats: CorpusStats, start: int = 0,
         end: int | None = None) -> Iterator[Doc]:
    """A source's documents, from block position start to end (None: all)."""
    if end is None:
        end = os.path.getsize(src.path) if READERS[src.format].seekable else \
            max((b[1] for b in READERS[src.format].blocks(src, opts)), default=0)
    return READERS[src.format].read(src, start, end, opts, stats)


def stream_positions(src: Source, opts: Options) -> Iterator[tuple[int, Doc]]:
    """(decompressed bytes read, document) of a compressed lines source: the one way to
    reach its middle (a tokenizer sample's windows)."""
    stats, read_to = CorpusStats(), [0]

    def tracked(lines):
        for raw, n, at in lines:
            read_to[0] = at + n
            yield raw, n, at
    with _Stream(src.path, src.compression) as s:
        lines = tracked(raw_lines(s.f, float("inf"), _line_bound(src, opts)))
        docs = _jsonl_docs(src, lines, opts, stats) if src.format == "jsonl" else \
            _guarded(src, stats, line_documents(lines, src.path, opts.one_doc_per_line,
                                                       opts.max_line_chars, stats))
        for doc in docs:
            yield read_to[0], doc


# ------------------------------------------------------------------ pre-tokenized sources

def check_ids(ids: np.ndarray, vocab_size: int, where: str) -> None:
    """Every id a row of the tokenizer's vocabulary, or one line naming the first that is
    not."""
    if not len(ids):
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise shards.CorpusError(
            f"{where}: token id {bad} is not in the tokenizer's vocabulary of {vocab_size}: "
            "the ids were made by another tokenizer; give the one that made them "
            "(--tokenizer / data.tokenizer)")


def tokens_folder(src: Source) -> str:
    return src.path if os.path.isdir(src.path) else os.path.dirname(src.path)


def named_tokenizer(src: Source) -> str:
    """The tokenizer a pre-tokenized source's metadata names, as a local path ("": none)."""
    name = _tokens_meta(tokens_folder(src)).get("tokenizer", "")
    if not name:
        return ""
    path = name if os.path.isabs(name) else os.path.join(tokens_folder(src), name)
    return path if os.path.exists(path) else ""


def check_tokenizer(src: Source, tok, tok_path: str) -> None:
    """A pre-tokenized source against the tokenizer given for it: the vocabulary size its
    metadata states and the tokenizer it names must be that tokenizer; never assumed."""
    meta = _tokens_meta(tokens_folder(src))
    where = os.path.join(tokens_folder(src), TOKENS_META)
    stated = meta.get("vocab_size")
    if stated is not None and int(stated) != tok.vocab_size:
        raise shards.CorpusError(f"{where} states vocab_size={stated}; the tokenizer "
                                 f"{tok_path} has {tok.vocab_size}: give the tokenizer that "
                                 "made these ids")
    if meta.get("fingerprint") and meta["fingerprint"] != tok.fingerprint():
        raise shards.CorpusError(f"{where} names tokenizer fingerprint {meta['fingerprint']}; "
                                 f"{tok_path} is {tok.fingerprint()}: give the tokenizer that "
                                 "made these ids")
    named = named_tokenizer(src)
    if named:
        from encoder.data import tokenizer as tokenizer_lib
        if tokenizer_lib.load(named).fingerprint() != tok.fingerprint():
            raise shards.CorpusError(f"{where} names the tokenizer {named}, which is not "
                                     f"{tok_path}: give the tokenizer that made these ids")
