"""Inputs a new user may hand to `prepare` that used to end in a traceback deep in a reader:
a small compressed file cut inside its first read, an MDS index.json another tool wrote
without the fields the reader takes. Each is one line naming the problem, or counted."""
import gzip
import json
import random

import pytest

from encoder.data import corpus, formats

# random words: a stream that compresses little, so half of it is past detection's sniff
_RNG = random.Random(0)
DOCS = [" ".join("".join(_RNG.choice("abcdefghij") for _ in range(6)) for _ in range(40))
        for _ in range(2000)]


@pytest.mark.parametrize("compressor", [gzip.compress])
def test_a_small_truncated_stream_is_planned_then_counted_not_raised(tmp_path, compressor):
    whole = compressor(("\n\n".join(DOCS) + "\n").encode())
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(whole[:len(whole) // 2])  # cut inside what the size estimate reads
    stats = corpus.CorpusStats()
    opts = formats.Options()
    (src,) = formats.sources_of([str(path)], opts, stats)
    blocks = formats.READERS[src.format].blocks(src, opts)
    assert len(blocks) == 1 and blocks[0][2] >= path.stat().st_size
    got = list(corpus.read_documents([str(path)], stats=stats))
    assert 0 < len(got) < len(DOCS) and stats.damaged_files == 1


@pytest.mark.parametrize("entry, named", [
    (dict(format="mds", column_names=["text"], column_encodings=["str"],
          raw_data=dict(basename="shard.00000.mds")), "'raw_data.bytes'"),
    (dict(format="mds", column_names=["text"], raw_data=dict(basename="s", bytes=3)),
     "'column_encodings'"),
    (dict(format="mds", column_names=["text", "id"], column_encodings=["str"],
          raw_data=dict(basename="s", bytes=3)), "2 column_names but 1 column_encodings"),
    ("shard.00000.mds", "is str, not an object"),
])
def test_an_mds_index_without_the_fields_read_is_one_line(tmp_path, entry, named):
    folder = tmp_path / "mds"
    folder.mkdir()
    (folder / "index.json").write_text(json.dumps(dict(version=2, shards=[entry])))
    (folder / "shard.00000.mds").write_bytes(b"\0" * 16)
    stats = corpus.CorpusStats()
    with pytest.raises(formats.FormatError, match="index.json: shards\\[0\\]") as e:
        for src in formats.sources_of(corpus.expand_paths(str(folder)), formats.Options(),
                                      stats):
            formats.READERS[src.format].blocks(src, formats.Options())
    assert named in str(e.value) and "\n" not in str(e.value)


def test_an_mds_folder_without_its_index_says_the_index_is_missing(tmp_path):
    folder = tmp_path / "mds"
    folder.mkdir()
    (folder / "shard.00000.mds").write_bytes(b"\1\0\0\0" + b"\0" * 64)
    with pytest.raises(formats.FormatError, match="has no index.json"):
        formats.sources_of(corpus.expand_paths(str(folder)), formats.Options(),
                           corpus.CorpusStats())


def test_a_phase_naming_an_undeclared_source_without_files_is_refused():
    from encoder import config as config_lib
    base = dict(web=config_lib.mixture_source("/data/web.txt"))
    with pytest.raises(ValueError, match="phase 'decay': data.sources.wbe is not among the "
                       "declared sources \\(web\\) and gives no files"):
        config_lib.merge_sources(base, dict(wbe=dict(weight=1.0)), "phase 'decay'")
    # a new source with its files, and a declared one changed, are what phases may do
    got = config_lib.merge_sources(base, dict(web=dict(weight=0.5),
                                              code=dict(files="/data/code.txt", weight=1.0)))
    assert got["web"]["weight"] == 0.5 and got["web"]["files"] == "/data/web.txt"
    assert got["code"]["files"] == "/data/code.txt"


@pytest.mark.parametrize("held, trained, said", [
    (False, True, "has documents cut at blank lines, T has one document a line"),
    (True, False, "has one document a line, T has documents cut at blank lines"),
    (True, True, None), (False, False, None)])
def test_held_out_and_training_cut_by_different_rules_is_said(held, trained, said):
    from encoder.data import overlap
    line = overlap.unit_mismatch([{"settings": {"one_doc_per_line": held}}],
                                 [{"settings": {"one_doc_per_line": trained}}], "H", "T")
    assert (line is None) if said is None else (said in line and "not seen" in line)


def test_prepare_refuses_an_empty_tokenizer_sample_as_a_flag(tmp_path):
    import subprocess
    import sys
    (tmp_path / "a.txt").write_text("\n\n".join(DOCS[:50]))
    p = subprocess.run([sys.executable, "-m", "encoder", "prepare", f"--input={tmp_path}/a.txt",
                        f"--out={tmp_path}/out", "--sample_chars=0"],
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert p.returncode == 1 and lines == ["error: flag --sample_chars=0: 0 is not a positive "
                                           "integer (--helpshort lists the flags)"], p.stderr
    assert not (tmp_path / "out").exists()
