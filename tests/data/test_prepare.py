"""Prepared corpora: the same rows as in-memory packing, parallel/resumed/distributed runs
that agree, an evenly drawn tokenizer sample, and clear errors for damaged corpora."""
import os

import numpy as np
import pytest

from encoder.data import corpus, packing, pipeline, preparation, shards, tokenizer as tokenizer_lib

SMALL_UNITS = preparation.Settings(shard_mb=0.05)  # ~50 KB units: many cuts inside each file


def _manifest_core(m):
    """What must agree between two prepares of the same input (not the command)."""
    return {"splits": m["splits"], "stats": m["stats"], "tokenizer": m["tokenizer"]["fingerprint"]}


@pytest.fixture(scope="module")
def prepared(text_corpus, tmp_path_factory):
    folder, tok = text_corpus
    out = str(tmp_path_factory.mktemp("prep") / "corpus")
    manifest = preparation.prepare(folder, out, SMALL_UNITS, tokenizer=tok, num_workers=1)
    return out, manifest


def test_units_cut_at_document_starts_read_the_same_documents(text_corpus):
    folder, _ = text_corpus
    files = corpus.expand_paths(folder)
    for s in (SMALL_UNITS, preparation.Settings(one_doc_per_line=True, shard_mb=0.05)):
        units, _ = preparation.plan_units(folder, s)
        assert len(units) > 6
        cut = [d for u in units for d in preparation.read_unit(u, s, corpus.CorpusStats())]
        whole = list(corpus.read_documents(files, s.one_doc_per_line))
        assert cut == whole


@pytest.mark.parametrize("restart", [False, True])
def test_prepared_rows_equal_in_memory_packing(text_corpus, prepared, restart):
    folder, tok_path = text_corpus
    out, manifest = prepared
    tok = tokenizer_lib.load(tok_path)
    docs = list(corpus.read_documents(corpus.expand_paths(folder)))
    train = [d for d in docs if not corpus.is_validation(d, 0.05)]
    valid = [d for d in docs if corpus.is_validation(d, 0.05)]
    assert manifest["splits"]["train"]["documents"] == len(train)
    assert manifest["splits"]["valid"]["documents"] == len(valid) > 0
    c = shards.PreparedCorpus(out)
    for split, split_docs in (("train", train), ("valid", valid)):
        tokens, offsets = packing.flatten(tok.encode_batch(split_docs))
        want = packing.pack_documents(tokens, offsets, 48, tok.cls_id, tok.sep_id, tok.pad_id,
                                      restart)
        got = shards.PackedRows(c, split, 48, tok.cls_id, tok.sep_id, tok.pad_id, restart)
        assert len(got) == len(want["input_ids"])
        rows = got.read_batch(range(len(got)))
        for k in want:
            np.testing.assert_array_equal(rows[k], want[k], err_msg=k)
    counts = c.token_counts()
    assert counts.sum() == manifest["splits"]["train"]["tokens"]
    train_tokens = packing.flatten(tok.encode_batch(train))[0]
    np.testing.assert_array_equal(counts, np.bincount(train_tokens, minlength=tok.vocab_size))


def test_two_workers_write_the_same_corpus(text_corpus, prepared, tmp_path):
    folder, tok = text_corpus
    m2 = preparation.prepare(folder, str(tmp_path / "w2"), SMALL_UNITS, tokenizer=tok,
                         num_workers=2)
    assert _manifest_core(m2) == _manifest_core(prepared[1])  # checksums included


def test_machines_share_the_units_and_the_last_writes_the_manifest(text_corpus, prepared,
                                                                   tmp_path):
    folder, tok = text_corpus
    out = str(tmp_path / "cluster")
    with pytest.raises(ValueError, match="no tokenizer yet"):
        preparation.prepare(folder, out, SMALL_UNITS, machine_index=0, num_machines=2)
    first = preparation.prepare(folder, out, SMALL_UNITS, tokenizer=tok, machine_index=0,
                            num_machines=2)
    assert first is None and not os.path.exists(os.path.join(out, "manifest.json"))
    last = preparation.prepare(folder, out, SMALL_UNITS, tokenizer=tok, machine_index=1,
                           num_machines=2)
    assert _manifest_core(last) == _manifest_core(prepared[1])


def test_beam_pipeline_writes_the_same_corpus(text_corpus, prepared, tmp_path):
    pytest.importorskip("apache_beam")
    folder, tok = text_corpus
    m = preparation.prepare_with_beam(folder, str(tmp_path / "beam"), SMALL_UNITS, tokenizer=tok)
    assert _manifest_core(m) == _manifest_core(prepared[1])


def test_changed_input_is_refused_on_resume(text_corpus, tmp_path):
    folder, tok = text_corpus
    out = str(tmp_path / "c")
    preparation.prepare(os.path.join(folder, "part0.txt"), out, SMALL_UNITS, tokenizer=tok)
    with pytest.raises(ValueError, match="different input or settings"):
        preparation.prepare(folder, out, SMALL_UNITS, tokenizer=tok)


def test_tokenizer_sample_is_drawn_across_the_whole_corpus(tmp_path):
    """Files ordered by topic: the sample must not come from the first file only."""
    rng = np.random.default_rng(0)
    for name, words in (("a_first.txt", ["alpha", "beta", "gamma"]),
                        ("b_second.txt", ["omega", "sigma", "delta"])):
        with open(tmp_path / name, "w") as f:
            for _ in range(4000):
                f.write(" ".join(rng.choice(words, 30)) + "\n\n")
    units, _ = preparation.plan_units(str(tmp_path), preparation.Settings(valid_fraction=0.0))
    sample = list(preparation.sample_documents(units, preparation.Settings(valid_fraction=0.0),
                                           sample_chars=100_000))
    second = sum(len(d) for d in sample if "omega" in d) / sum(len(d) for d in sample)
    assert 95_000 <= sum(len(d) for d in sample) <= 130_000
    assert 0.35 < second < 0.65


def _data_cfg(train_files, **kw):
    from encoder import config as config_lib
    cfg = config_lib.base_config().data
    cfg.train_files = train_files
    cfg.seq_len = 32
    cfg.update(kw)
    return cfg


def test_training_reads_a_prepared_folder_with_its_tokenizer(prepared, tmp_path):
    out, manifest = prepared
    data = pipeline.open_pretraining_data(_data_cfg(out), str(tmp_path), vocab_size=0)
    assert data.tokenizer.fingerprint() == manifest["tokenizer"]["fingerprint"]
    assert os.path.exists(tmp_path / "tokenizer" / "sp.model")  # the workdir keeps it
    assert len(data.valid) > 0 and len(data.train) > 10 * len(data.valid)
    first = pipeline.batch_iterator(data.train, 8, seed=0)
    assert next(first)["input_ids"].shape == (8, 32)


def test_a_tokenizer_other_than_the_corpus_is_refused(prepared, text_corpus, tmp_path):
    out, _ = prepared
    other = tokenizer_lib.train_sentencepiece(corpus.stdlib_documents()[3000:4500],
                                              str(tmp_path / "other"), 1500)
    with pytest.raises(shards.CorpusError, match="tokenized with tokenizer"):
        pipeline.open_pretraining_data(_data_cfg(out, tokenizer=other), str(tmp_path), 0)


def _copy(out, tmp_path):
    import shutil
    dst = str(tmp_path / "copy")
    shutil.copytree(out, dst)
    return dst


def test_truncated_or_missing_shards_are_named_before_training(prepared, tmp_path):
    dst = _copy(prepared[0], tmp_path)
    shard = prepared[1]["splits"]["train"]["shards"][2]["file"]
    with open(os.path.join(dst, shard), "r+b") as f:
        f.truncate(100)
    with pytest.raises(shards.CorpusError, match=shard.replace(".", r"\.")):
        pipeline.open_pretraining_data(_data_cfg(dst), str(tmp_path / "w"), 0)
    os.remove(os.path.join(dst, shard))
    with pytest.raises(shards.CorpusError, match="listed in the manifest but missing"):
        pipeline.open_pretraining_data(_data_cfg(dst), str(tmp_path / "w"), 0)


def test_corrupted_bytes_are_found_by_verify_and_named_on_read(prepared, tmp_path):
    dst = _copy(prepared[0], tmp_path)
    shard = prepared[1]["splits"]["train"]["shards"][0]
    path = os.path.join(dst, shard["file"])
    with open(path, "r+b") as f:
        f.seek(2000)  # inside the records (the file's tail is block padding)
        f.write(b"\xff" * 64)
    c = shards.PreparedCorpus(dst)
    c.verify("train")  # sizes still match: only the checksum can tell
    with pytest.raises(shards.CorpusError, match="checksum"):
        c.verify("train", checksums=True)
    tok = tokenizer_lib.load(c.tokenizer_path)
    rows = shards.PackedRows(c, "train", 64, tok.cls_id, tok.sep_id, tok.pad_id)
    with pytest.raises(shards.CorpusError, match=os.path.basename(path)):
        for i in range(len(rows)):
            row = rows[i]
            assert row["input_ids"].max() < tok.vocab_size, "corrupted ids read silently"


def test_pairs_mode_refuses_a_prepared_corpus(prepared, tmp_path):
    with pytest.raises(ValueError, match="pack_mode='pairs'"):
        pipeline.open_pretraining_data(_data_cfg(prepared[0], pack_mode="pairs"),
                                       str(tmp_path), 0, pair_task="nsp")


def test_a_byte_level_tokenizer_is_trained_and_read_back_by_prepare(text_corpus, tmp_path):
    """--tokenizer_type=byte_bpe: prepare trains a tokenizer.json folder into OUT/tokenizer,
    the shards hold its ids, and a second prepare given that tokenizer.json reads the same."""
    folder, _ = text_corpus
    out = str(tmp_path / "bb")
    m = preparation.prepare(folder, out, SMALL_UNITS, vocab_size=400, tokenizer_type="byte_bpe")
    assert "tokenizer.json" in os.listdir(os.path.join(out, "tokenizer"))
    c = shards.PreparedCorpus(out)
    tok = tokenizer_lib.load(c.tokenizer_path)
    assert tok.vocab_size == 400 and type(tok).__name__ == "HFTokenizer"
    again = preparation.prepare(folder, str(tmp_path / "again"), SMALL_UNITS,
                                tokenizer=os.path.join(out, "tokenizer", "tokenizer.json"))
    assert _manifest_core(again) == _manifest_core(m)
