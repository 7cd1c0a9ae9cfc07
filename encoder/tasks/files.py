"""What every task type shares about its files: JSON lines, GLUE TSV, labels, errors.

Nothing here names a task type. A type says which fields its examples carry and
checks its own lines (encoder/tasks/<type>.py); these readers parse the formats
and name file:line in every error. Labels are indexed from the training file (or a
fine-tuned starting point's map it continues); a label neither knows is an error when a
dev/test file is featurized.
"""
import csv
import dataclasses
import io
import os
import json

import numpy as np

from encoder.data import overlap

IGNORE = -100  # a position with no label (cross-entropy skips it)


class TaskDataError(ValueError):
    pass


# The fields that hold text wherever a type has them: a string each (JSON's null, a number
# or a list there would reach the tokenizer and end in its traceback).
TEXT_FIELDS = ("text", "text_a", "text_b", "question", "context", "answer_text")


def json_kind(value) -> str:
    """A value as a JSON-file writer names it: null, true, a number (5), a list, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    if isinstance(value, list):
        return f"a list ({json.dumps(value)[:40]})"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def check_texts(example: dict, where: str) -> None:
    """Every text field the example holds is a string."""
    for key in TEXT_FIELDS:
        if key in example and not isinstance(example[key], str):
            raise TaskDataError(f"{where}: {key!r} is {json_kind(example[key])}; expected a "
                                "string")


def _not_utf8(path: str, e: UnicodeDecodeError, offset: int, line_no: int,
              column: int) -> TaskDataError:
    return TaskDataError(f"{path}:{line_no}: not valid UTF-8 (byte 0x{e.object[e.start]:02x} at "
                         f"byte offset {offset} of the file, column {column} of the line); save "
                         "the file as UTF-8")


def read_text(path: str, encoding: str = "utf-8") -> str:
    """A whole file as text; bytes that are not UTF-8 are an error naming file:line."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        at = e.start + (len(data) - len(e.object))  # utf-8-sig reports past a BOM it dropped
        line_start = data.rfind(b"\n", 0, at) + 1
        raise _not_utf8(path, e, at, data.count(b"\n", 0, at) + 1, at - line_start + 1
                        ) from None


def text_lines(path: str):
    """(line number, text) of a file's lines, split at \\n only (as JSON lines are; a
    U+2028 inside a string is no line end); bytes that are not UTF-8 name file:line."""
    offset = 0
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
                # a byte-order mark (Notepad's UTF-8) opens the file, not its first text
                yield line_no, text[1:] if line_no == 1 and text.startswith("\ufeff") else text
            except UnicodeDecodeError as e:
                raise _not_utf8(path, e, offset + e.start, line_no, e.start + 1) from None
            offset += len(raw)


def _require(example: dict, keys, path: str, line: int) -> None:
    missing = [k for k in keys if k not in example]
    if missing:
        raise TaskDataError(f"{path}:{line}: missing field(s) {missing}; found {sorted(example)}")


def read_jsonl(path: str, fields, check_line=None) -> list[dict]:
    """One JSON object per line (blank lines skipped) holding one of the field sets in
    `fields`, its text fields strings (check_texts); check_line(example, "path:line") raises
    on a line its type refuses."""
    examples = []
    for line_no, line in text_lines(path):
        if not line.strip():
            continue
        try:
            ex = json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskDataError(f"{path}:{line_no}: not valid JSON ({e.msg})") from None
        if not isinstance(ex, dict):
            raise TaskDataError(f"{path}:{line_no}: expected a JSON object, got "
                                f"{json_kind(ex)}")
        if not any(all(k in ex for k in shape) for shape in fields):
            _require(ex, fields[-1], path, line_no)
        check_texts(ex, f"{path}:{line_no}")
        if check_line is not None:
            check_line(ex, f"{path}:{line_no}")
        ex["_where"] = f"{path}:{line_no}"
        examples.append(ex)
    if not examples:
        raise TaskDataError(f"{path}: no examples")
    return examples


# GLUE TSV columns, by header name.
_GLUE_A = ("sentence", "sentence1", "question", "question1", "#1 String")
_GLUE_B = ("sentence2", "question2", "#2 String")
_GLUE_LABEL = ("label", "gold_label", "score", "is_duplicate", "Quality")


def read_glue_tsv(path: str, skipped: list | None = None) -> list[dict]:
    """A GLUE-style TSV with a header (CoLA's header-less 4-column file too).

    utf-8-sig: MRPC's header can start with a byte-order mark (it is copied from
    Microsoft's msr_paraphrase_*.txt), which would hide the `Quality` column.
    A row with fewer columns than the header is an error naming file:line, or,
    when a `skipped` list is given, appended to it and left out (QQP's train
    file has a few such rows; GLUE's own loaders drop them).
    """
    text = read_text(path, "utf-8-sig")
    rows = list(csv.reader(io.StringIO(text, newline=""), delimiter="\t",
                           quoting=csv.QUOTE_NONE))
    if not rows:
        raise TaskDataError(f"{path}: empty file")
    header = rows[0]
    if not any(h in header for h in _GLUE_A) and len(header) == 4:  # CoLA
        header, body, start = ["source", "label", "original", "sentence"], rows, 1
    else:
        body, start = rows[1:], 2
    col = {h: i for i, h in enumerate(header)}
    a = next((col[h] for h in _GLUE_A if h in col), None)
    if a is None:
        raise TaskDataError(f"{path}:1: no text column among {_GLUE_A}; header {header}")
    b_name = next((h for h in _GLUE_B if h in col), None)
    if "question" in col and "sentence" in col:  # QNLI: question + sentence
        a, b_name = col["question"], "sentence"
    label = next((col[h] for h in _GLUE_LABEL if h in col), None)
    examples = []
    for line_no, row in enumerate(body, start):
        if not row:  # a blank line is no example
            continue
        if len(row) < len(header) and skipped is not None:
            skipped.append(f"{path}:{line_no}")
            continue
        if len(row) < len(header):
            raise TaskDataError(f"{path}:{line_no}: {len(row)} columns, the header has "
                                f"{len(header)}")
        ex = {"_where": f"{path}:{line_no}"}
        if b_name:
            ex["text_a"], ex["text_b"] = row[a], row[col[b_name]]
        else:
            ex["text"] = row[a]
        if label is not None:
            ex["label"] = row[label]
        examples.append(ex)
    return examples


@dataclasses.dataclass
class LabelSet:
    """Label <-> index, fixed by the training file (a type's `label_names`), or by a
    fine-tuned starting point's label map that the training file continues (`source`
    names it; Task.fit_labels)."""
    names: list
    source: str = ""  # e.g. "init_from=DIR": the map came from there, the file extended it

    def index(self, label, where: str) -> int:
        try:
            return self.names.index(label)
        except ValueError:
            seen = (f"is neither in the training file nor in {self.source}'s label map"
                    if self.source else "was not seen in training")
            raise TaskDataError(f"{where}: label {label!r} {seen}; known labels: "
                                f"{self.names}") from None

    def extended(self, names: list) -> "LabelSet":
        """This map with the labels it lacks appended (its rows keep their indices)."""
        return LabelSet(list(self.names) + [n for n in names if n not in self.names],
                        self.source)


def encode_texts(examples, tokenizer, max_len: int) -> dict:
    """[N, T] int32 arrays of single texts or pairs ({"text"} or {"text_a", "text_b"})."""
    feats = [tokenizer.encode_example(ex.get("text", ex.get("text_a")), ex.get("text_b"), max_len)
             for ex in examples]
    return {k: np.stack([f[k] for f in feats]) for k in feats[0]}


def same_content(a: str, b: str) -> bool:
    """Whether two task files are one file or byte-identical copies (a dev set that is the
    training set scores memorisation, not generalisation)."""
    import filecmp
    if not a or not b or not os.path.isfile(a) or not os.path.isfile(b):
        return False
    return os.path.realpath(a) == os.path.realpath(b) or filecmp.cmp(a, b, shallow=False)


def refuse_training_files_as_held_out(train: str, **held_out: str) -> None:
    """Refuses a dev or test file that is the training file (by path or content): the cheap
    check, before anything is read; rows shared one by one are refuse_training_rows's."""
    for flag, path in held_out.items():
        if same_content(train, path):
            raise TaskDataError(f"{flag}={path} is the training file ({train}), by path or "
                                "content: its scores would be training scores; give a "
                                "held-out file")


# What a model reads of a row, whatever its task type: its key for the overlap check
# (labels, scores and ids left out: a dev row with a training row's text and another
# label is still a row the model was trained on).
INPUT_FIELDS = ("text", "text_a", "text_b", "question", "context", "tokens", "query",
                "passages")


def row_key(example: dict) -> bytes | None:
    """A row's input fields, whitespace runs made one (encoder/data/overlap.py); None for a
    row with none."""
    parts = []
    for name in INPUT_FIELDS:
        if name in example:
            value = example[name]
            text = (" ".join(map(str, value)) if isinstance(value, list) and all(
                isinstance(v, str) for v in value) else
                value if isinstance(value, str) else json.dumps(value, sort_keys=True))
            parts.append([name, overlap.normalise(text)])
    return overlap.text_key(json.dumps(parts)) if parts else None


def refuse_training_rows(train: list[dict], train_name: str, held_out: dict,
                         max_share: float = overlap.MAX_SHARE, accept: str = "") -> list[str]:
    """Each held-out split ({flag: (path, its rows)}) against the training rows by content:
    past max_share shared it is refused in one line (the count, the share, the first
    shared row's file:line, `accept`: the setting that takes more); below, the lines to
    say are returned (empty: none shared). The training keys are hashed once."""
    train_keys = {row_key(ex) for ex in train}
    lines = []
    for flag, (path, rows) in held_out.items():
        keys = [row_key(ex) for ex in rows]
        n, shared, first = overlap.measure(keys, iter(train_keys))
        o = overlap.Overlap(f"{flag}={path}", train_name, n, shared,
                            rows[first].get("_where", "") if first >= 0 else "")
        try:
            line = overlap.verdict(o, max_share, accept)
        except overlap.HeldOutOverlap as e:
            raise TaskDataError(str(e)) from None
        if line:
            lines.append(line)
    return lines
