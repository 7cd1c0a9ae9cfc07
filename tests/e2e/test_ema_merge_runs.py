"""The parameter EMA in a run (saved with the checkpoint, evaluated as eval_ema/) and
`encoder merge` (encoder/jobs/merge.py): averages against hand averages, the output is a
valid init_from, mismatched inputs are refused."""
import json
import os
import shutil
import sys

import jax
import numpy as np
import pytest

from encoder.checkpoints import sources, store
from encoder.jobs import merge, pretrain
from encoder.train import metrics_io

from helpers import ROOT  # noqa: E402


@pytest.fixture(scope="module")
def ema_run(tiny_pretrained, tmp_path_factory):
    """4 steps with an EMA, checkpoints at steps 2 and 4, evaluated at the end."""
    sys.path.insert(0, ROOT)
    from experiments import pretrain as exp
    config = exp.get_config("runlocal")
    config.data.tokenizer = os.path.join(tiny_pretrained, "tokenizer", "sp.model")
    config.data.cache_dir = os.path.join(tiny_pretrained, "cache")
    config.train.update(dict(num_steps=4, checkpoint_every=2, eval_every=4, eval_batches=1,
                             log_every=2, ema_decay=0.5))
    wd = str(tmp_path_factory.mktemp("ema_run"))
    result = pretrain.train(config, wd, devices=jax.devices()[:1])
    return wd, result


def _raw(wd, step):
    mngr = store.manager(wd, create=False)
    state = store.restore(mngr, step=step, set_aside=False)[0]
    mngr.close()
    return state


def test_ema_is_saved_and_evaluated(ema_run):
    wd, result = ema_run
    assert "eval_ema/mlm_loss" in result and "eval/mlm_loss" in result
    assert result["eval_ema/mlm_loss"] != result["eval/mlm_loss"]
    rows = metrics_io.read_metrics(wd)
    assert rows[-1]["phase"] == "main" and "eval_ema/mlm_accuracy" in rows[-1]
    ema = merge._find_ema(_raw(wd, 4)["opt_state"], _raw(wd, 4)["params"])
    assert ema is not None and not np.allclose(
        jax.tree.leaves(ema)[0], jax.tree.leaves(_raw(wd, 4)["params"])[0])


def test_average_of_two_steps_against_the_hand_average(ema_run, tmp_path):
    wd, _ = ema_run
    out = str(tmp_path / "avg")
    record = merge.merge(wd, out, last=2)
    assert [i["step"] for i in record["inputs"]] == [2, 4]
    a, b = _raw(wd, 2)["params"], _raw(wd, 4)["params"]
    src = sources.load(out)  # a valid init_from: params folder + tokenizer
    assert src.kind == "params" and src.tokenizer.vocab_size > 0
    for x, y, m in zip(jax.tree.leaves(a), jax.tree.leaves(b), jax.tree.leaves(src.params)):
        np.testing.assert_allclose(m, (np.asarray(x, np.float64) + y) / 2, rtol=1e-6, atol=1e-7)
    with open(os.path.join(out, "merge.json")) as f:
        assert json.load(f)["method"] == "average"
    # weighted 3:1, and the EMA tree
    merge.merge(f"{wd}@2,{wd}@4", str(tmp_path / "w"), method="weighted", weights="3,1")
    w = sources.load(str(tmp_path / "w")).params
    x, y, m = (jax.tree.leaves(t)[0] for t in (a, b, w))
    np.testing.assert_allclose(m, 0.75 * np.asarray(x, np.float64) + 0.25 * y, rtol=1e-6)
    merge.merge(f"{wd}@4", str(tmp_path / "ema"), tree="ema")
    e = sources.load(str(tmp_path / "ema")).params
    ref = merge._find_ema(_raw(wd, 4)["opt_state"], b)
    np.testing.assert_array_equal(jax.tree.leaves(e)[0], jax.tree.leaves(ref)[0])


def _copy_run(wd, dst):
    shutil.copytree(wd, dst, ignore=shutil.ignore_patterns("LOCK", "cache", "tensorboard"))
    return dst


def test_merge_refuses_mismatched_inputs(ema_run, tiny_pretrained, tmp_path):
    wd, _ = ema_run
    other = _copy_run(wd, str(tmp_path / "tok"))
    from encoder.data import corpus, tokenizer as tokenizer_lib
    own = tokenizer_lib.load(os.path.join(other, "tokenizer", "sp.model"))
    retrained = tokenizer_lib.train_sentencepiece(  # another tokenization, the same size
        corpus.stdlib_documents()[:60], str(tmp_path / "retrained"), own.vocab_size)
    shutil.copy(retrained, os.path.join(other, "tokenizer", "sp.model"))
    with pytest.raises(ValueError, match="different tokenizers .*pieces"):
        merge.merge(f"{wd},{other}", str(tmp_path / "o1"))
    model = _copy_run(wd, str(tmp_path / "model"))
    cfg_path = os.path.join(model, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["model"]["rope_theta"] = 1.0
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    with pytest.raises(ValueError, match=r"different models:\n  model.rope_theta"):
        merge.merge(f"{wd},{model}", str(tmp_path / "o2"))
    cfg["model"]["rope_theta"], cfg["objective"] = 10000.0, "rtd"  # as an RTD run says
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    with pytest.raises(ValueError, match=r"different objectives \(rtd vs mlm\)"):
        merge.merge(f"{wd},{model}", str(tmp_path / "o2"))
    shaped = _copy_run(wd, str(tmp_path / "shape"))
    state = _raw(wd, 4)
    node, path = state["params"], ""
    while isinstance(node, dict):  # the first leaf, made another shape
        key = sorted(node)[0]
        path += f"/{key}"
        parent, node = node, node[key]
    parent[key] = np.zeros(3, np.float32)
    mngr = store.manager(shaped)
    store.save(mngr, 6, state, {}, {})
    mngr.wait_until_finished()
    mngr.close()
    with pytest.raises(ValueError, match=f"parameter shapes differ at {path}: "):
        merge.merge(f"{wd},{shaped}@6", str(tmp_path / "o3"))
    with pytest.raises(ValueError, match="Unknown merge method 'ties'"):
        merge.merge(wd, str(tmp_path / "o4"), method="ties")
    with pytest.raises(FileNotFoundError, match="no checkpoint at step 3"):
        merge.merge(f"{wd}@3", str(tmp_path / "o5"))
    with pytest.raises(ValueError, match="keeps no parameter EMA"):
        merge.merge(tiny_pretrained, str(tmp_path / "o6"), tree="ema")


def test_merge_refuses_checkpoints_of_phases_with_another_model(tiny_pretrained, tmp_path):
    """--last=3 once averaged a stable-phase checkpoint (RoPE base 10,000)
    with two after the context extension (160,000), and wrote the base config's model."""
    from experiments import pretrain as exp
    config = exp.get_config("runlocal")
    config.data.tokenizer = os.path.join(tiny_pretrained, "tokenizer", "sp.model")
    config.data.cache_dir = os.path.join(tiny_pretrained, "cache")
    config.train.update(dict(checkpoint_every=2, eval_every=0, log_every=2))
    config.phases = ({"name": "stable", "steps": 2},
                     {"name": "extend", "steps": 4, "model": {"rope_theta": 160000.0}})
    wd = str(tmp_path / "phased")
    pretrain.train(config, wd, devices=jax.devices()[:1])
    with pytest.raises(ValueError, match=r"@2 \(phase 'stable'\) and .*@6 \(phase "
                                         r"'extend'\): different models:\n"
                                         r"  model.rope_theta: 10000.0 vs 160000.0"):
        merge.merge(f"{wd}@6,{wd}@4,{wd}@2", str(tmp_path / "m"))
    merge.merge(wd, str(tmp_path / "m"), last=2)  # steps 4 and 6: one phase, one model
    with open(tmp_path / "m" / "model_config.json") as f:
        assert json.load(f)["rope_theta"] == 160000.0  # the phase's model, not the base's
