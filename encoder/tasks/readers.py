"""Downstream task data: readers (JSONL, SQuAD v1.1 JSON, GLUE TSV) and featurizers.

Readers return a list of example dicts and fail on a malformed line with the
file and line number. Featurizers turn examples into fixed-shape int32
arrays for a typed head:

  classification / regression  {"text", "label"} or {"text_a", "text_b", "label"}
  tagging                      {"tokens": [...], "tags": [...]}; the label sits
                               on each word's first piece, other pieces get -100
  qa                           {"question", "context", "answer_text",
                               "answer_start"}; long contexts become overlapping
                               windows (doc stride), spans map back to characters
  contrastive                  {"text_a", "text_b"} positive pairs

Labels are indexed from the training file; a label unseen in training is an
error when a dev/test file is featurized.
"""
import csv
import dataclasses
import json

import numpy as np

IGNORE = -100


class TaskDataError(ValueError):
    pass


def _require(example: dict, keys, path: str, line: int) -> None:
    missing = [k for k in keys if k not in example]
    if missing:
        raise TaskDataError(f"{path}:{line}: missing field(s) {missing}; found {sorted(example)}")


TASK_FIELDS = {
    "classification": (("text",), ("text_a", "text_b")),
    "regression": (("text",), ("text_a", "text_b")),
    "tagging": (("tokens", "tags"),),
    "qa": (("question", "context", "answer_text", "answer_start"),),
    "contrastive": (("text_a", "text_b"),),
}


def read_jsonl(path: str, task: str) -> list[dict]:
    """One JSON object per line; blank lines are skipped."""
    shapes = TASK_FIELDS[task]
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
            if not any(all(k in ex for k in shape) for shape in shapes):
                _require(ex, shapes[-1], path, line_no)
            if task == "tagging" and len(ex["tokens"]) != len(ex["tags"]):
                raise TaskDataError(f"{path}:{line_no}: {len(ex['tokens'])} tokens but "
                                    f"{len(ex['tags'])} tags")
            if task == "qa":
                start = ex["answer_start"]
                if ex["context"][start:start + len(ex["answer_text"])] != ex["answer_text"]:
                    raise TaskDataError(f"{path}:{line_no}: answer_text is not at answer_start "
                                        "in the context")
            ex["_where"] = f"{path}:{line_no}"
            examples.append(ex)
    if not examples:
        raise TaskDataError(f"{path}: no examples")
    return examples


def read_squad(path: str) -> list[dict]:
    """SQuAD v1.1 JSON -> qa examples (every gold answer kept in `answers`)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    examples = []
    for article in data.get("data", []):
        for para in article.get("paragraphs", []):
            for qa in para.get("qas", []):
                answers = qa.get("answers") or [{"text": "", "answer_start": 0}]
                first = answers[0]
                examples.append({"id": qa.get("id"), "question": qa["question"],
                                 "context": para["context"], "answer_text": first["text"],
                                 "answer_start": first["answer_start"],
                                 "answers": [a["text"] for a in answers],
                                 "_where": f"{path}:{qa.get('id')}"})
    if not examples:
        raise TaskDataError(f"{path}: no SQuAD questions found")
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


def read_examples(path: str, task: str) -> list[dict]:
    if path.endswith(".tsv"):
        return read_glue_tsv(path)
    if path.endswith(".json") and task == "qa":
        return read_squad(path)
    return read_jsonl(path, task)


@dataclasses.dataclass
class LabelSet:
    """Label <-> index, fixed by the training file."""
    names: list

    @classmethod
    def from_examples(cls, examples, task: str) -> "LabelSet":
        if task == "tagging":
            names = sorted({t for ex in examples for t in ex["tags"]})
        else:
            names = sorted({ex["label"] for ex in examples}, key=str)
        return cls(names)

    def index(self, label, where: str) -> int:
        try:
            return self.names.index(label)
        except ValueError:
            raise TaskDataError(f"{where}: label {label!r} was not seen in training; "
                                f"known labels: {self.names}") from None


def featurize_sequences(examples, tokenizer, max_len: int, task: str, labels: LabelSet | None):
    """Classification / regression rows; label_ids for classification, floats for regression."""
    feats = [tokenizer.encode_example(ex.get("text", ex.get("text_a")), ex.get("text_b"), max_len)
             for ex in examples]
    out = {k: np.stack([f[k] for f in feats]) for k in feats[0]}
    if all("label" in ex for ex in examples):
        if task == "regression":
            out["labels"] = np.asarray([float(ex["label"]) for ex in examples], np.float32)
        else:
            out["labels"] = np.asarray([labels.index(ex["label"], ex["_where"])
                                        for ex in examples], np.int32)
    return out


def featurize_tagging(examples, tokenizer, max_len: int, labels: LabelSet):
    """Word-level tags onto pieces: first piece labelled, the rest IGNORE."""
    n = len(examples)
    ids = np.full((n, max_len), tokenizer.pad_id, np.int32)
    tags = np.full((n, max_len), IGNORE, np.int32)
    mask = np.zeros((n, max_len), np.int32)
    word_pos = []  # per example: piece index of each word's first piece (-1 if truncated)
    for r, ex in enumerate(examples):
        pieces, first = [tokenizer.cls_id], []
        row_tags = [IGNORE]
        full = False  # truncation keeps a prefix: after the first word that does not fit, none
        for word, tag in zip(ex["tokens"], ex["tags"]):
            wp = tokenizer.encode(word) or [tokenizer.unk_id]
            full = full or len(pieces) + len(wp) > max_len - 1
            if full:
                first.append(-1)
                continue
            first.append(len(pieces))
            row_tags += [labels.index(tag, ex["_where"])] + [IGNORE] * (len(wp) - 1)
            pieces += wp
        pieces.append(tokenizer.sep_id)
        row_tags.append(IGNORE)
        ids[r, :len(pieces)] = pieces
        tags[r, :len(pieces)] = row_tags
        mask[r, :len(pieces)] = 1
        word_pos.append(first)
    return {"input_ids": ids, "segment_ids": np.zeros_like(ids), "attention_mask": mask,
            "labels": tags}, word_pos


def qa_windows(question_ids, context_offsets, max_len: int, stride: int):
    """Context token ranges [lo, hi) for overlapping windows of the context."""
    room = max_len - len(question_ids) - 3
    if room <= 0:
        raise TaskDataError(f"max_seq_len {max_len} leaves no room for the context")
    n = len(context_offsets)
    windows, lo = [], 0
    while True:
        hi = min(lo + room, n)
        windows.append((lo, hi))
        if hi >= n:
            return windows
        lo += max(1, min(stride, room))


def answer_tokens(offsets, char_start: int, char_end: int):
    """(first, last) context tokens covering [char_start, char_end), or None."""
    if char_end <= char_start:
        return None
    first = next((i for i, (_, e) in enumerate(offsets) if e > char_start), None)
    last = next((i for i in range(len(offsets) - 1, -1, -1) if offsets[i][0] < char_end), None)
    if first is None or last is None or first > last:
        return None
    return first, last


def featurize_qa(examples, tokenizer, max_len: int, stride: int, max_question: int = 64):
    """Windows of [CLS] question [SEP] context [SEP]; start/end token labels.

    A window that does not contain the whole answer points both labels at [CLS]
    (position 0). Returns the arrays plus per-window metadata for decoding.
    """
    rows, meta = [], []
    for e, ex in enumerate(examples):
        q = tokenizer.encode(ex["question"])[:max_question]
        ctx_ids, offsets = tokenizer.encode_with_offsets(ex["context"])
        span = answer_tokens(offsets, ex["answer_start"],
                             ex["answer_start"] + len(ex["answer_text"]))
        for lo, hi in qa_windows(q, offsets, max_len, stride):
            ids = [tokenizer.cls_id] + q + [tokenizer.sep_id] + ctx_ids[lo:hi] + [tokenizer.sep_id]
            base = len(q) + 2
            start = end = 0
            if span is not None and lo <= span[0] and span[1] < hi:
                start, end = base + span[0] - lo, base + span[1] - lo
            rows.append((ids, len(q), start, end))
            meta.append({"example": e, "base": base, "lo": lo,
                         "offsets": offsets[lo:hi]})
    n = len(rows)
    out = {"input_ids": np.full((n, max_len), tokenizer.pad_id, np.int32),
           "segment_ids": np.zeros((n, max_len), np.int32),
           "attention_mask": np.zeros((n, max_len), np.int32),
           "context_mask": np.zeros((n, max_len), np.int32),
           "start_positions": np.zeros(n, np.int32), "end_positions": np.zeros(n, np.int32)}
    for r, (ids, q_len, start, end) in enumerate(rows):
        m = len(ids)
        out["input_ids"][r, :m] = ids
        out["segment_ids"][r, q_len + 2:m] = 1
        out["attention_mask"][r, :m] = 1
        out["context_mask"][r, q_len + 2:m - 1] = 1
        out["start_positions"][r], out["end_positions"][r] = start, end
    return out, meta


def qa_answer_text(example: dict, window_meta: dict, start: int, end: int) -> str:
    """Token span (row positions) -> the context's characters."""
    offsets = window_meta["offsets"]
    i, j = start - window_meta["base"], end - window_meta["base"]
    if not (0 <= i <= j < len(offsets)):
        return ""
    return example["context"][offsets[i][0]:offsets[j][1]]


def featurize_pairs(examples, tokenizer, max_len: int):
    """Contrastive pairs: two single-text encodings per example."""
    a = [tokenizer.encode_example(ex["text_a"], None, max_len) for ex in examples]
    b = [tokenizer.encode_example(ex["text_b"], None, max_len) for ex in examples]
    out = {f"a_{k}": np.stack([f[k] for f in a]) for k in a[0]}
    out.update({f"b_{k}": np.stack([f[k] for f in b]) for k in b[0]})
    return out
