"""Task files checked against what their type and metric assume, at reading: a
line a type cannot use, or a split whose labels make the training or the metric degenerate,
is one TaskDataError naming file:line (or the file), before any training. The baselines
read through the same checks as fine-tuning (Task.read), so they refuse the same files."""
import json

import pytest

from encoder.tasks import baselines, qa
from encoder.tasks.files import TaskDataError
from encoder.tasks.table import TASKS

CLS = [{"text": f"text {i}", "label": "ab"[i % 2]} for i in range(6)]
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
REG = [{"text": f"text {WORDS[i]}", "label": i / 2} for i in range(6)]
QA = [{"question": "which?", "context": f"the answer is foo{i} here", "answer_text": f"foo{i}",
       "answer_start": 14} for i in range(6)]
TAGS = [{"tokens": ["a", "b", "c"], "tags": ["B-X", "I-X", "O"]} for _ in range(6)]


def _write(path, rows) -> str:
    """JSON lines; a str row is written as it is (NaN, Infinity: what json.dumps writes)."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def _refused(task, path, match, split="train"):
    with pytest.raises(TaskDataError, match=match):
        TASKS[task].read(path, split)


# One bad line in an otherwise good file: (type, good rows, the bad line at line 3, message).
BAD_LINES = {
    "null text": ("classification", CLS, {"text": None, "label": "a"},
                  r":3: 'text' is null; expected a string"),
    "numeric text": ("classification", CLS, {"text": 5, "label": "a"},
                     r":3: 'text' is a number \(5\); expected a string"),
    "numeric text_b": ("regression", REG, {"text_a": "x", "text_b": 7, "label": 1.0},
                       r":3: 'text_b' is a number \(7\)"),
    "list label": ("classification", CLS, {"text": "x", "label": ["a"]},
                   r":3: label is a list \(\[\"a\"\]\); a classification label must be a "
                   "string or an integer"),
    "NaN score": ("regression", REG, '{"text": "x", "label": NaN}',
                  r":3: regression label nan is not a finite number"),
    "infinite score": ("regression", REG, '{"text": "x", "label": -Infinity}',
                       r":3: regression label -inf is not a finite number"),
    "NaN score as text": ("regression", REG, {"text": "x", "label": "nan"},
                          r":3: regression label 'nan' is not a finite number"),
    "answer_start as a string": ("qa", QA, {**QA[0], "answer_start": "14"},
                                 r":3: answer_start is a string \('14'\).*write it as a "
                                 "number: 14"),
    "empty answer": ("qa", QA, {**QA[0], "answer_text": "", "answer_start": 0},
                     r":3: the answer is empty"),
    "null question": ("qa", QA, {**QA[0], "question": None}, r":3: 'question' is null"),
    "non-BIO tag": ("tagging", TAGS, {"tokens": ["x", "runs"], "tags": ["O", "VERB"]},
                    r":3: tag 'VERB' \(word 2, 'runs'\) is not a BIO tag .*entity F1"),
    "BIOES tag": ("tagging", TAGS, {"tokens": ["x"], "tags": ["S-PER"]},
                  r":3: tag 'S-PER' \(word 1, 'x'\) is not a BIO tag"),
    "null negative": ("contrastive", [{"text_a": "q", "text_b": "p"}] * 4,
                      {"text_a": "q", "text_b": "p", "negatives": [None]},
                      r":3: 'negatives' must be a list of strings"),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_bad_line_is_refused_at_reading_naming_file_and_line(tmp_path, case):
    task, good, bad, match = BAD_LINES[case]
    path = _write(tmp_path / "train.jsonl", good[:2] + [bad] + good[2:])
    _refused(task, path, r"train\.jsonl" + match)
    with pytest.raises(TaskDataError, match=r"train\.jsonl" + match):  # the suite's door too
        TASKS[task].read_file(path)


def test_invalid_utf8_names_the_file_line_and_byte(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_bytes(b'{"text": "ok", "label": "a"}\n{"text": "b\xff", "label": "b"}\n')
    _refused("classification", str(path),
             r"train\.jsonl:2: not valid UTF-8 \(byte 0xff at byte offset 40 of the file, "
             r"column 12 of the line\)")
    tsv = tmp_path / "train.tsv"  # the whole-file readers: GLUE TSV (with its BOM), SQuAD
    tsv.write_bytes(b"\xef\xbb\xbfsentence\tlabel\ngood\t1\nbad \xc3(\t0\n")
    _refused("classification", str(tsv), r"train\.tsv:3: not valid UTF-8 \(byte 0xc3 at byte "
                                         r"offset 29 of the file, column 5 of the line\)")
    squad = tmp_path / "train.json"
    squad.write_bytes(b'{"data": [\n{"title": "\xfe"}]}')
    _refused("qa", str(squad), r"train\.json:2: not valid UTF-8")


def test_a_squad_question_without_an_answer_is_refused(tmp_path):
    squad = {"data": [{"paragraphs": [{"context": "the answer is foo", "qas": [
        {"id": "q1", "question": "which?", "answers": [{"text": "foo", "answer_start": 14}]},
        {"id": "q2", "question": "none?", "answers": []}]}]}]}
    (tmp_path / "train.json").write_text(json.dumps(squad))
    _refused("qa", str(tmp_path / "train.json"), r"train\.json:q2: the answer is empty")
    (tmp_path / "bad.json").write_text('{"data": [{"paragraphs": [{"qas": [{}]}]}]}')
    with pytest.raises(TaskDataError, match=r"bad\.json: not a SQuAD v1.1 file"):
        qa.read_squad(str(tmp_path / "bad.json"))


def test_one_class_in_the_training_file_is_refused(tmp_path):
    path = _write(tmp_path / "train.jsonl", [{"text": f"t {i}", "label": "yes"} for i in range(5)])
    _refused("classification", path, r"train\.jsonl: only one label \('yes'\) in all 5 "
                                     "training examples")
    TASKS["classification"].read(path, "dev")  # a dev file of one class is scored as it is


def test_constant_regression_labels_are_refused_with_the_count(tmp_path):
    path = _write(tmp_path / "train.jsonl", [{"text": f"t {i}", "label": 3} for i in range(7)])
    _refused("regression", path, r"train\.jsonl: all 7 train labels are 3: .*Pearson")
    _refused("regression", path, r"train\.jsonl: all 7 dev labels are 3: Pearson and Spearman "
                                 "are undefined", split="dev")


def test_bio_tags_with_and_without_types_are_read(tmp_path):
    rows = [{"tokens": ["a", "b", "c", "d"], "tags": ["B-PER", "I-PER", "O", "I-LOC"]},
            {"tokens": ["a", "b"], "tags": ["B", "I"]}]
    assert len(TASKS["tagging"].read(_write(tmp_path / "t.jsonl", rows), "train")) == 2


@pytest.mark.parametrize("case", ["null text", "list label", "NaN score", "empty answer",
                                  "non-BIO tag", "answer_start as a string"])
def test_the_baselines_refuse_what_fine_tuning_refuses(tmp_path, case):
    task, good, bad, match = BAD_LINES[case]
    good_path = _write(tmp_path / "good.jsonl", good)
    bad_path = _write(tmp_path / "bad.jsonl", good[:2] + [bad] + good[2:])
    # scores (dev repeats the training rows: accepted here, tests/data/test_held_out_overlap.py
    # refuses it by default)
    baselines.run(task, good_path, _write(tmp_path / "dev.jsonl", good + good[:1]),
                  max_overlap=1.0)
    for train, dev in ((bad_path, good_path), (good_path, bad_path)):
        with pytest.raises(TaskDataError, match=r"bad\.jsonl" + match):
            baselines.run(task, train, dev)


def test_the_baselines_refuse_degenerate_labels_and_unseen_ones(tmp_path):
    one = _write(tmp_path / "one.jsonl", [{"text": f"t {i}", "label": "a"} for i in range(4)])
    good = _write(tmp_path / "good.jsonl", CLS)
    with pytest.raises(TaskDataError, match=r"one\.jsonl: only one label"):
        baselines.run("classification", one, good)
    flat = _write(tmp_path / "flat.jsonl", [{"text": f"t {i}", "label": 1.5} for i in range(4)])
    with pytest.raises(TaskDataError, match=r"flat\.jsonl: all 4 dev labels are 1.5"):
        baselines.run("regression", _write(tmp_path / "reg.jsonl", REG), flat)
    unseen = _write(tmp_path / "dev.jsonl", CLS[:2] + [{"text": "x", "label": "z"}])
    with pytest.raises(TaskDataError, match=r"dev\.jsonl:3: label 'z' was not seen in training"):
        baselines.run("classification", good, unseen)
    bare = _write(tmp_path / "bare.jsonl", [{"text": "x"}, {"text": "y"}])
    with pytest.raises(TaskDataError, match=r"bare\.jsonl: no labels"):
        baselines.run("classification", good, bare)


def test_a_utf8_byte_order_mark_opens_the_file_and_is_no_text(tmp_path):
    """Notepad's UTF-8 BOM once made line 1 "not valid JSON"."""
    from encoder.tasks import files
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"text": "a", "label": "x"}\n{"text": "\xef\xbb\xbfb", '
                     b'"label": "y"}\n')
    examples = files.read_jsonl(str(path), [("text", "label")])
    assert [e["text"] for e in examples] == ["a", "\ufeffb"]  # only the file's first is a BOM
