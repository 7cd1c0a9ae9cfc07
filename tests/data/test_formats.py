"""Sources by format: files written by the ecosystem's own writers (pyarrow, datasets, the
standard library's gzip/bz2/lzma, zstandard) read to the same documents as the equivalent
text; contradicting formats refused in one line; missing fields counted and named; token ids
checked against the tokenizer and written as they are; what was skipped said with its
share, and a run refused past data.max_skipped_share."""
import bz2
import dataclasses
import gzip
import json
import lzma
import os

import ml_collections
import numpy as np
import pytest

from encoder.data import corpus, formats, pipeline, preparation, shards
from encoder.data import tokenizer as tokenizer_lib

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
zstandard = pytest.importorskip("zstandard")


def _normal(doc: str) -> str:
    """A document as a blank-line text file gives it back: lines stripped, none blank."""
    return "\n".join(ln.strip() for ln in doc.splitlines() if ln.strip())


@pytest.fixture(scope="module")
def docs():
    return list(dict.fromkeys(d for d in (_normal(x) for x in corpus.stdlib_documents()[:400])
                              if d))


def _text(path, docs):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join(docs) + "\n")
    return str(path)


def _jsonl_bytes(docs, field="text"):
    return "".join(json.dumps({"id": i, field: d, "score": 0.5}) + "\n"
                   for i, d in enumerate(docs)).encode("utf-8")


def _read(spec, fmt="", field="text", stats=None):
    stats = stats if stats is not None else corpus.CorpusStats()
    return list(corpus.read_documents(corpus.expand_paths(spec), stats=stats, fmt=fmt,
                                      text_field=field))


COMPRESSORS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress,
               ".zst": lambda b: zstandard.ZstdCompressor().compress(b)}


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
def test_compressed_text_and_jsonl_read_the_same_documents_as_text(tmp_path, docs, suffix):
    plain = _text(tmp_path / "plain.txt", docs)
    with open(plain, "rb") as f:
        (tmp_path / f"c.txt{suffix}").write_bytes(COMPRESSORS[suffix](f.read()))
    (tmp_path / f"c.jsonl{suffix}").write_bytes(COMPRESSORS[suffix](_jsonl_bytes(docs)))
    want = _read(plain)
    assert want == docs
    assert _read(str(tmp_path / f"c.txt{suffix}")) == want
    stats = corpus.CorpusStats()
    assert _read(str(tmp_path / f"c.jsonl{suffix}"), stats=stats) == want
    assert (stats.records, stats.skipped_records, stats.documents) == (len(docs), 0, len(docs))


def test_jsonl_reads_the_named_field_and_counts_and_names_records_without_it(tmp_path, docs):
    lines = _jsonl_bytes(docs[:50], field="content").decode().splitlines()
    lines[3] = json.dumps({"id": 3, "body": "no content here"})
    lines[7] = "[1, 2, 3]"
    lines[9] = '{"content": "cut short'
    lines[11] = json.dumps({"content": 42})
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    stats = corpus.CorpusStats()
    got = _read(str(path), field="content", stats=stats)
    assert got == [d for i, d in enumerate(docs[:50]) if i not in (3, 7, 9, 11)]
    assert (stats.records, stats.skipped_records) == (50, 4)
    named = " ".join(stats.skipped)
    for why in ("no field 'content' (fields: id, body)", "not a JSON object (list)",
                "not JSON", "field 'content' is int, not text"):
        assert why in named
    counts = dataclasses.asdict(stats)
    assert 0 < stats.skipped_bytes < stats.bytes
    assert corpus.dropped_share(counts) == pytest.approx(4 / 50)  # records over bytes
    assert "skipped 4 of 50 records without usable text (8.0%)" in corpus.skip_report(counts)


def test_parquet_by_row_group_and_arrow_files_read_the_same_documents(tmp_path, docs):
    table = pa.table({"id": list(range(len(docs))), "text": docs})
    pq.write_table(table, tmp_path / "d.parquet", row_group_size=37)
    with pa.OSFile(str(tmp_path / "d_file.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, table.schema) as w:
            for batch in table.to_batches(max_chunksize=50):
                w.write_batch(batch)
    with pa.OSFile(str(tmp_path / "d_stream.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as w:
            for batch in table.to_batches(max_chunksize=64):
                w.write_batch(batch)
    for name in ("d.parquet", "d_file.arrow", "d_stream.arrow"):
        stats = corpus.CorpusStats()
        assert _read(str(tmp_path / name), stats=stats) == docs, name
        assert stats.records == len(docs)
    # every block its own unit: reading the units one by one gives the same documents
    s = preparation.Settings(shard_mb=0.001)
    units, _ = preparation.plan_units(str(tmp_path / "d.parquet"), s)
    assert len(units) == -(-len(docs) // 37)
    assert [d for u in units for d in preparation.read_unit(u, s, corpus.CorpusStats())] == docs


def test_a_datasets_save_to_disk_folder_is_one_source_its_metadata_never_text(tmp_path, docs):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": docs, "n": list(range(len(docs)))})
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=2)
    stats = corpus.CorpusStats()
    assert _read(str(tmp_path / "ds"), stats=stats) == docs
    assert stats.files == 2 and not stats.skipped
    datasets.DatasetDict(train=ds, test=ds).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(formats.FormatError, match=r"DatasetDict \(splits: test, train\): give "
                                                  r"one split's folder"):
        _read(str(tmp_path / "dd"))


def test_a_missing_column_is_refused_naming_the_columns_and_the_flag(tmp_path, docs):
    pq.write_table(pa.table({"content": docs[:5], "url": ["u"] * 5}), tmp_path / "d.parquet")
    with pytest.raises(formats.FormatError, match=r"has no column 'text' \(columns: content "
                                                  r"\(string\), url \(string\)\): give "
                                                  r"--text_field=NAME"):
        preparation.plan_units(str(tmp_path / "d.parquet"), preparation.Settings())
    assert _read(str(tmp_path / "d.parquet"), field="content") == docs[:5]


def test_jsonl_read_as_text_and_other_contradictions_are_refused_naming_the_format(tmp_path,
                                                                                     docs):
    (tmp_path / "records.txt").write_bytes(_jsonl_bytes(docs[:20]))
    with pytest.raises(formats.FormatError) as e:
        preparation.plan_units(str(tmp_path / "records.txt"), preparation.Settings())
    assert "records.txt is JSON lines (records like {id, text, score}), not text: give " \
           "--format=jsonl" in str(e.value)
    (tmp_path / "d.jsonl").write_bytes(_jsonl_bytes(docs[:20]))
    with pytest.raises(formats.FormatError, match="is JSON lines .*give --config.data.format="
                                                  "jsonl"):
        preparation.plan_units(str(tmp_path / "d.jsonl"), preparation.Settings(format="text"),
                               flag="--config.data.train_files")
    pq.write_table(pa.table({"text": docs[:5]}), tmp_path / "d.parquet")
    with pytest.raises(formats.FormatError, match="d.parquet is Parquet, not text: give "
                                                  "--format=parquet"):
        preparation.plan_units(str(tmp_path / "d.parquet"), preparation.Settings(format="text"))
    plain = _text(tmp_path / "plain.txt", docs[:5])
    with pytest.raises(formats.FormatError, match="plain.txt is text .*give --format=text"):
        preparation.plan_units(plain, preparation.Settings(format="jsonl"))
    (tmp_path / "array.json").write_text(json.dumps([{"text": d} for d in docs[:3]]))
    with pytest.raises(formats.FormatError, match="one JSON array, not JSON lines"):
        _read(str(tmp_path / "array.json"))
    # without an extension the first lines decide, and a .gz is text once decompressed
    (tmp_path / "noext").write_bytes(gzip.compress(_jsonl_bytes(docs[:20])))
    assert _read(str(tmp_path / "noext")) == docs[:20]


def test_a_mixed_folder_reads_every_file_in_its_format(tmp_path, docs):
    """a.txt, b.txt.gz and c.json together: once the .gz was skipped as binary."""
    _text(tmp_path / "a.txt", docs[:10])
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(("\n\n".join(docs[10:20]) +
                                                       "\n").encode()))
    (tmp_path / "c.json").write_bytes(_jsonl_bytes(docs[20:30]))
    units, stats = preparation.plan_units(str(tmp_path), preparation.Settings())
    assert preparation.source_formats(units) == {"jsonl": 1, "text": 1, "text.gz": 1}
    got = [d for u in units for d in preparation.read_unit(u, preparation.Settings(), stats)]
    assert got == docs[:30] and stats.skipped_binary_files == 0


def test_token_ids_are_written_as_they_are_and_an_id_past_the_vocabulary_is_refused(
        tmp_path, text_corpus):
    _, tok_path = text_corpus
    tok = tokenizer_lib.load(tok_path)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, tok.vocab_size, size=(60, 24)).astype(np.uint16)
    ids[::3, 18:] = 0  # padding, stripped by the pad_id tokens.json states
    src = tmp_path / "ids"
    src.mkdir()
    np.save(src / "part0.npy", ids)
    (src / formats.TOKENS_META).write_text(json.dumps({"tokenizer": tok_path,
                                                       "vocab_size": tok.vocab_size,
                                                       "pad_id": 0}))
    out = str(tmp_path / "prep")
    m = preparation.prepare(str(src), out, preparation.Settings(valid_fraction=0.2))
    assert m["source_formats"] == {"tokens": 1}
    assert m["tokenizer"]["fingerprint"] == tok.fingerprint()  # the one tokens.json names
    written = _prepared_docs(out, m)
    want = [row[:18] if i % 3 == 0 else row for i, row in enumerate(ids.astype(np.int64))]
    assert sorted(map(tuple, written)) == sorted(map(tuple, want))
    assert m["splits"]["valid"]["documents"] > 0
    # an id at the vocabulary's size: refused, naming the file and the tokenizer to give
    ids[7, 3] = tok.vocab_size
    np.save(src / "part0.npy", ids)
    with pytest.raises(shards.CorpusError, match=rf"part0.npy .*token id {tok.vocab_size} is "
                                                 "not in the tokenizer's vocabulary"):
        preparation.prepare(str(src), str(tmp_path / "prep2"), preparation.Settings())
    # a tokenizer that is not the one tokens.json states: refused before anything is read
    (src / formats.TOKENS_META).write_text(json.dumps({"vocab_size": tok.vocab_size + 1}))
    with pytest.raises(shards.CorpusError, match="states vocab_size="):
        preparation.prepare(str(src), str(tmp_path / "prep3"), tokenizer=tok_path)
    (src / formats.TOKENS_META).unlink()
    with pytest.raises(ValueError, match="holds token ids and names no tokenizer.*give "
                                         "--tokenizer=PATH"):
        preparation.prepare(str(src), str(tmp_path / "prep4"))


def _prepared_docs(out, manifest):
    from array_record.python import array_record_module
    docs = []
    for split in shards.SPLITS:
        for sh in manifest["splits"][split]["shards"]:
            r = array_record_module.ArrayRecordReader(os.path.join(out, sh["file"]))
            docs += [shards.decode_record(b, manifest["token_dtype"]).astype(np.int64)
                     for b in r.read(list(range(sh["documents"])))]
            r.close()
    return docs


def test_a_parquet_file_prepared_end_to_end(tmp_path, docs, text_corpus):
    _, tok_path = text_corpus
    pq.write_table(pa.table({"text": docs}), tmp_path / "d.parquet", row_group_size=64)
    out = str(tmp_path / "prep")
    m = preparation.prepare(str(tmp_path / "d.parquet"), out,
                            preparation.Settings(shard_mb=0.05), tokenizer=tok_path,
                            num_workers=1)
    assert m["source_formats"] == {"parquet": 1} and m["text_field"] == "text"
    assert m["units"] > 1
    total = m["splits"]["train"]["documents"] + m["splits"]["valid"]["documents"]
    assert total == len(docs)
    tok = tokenizer_lib.load(tok_path)
    want = sorted(tuple(ids) for ids in tok.encode_batch(docs))
    assert sorted(tuple(d) for d in _prepared_docs(out, m)) == want
    assert preparation.input_report(m) == ["read 1 parquet source (field 'text')"]


def test_a_tokenizer_sample_reaches_the_end_of_a_compressed_file(tmp_path, docs):
    """Windows in a stream: read forward once, from every stratum."""
    path = tmp_path / "big.txt.zst"
    many = [f"{i} {d}" for i in range(4) for d in docs]
    path.write_bytes(zstandard.ZstdCompressor().compress(("\n\n".join(many) + "\n").encode()))
    s = preparation.Settings(valid_fraction=0.0)
    units, _ = preparation.plan_units(str(path), s)
    total = sum(len(d) for d in many)
    sample = list(preparation.sample_documents(units, s, sample_chars=total // 5))
    assert len(set(sample)) == len(sample)  # no window read twice
    assert sum(len(d) for d in sample) < total // 2
    assert any(d.startswith("3 ") for d in sample) and any(d.startswith("0 ") for d in sample)


# ------------------------------------------------------------------ said on the console

def _data_cfg(files, **kw):
    return ml_collections.ConfigDict(dict(
        train_files=files, valid_files="", one_doc_per_line=False, max_line_chars=10_000,
        valid_fraction=0.05, format="", text_field="text", max_skipped_share=0.01, **kw))


def test_the_run_says_what_was_dropped_and_refuses_past_the_share(tmp_path, docs, text_corpus,
                                                                   capsys):
    """A 50 KB one-line file beside a small text file: once dropped without a word."""
    _, tok_path = text_corpus
    d = tmp_path / "in"
    d.mkdir()
    _text(d / "text.txt", docs[:30])
    (d / "huge.txt").write_text("x" * 50_000 + "\n")
    cfg = _data_cfg(str(d))
    with pytest.raises(shards.CorpusError) as e:
        pipeline._prepared_text(str(d), cfg, 0.05, tok_path, str(tmp_path / "cache"), True,
                                lambda name: None)
    assert "more than --config.data.max_skipped_share=0.01" in str(e.value)
    out = capsys.readouterr().out
    assert "input: skipped 1 of " in out and "lines as longer than max_line_chars" in out
    assert "input: dropped 48.8 KB of the input's" in out
    cfg.max_skipped_share = 1.0  # accepted, and said again
    c = pipeline._prepared_text(str(d), cfg, 0.05, tok_path, str(tmp_path / "cache"), True,
                                lambda name: None)
    assert c.documents("train") + c.documents("valid") == 30
    assert "input: dropped" in capsys.readouterr().out


def test_latin1_text_counts_as_damaged_and_stops_the_run(tmp_path, text_corpus, capsys):
    _, tok_path = text_corpus
    (tmp_path / "l1.txt").write_bytes("caf\xe9 na\xefve r\xe9sum\xe9\n\n".encode("latin-1")
                                      * 50 + b"plain ascii\n")
    with pytest.raises(shards.CorpusError, match="skipped or damaged"):
        pipeline._prepared_text(str(tmp_path / "l1.txt"), _data_cfg(str(tmp_path / "l1.txt")),
                                0.05, tok_path, str(tmp_path / "cache"), True, lambda n: None)
    assert "input: repaired 50 of 101 lines that were not UTF-8" in capsys.readouterr().out


def test_beam_prepares_every_format_to_the_local_engine_s_corpus(tmp_path, docs, text_corpus):
    pytest.importorskip("apache_beam")
    _, tok_path = text_corpus
    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(pa.table({"text": docs[:150]}), d / "a.parquet", row_group_size=40)
    (d / "b.jsonl.gz").write_bytes(gzip.compress(_jsonl_bytes(docs[150:250])))
    _text(d / "c.txt", docs[250:])
    s = preparation.Settings(shard_mb=0.02)
    local = preparation.prepare(str(d), str(tmp_path / "local"), s, tokenizer=tok_path)
    beam = preparation.prepare_with_beam(str(d), str(tmp_path / "beam"), s, tokenizer=tok_path)
    for m in (local, beam):
        assert m["source_formats"] == {"jsonl.gz": 1, "parquet": 1, "text": 1}
    core = lambda m: (m["splits"], m["stats"])  # noqa: E731
    assert core(beam) == core(local)
    assert local["splits"]["train"]["documents"] + local["splits"]["valid"]["documents"] \
        == len(docs)


def test_a_run_on_token_ids_needs_the_tokenizer_that_made_them(tmp_path):
    np.save(tmp_path / "ids.npy", np.arange(40, dtype=np.int32).reshape(4, 10))
    cfg = _data_cfg(str(tmp_path / "ids.npy"), tokenizer="", tokenizer_type="unigram",
                    tokenizer_sample_chars=1000)
    with pytest.raises(ValueError, match=r"holds token ids \(.*ids.npy\): a tokenizer trained "
                                         "here would not be the one that made them; give "
                                         "--config.data.tokenizer=PATH"):
        pipeline._workdir_tokenizer(cfg, str(tmp_path / "wd"), 100, True, lambda n: None)


def test_a_parquet_column_of_id_lists_is_read_as_token_ids(tmp_path):
    rows = [[1, 2, 3], [7] * 9, [4, 5]]
    pq.write_table(pa.table({"input_ids": pa.array(rows, pa.list_(pa.int32()))}),
                   tmp_path / "ids.parquet")
    units, _ = preparation.plan_units(str(tmp_path / "ids.parquet"),
                                      preparation.Settings(format="tokens"))
    assert all(p.ids for u in units for p in u)
    got = [d.tolist() for u in units
           for d in preparation.read_unit(u, preparation.Settings(format="tokens"),
                                          corpus.CorpusStats(), vocab_size=8)]
    assert got == rows
    with pytest.raises(shards.CorpusError, match="token id 7 is not in the tokenizer's "
                                                 "vocabulary of 7"):
        [d for u in units for d in preparation.read_unit(
            u, preparation.Settings(format="tokens"), corpus.CorpusStats(), vocab_size=7)]


def test_a_run_prepares_raw_parquet_and_jsonl_into_its_cache(tmp_path, docs, text_corpus,
                                                             capsys):
    from encoder import config as config_lib
    _, tok_path = text_corpus
    pq.write_table(pa.table({"body": docs[:200]}), tmp_path / "a.parquet", row_group_size=50)
    (tmp_path / "b.jsonl").write_bytes(_jsonl_bytes(docs[200:], field="body"))
    data = config_lib.base_config().data
    data.update(train_files=f"{tmp_path / 'a.parquet'},{tmp_path / 'b.jsonl'}",
                tokenizer=tok_path, text_field="body", seq_len=64)
    got = pipeline.open_pretraining_data(data, str(tmp_path / "wd"), 0)
    m = got.train.corpus.manifest
    assert m["source_formats"] == {"jsonl": 1, "parquet": 1} and m["text_field"] == "body"
    assert m["splits"]["train"]["documents"] + m["splits"]["valid"]["documents"] == len(docs)
    assert len(got.train) > 0 and got.valid is not None
    assert "input: read 1 jsonl, 1 parquet sources (field 'body')" in capsys.readouterr().out


@pytest.mark.parametrize("suffix", [".gz", ".zst", ".xz"])
def test_a_truncated_stream_is_read_up_to_its_damage_and_counted(tmp_path, docs, suffix):
    whole = COMPRESSORS[suffix](("\n\n".join(docs) + "\n").encode())
    (tmp_path / f"cut.txt{suffix}").write_bytes(whole[:len(whole) // 2])
    stats = corpus.CorpusStats()
    got = _read(str(tmp_path / f"cut.txt{suffix}"), stats=stats)
    assert 0 < len(got) < len(docs) and got[:-1] == docs[:len(got) - 1]
    assert stats.damaged_files == 1 and "read error, the rest skipped" in stats.skipped[0]
    assert any("ended in a read error" in line
               for line in corpus.skip_report(dataclasses.asdict(stats)))
