"""Baselines with no model, that every fine-tuning result is reported next to.

    python -m encoder.eval.baselines --task=classification --train=train.jsonl --dev=dev.jsonl
    python -m encoder.suite --baseline=bow --workdir=OUT     (a whole suite: the same rows)

A predictor is `predict(train, splits) -> one list of predictions per split`, each
prediction in the fine-tuning job's predictions.jsonl form ({"label"}, {"tags"},
{"answer"}); `score` turns them into the metrics the fine-tuning tasks write to
eval.json (encoder/eval/metrics.py), so a baseline's number and a model's number on the
same file are the same computation.

METHODS["bow"], the lexical row:
  classification  TF-IDF (unigrams and bigrams) -> logistic regression; a sentence pair's
                  features are [a, b, |a - b|, a * b] of its two texts' vectors
  regression      the same features -> ridge regression
  tagging         each word's most frequent tag in training (ties: the tag seen first);
                  a word never seen in training gets the outside tag O
  qa              the best sentence minus the question: the context sentence (a line, or
                  a piece ending in . ! ?) with the highest TF-IDF cosine to the question,
                  and inside it the longest run of words that is not aligned to the
                  question (difflib's matching blocks over SQuAD-normalised words),
                  answered as that span of the context (edge punctuation trimmed). It is
                  the QA rule of `bow` (the first word is `majority`'s) because it finds
                  any answer that sits beside the question's words in one sentence; on
                  the embedded api_qa it is exact (100 EM on dev: that task is lexical)
  sts, retrieval  cosine of TF-IDF vectors (`tfidf_encoder`, scored in encoder/eval/suite)
METHODS["majority"], the constant row: classification the most frequent training label;
  tagging the most frequent training tag (O: no entity, F1 0); qa the context's first word.
  Regression, STS and retrieval have no constant baseline (a constant has no correlation
  and no ranking).

TF-IDF is fitted on the training split only (vocabulary and IDF never see a dev or test
text; qa: the training questions and context sentences). Embedding tasks have no training
split; encoder/eval/suite/baseline.py says what their IDF is fitted on.
"""
import collections
import difflib
import json
import re
import string

import numpy as np
from absl import flags

from encoder.tasks import readers as tasks
from encoder.eval import metrics


def tfidf():
    """The one vectorizer of every bag-of-words baseline (L2-normalised rows)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    return TfidfVectorizer(min_df=1, ngram_range=(1, 2), max_features=50_000)


def tfidf_encoder(fit_texts: list[str]):
    """texts -> [N, V] sparse unit TF-IDF vectors, the vocabulary and IDF from fit_texts."""
    return tfidf().fit(fit_texts).transform


def _texts(examples):
    return [ex.get("text", ex.get("text_a", "")) for ex in examples]


def bow_features(train, splits):
    """(x_train, [x_split, ...]): TF-IDF rows, a pair's as [a, b, |a - b|, a * b]."""
    from scipy.sparse import hstack
    vec = tfidf()
    if "text_b" in train[0]:
        vec.fit([ex["text_a"] for ex in train] + [ex["text_b"] for ex in train])

        def feats(exs):
            a = vec.transform([ex["text_a"] for ex in exs])
            b = vec.transform([ex["text_b"] for ex in exs])
            return hstack([a, b, abs(a - b), a.multiply(b)]).tocsr()
        return feats(train), [feats(s) for s in splits]
    return vec.fit_transform(_texts(train)), [vec.transform(_texts(s)) for s in splits]


def _label_names(train) -> dict:
    """str(label) -> the label as the training file spells it (predictions keep its type)."""
    return {str(ex["label"]): ex["label"] for ex in train}


def majority_label(train, splits) -> list:
    counts = collections.Counter(str(ex["label"]) for ex in train)
    top = _label_names(train)[max(sorted(counts), key=counts.__getitem__)]
    return [[{"label": top}] * len(s) for s in splits]


def bow_logistic_regression(train, splits) -> list:
    from sklearn.linear_model import LogisticRegression
    y = [str(ex["label"]) for ex in train]
    if len(set(y)) < 2:  # a drawn subset with one class: that class is all it can say
        return majority_label(train, splits)
    x_train, xs = bow_features(train, splits)
    clf = LogisticRegression(max_iter=2000, C=10.0).fit(x_train, y)
    names = _label_names(train)
    return [[{"label": names[p]} for p in clf.predict(x)] for x in xs]


def bow_ridge_regression(train, splits) -> list:
    from sklearn.linear_model import Ridge
    x_train, xs = bow_features(train, splits)
    reg = Ridge(alpha=1.0).fit(x_train, [float(ex["label"]) for ex in train])
    return [[{"label": float(v)} for v in reg.predict(x)] for x in xs]


OUTSIDE = "O"


def tag_by_word(train, splits) -> list:
    """Each word's most frequent training tag; unseen words OUTSIDE."""
    counts: dict = collections.defaultdict(collections.Counter)
    for ex in train:
        for word, tag in zip(ex["tokens"], ex["tags"]):
            counts[word][tag] += 1
    best = {w: c.most_common(1)[0][0] for w, c in counts.items()}  # ties: first seen
    return [[{"tags": [best.get(w, OUTSIDE) for w in ex["tokens"]]} for ex in s] for s in splits]


def majority_tag(train, splits) -> list:
    top = collections.Counter(t for ex in train for t in ex["tags"]).most_common(1)[0][0]
    return [[{"tags": [top] * len(ex["tokens"])} for ex in s] for s in splits]


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
        norm = metrics.normalize_answer(m.group())
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
    vec = tfidf().fit([ex["question"] for ex in train] +
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


# baseline name -> task type -> predictor. Embedding types (sts, retrieval) are scored in
# encoder/eval/suite/baseline.py from `tfidf_encoder`.
METHODS = {
    "bow": {"classification": bow_logistic_regression, "regression": bow_ridge_regression,
            "tagging": tag_by_word, "qa": qa_best_sentence},
    "majority": {"classification": majority_label, "tagging": majority_tag,
                 "qa": qa_first_word},
}


def score(task_type: str, examples: list, preds: list) -> dict:
    """eval.json's metrics for one split, as the fine-tuning task of this type computes them."""
    if task_type == "classification":
        return metrics.classification_metrics([str(ex["label"]) for ex in examples],
                                              [str(p["label"]) for p in preds])
    if task_type == "regression":
        return metrics.regression_metrics([float(ex["label"]) for ex in examples],
                                          [p["label"] for p in preds])
    if task_type == "tagging":
        return metrics.entity_f1([ex["tags"] for ex in examples], [p["tags"] for p in preds])
    if task_type == "qa":
        return metrics.squad_scores([p["answer"] for p in preds],
                                    [ex.get("answers") or [ex["answer_text"]] for ex in examples])
    raise ValueError(f"no baseline score for task type {task_type!r}")


def run(task: str, train_path: str, dev_path: str) -> dict:
    """{method: dev metrics} of every method with a predictor for this task type."""
    train = tasks.read_examples(train_path, task)
    dev = tasks.read_examples(dev_path, task)
    return {name: score(task, dev, table[task](train, [dev])[0])
            for name, table in METHODS.items() if task in table}


def main(argv):
    del argv
    f = flags.FLAGS
    print(json.dumps(run(f.task, f.train, f.dev), indent=1))
