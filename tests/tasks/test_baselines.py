"""Baselines with no model (each task type's, gathered by encoder/tasks/baselines.py): each
method's score on a toy task against a value worked out by hand (the suite's --baseline=bow
rows: tests/e2e/test_baselines_runs.py)."""
import pytest
from scipy import sparse

from encoder.eval import metrics
from encoder.tasks import baselines, bow, classification, qa, tagging
from encoder.tasks import embedding
from toy_tasks import CORPUS, QA_DEV, QA_TRAIN, QUERIES, RETRIEVAL, STS_PAIRS, TAG_DEV, TAG_TRAIN


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

