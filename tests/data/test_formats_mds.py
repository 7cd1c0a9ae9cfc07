"""MDS folders written by mosaicml-streaming's own MDSWriter, read by formats.py's reader of
the documented layout (index.json, shard headers, column encodings, zstd/gzip shards): the
same documents as the equivalent text, and input_ids kept as written.

mosaicml-streaming imports torch and torchvision at package import; the reader here needs
neither. Its vision subpackage is left out of the import (torchvision's CPU build pairs
with torch only from torch's own index), the writer itself is the package's own."""
import json
import sys
import types

import numpy as np
import pytest

from encoder.data import corpus, formats, preparation, tokenizer as tokenizer_lib
from helpers import TORCH_GROUP

pytestmark = TORCH_GROUP  # mosaicml-streaming's writer imports torch


@pytest.fixture(scope="module")
def MDSWriter():
    pytest.importorskip("torch")
    sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))
    try:
        from streaming import MDSWriter
    except ImportError as e:
        pytest.skip(f"mosaicml-streaming does not import here: {e}")
    return MDSWriter


@pytest.fixture(scope="module")
def docs():
    return list(dict.fromkeys(
        "\n".join(ln.strip() for ln in d.splitlines() if ln.strip())
        for d in corpus.stdlib_documents()[:300]))


@pytest.mark.parametrize("compression", [None, "zstd", "gz:5"])
def test_mds_text_column_reads_the_same_documents_as_text(tmp_path, MDSWriter, docs,
                                                          compression):
    out = tmp_path / "mds"
    with MDSWriter(out=str(out), columns={"id": "int", "text": "str", "meta": "json"},
                   compression=compression, size_limit=1 << 14) as w:
        for i, d in enumerate(docs):
            w.write({"id": i, "text": d, "meta": {"k": i}})
    index = json.loads((out / "index.json").read_text())
    assert len(index["shards"]) > 5  # many shards: each a block of its own
    stats = corpus.CorpusStats()
    got = list(corpus.read_documents(corpus.expand_paths(str(out)), stats=stats))
    assert got == docs and stats.records == len(docs) and not stats.skipped
    s = preparation.Settings(shard_mb=0.03)
    units, _ = preparation.plan_units(str(out), s)
    assert len(units) > 2
    assert [d for u in units for d in preparation.read_unit(u, s, corpus.CorpusStats())] == docs


def test_mds_input_ids_are_prepared_as_written(tmp_path, MDSWriter, text_corpus):
    _, tok_path = text_corpus
    tok = tokenizer_lib.load(tok_path)
    rng = np.random.default_rng(1)
    rows = [rng.integers(0, tok.vocab_size, size=int(n)).astype(np.uint32)
            for n in rng.integers(5, 60, size=80)]
    out = tmp_path / "mds_ids"
    with MDSWriter(out=str(out), columns={"input_ids": "ndarray:uint32", "body": "str"},
                   compression="zstd", size_limit=1 << 12) as w:
        for r in rows:
            w.write({"input_ids": r, "body": "unused"})
    src = formats.Source(str(out), "mds", ids=True)
    opts = formats.Options(stated="tokens")
    got = list(formats.read(src, opts, corpus.CorpusStats()))
    assert [g.tolist() for g in got] == [r.tolist() for r in rows]
    with pytest.raises(ValueError, match="column 'body' holds text, not token ids: give "
                                         "--format=mds"):
        preparation.plan_units(str(out), preparation.Settings(format="tokens",
                                                              text_field="body"))
    prep = tmp_path / "prep"
    m = preparation.prepare(str(out), str(prep), preparation.Settings(
        format="tokens", valid_fraction=0.1, shard_mb=0.01), tokenizer=tok_path)
    assert m["source_formats"] == {"mds": 1}
    n = m["splits"]["train"]["documents"] + m["splits"]["valid"]["documents"]
    tokens = m["splits"]["train"]["tokens"] + m["splits"]["valid"]["tokens"]
    assert (n, tokens) == (len(rows), sum(len(r) for r in rows))
