"""Skipped inputs are named, and an error names the config field the user gave."""
import ml_collections
import pytest

from encoder.data import pipeline, shards


def test_a_corpus_of_skipped_files_names_the_field_and_each_file(tmp_path):
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "x.bin").write_bytes(b"\x00\x01")
    (tmp_path / "text" / "u16.txt").write_text("hello\n", encoding="utf-16")
    data = ml_collections.ConfigDict(dict(
        tokenizer="", train_files=str(tmp_path / "text"), valid_files="", valid_fraction=0.05,
        one_doc_per_line=False, max_line_chars=100_000, tokenizer_type="unigram",
        tokenizer_sample_chars=10_000))
    with pytest.raises(shards.CorpusError) as e:
        pipeline._workdir_tokenizer(data, str(tmp_path / "wd"), 100, True, lambda name: None)
    for word in ("--config.data.train_files=", "x.bin (binary", "u16.txt (UTF-16 text"):
        assert word in str(e.value)
    assert "--input" not in str(e.value)
    assert not (tmp_path / "wd").exists()
