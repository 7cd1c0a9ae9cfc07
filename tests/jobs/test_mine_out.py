"""`encoder mine` refuses what cannot work before it loads a model, and writes only
a new file, an empty one or its own earlier output.
The command itself: tests/e2e/test_hostile_commands.py."""
import json
import os

import pytest

from encoder import errors
from encoder.jobs import mine

from helpers import snapshot, write_jsonl

NO_MODEL = "/nonexistent/model"  # every refusal here comes before the model is read


@pytest.fixture
def files(tmp_path):
    write_jsonl(tmp_path / "pairs.jsonl", [{"text_a": f"q{i}", "text_b": f"d{i}"}
                                           for i in range(4)])
    write_jsonl(tmp_path / "bad_corpus.jsonl", [{"id": "1", "body": "x"}] * 3)
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "mine_notes.jsonl").write_text('{"note": "keep me"}\n')
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.txt").write_text("keep")
    return tmp_path


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(pairs_path="nope.jsonl"), errors.UsageError, "--pairs="),
    (dict(corpus_path="nope.jsonl"), errors.UsageError, "--corpus="),
    (dict(pairs_path="empty.jsonl"), ValueError, "no examples"),
    (dict(corpus_path="bad_corpus.jsonl"), errors.UsageError, "no document to mine from (3 lines"),
    (dict(out="folder"), errors.NotOurs, "is a folder"),
    (dict(out="pairs.jsonl"), errors.NotOurs, "is the --pairs input"),
    (dict(out="bad_corpus.jsonl", corpus_path="bad_corpus.jsonl"), errors.NotOurs,
     "is the --corpus input"),
    (dict(out="mine_notes.jsonl"), errors.NotOurs, "did not write"),
    (dict(num_negatives=0), ValueError, "num_negatives must be positive"),
    (dict(range_min=5, range_max=3), ValueError, "must exceed range_min"),
])
def test_refused_before_the_model_is_read_and_nothing_written(files, kwargs, error, words):
    before = snapshot(files)
    args = dict(pairs_path="pairs.jsonl", out="triples.jsonl")
    args.update(kwargs)
    for key in ("pairs_path", "corpus_path", "out"):
        if args.get(key):
            args[key] = str(files / args[key])
    with pytest.raises(error) as e:
        mine.mine_file(NO_MODEL, **args)
    assert words in str(e.value), str(e.value)
    assert snapshot(files) == before
    assert sorted(os.listdir(files)) == sorted(["pairs.jsonl", "bad_corpus.jsonl", "empty.jsonl",
                                                "mine_notes.jsonl", "folder"])


def test_a_stopped_write_leaves_the_old_output_and_no_scratch(tmp_path):
    out = tmp_path / "triples.jsonl"
    pairs = [{"text_a": "q", "text_b": "d"}] * 3
    mine._write(str(out), pairs, [["n1"], ["n2"], ["n3"]])
    first = out.read_text()
    mine.check_out(str(out), {})  # its own output may be replaced

    def stopped():
        yield ["x"]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        mine._write(str(out), pairs, stopped())
    assert out.read_text() == first
    assert os.listdir(tmp_path) == ["triples.jsonl"]
    assert json.loads(first.splitlines()[0]) == {"text_a": "q", "text_b": "d", "negatives": ["n1"]}

