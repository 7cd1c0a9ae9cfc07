"""`mine --range_min` past the corpus skips every candidate: refused before the model is
loaded, not a file of pairs without a negative and exit 0."""
import json

import pytest

from encoder import errors
from encoder.jobs import mine


def _pairs(path, n):
    path.write_text("".join(json.dumps({"text_a": f"q{i}", "text_b": f"passage {i}"}) + "\n"
                            for i in range(n)))
    return str(path)


@pytest.mark.parametrize("range_min", [9, 10, 500])
def test_a_range_past_the_corpus_is_refused_before_the_model(tmp_path, range_min):
    pairs = _pairs(tmp_path / "pairs.jsonl", 10)
    with pytest.raises(errors.UsageError, match=f"--range_min={range_min} skips every "
                       "candidate: .* holds 10 passage"):
        mine.mine_file(str(tmp_path / "no-model-needed"), pairs, str(tmp_path / "out.jsonl"),
                       range_min=range_min)
    assert not (tmp_path / "out.jsonl").exists()


def test_a_range_inside_the_corpus_reaches_the_model(tmp_path):
    pairs = _pairs(tmp_path / "pairs.jsonl", 10)
    with pytest.raises(Exception) as e:  # the next step: loading the (absent) model
        mine.mine_file(str(tmp_path / "absent-model"), pairs, str(tmp_path / "out.jsonl"),
                       range_min=8)
    assert "range_min" not in str(e.value) and "absent-model" in str(e.value)


@pytest.mark.parametrize("flag", ["relative_margin", "absolute_margin", "max_score"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_filter_is_refused(tmp_path, flag, value):
    pairs = _pairs(tmp_path / "pairs.jsonl", 10)
    with pytest.raises(errors.UsageError, match=f"--{flag}={value}: expected a finite"):
        mine.mine_file(str(tmp_path / "m"), pairs, str(tmp_path / "out.jsonl"),
                       **{flag: value})


def test_a_corpus_that_is_not_text_is_named(tmp_path):
    pairs = _pairs(tmp_path / "pairs.jsonl", 10)
    (tmp_path / "c.parquet").write_bytes(b"PAR1\xa4\xff\x00binary")
    with pytest.raises(errors.UsageError, match="--corpus=.*c.parquet is not UTF-8"):
        mine.mine_file(str(tmp_path / "m"), pairs, str(tmp_path / "out.jsonl"),
                       corpus_path=str(tmp_path / "c.parquet"))


def test_a_length_past_the_models_positions_is_refused(tmp_path, tiny_pretrained):
    pairs = _pairs(tmp_path / "pairs.jsonl", 10)
    with pytest.raises(errors.UsageError, match="--max_len=100000 is past the 512 positions"):
        mine.mine_file(tiny_pretrained, pairs, str(tmp_path / "out.jsonl"), max_len=100000)
