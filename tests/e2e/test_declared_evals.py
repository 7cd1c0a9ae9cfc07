"""config.evals in a real pretraining run: each evaluator at its cadence, its scores in
metrics.jsonl and evals.jsonl, and a run resumed behind a scored step reading it back."""
import json
import os
import shutil

import jax
import ml_collections
import pytest

from encoder.jobs import evals as declared
from encoder.jobs import pretrain
from encoder.train import metrics_io

from helpers import tiny_pretrain_config

pytestmark = pytest.mark.e2e


def _record(d):
    with open(os.path.join(d, metrics_io.SCORES)) as f:
        return [json.loads(line) for line in f]


def _evals(d):
    return {r["step"]: {k: v for k, v in r.items() if k.startswith("evals/")}
            for r in metrics_io.read_metrics(d) if any(k.startswith("evals/") for k in r)}


def test_declared_evaluators_score_each_checkpoint_once_across_a_resume(tmp_path, shared_data):
    tok, cache = shared_data
    config = tiny_pretrain_config(num_steps=12, checkpoint_every=8, log_every=4)
    config.data.tokenizer, config.data.cache_dir = tok, cache
    config.evals = ml_collections.ConfigDict({
        "ho": {"kind": "heldout", "every": 4, "batches": 1},
        "sts": declared.entry("embedding", task="sts_relatedness", max_eval=40)})
    d = str(tmp_path / "run")
    pretrain.train(config, d, devices=jax.devices()[:1])
    first = _record(d)
    assert [(r["name"], r["step"]) for r in first] == [
        ("ho", 4), ("ho", 8), ("sts", 8), ("ho", 12), ("sts", 12)]  # sts: each checkpoint
    scores = _evals(d)
    assert set(scores) == {4, 8, 12}
    assert set(scores[8]) == {"evals/ho/loss", "evals/ho/mlm_loss", "evals/ho/mlm_accuracy",
                              "evals/ho/mlm_baseline_accuracy", "evals/sts/cosine_spearman"}
    assert -1 <= scores[12]["evals/sts/cosine_spearman"] <= 1
    assert os.path.isdir(os.path.join(d, "evals", "tasks", "sts_relatedness"))
    # killed after scoring step 12, before its checkpoint: the resume from step 8 replays
    # steps 9-12 and reads step 12's scores back instead of computing them again
    shutil.rmtree(os.path.join(d, "checkpoints", "12"))
    pretrain.train(config, d, devices=jax.devices()[:1])
    assert _record(d) == first
    assert _evals(d) == scores
    # a restart that changes a scored evaluator's options is refused before any work
    # (else one curve would hold two protocols)
    config.evals.sts.max_eval = 20
    config.train.num_steps = 16
    with pytest.raises(declared.UsageError, match=r"config\.evals\.sts \(max_eval: 40 -> 20; "
                                                  r"scored at step 8, 12"):
        pretrain.train(config, d, devices=jax.devices()[:1])
    assert _record(d) == first and sorted(os.listdir(os.path.join(d, "checkpoints"))) == ["12", "8"]
