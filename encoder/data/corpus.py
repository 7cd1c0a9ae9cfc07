"""Corpora: plain-text files, folders and globs, and the embedded default corpus.

A document is a block of lines separated by a blank line (or one line, with
one_doc_per_line). Bad input never crashes a run: binary and empty files,
undecodable bytes and absurdly long lines are skipped or repaired and counted
in CorpusStats, with their bytes, and `skip_report` says what that was as a share
of the input (every command that prepares prints it). An empty corpus is an error.
Other formats (JSONL, Parquet, Arrow, MDS, token ids, compressed text) are read by
encoder/data/formats.py, which counts into the same CorpusStats.

The embedded corpus needs no download: it is the Python standard library's own
documentation, the `pydoc_data` topics plus the docstrings of the
standard-library modules (read with `ast`, without importing anything).
"""
import ast
import glob
import hashlib
import json
import os
import sys
import sysconfig
import zlib
from typing import Iterable, Iterator

import numpy as np

from encoder.data import formats, shards
# the readers' tally lives with the readers (formats.py); named here as before
from encoder.data.formats import CorpusStats, add_stats, summarize  # noqa: F401

# ------------------------------------------------------------------ what was skipped, said

def _size(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    return ""


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "?"


def dropped_share(stats: dict) -> float:
    """The share of the input dropped or damaged: bytes of skipped files, long lines, bad
    records and repaired (U+FFFD) lines over the bytes looked at, or skipped records over
    records read (a table's rows have no bytes of their own), whichever is larger."""
    by_bytes = (stats.get("skipped_bytes", 0) + stats.get("repaired_bytes", 0)) / \
        max(stats.get("bytes", 0), 1)
    by_records = stats.get("skipped_records", 0) / max(stats.get("records", 0), 1)
    return max(by_bytes, by_records)


def skip_report(stats: dict) -> list[str]:
    """One console line for each kind of input skipped or repaired, with its share of the
    input; none when nothing was. Every command that prepares prints these."""
    total = stats.get("bytes", 0)
    lines = []
    files = stats.get("files", 0)
    skipped_files = {"binary": stats.get("skipped_binary_files", 0),
                     "empty": stats.get("skipped_empty_files", 0)}
    whole = sum(skipped_files.values()) + files
    if skipped_files["binary"]:
        lines.append(f"skipped {skipped_files['binary']:,} of {whole:,} files as binary "
                     "(NUL bytes, UTF-16, or a format it is not read as)")
    if skipped_files["empty"]:
        lines.append(f"skipped {skipped_files['empty']:,} of {whole:,} files as empty")
    if stats.get("damaged_files"):
        lines.append(f"{stats['damaged_files']:,} files ended in a read error (a truncated or "
                     "corrupt compressed stream or table): read up to the error")
    n_lines = stats.get("lines", 0) + stats.get("skipped_long_lines", 0)
    if stats.get("skipped_long_lines"):
        lines.append(f"skipped {stats['skipped_long_lines']:,} of {n_lines:,} lines as "
                     "longer than max_line_chars")
    if stats.get("repaired_lines"):
        lines.append(f"repaired {stats['repaired_lines']:,} of {n_lines:,} lines that were "
                     f"not UTF-8 (their bad bytes became U+FFFD): "
                     f"{_size(stats.get('repaired_bytes', 0))}, "
                     f"{_pct(stats.get('repaired_bytes', 0), total)} of the input's bytes")
    if stats.get("skipped_records"):
        lines.append(f"skipped {stats['skipped_records']:,} of {stats.get('records', 0):,} "
                     f"records without usable text "
                     f"({_pct(stats['skipped_records'], stats.get('records', 0))})")
    if stats.get("skipped_bytes"):
        lines.append(f"dropped {_size(stats['skipped_bytes'])} of the input's {_size(total)} "
                     f"({_pct(stats['skipped_bytes'], total)})")
    if lines and stats.get("skipped"):
        lines.append("first named: " + "; ".join(stats["skipped"]))
    return lines


def check_dropped(stats: dict, max_share: float, field: str) -> None:
    """Refuses a corpus whose dropped or damaged share is over max_share, naming field."""
    share = dropped_share(stats)
    if share > max_share:
        raise shards.CorpusError(
            f"{100 * share:.1f}% of the input was skipped or damaged (see the lines above: "
            f"{'; '.join(skip_report(stats)[:3])}), more than {field}={max_share}: fix the "
            f"input (give its format, convert its encoding), or raise {field} to train on "
            "what is left")


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


def read_documents(paths: Iterable[str], one_doc_per_line: bool = False,
                   max_line_chars: int = 100_000,
                   stats: CorpusStats | None = None, fmt: str = "",
                   text_field: str = "text") -> Iterator[str]:
    """Yields documents from files of any format (formats.py; fmt "" detects each file's),
    counting what it skips or repairs. Pre-tokenized sources are refused here: they are
    read by a prepare, which checks them against a tokenizer."""
    stats = stats if stats is not None else CorpusStats()
    opts = formats.Options(one_doc_per_line, max_line_chars, text_field, fmt)
    for src in formats.sources_of(list(paths), opts, stats):
        if src.ids:
            raise shards.CorpusError(f"{src.path} holds token ids ({src.format}); it is read "
                                     "through a prepare (python -m encoder prepare "
                                     "--tokenizer=...), not as text")
        stats.files += 1
        yield from formats.read(src, opts, stats)


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


def is_validation(doc, valid_fraction: float) -> bool:
    """Deterministic split by content hash: stable across runs and machines. A document
    of token ids is hashed by its ids (as int64), whatever their stored type."""
    data = doc.encode("utf-8") if isinstance(doc, str) else \
        np.asarray(doc, np.int64).astype("<i8").tobytes()
    return (zlib.crc32(data) % 10_000) < valid_fraction * 10_000


def load_corpus(data_cfg) -> tuple[list[str], list[str], CorpusStats]:
    """Train and validation documents from the data config.

    No train_files: the embedded corpus, split by content hash. train_files
    without valid_files: the same hash split of the given files.
    """
    stats = CorpusStats()
    fmt, field = data_cfg.get("format", ""), data_cfg.get("text_field", "text")
    if data_cfg.train_files:
        docs = list(read_documents(expand_paths(data_cfg.train_files), data_cfg.one_doc_per_line,
                                   data_cfg.max_line_chars, stats, fmt, field))
        if data_cfg.valid_files:
            valid = list(read_documents(expand_paths(data_cfg.valid_files),
                                        data_cfg.one_doc_per_line, data_cfg.max_line_chars,
                                        CorpusStats(), fmt, field))
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
