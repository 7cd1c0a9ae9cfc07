"""The evaluate job's protocol does not depend on how the model was handed over (once
a workdir brought its own objective settings, ModernBERT's 30% masking, a params folder
did not; the same parameters scored MLM accuracy 0.0158 and 0.0176, baselines 0.0370 and
0.0387). The protocol comes from the evaluate config alone and eval.json records it, with
the checkpoint's identity and the data's."""
import json
import os
import shutil

import ml_collections
import pytest

from encoder.data import corpus
from encoder.jobs import evaluate, merge


def _config(init_from, valid_files, **masking):
    from experiments import evaluate as evaluate_exp
    config = evaluate_exp.get_config("runlocal")
    config.init_from = init_from
    config.data.valid_files = valid_files
    config.data.seq_len = 64
    config.eval.max_tokens = 1024
    if masking:
        config.eval.masking = ml_collections.ConfigDict(masking)
    return config


def test_the_protocol_is_the_configs_and_checked():
    config = _config("x", "")
    p = evaluate.protocol(config)
    assert p["masking"] == evaluate.DEFAULT_MASKING and p["document_mask"] is True
    assert (p["seq_len"], p["seed"], p["max_tokens"]) == (64, config.eval.masking_seed, 1024)
    assert evaluate.protocol(_config("x", "", rate=0.3))["masking"]["rate"] == 0.3
    with pytest.raises(ValueError, match=r"eval\.masking: unknown field\(s\) \['rat'\]"):
        evaluate.protocol(_config("x", "", rat=0.3))
    with pytest.raises(ValueError, match=r"eval\.masking\.mode='spans'; valid names"):
        evaluate.protocol(_config("x", "", mode="spans"))


@pytest.fixture(scope="module")
def handed_over(tiny_pretrained, tmp_path_factory):
    """One model two ways: a workdir whose run masked 30% of tokens without a document
    mask (ModernBERT-like settings in its config.json) and the params folder merged from
    it (the very same parameters); a held-out text file."""
    root = tmp_path_factory.mktemp("handed_over")
    wd = str(root / "workdir")
    shutil.copytree(tiny_pretrained, wd, ignore=shutil.ignore_patterns("LOCK", "tensorboard"))
    with open(os.path.join(wd, "config.json")) as f:
        cfg = json.load(f)
    cfg["masking"]["rate"], cfg["data"]["document_mask"] = 0.3, False
    with open(os.path.join(wd, "config.json"), "w") as f:
        json.dump(cfg, f)
    params = str(root / "params")
    merge.merge(wd, params)
    valid = root / "held_out.txt"
    held = [d for d in corpus.stdlib_documents() if corpus.is_validation(d, 0.05)]
    valid.write_text("\n\n".join(held[-40:]))  # the run's own held-out documents
    return wd, params, str(valid)


def test_a_workdir_and_its_params_folder_score_the_same(handed_over, tmp_path):
    wd, params, valid = handed_over
    a = evaluate.evaluate(_config(wd, valid), str(tmp_path / "a"))
    b = evaluate.evaluate(_config(params, valid), str(tmp_path / "b"))
    for key in ("eval/mlm_loss", "eval/mlm_accuracy", "eval/mlm_baseline_accuracy",
                "eval/pseudo_perplexity", "eval/pppl_tokens", "eval/rows"):
        assert a[key] == pytest.approx(b[key], rel=1e-6), key
    assert a["protocol"] == b["protocol"] and a["protocol"]["masking"]["rate"] == 0.15
    assert a["data"] == b["data"] and a["data"]["valid_files"]["path"] == valid
    assert (a["checkpoint"]["kind"], a["checkpoint"]["step"]) == ("pretraining", 6)
    assert b["checkpoint"]["kind"] == "params" and len(b["checkpoint"]["sha256"]) == 16
    with open(tmp_path / "a" / "eval.json") as f:
        saved = json.load(f)
    assert saved["protocol"]["masking"]["rate"] == 0.15 and saved["checkpoint"]["step"] == 6
    # the user's protocol is the one used, for either kind, and recorded
    c = evaluate.evaluate(_config(params, valid, rate=0.3), str(tmp_path / "c"))
    assert c["protocol"]["masking"]["rate"] == 0.3
    assert c["eval/mlm_loss"] != pytest.approx(b["eval/mlm_loss"], rel=1e-6)
