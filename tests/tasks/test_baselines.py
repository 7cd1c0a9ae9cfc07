"""Baselines with no model (each task type's, gathered by encoder/tasks/baselines.py) and
their suite rows (python -m encoder.suite --baseline=bow): each method's score on a toy
task against a value worked out by hand, every task type through the suite's own files
and report, the few-shot draws of the model's runs, and the refusals."""
import csv
import json
import os

import pytest
from scipy import sparse

from encoder.eval import metrics
from encoder.tasks import baselines, bow, classification, qa, tagging
from encoder.studies.suite import embedding
from helpers import topic_task, write_jsonl

# ------------------------------------------------------------------------ toy tasks

TAG_TRAIN = [  # "path": B-ARG twice, O once -> B-ARG; "mode": B-ARG then O (a tie: first seen)
    {"tokens": ["the", "path", "is", "a", "path"], "tags": ["O", "B-ARG", "O", "O", "B-ARG"]},
    {"tokens": ["path", "mode", "mode"], "tags": ["O", "B-ARG", "O"]},
    {"tokens": ["the", "name", "of", "it"], "tags": ["O", "B-ARG", "I-ARG", "O"]},
]
TAG_DEV = [  # gold entities (1,1) (3,3) (5,6); predicted O B B O B I -> (1,1) (2,2) (4,5)
    {"tokens": ["the", "path", "mode", "zebra", "name", "of", "it"],
     "tags": ["O", "B-ARG", "O", "B-ARG", "O", "B-ARG", "I-ARG"]},
]

QA_TRAIN = [{"question": "When was it built?", "context": "It was built in 1889.",
             "answer_text": "1889", "answer_start": 16},
            {"question": "Open a file and return a stream.",
             "context": "open: Open a file and return a stream.\nclose: Flush and close the "
                        "stream.", "answer_text": "open", "answer_start": 0}]
QA_DEV = [
    # the second line wins; aligned with the question, "close" is what is left: exact
    {"question": "Flush and close the stream.",
     "context": "open: Open a file and return a stream.\nclose: Flush and close the stream.",
     "answer_text": "close", "answer_start": 39},
    # the second sentence wins (was, built, it); left over: "was" (between two aligned
    # words) and "in 1889" (the longest run) -> "in 1889": EM 0, F1 2 * (1/2 * 1) / 1.5 = 2/3
    {"question": "When was it built?",
     "context": "The tower is tall. It was built in 1889.",
     "answer_text": "1889", "answer_start": 35},
]

STS_PAIRS = [  # cosines 1, strictly between 0 and 1, 0: gold ranks 1, 3, 2 -> Spearman -0.5
    {"text_a": "parse json text", "text_b": "parse json text", "label": 1.0},
    {"text_a": "read the socket", "text_b": "read the file", "label": 5.0},
    {"text_a": "thread lock", "text_b": "compress bytes", "label": 3.0},
]

CORPUS = [{"_id": "d1", "title": "", "text": "write text to a file"},
          {"_id": "d2", "title": "json", "text": "parse json text into objects"},
          {"_id": "d3", "title": "", "text": "parse the command line"}]
QUERIES = [{"_id": "q1", "text": "parse json text"},  # d2 shares every word: first
           {"_id": "q2", "text": "zebra"}]            # no word in the corpus: d3 comes last
QRELS = "query-id\tcorpus-id\tscore\nq1\td2\t1\nq2\td3\t1\n"
# q1: rank 1; q2: rank 3 of 3 (ties kept in corpus order) -> nDCG@10 (1 + 1/log2(4)) / 2,
# MRR@10 (1 + 1/3) / 2, recall@1 1/2, recall@10 1.
RETRIEVAL = {"ndcg_at_10": 0.75, "mrr_at_10": 2 / 3, "recall_at_1": 0.5, "recall_at_10": 1.0,
             "recall_at_100": 1.0}


def _pair_regression():
    """Two kinds of pair, "high" (5) and "low" (0): two distinct feature rows, so the ridge
    predictions are two values and both correlations are exactly 1 (-1 if reversed)."""
    row = lambda w, y: {"text_a": f"value {w}", "text_b": f"value {w}", "label": y}  # noqa
    return [row("high", 5.0), row("low", 0.0)] * 4, [row("low", 0.0), row("high", 5.0)] * 3


def _task(folder, meta: dict, splits: dict) -> str:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "task.json"), "w") as f:
        json.dump(meta, f)
    for name, rows in splits.items():
        write_jsonl(os.path.join(folder, name), rows)
    return str(folder)


def every_type(root) -> str:
    """A tasks folder with one toy task of every type."""
    topic_task(root / "topic", n_train=64, n_dev=24)  # io iff the word "file": separable
    pairs = [{"text_a": f"aa {w}", "text_b": f"aa {w}", "label": "same"} for w in "uvw"] + \
        [{"text_a": f"bb {w}", "text_b": f"cc {w}", "label": "other"} for w in "uvw"]
    _task(root / "pairs", {"type": "classification"}, {"train.jsonl": pairs, "dev.jsonl": pairs})
    train, dev = _pair_regression()
    _task(root / "scores", {"type": "regression"}, {"train.jsonl": train, "dev.jsonl": dev})
    _task(root / "tags", {"type": "tagging"}, {"train.jsonl": TAG_TRAIN, "dev.jsonl": TAG_DEV})
    _task(root / "qa", {"type": "qa"}, {"train.jsonl": QA_TRAIN, "dev.jsonl": QA_DEV})
    _task(root / "sts", {"type": "sts"}, {"test.jsonl": STS_PAIRS})
    _task(root / "search", {"type": "retrieval"}, {"corpus.jsonl": CORPUS,
                                                   "queries.jsonl": QUERIES})
    os.makedirs(root / "search" / "qrels")
    (root / "search" / "qrels" / "test.tsv").write_text(QRELS)
    return str(root)


# --------------------------------------------------------------------- the methods

def test_tagging_takes_each_words_most_frequent_tag():
    (pred,), = tagging.tag_by_word(TAG_TRAIN, [TAG_DEV])
    assert pred["tags"] == ["O", "B-ARG", "B-ARG", "O", "B-ARG", "I-ARG", "O"]
    # gold (1,1) (3,3) (5,6); predicted (1,1) (2,2) (4,5): 1 of 3 each way
    m = baselines.score("tagging", TAG_DEV, [pred])
    assert m["entity_precision"] == pytest.approx(1 / 3)
    assert m["entity_f1"] == pytest.approx(1 / 3)
    (const,), = tagging.majority_tag(TAG_TRAIN, [TAG_DEV])
    assert set(const["tags"]) == {"O"}
    assert baselines.score("tagging", TAG_DEV, [const])["entity_f1"] == 0.0


def test_qa_answers_with_the_best_sentence_minus_the_question():
    preds, = qa.qa_best_sentence(QA_TRAIN, [QA_DEV])
    assert [p["answer"] for p in preds] == ["close", "in 1889"]  # edge punctuation trimmed
    m = baselines.score("qa", QA_DEV, preds)
    assert m["exact_match"] == pytest.approx(50.0)
    assert m["f1"] == pytest.approx((100 + 200 / 3) / 2)
    first, = qa.qa_first_word(QA_TRAIN, [QA_DEV])
    assert [p["answer"] for p in first] == ["open:", "The"]
    assert qa.sentence_spans("a b. c\n\nd e") == [(0, 4), (5, 6), (8, 11)]


def test_a_blank_line_is_no_sentence():
    assert qa.sentence_spans("a\n \nb") == [(0, 1), (4, 5)]
    # no context word is in the question: every cosine is 0 and the first sentence wins,
    # which is "foo bar." (a line of spaces before it is no sentence to answer with)
    dev = [{"question": "zebra?", "context": " \t\nfoo bar. baz qux.", "answer_text": "foo",
            "answer_start": 3}]
    (pred,), = qa.qa_best_sentence(QA_TRAIN, [dev])
    assert pred["answer"] == "foo bar"


def test_bow_is_fitted_on_the_training_split_only():
    train = [{"text": "alpha beta", "label": "a"}, {"text": "gamma delta", "label": "b"}]
    dev = [{"text": "omega zeta"}, {"text": "alpha"}]
    _, (x_dev,) = bow.bow_features(train, [dev])
    assert x_dev[0].nnz == 0 and x_dev[1].nnz == 1  # dev words have no column
    pair = [{"text_a": "alpha", "text_b": "beta", "label": 1.0}]
    x, (xp,) = bow.bow_features(pair, [[{"text_a": "omega", "text_b": "alpha"}]])
    assert x.shape == xp.shape and x.shape[1] == 4 * 2  # [a, b, |a-b|, a*b] over 2 words
    # a one-class draw answers with that class instead of failing
    one = [{"text": "alpha", "label": 7}, {"text": "beta", "label": 7}]
    assert classification.bow_logistic_regression(one, [dev])[0] == [{"label": 7}] * 2


def test_labels_keep_their_type_and_the_majority_is_the_most_frequent():
    train = [{"text": "aa xx", "label": 1}, {"text": "bb yy", "label": 0},
             {"text": "cc yy", "label": 0}]
    assert classification.majority_label(train, [[{}, {}]]) == [[{"label": 0}] * 2]
    preds, = classification.bow_logistic_regression(train, [train])
    assert {type(p["label"]) for p in preds} == {int}


def test_tfidf_vectors_score_sts_and_retrieval_by_hand():
    encode = bow.tfidf_encoder([p["text_a"] for p in STS_PAIRS] +
                                     [p["text_b"] for p in STS_PAIRS])
    a, b = encode([p["text_a"] for p in STS_PAIRS]), encode([p["text_b"] for p in STS_PAIRS])
    assert sparse.issparse(a)
    assert metrics.cosine_spearman(a, b, [p["label"] for p in STS_PAIRS]) == pytest.approx(-0.5)
    # sparse rows score as their dense copies do
    assert metrics.cosine_spearman(a, b, [3, 1, 2]) == pytest.approx(
        metrics.cosine_spearman(a.toarray(), b.toarray(), [3, 1, 2]))
    docs = embedding.document_texts(CORPUS)
    assert docs[1] == "json parse json text into objects"
    enc = bow.tfidf_encoder(docs)
    assert embedding.rank(enc(["parse json text"]), enc(docs), ["d1", "d2", "d3"], 3)[0][0] == "d2"
    qrels = {"q1": {"d2": 1}, "q2": {"d3": 1}}
    assert embedding.retrieval_scores(enc, CORPUS, QUERIES, qrels) == pytest.approx(RETRIEVAL)


# ----------------------------------------------------------------------- the suite

def _csv(path) -> dict:
    with open(path) as f:
        return {r["task"]: r for r in csv.DictReader(f)}


