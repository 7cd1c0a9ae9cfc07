"""What every task type shares about its files: JSON lines, GLUE TSV, labels, errors.

Nothing here names a task type. A type says which fields its examples carry and
checks its own lines (encoder/tasks/<type>.py); these readers parse the formats
and name file:line in every error. Labels are indexed from the training file (or a
fine-tuned starting point's map it continues); a label neither knows is an error when a
dev/test file is featurized.
"""
import csv
import dataclasses
import json

import numpy as np

IGNORE = -100  # a position with no label (cross-entropy skips it)


class TaskDataError(ValueError):
    pass


def _require(example: dict, keys, path: str, line: int) -> None:
    missing = [k for k in keys if k not in example]
    if missing:
        raise TaskDataError(f"{path}:{line}: missing field(s) {missing}; found {sorted(example)}")


def read_jsonl(path: str, fields, check_line=None) -> list[dict]:
    """One JSON object per line (blank lines skipped) holding one of the field sets in
    `fields`; check_line(example, "path:line") raises on a line its type refuses."""
    examples = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                ex = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskDataError(f"{path}:{line_no}: not valid JSON ({e.msg})") from None
            if not isinstance(ex, dict):
                raise TaskDataError(f"{path}:{line_no}: expected a JSON object")
            if not any(all(k in ex for k in shape) for shape in fields):
                _require(ex, fields[-1], path, line_no)
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
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
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
