"""Corpora: plain-text files, folders and globs, and the embedded default corpus.

A document is a block of lines separated by a blank line (or one line, with
one_doc_per_line). Bad input never crashes a run: binary and empty files,
undecodable bytes and absurdly long lines are skipped or repaired and counted
in CorpusStats. An empty corpus is an error.

The embedded corpus needs no download: it is the Python standard library's own
documentation, the `pydoc_data` topics plus the docstrings of the
standard-library modules (read with `ast`, without importing anything).
"""
import ast
import dataclasses
import glob
import hashlib
import json
import os
import sys
import sysconfig
import zlib
from typing import Iterable, Iterator

from encoder.data import shards

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


def _prepared_looking(folder: str) -> str | None:
    """Why a folder must not be read as text: a prepared corpus, finished or not."""
    if os.path.isfile(os.path.join(folder, shards.MANIFEST)):
        return (f"{folder} is a prepared corpus: give it alone as data.train_files (several "
                "prepared corpora are not read as one; prepare their text together), and "
                "never inside a folder of text")
    return shards.incomplete_reason(folder)


def expand_paths(spec: str | Iterable[str]) -> list[str]:
    """Comma-separated paths, globs and folders (recursive) -> sorted file list."""
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    files = []
    for item in filter(None, items):
        if os.path.isdir(item):
            for root, dirs, names in os.walk(item):
                why = _prepared_looking(root)
                if why:  # its plan, markers and manifest are not text to train on
                    raise shards.CorpusError(why)
                dirs.sort()
                files.extend(os.path.join(root, n) for n in names)
        elif any(c in item for c in "*?["):
            matched = [p for p in glob.glob(item, recursive=True) if os.path.isfile(p)]
            if not matched:
                raise FileNotFoundError(f"glob {item!r} matched no file")
            files.extend(matched)
        elif os.path.isfile(item):
            files.append(item)
        else:
            raise FileNotFoundError(f"no such file, folder or glob: {item!r}")
    return sorted(set(files))


def _is_binary(path: str) -> bool:
    with open(path, "rb") as f:
        return b"\x00" in f.read(BINARY_SNIFF_BYTES)


def _binary_reason(path: str) -> str:
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return f"{path} (UTF-16 text: convert it to UTF-8)"
    return f"{path} (binary: NUL bytes)"


def _raw_lines(f, end: int, max_bytes: int) -> Iterator[bytes | None]:
    """Lines of a binary file up to byte `end`; None for a line over max_bytes.

    A too-long line is consumed in bounded pieces, never held whole in memory.
    """
    pos = f.tell()
    while pos < end:
        raw = f.readline(max_bytes + 1)
        if not raw:
            return
        pos += len(raw)
        if len(raw) > max_bytes and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = f.readline(1 << 20)
                pos += len(raw)
            yield None
        else:
            yield raw


def _decode(raw: bytes, stats: CorpusStats) -> str:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        line = raw.decode("utf-8", errors="replace")
        stats.repaired_lines += 1
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
    block: list[str] = []
    with open(path, "rb") as f:
        f.seek(start)
        for raw in _raw_lines(f, end, 4 * max_line_chars + 2):
            line = None if raw is None else _decode(raw, stats)
            if line is None or len(line) > max_line_chars:
                stats.skipped_long_lines += 1
                stats.skip(f"{path}: a line over max_line_chars={max_line_chars} "
                           f"(before byte {f.tell()})")
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
        stats.skipped_binary_files += 1
        stats.skip(_binary_reason(path))
        return False
    return True


def read_documents(paths: Iterable[str], one_doc_per_line: bool = False,
                   max_line_chars: int = 100_000,
                   stats: CorpusStats | None = None) -> Iterator[str]:
    """Yields documents from text files, counting what it skips or repairs."""
    stats = stats if stats is not None else CorpusStats()
    for path in paths:
        if not usable(path, stats):
            continue
        stats.files += 1
        yield from read_range(path, 0, os.path.getsize(path), one_doc_per_line,
                              max_line_chars, stats)


def _docstrings(source: str) -> Iterator[str]:
    tree = ast.parse(source)
    nodes = [tree] + [n for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    for node in nodes:
        doc = ast.get_docstring(node)
        if doc and len(doc) >= 40:
            yield doc


def _stdlib_files() -> list[str]:
    stdlib = sysconfig.get_paths()["stdlib"]
    files = []
    for root, dirs, names in os.walk(stdlib):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "test", "tests",
                                                      "idlelib", "__pycache__", "lib2to3"))
        files.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(".py"))
    return sorted(files)


def _stdlib_cache_path(files: list[str]) -> str:
    """A per-user cache file keyed by the interpreter and every source file's size and date."""
    h = hashlib.sha256(sys.version.encode())
    for path in files:
        st = os.stat(path)
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "encoder", f"stdlib-{h.hexdigest()[:20]}.json")


def stdlib_documents() -> list[str]:
    """The pydoc topics and the stdlib modules' docstrings, in a fixed order.

    Parsing ~650 modules takes about 10 s on the 2-core VM, so the result is
    cached per user (~/.cache/encoder), keyed by the Python version and every
    source file's size and date; an unwritable cache is skipped.
    """
    from pydoc_data import topics
    files = _stdlib_files()
    cache = _stdlib_cache_path(files)
    try:
        with open(cache, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        pass
    docs = [topics.topics[k].strip() for k in sorted(topics.topics)]
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                docs.extend(_docstrings(f.read()))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # a few stdlib files are deliberately broken (test data)
    docs = [d for d in docs if d]
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        tmp = f"{cache}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(docs, f)
        os.replace(tmp, cache)  # atomic: concurrent runs never read half a file
    except OSError:
        pass
    return docs


def is_validation(doc: str, valid_fraction: float) -> bool:
    """Deterministic split by content hash: stable across runs and machines."""
    return (zlib.crc32(doc.encode("utf-8")) % 10_000) < valid_fraction * 10_000


def load_corpus(data_cfg) -> tuple[list[str], list[str], CorpusStats]:
    """Train and validation documents from the data config.

    No train_files: the embedded corpus, split by content hash. train_files
    without valid_files: the same hash split of the given files.
    """
    stats = CorpusStats()
    if data_cfg.train_files:
        docs = list(read_documents(expand_paths(data_cfg.train_files), data_cfg.one_doc_per_line,
                                   data_cfg.max_line_chars, stats))
        if data_cfg.valid_files:
            valid = list(read_documents(expand_paths(data_cfg.valid_files),
                                        data_cfg.one_doc_per_line, data_cfg.max_line_chars,
                                        CorpusStats()))
            train = docs
        else:
            train = [d for d in docs if not is_validation(d, data_cfg.valid_fraction)]
            valid = [d for d in docs if is_validation(d, data_cfg.valid_fraction)]
    else:
        docs = stdlib_documents()
        stats.documents = len(docs)
        train = [d for d in docs if not is_validation(d, data_cfg.valid_fraction)]
        valid = [d for d in docs if is_validation(d, data_cfg.valid_fraction)]
    if not train:
        raise ValueError(f"the training corpus is empty ({stats.summary()}); "
                         f"check data.train_files={data_cfg.train_files!r}")
    return train, valid, stats


# ------------------------------------------------------------------ what a run's data is

def fingerprint(spec: str, previous: dict | None = None) -> dict:
    """A run's data, as a restart compares it: a prepared corpus by its manifest (plan,
    tokenizer, every shard's checksum), plain files by name, size and content hash.

    A file whose size and date match `previous` keeps its recorded hash (a restart does
    not re-read an unchanged corpus); the embedded corpus is named by the interpreter.
    """
    if not spec:
        return {}
    if spec == "stdlib":
        return {"stdlib": sys.version}
    if shards.is_prepared(spec):
        with open(os.path.join(spec, shards.MANIFEST)) as f:
            m = json.load(f)
        h = hashlib.sha256()
        for split in shards.SPLITS:
            for sh in m.get("splits", {}).get(split, {}).get("shards", []):
                h.update(f"{split}\0{sh['file']}\0{sh['sha256']}\n".encode())
        return {"prepared": os.path.abspath(spec), "plan": m.get("plan"),
                "tokenizer": m.get("tokenizer", {}).get("fingerprint"),
                "documents": {s: m["splits"][s]["documents"] for s in shards.SPLITS},
                "shards": h.hexdigest()[:20]}
    old = (previous or {}).get("files", {})
    files = {}
    for path in expand_paths(spec):
        st = os.stat(path)
        key = os.path.abspath(path)
        was = old.get(key)
        if was and was[0] == st.st_size and was[1] == st.st_mtime_ns:
            digest = was[2]
        else:
            digest = shards.file_sha256(path)[:20]
        files[key] = [st.st_size, st.st_mtime_ns, digest]
    return {"files": files}


def fingerprint_diff(old: dict, new: dict, limit: int = 8) -> list[str]:
    """What changed between two fingerprints, one line each (empty: the same data)."""
    if not old and not new:
        return []
    if set(old) != set(new) or "files" not in old:
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        return [f"{k}: {old.get(k, '<absent>')} -> {new.get(k, '<absent>')}" for k in keys]
    a, b = old["files"], new["files"]
    lines = [f"file added: {p}" for p in sorted(set(b) - set(a))]
    lines += [f"file removed: {p}" for p in sorted(set(a) - set(b))]
    for p in sorted(set(a) & set(b)):
        if a[p][2] != b[p][2]:
            lines.append(f"file changed: {p} ({a[p][0]:,} -> {b[p][0]:,} bytes)")
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more"]
    return lines
