"""Non-finite numbers end a run in one line: a source whose tensors hold NaN is refused at
load naming them (a params folder by its parameter paths, an HF folder by its tensor
names), a source that computes NaN before its first step here is stopped at step 0, and a
real divergence stops at its step naming the likely causes. An HF folder given without
hf: is named as one by every job, as export names it."""
import os
import shutil

import jax
import numpy as np
import pytest

from encoder import errors
from encoder.checkpoints import sources, store
from helpers import tiny_pretrain_config


def _params_folder(workdir: str, out: str, change) -> str:
    """A params folder of workdir's model and tokenizer, one parameter changed by change(path,
    array) -> array or None; returns the path of the parameter changed."""
    src = sources.load(workdir)
    params = jax.tree.map(np.array, src.params)
    leaves = jax.tree_util.tree_leaves_with_path(params)
    changed = ""
    flat = {}
    for path, x in leaves:
        name = "/" + "/".join(str(getattr(k, "key", k)) for k in path)
        y = change(name, x) if not changed else None
        if y is not None:
            changed = name
        flat[name] = x if y is None else y
    params = jax.tree_util.tree_unflatten(jax.tree.structure(params), list(flat.values()))
    store.save_params(out, params, src.model_cfg)
    shutil.copytree(os.path.join(workdir, "tokenizer"), os.path.join(out, "tokenizer"))
    return changed


def _poison(name, x):
    if x.ndim == 2:
        x = x.copy()
        x[1, 2] = np.nan
        x[0, 0] = np.inf
        return x
    return None


def test_a_params_folder_holding_nan_is_refused_naming_the_tensor(tiny_pretrained, tmp_path):
    bad = _params_folder(tiny_pretrained, str(tmp_path / "nan"), _poison)
    with pytest.raises(errors.NonFinite) as refused:
        sources.load(str(tmp_path / "nan"))
    text = str(refused.value)
    assert f"{bad}: 1 NaN, 1 inf of " in text and "1 of " in text and "tensors hold" in text
    assert sources.load(tiny_pretrained).params  # the finite workdir loads


def test_an_hf_folder_holding_nan_is_refused_naming_its_tensor(tiny_pretrained, tmp_path):
    from safetensors.numpy import load_file, save_file
    from encoder.jobs import export
    out = str(tmp_path / "hf")
    export.export(tiny_pretrained, out)
    path = os.path.join(out, "model.safetensors")
    tensors = load_file(path)
    name = next(k for k in sorted(tensors) if "word_embeddings" in k)
    tensors[name] = tensors[name].copy()
    tensors[name][3, :5] = np.nan
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(errors.NonFinite, match=rf"hf:{out}: 1 of {len(tensors)} tensors hold "
                                               rf"non-finite values \({name}: 5 NaN of "):
        sources.load(f"hf:{out}")


def test_an_hf_folder_without_hf_is_named_as_one_by_a_continued_run(tiny_pretrained, tmp_path):
    import importlib
    from encoder.jobs import export, pretrain
    continue_exp = importlib.import_module("experiments.continue")  # a keyword's name
    out = str(tmp_path / "hf")
    export.export(tiny_pretrained, out)
    config = continue_exp.get_config("runlocal")
    config.init_from = out  # no hf: (export's own resolver names the same mistake)
    with pytest.raises(FileNotFoundError, match=rf"init_from='{out}' is a HuggingFace folder: "
                                                rf"use hf:{out}"):
        pretrain.train(config, str(tmp_path / "run"), devices=jax.devices()[:1])
    assert not (tmp_path / "run").exists()


def test_a_divergence_stops_at_its_step_naming_the_causes(shared_data, tmp_path):
    from encoder.jobs import pretrain
    config = tiny_pretrain_config(num_steps=8, learning_rate=1e6, warmup_steps=0,
                                  clip_norm=0.0, log_every=1, checkpoint_every=8)
    config.data.tokenizer, config.data.cache_dir = shared_data
    with pytest.raises(errors.NonFinite) as stop:
        pretrain.train(config, str(tmp_path / "w"), devices=jax.devices()[:1])
    text = str(stop.value)
    assert text.startswith("non-finite ") and " at step " in text
    assert "No checkpoint was saved before it" in text and "train.learning_rate" in text
    assert not store.has_checkpoint(str(tmp_path / "w"))  # nothing non-finite was saved


def test_a_source_that_computes_nan_is_stopped_at_step_0(tiny_pretrained, shared_data,
                                                         tmp_path):
    from encoder.jobs import pretrain

    def huge(name, x):  # finite weights whose squares overflow float32 in the first norm
        return x * np.float32(1e30) if "embed" in name and x.ndim == 2 else None
    _params_folder(tiny_pretrained, str(tmp_path / "huge"), huge)
    config = tiny_pretrain_config(num_steps=4, eval_every=4, eval_batches=1,
                                  checkpoint_every=4)
    config.data.tokenizer, config.data.cache_dir = shared_data
    config.init_from = str(tmp_path / "huge")
    with pytest.raises(errors.NonFinite, match=r"non-finite eval/\S+ \((nan|inf|-inf)\) at "
                                               r"step 0; stopping"):
        pretrain.train(config, str(tmp_path / "w"), devices=jax.devices()[:1])
