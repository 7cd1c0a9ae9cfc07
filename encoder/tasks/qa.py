"""Extractive QA (SQuAD v1.1): start/end logits over context windows, EM and F1.

Examples: {"question", "context", "answer_text", "answer_start"} as JSON lines, or a
SQuAD v1.1 .json file (every gold answer kept in `answers`). Long contexts become
overlapping windows (doc stride); predicted spans map back to the context's characters.

Baselines: `bow` answers with the best sentence minus the question: the context
sentence (a line, or a piece ending in . ! ?) with the highest TF-IDF cosine to the
question, and inside it the longest run of words that is not aligned to the question
(difflib's matching blocks over SQuAD-normalised words), answered as that span of the
context (edge punctuation trimmed). It finds any answer that sits beside the
question's words in one sentence; on the embedded api_qa it is exact (100 EM on dev:
that task is lexical). Its IDF is fitted on the training questions and context
sentences. `majority` answers with the context's first word.
"""
import difflib
import json
import re
import string

import jax
import jax.numpy as jnp
import numpy as np

from encoder.eval import metrics as metrics_lib
from encoder.model import heads, models
from encoder.tasks import bow, files
from encoder.tasks.base import Baseline, Export, Task, TaskDataError, weighted_mean


def read_squad(path: str) -> list[dict]:
    """SQuAD v1.1 JSON -> qa examples (every gold answer kept in `answers`); a question with
    no answer (SQuAD v2's unanswerable ones) is refused by the line checks."""
    try:
        data = json.loads(files.read_text(path))
    except json.JSONDecodeError as e:
        raise TaskDataError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    examples = []
    try:
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
    except (AttributeError, KeyError, TypeError) as e:
        what = f"no {e.args[0]!r} field" if isinstance(e, KeyError) else "a field of the wrong type"
        raise TaskDataError(f"{path}: not a SQuAD v1.1 file ({what} in question "
                            f"{len(examples) + 1}; expected data/paragraphs/qas with question, "
                            "context and answers)") from None
    if not examples:
        raise TaskDataError(f"{path}: no SQuAD questions found")
    return examples


# ------------------------------------------------------------------ featurizer

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
    # BERT's SQuAD recipe caps the question at 64 of 384 tokens; a short row keeps at least
    # half of itself for the context (runlocal's 64-token rows took no context at all)
    max_question = min(max_question, max_len // 2)
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


# ------------------------------------------------------------------ baselines

def qa_first_word(train, splits) -> list:
    del train
    return [[{"id": ex.get("id"), "answer": (ex["context"].split() or [""])[0]} for ex in s]
            for s in splits]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of each line, or piece of a line ending in . ! ? before whitespace;
    blank pieces (a line of spaces) are no sentence."""
    spans, start = [], 0
    for m in re.finditer(r"\n+|(?<=[.!?])\s+", text):
        if text[start:m.start()].strip():
            spans.append((start, m.start()))
        start = m.end()
    if text[start:].strip():
        spans.append((start, len(text)))
    return spans


def _words(text: str, lo: int, hi: int) -> list[tuple[str, int, int]]:
    """(SQuAD-normalised word, start, end) of text[lo:hi], the span without the word's
    leading and trailing punctuation; words that normalise away (punctuation, articles)
    are left out."""
    out = []
    for m in re.finditer(r"\S+", text[lo:hi]):
        norm = metrics_lib.normalize_answer(m.group())
        if norm:
            word = m.group()
            start = lo + m.start() + len(word) - len(word.lstrip(string.punctuation))
            out.append((norm, start, lo + m.start() + len(word.rstrip(string.punctuation))))
    return out


def unaligned_span(text: str, lo: int, hi: int, question: str) -> tuple[int, int]:
    """The longest run of text[lo:hi]'s words outside its alignment with the question
    (ties: the first); the whole sentence when every word is aligned."""
    words = _words(text, lo, hi)
    q = [w for w, _, _ in _words(question, 0, len(question))]
    blocks = difflib.SequenceMatcher(None, [w for w, _, _ in words], q,
                                     autojunk=False).get_matching_blocks()
    best, pos = None, 0
    for b in blocks:  # the gaps before each matching block (the last block is empty)
        if b.a > pos and (best is None or b.a - pos > best[1] - best[0]):
            best = (pos, b.a)
        pos = b.a + b.size
    if best is None:
        return lo, hi
    return words[best[0]][1], words[best[1] - 1][2]


def qa_best_sentence(train, splits) -> list:
    """The best sentence minus the question (module docstring); IDF from training text."""
    vec = bow.tfidf().fit([ex["question"] for ex in train] +
                          [ex["context"][a:b] for ex in train
                           for a, b in sentence_spans(ex["context"])])
    out = []
    for s in splits:
        preds = []
        for ex in s:
            ctx = ex["context"]
            spans = sentence_spans(ctx) or [(0, len(ctx))]
            sims = (vec.transform([ctx[a:b] for a, b in spans]) @
                    vec.transform([ex["question"]]).T).toarray()[:, 0]  # [sentences]
            lo, hi = spans[int(np.argmax(sims))]  # ties: the first sentence
            a, b = unaligned_span(ctx, lo, hi, ex["question"])
            preds.append({"id": ex.get("id"), "answer": ctx[a:b]})
        out.append(preds)
    return out


def _golds(examples) -> list[list[str]]:
    return [ex.get("answers") or [ex["answer_text"]] for ex in examples]


class QA(Task):
    name = "qa"
    primary_metric = "f1"
    model_cls = models.SpanExtractor
    fields = (("question", "context", "answer_text", "answer_start"),)
    formats = {".json": read_squad}
    metric_keys = ("exact_match", "f1")
    default_metrics = ("exact_match", "f1")
    baselines = {
        "bow": Baseline(qa_best_sentence, "the best TF-IDF sentence minus the question"),
        "majority": Baseline(qa_first_word, "the context's first word"),
    }
    export = Export("span")
    # Contexts are long: published recipes give SQuAD its own length (ELECTRA 512,
    # RoBERTa 384) and 2 epochs (BERT, ELECTRA, RoBERTa, ModernBERT's setups).
    seq_len_field = "qa_max_seq_len"
    recipe_epochs = 2
    label_fields = (("start_positions", (), "int32"), ("end_positions", (), "int32"),
                    ("context_mask", ("T",), "int32"))

    @classmethod
    def check_line(cls, example, where):
        start, answer = example["answer_start"], example["answer_text"]
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            hint = (f"; write it as a number: {int(start)}" if isinstance(start, str)
                    and start.strip().isdigit() else "")
            raise TaskDataError(f"{where}: answer_start is {files.json_kind(start)}; expected "
                                "the answer's character offset in the context, an integer "
                                f">= 0{hint}")
        if not answer.strip():
            raise TaskDataError(f"{where}: the answer is empty: every question needs its answer "
                                "span (unanswerable questions, as in SQuAD v2, are not "
                                "supported); drop the line or give its answer")
        if example["context"][start:start + len(answer)] != answer:
            raise TaskDataError(f"{where}: answer_text is not at answer_start in the context")
        golds = example.get("answers", [answer])
        if not all(isinstance(a, str) and a.strip() for a in golds):
            raise TaskDataError(f"{where}: every gold answer must be a non-empty string; "
                                f"answers holds {files.json_kind(golds)}")

    @property
    def num_labels(self) -> int:
        return 2

    def featurize(self, examples):
        return featurize_qa(examples, self.tokenizer, self.config.data.max_seq_len,
                            self.config.data.doc_stride)

    def loss(self, out, batch):
        # [CLS] is allowed: it is where a window without the answer points.
        allowed = batch["context_mask"].astype(bool).at[:, 0].set(True)
        total = 0.0
        for logits, target in ((out[0], batch["start_positions"]),
                               (out[1], batch["end_positions"])):
            logp = jax.nn.log_softmax(jnp.where(allowed, logits.astype(jnp.float32), -1e9))
            nll = -jnp.take_along_axis(logp, target[:, None], -1)[:, 0]
            total = total + weighted_mean(nll, batch["weight"])
        return total / 2

    def score(self, out, examples, arrays, meta):
        start, end = out
        s, e, score = heads.best_span(jnp.asarray(start), jnp.asarray(end),
                                      jnp.asarray(arrays["context_mask"].astype(bool)),
                                      self.config.data.max_answer_tokens)
        s, e, score = np.asarray(s), np.asarray(e), np.asarray(score)
        best: dict[int, tuple[float, str]] = {}
        for w, info in enumerate(meta):
            text = qa_answer_text(examples[info["example"]], info, int(s[w]), int(e[w]))
            if info["example"] not in best or score[w] > best[info["example"]][0]:
                best[info["example"]] = (float(score[w]), text)
        answers = [best.get(i, (0.0, ""))[1] for i in range(len(examples))]
        preds = [{"id": ex.get("id"), "answer": a} for ex, a in zip(examples, answers)]
        return metrics_lib.squad_scores(answers, _golds(examples)), preds

    @classmethod
    def score_predictions(cls, examples, preds):
        return metrics_lib.squad_scores([p["answer"] for p in preds], _golds(examples))
