"""Every metric against hand-computed values."""
import numpy as np
import pytest

from encoder.eval import metrics


def test_classification_metrics_by_hand():
    labels = [0, 0, 1, 1, 2, 2]
    preds = [0, 1, 1, 1, 2, 0]
    m = metrics.classification_metrics(labels, preds)
    assert m["accuracy"] == pytest.approx(4 / 6)
    # per-class F1: c0 p=1/2 r=1/2 -> .5; c1 p=2/3 r=1 -> .8; c2 p=1 r=1/2 -> 2/3
    assert m["macro_f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    # binary MCC by the formula (TP*TN - FP*FN)/sqrt(...)
    b = metrics.mcc([1, 1, 0, 0, 1], [1, 0, 0, 1, 1])  # TP=2 TN=1 FP=1 FN=1
    assert b == pytest.approx((2 * 1 - 1 * 1) / np.sqrt(3 * 3 * 2 * 2))


def test_regression_metrics_by_hand():
    m = metrics.regression_metrics([1, 2, 3, 4], [2, 4, 6, 8.5])
    assert m["spearman"] == pytest.approx(1.0)
    x, y = np.array([1, 2, 3, 4.0]), np.array([2, 4, 6, 8.5])
    r = np.sum((x - x.mean()) * (y - y.mean())) / np.sqrt(np.sum((x - x.mean()) ** 2) *
                                                           np.sum((y - y.mean()) ** 2))
    assert m["pearson"] == pytest.approx(r)
    assert metrics.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_squad_normalisation_em_and_f1():
    assert metrics.normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert metrics.squad_exact_match("the Eiffel Tower", "Eiffel tower.") == 1.0
    # pred tokens: [eiffel, tower, in, paris]; gold: [eiffel, tower] -> p=1/2, r=1, f1=2/3
    assert metrics.squad_f1("Eiffel Tower in Paris", "the Eiffel Tower") == pytest.approx(2 / 3)
    assert metrics.squad_f1("London", "Paris") == 0.0
    s = metrics.squad_scores(["Paris", "red car"], [["paris", "Paris, France"], ["a blue car"]])
    assert s["exact_match"] == pytest.approx(50.0)
    assert s["f1"] == pytest.approx(100 * (1.0 + 0.5) / 2)


def test_bio_entities_and_entity_f1():
    assert metrics.bio_entities(["B-PER", "I-PER", "O", "B-LOC", "I-ORG", "I-ORG"]) == {
        ("PER", 0, 1), ("LOC", 3, 3), ("ORG", 4, 5)}
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG"]]
    pred = [["B-PER", "I-PER", "O", "O"], ["O", "B-LOC"]]
    m = metrics.entity_f1(gold, pred)
    # gold 3 entities, pred 2, 1 correct: p=1/2, r=1/3
    assert m["entity_precision"] == pytest.approx(0.5)
    assert m["entity_recall"] == pytest.approx(1 / 3)
    assert m["entity_f1"] == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))
