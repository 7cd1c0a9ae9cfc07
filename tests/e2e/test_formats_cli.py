"""`python -m encoder prepare` on the formats users have: JSON records prepared as records
(once one document of JSON syntax, exit 0), a mixed folder read whole with what it skipped
said on the console with its share, and a stated format the content contradicts refused in
one line naming the format to give."""
import gzip
import json

import pytest

from helpers import run_module

pytestmark = pytest.mark.e2e


def test_prepare_reads_json_records_and_says_what_it_skipped(tmp_path, text_corpus):
    _, tok = text_corpus
    d = tmp_path / "in"
    d.mkdir()
    records = [{"id": i, "url": f"https://x/{i}", "text": f"record number {i} says hello.",
                "score": i / 7} for i in range(600)]
    (d / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (d / "more.txt.gz").write_bytes(gzip.compress(b"a gzip document\n\nand another\n"))
    (d / "x.bin").write_bytes(b"\x00\x01" * 100)
    rc, out, err = run_module("encoder", "prepare", f"--input={d}", f"--out={tmp_path / 'p'}",
                              f"--tokenizer={tok}", "--num_workers=1")
    assert rc == 0, err
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    sp = manifest["splits"]
    assert sp["train"]["documents"] + sp["valid"]["documents"] == 602
    assert sp["valid"]["documents"] > 0
    assert "input: read 1 jsonl, 1 text.gz sources (field 'text')" in out
    assert "input: skipped 1 of 3 files as binary" in out
    assert "x.bin (binary: NUL bytes)" in out
    rc, out, err = run_module("encoder", "prepare", f"--input={d / 'data.jsonl'}",
                              f"--out={tmp_path / 'q'}", f"--tokenizer={tok}", "--format=text")
    assert rc == 1 and err.count("\n") == 1, err
    assert "data.jsonl is JSON lines (records like {id, url, text, score}), not text: give " \
           "--format=jsonl" in err
    assert not (tmp_path / "q").exists()
