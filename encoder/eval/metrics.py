"""Downstream metrics, named as eval.json reports them.

accuracy, macro_f1 and mcc come from scikit-learn, pearson and spearman from
scipy; SQuAD exact match / F1 (with SQuAD v1.1's answer normalisation) and
entity-level F1 over BIO tags are written here and tested by hand.

A correlation that cannot be computed (constant labels or predictions, a NaN or an
infinity, fewer than two pairs) raises `UndefinedMetric`, naming the metric, which side
and why, instead of returning the NaN scipy gives (which surfaced an epoch later as
"dev/pearson is not finite"). `undefined_reason` is the same check as a value, for a job
that checks its labels before it trains.
"""
import collections
import math
import re
import string

import numpy as np

from encoder import errors


class UndefinedMetric(errors.UserFacing, ValueError):
    """A metric that cannot be computed on these values: `metric`, `side` (labels |
    predictions | both) and `reason` name it; the message is one line."""

    def __init__(self, metric: str, side: str, reason: str, where: str = ""):
        self.metric, self.side, self.reason, self.where = metric, side, reason, where
        super().__init__(f"{where + ': ' if where else ''}{metric} is undefined: {reason}")


CORRELATIONS = ("pearson", "spearman", "cosine_spearman")


def _values_problem(values, side: str) -> tuple[str, str] | None:
    """(kind, reason) when one side is not all numbers, holds a NaN or an infinity, or is
    constant (kind: numbers | finite | constant); None when it is fine."""
    try:
        x = np.asarray(values, np.float64).ravel()
    except (TypeError, ValueError):
        return "numbers", f"the {side} are not all numbers"
    bad = np.flatnonzero(~np.isfinite(x))
    if len(bad):
        kinds = sorted({"NaN" if math.isnan(x[i]) else "infinite" for i in bad})
        return "finite", (f"{len(bad)} of {len(x)} {side} {'is' if len(bad) == 1 else 'are'} "
                          f"{' or '.join(kinds)} (first at row {int(bad[0])})")
    if len(x) >= 2 and np.all(x == x[0]):
        why = ("the model predicts one value for every input" if side == "predictions" else
               "a correlation needs labels that vary")
        return "constant", f"every one of the {len(x)} {side} is {x[0]:g} ({why})"
    return None


def undefined_reason(metric: str, labels, preds=None) -> tuple[str, str] | None:
    """(side, reason) when `metric` cannot be computed on these labels (and predictions,
    where given); None when it can. A correlation (pearson, spearman, cosine_spearman)
    needs at least two finite pairs on each side that vary; any other metric finite
    numbers. Given labels alone, this is the check a job makes before it trains."""
    correlation = metric in CORRELATIONS
    if correlation and len(labels) < 2:
        return "labels", f"it needs at least 2 pairs, got {len(labels)}"
    if preds is not None and len(preds) != len(labels):
        return "both", f"{len(labels)} labels but {len(preds)} predictions"
    for side, values in (("labels", labels), ("predictions", preds)):
        if values is None:
            continue
        problem = _values_problem(values, side)
        if problem is not None and (correlation or problem[0] != "constant"):
            return side, problem[1]
    return None


def check_defined(metric: str, labels, preds=None, where: str = "") -> None:
    """Raises UndefinedMetric when `metric` cannot be computed on these values; `where`
    (a file, a split) starts the message."""
    found = undefined_reason(metric, labels, preds)
    if found is not None:
        raise UndefinedMetric(metric, *found, where=where)


def accuracy(labels, preds) -> float:
    return float(np.mean(np.asarray(labels) == np.asarray(preds)))


def macro_f1(labels, preds) -> float:
    from sklearn.metrics import f1_score
    return float(f1_score(labels, preds, average="macro"))


def mcc(labels, preds) -> float:
    from sklearn.metrics import matthews_corrcoef
    return float(matthews_corrcoef(labels, preds))


def pearson(labels, preds) -> float:
    """Pearson's r; UndefinedMetric on constant or non-finite values (module docstring)."""
    from scipy.stats import pearsonr
    check_defined("pearson", labels, preds)
    return float(pearsonr(np.asarray(labels, np.float64), np.asarray(preds, np.float64))[0])


def spearman(labels, preds, metric: str = "spearman") -> float:
    """Spearman's rho; UndefinedMetric on constant or non-finite values."""
    from scipy.stats import spearmanr
    check_defined(metric, labels, preds)
    return float(spearmanr(np.asarray(labels, np.float64), np.asarray(preds, np.float64))[0])


def normalize_answer(text: str) -> str:
    """SQuAD v1.1: lower case, drop punctuation and articles, squeeze whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def squad_f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = collections.Counter(pred) & collections.Counter(ref)
    overlap = sum(common.values())
    if not pred or not ref:
        return float(pred == ref)
    if overlap == 0:
        return 0.0
    p, r = overlap / len(pred), overlap / len(ref)
    return 2 * p * r / (p + r)


def squad_scores(predictions: list[str], golds: list[list[str]]) -> dict:
    """Mean EM and F1 in percent, each example scored against its best gold answer."""
    em = [max(squad_exact_match(p, g) for g in gs) for p, gs in zip(predictions, golds)]
    f1 = [max(squad_f1(p, g) for g in gs) for p, gs in zip(predictions, golds)]
    return {"exact_match": 100.0 * float(np.mean(em)), "f1": 100.0 * float(np.mean(f1))}


def bio_entities(tags: list[str]) -> set[tuple[str, int, int]]:
    """(type, start, end) spans from BIO tags; a stray I-X opens an entity (as conlleval)."""
    entities, start, kind = set(), None, None
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, label = tag.partition("-")
        continues = prefix == "I" and kind == label
        if start is not None and not continues:
            entities.add((kind, start, i - 1))
            start, kind = None, None
        if prefix == "B" or (prefix == "I" and not continues):
            start, kind = i, label
    return entities


def entity_f1(gold_tags: list[list[str]], pred_tags: list[list[str]]) -> dict:
    tp = n_pred = n_gold = 0
    for g, p in zip(gold_tags, pred_tags):
        ge, pe = bio_entities(g), bio_entities(p)
        tp += len(ge & pe)
        n_pred += len(pe)
        n_gold += len(ge)
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"entity_f1": f1, "entity_precision": precision, "entity_recall": recall}


def classification_metrics(labels, preds) -> dict:
    return {"accuracy": accuracy(labels, preds), "macro_f1": macro_f1(labels, preds),
            "mcc": mcc(labels, preds)}


def regression_metrics(labels, preds) -> dict:
    """pearson, spearman and mse; UndefinedMetric (naming which and why) where one cannot
    be computed: the labels are checked first (an input error), then the predictions."""
    labels, preds = np.asarray(labels, float), np.asarray(preds, float)
    check_defined("pearson", labels)  # the labels first: an input error, whatever the model
    check_defined("mse", labels, preds)
    return {"pearson": pearson(labels, preds), "spearman": spearman(labels, preds),
            "mse": float(np.mean((labels - preds) ** 2))}


# ------------------------------------------------------------------ suite metrics
# GLUE (Wang et al. 2019) and MTEB (Muennighoff et al. 2023) conventions, used by
# encoder/eval/suite; each is tested against hand-computed values.

def binary_f1(labels, preds, positive) -> float:
    """F1 of the positive class alone (GLUE's F1 for MRPC and QQP, positive = "1")."""
    labels, preds = np.asarray(labels), np.asarray(preds)
    tp = float(np.sum((preds == positive) & (labels == positive)))
    n_pred, n_gold = float(np.sum(preds == positive)), float(np.sum(labels == positive))
    if tp == 0:
        return 0.0
    precision, recall = tp / n_pred, tp / n_gold
    return 2 * precision * recall / (precision + recall)


def _row_dots(a, b) -> np.ndarray:
    """[N] row-wise dot products of two [N, D] arrays, or of two scipy sparse matrices
    (TF-IDF rows: no dense [N, V] copy)."""
    if hasattr(a, "multiply"):
        return np.asarray(a.multiply(b).sum(-1), np.float64).ravel()
    return np.sum(np.asarray(a, np.float64) * np.asarray(b, np.float64), -1)


def cosine_spearman(a, b, gold) -> float:
    """MTEB's STS score: Spearman correlation of the pairs' cosine similarity with gold.

    a, b: [N, D] embeddings of each pair's two texts (any norm; or scipy sparse rows);
    gold: [N].
    """
    cos = _row_dots(a, b) / np.maximum(np.sqrt(_row_dots(a, a) * _row_dots(b, b)),
                                       1e-12)  # [N]
    return spearman(np.asarray(gold, float), cos, metric="cosine_spearman")


def glue_score(task_metrics: dict) -> float:
    """GLUE's average: each task's metrics averaged first, then the tasks (macro).

    task_metrics: task -> {metric: value} (e.g. MRPC {f1, accuracy}, STS-B
    {pearson, spearman}, MNLI {accuracy_m, accuracy_mm}); Wang et al. 2019 §4.
    """
    if not task_metrics:
        raise ValueError("no task scores to average")
    return float(np.mean([np.mean(list(m.values())) for m in task_metrics.values()]))
