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


@pytest.mark.parametrize("labels, preds, side, words", [
    ([2.0] * 5, [1, 2, 3, 4, 5], "labels", "every one of the 5 labels is 2"),
    ([1, 2, 3, 4], [0.5] * 4, "predictions", "predicts one value for every input"),
    ([1, float("nan"), 3, 4], [1, 2, 3, 4], "labels", "1 of 4 labels is NaN (first at row 1)"),
    ([1, 2, 3, 4], [1, 2, float("inf"), float("-inf")], "predictions",
     "2 of 4 predictions are infinite (first at row 2)"),
    ([1.0], [2.0], "labels", "at least 2 pairs, got 1"),
    ([1, 2, 3], [1, 2], "both", "3 labels but 2 predictions"),
])
def test_a_correlation_that_cannot_be_computed_says_which_and_why(labels, preds, side, words):
    """Not scipy's NaN (which became "dev/pearson is not finite" a whole epoch later): one
    line naming the metric, the side and the reason."""
    for name, fn in (("pearson", metrics.pearson), ("spearman", metrics.spearman)):
        with pytest.raises(metrics.UndefinedMetric) as e:
            fn(labels, preds)
        assert (e.value.metric, e.value.side) == (name, side)
        assert str(e.value).startswith(f"{name} is undefined: ") and words in str(e.value)
        assert "\n" not in str(e.value) and isinstance(e.value, ValueError)


def test_undefined_reason_checks_labels_before_training():
    assert metrics.undefined_reason("pearson", [1.0, 1.0, 1.0]) == (
        "labels", "every one of the 3 labels is 1 (a correlation needs labels that vary)")
    assert metrics.undefined_reason("pearson", [1.0, 2.0]) is None
    # mse is defined for constant labels, not for a NaN
    assert metrics.undefined_reason("mse", [1.0, 1.0]) is None
    assert metrics.undefined_reason("mse", [1.0, float("nan")])[0] == "labels"
    with pytest.raises(metrics.UndefinedMetric, match=r"^dev\.jsonl: pearson is undefined"):
        metrics.check_defined("pearson", [3, 3], where="dev.jsonl")
    # regression_metrics: the labels are named first, whatever the predictions
    with pytest.raises(metrics.UndefinedMetric) as e:
        metrics.regression_metrics([2, 2, 2], [0.1, 0.1, 0.1])
    assert e.value.side == "labels"
    with pytest.raises(metrics.UndefinedMetric, match="mse is undefined: 1 of 3 predictions"):
        metrics.regression_metrics([1, 2, 3], [0.1, float("nan"), 0.3])
    # the STS score names itself
    a = np.eye(3)
    with pytest.raises(metrics.UndefinedMetric, match="cosine_spearman is undefined"):
        metrics.cosine_spearman(a, a, [1, 2, 3])  # every cosine is 1
