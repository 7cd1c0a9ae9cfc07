"""Sources by format (encoder/data/formats.py): documents/s and MB/s of each format against
plain text in the same run, peak memory while streaming a Parquet source as it grows (100 MB
-> 1 GB of text), and the seconds from nothing to its first document. JSON lines out, no
assertion.

    python -m benchmarks.formats [--formats_mb=20] [--formats_parquet_mb=100,1000]
        [--formats_dir=DIR]

The corpora are the embedded corpus's documents repeated (each copy marked, so documents
differ) and written by each format's own writer (the standard library, zstandard, pyarrow,
mosaicml-streaming's MDSWriter when it imports); they go to --formats_dir (default: a
temporary folder) and are deleted at the end. Memory and start-up are measured in a fresh
process per size (peak resident set, VmHWM), so one reading does not inherit another's.
"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app, flags

flags.DEFINE_integer("formats_mb", 20, "formats: MB of text per format for the rows/s table")
flags.DEFINE_list("formats_parquet_mb", ["100", "1000"], "formats: Parquet sources' text MB "
                  "for peak memory and start-up")
flags.DEFINE_string("formats_dir", "", "formats: where sources go (default: a temporary "
                    "folder); removed at the end")
FLAGS = flags.FLAGS


def _documents(mb: float) -> list[str]:
    from encoder.data import corpus
    base = [d for d in corpus.stdlib_documents() if d.strip()]
    out, size, k = [], 0, 0
    while size < mb * 2**20:
        for d in base:
            doc = f"[copy {k}] " + "\n".join(ln.strip() for ln in d.splitlines() if ln.strip())
            out.append(doc)
            size += len(doc.encode("utf-8"))
            if size >= mb * 2**20:
                break
        k += 1
    return out


def _write_all(folder: str, docs: list[str]) -> dict:
    """format label -> the path its writer made."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard
    text = ("\n\n".join(docs) + "\n").encode("utf-8")
    jsonl = "".join(json.dumps({"id": i, "text": d}) + "\n" for i, d in enumerate(docs))
    paths = {"text": f"{folder}/d.txt", "text.gz": f"{folder}/d.txt.gz",
             "text.zst": f"{folder}/d.txt.zst", "jsonl": f"{folder}/d.jsonl",
             "jsonl.zst": f"{folder}/d.jsonl.zst", "parquet": f"{folder}/d.parquet",
             "arrow": f"{folder}/d.arrow", "tokens": f"{folder}/ids/d.npy"}
    with open(paths["text"], "wb") as f:
        f.write(text)
    with open(paths["text.gz"], "wb") as f:
        f.write(gzip.compress(text, 6))
    with open(paths["text.zst"], "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(text))
    with open(paths["jsonl"], "w", encoding="utf-8") as f:
        f.write(jsonl)
    with open(paths["jsonl.zst"], "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(jsonl.encode("utf-8")))
    table = pa.table({"id": list(range(len(docs))), "text": docs})
    pq.write_table(table, paths["parquet"], row_group_size=8192)
    with pa.OSFile(paths["arrow"], "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        for batch in table.to_batches(max_chunksize=1000):
            w.write_batch(batch)
    os.makedirs(f"{folder}/ids")
    rng = np.random.default_rng(0)  # as many ids as text bytes / 4, rows of 512
    n = max(1, len(text) // 4 // 512)
    np.save(paths["tokens"], rng.integers(0, 32000, size=(n, 512), dtype=np.int32))
    try:
        import types
        sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))
        from streaming import MDSWriter
        with MDSWriter(out=f"{folder}/mds", columns={"text": "str"}, compression="zstd") as w:
            for d in docs:
                w.write({"text": d})
        paths["mds"] = f"{folder}/mds"
    except ImportError:  # mosaicml-streaming is a test-only package
        pass
    return paths


def _read_rate(path: str, label: str) -> dict:
    from encoder.data import corpus, formats
    stats = corpus.CorpusStats()
    t0 = time.perf_counter()
    opts = formats.Options()
    sources = formats.sources_of(corpus.expand_paths(path), opts, stats)
    n = chars = 0
    for src in sources:
        for doc in formats.read(src, opts, stats):
            n += 1
            chars += len(doc)
    seconds = time.perf_counter() - t0
    disk = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs) \
        if os.path.isdir(path) else os.path.getsize(path)
    return {"format": label, "documents": n, "disk_mb": round(disk / 2**20, 1),
            "seconds": round(seconds, 3), "documents_per_s": round(n / seconds),
            "text_mb_per_s": round(stats.bytes / 2**20 / seconds, 1) if stats.bytes else None}


def _write_parquet(path: str, mb: float) -> None:
    """A Parquet file of about mb MB of text, written a row group at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    chunk = _documents(min(mb, 50))
    per = sum(len(d.encode("utf-8")) for d in chunk)
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    written, k, i = 0, 0, 0
    with pq.ParquetWriter(path, schema) as w:
        while written < mb * 2**20:
            docs = [f"[{k}] {d}" for d in chunk]
            w.write_table(pa.table({"id": list(range(i, i + len(docs))), "text": docs},
                                   schema=schema), row_group_size=8192)
            written += per
            i += len(docs)
            k += 1


_CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
from encoder.data import corpus, formats, preparation
def hwm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM"))
s = preparation.Settings()
units, _ = preparation.plan_units(sys.argv[1], s)
t_plan = time.perf_counter() - t0
stats = corpus.CorpusStats()
docs = preparation.read_unit(units[0], s, stats)
next(docs)
t_first = time.perf_counter() - t0
import_rss = hwm()
n = 1
for unit in units:
    for _ in (docs if unit is units[0] else preparation.read_unit(unit, s, stats)):
        n += 1
print(json.dumps({"documents": n, "units": len(units), "plan_s": round(t_plan, 3),
                  "first_document_s": round(t_first, 3),
                  "read_s": round(time.perf_counter() - t0, 1),
                  "rss_at_first_document_mb": round(import_rss / 2**20, 1),
                  "peak_rss_mb": round(hwm() / 2**20, 1)}))
"""


def _stream_parquet(path: str) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", _CHILD, path], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run():
    folder = FLAGS.formats_dir or tempfile.mkdtemp(prefix="bench-formats-")
    os.makedirs(folder, exist_ok=True)
    try:
        docs = _documents(FLAGS.formats_mb)
        paths = _write_all(folder, docs)
        rows = [_read_rate(p, label) for label, p in paths.items()]
        base = next(r for r in rows if r["format"] == "text")
        for r in rows:
            r["documents_per_s_over_text"] = round(r["documents_per_s"] /
                                                   base["documents_per_s"], 2)
            print(json.dumps({"benchmark": "formats", "what": "read", **r}), flush=True)
        for mb in map(float, FLAGS.formats_parquet_mb):
            path = os.path.join(folder, f"stream-{mb:g}.parquet")
            _write_parquet(path, mb)
            got = _stream_parquet(path)
            print(json.dumps({"benchmark": "formats", "what": "parquet_stream",
                              "text_mb": mb, "file_mb": round(os.path.getsize(path) / 2**20, 1),
                              **got}), flush=True)
            os.remove(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv):
    del argv
    run()


if __name__ == "__main__":
    app.run(main)
