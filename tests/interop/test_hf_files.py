"""A damaged HuggingFace folder is one error naming its file: a truncated
model.safetensors, a config.json that is not a JSON object of sizes, and a config.json whose
hidden_size or num_hidden_layers no longer match the tensors (named with the size the
weights have, not as a tensor the mapping cannot find). hf:DIR and import_hf read here."""
import json
import os

import jax
import numpy as np
import pytest
from flax import linen as nn

from encoder import config as config_lib
from encoder.checkpoints import sources
from encoder.interop import hf
from encoder.model import models


@pytest.fixture(scope="module")
def roformer(tmp_path_factory):
    """A tiny RoFormer folder (config.json + model.safetensors) exported from our model."""
    cfg = config_lib.model_config("tiny")
    cfg.update(vocab_size=101, hidden_size=32, num_heads=4, intermediate_size=64,
               max_position=64, position="rope", num_layers=2)
    ids = np.ones((1, 8), np.int32)
    params = nn.unbox(models.MaskedLM(models.freeze(cfg)).init(
        jax.random.key(0), ids, ids * 0, ids)["params"])
    out = tmp_path_factory.mktemp("roformer")
    hf.write_folder(str(out), "roformer", cfg, params, "mlm")
    return out


def _copy(src, dst, config_edit=None):
    import shutil
    shutil.copytree(src, dst)
    if config_edit is not None:
        path = dst / "config.json"
        cfg = json.loads(path.read_text())
        config_edit(cfg)
        path.write_text(json.dumps(cfg))
    return dst


def test_the_intact_folder_loads(roformer):
    cfg, _ = hf.load(str(roformer))
    assert (cfg.hidden_size, cfg.num_layers) == (32, 2)


def test_a_truncated_safetensors_file_is_named(roformer, tmp_path):
    folder = _copy(roformer, tmp_path / "f")
    st = folder / "model.safetensors"
    st.write_bytes(st.read_bytes()[:st.stat().st_size // 2])
    match = r"f/model.safetensors: not a readable safetensors file .*truncated or damaged"
    with pytest.raises(ValueError, match=match):
        hf.load(str(folder))
    with pytest.raises(ValueError, match=match):  # init_from=hf:DIR, the jobs' door
        sources.load(f"hf:{folder}")
    st.write_bytes(b"\x05")
    with pytest.raises(ValueError, match=r"model.safetensors: not a readable safetensors"):
        hf.load(str(folder))


@pytest.mark.parametrize("text,match", [
    ('{"model_type": "roformer", "hidden', r"config.json: not valid JSON \(.*line 1\): the file is "
                                          "truncated"),
    ("", r"config.json: not valid JSON"),
    ("[1, 2]", r"config.json: expected a JSON object of the model's settings, got list"),
    (b'{"model_type": "\xff"}', r"config.json: not valid UTF-8"),
])
def test_a_config_json_that_is_no_object_of_settings_is_named(roformer, tmp_path, text, match):
    folder = _copy(roformer, tmp_path / "f")
    path = folder / "config.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError, match=match):
        hf.load(str(folder))


def test_a_size_of_the_wrong_type_is_named(roformer, tmp_path):
    folder = _copy(roformer, tmp_path / "f", lambda c: c.update(hidden_size="32"))
    with pytest.raises(ValueError, match=r"config.json: hidden_size is '32'; expected a positive "
                                         "integer"):
        hf.load(str(folder))


def test_an_edited_hidden_size_names_the_size_the_weights_have(roformer, tmp_path):
    folder = _copy(roformer, tmp_path / "f", lambda c: c.update(hidden_size=64))
    with pytest.raises(ValueError, match=r"f/config.json: hidden_size is 64, but the weights in "
                                         r".*f have 32 \(roformer.encoder.layer.0.*LayerNorm"
                                         r".weight has shape \(32,\)\).*set hidden_size to 32"):
        hf.load(str(folder))


def test_an_edited_layer_count_is_named(roformer, tmp_path):
    for layers in (4, 1):  # more: tensors missing; fewer: layers silently left out
        folder = _copy(roformer, tmp_path / f"f{layers}",
                       lambda c: c.update(num_hidden_layers=layers))
        with pytest.raises(ValueError, match=rf"config.json: num_hidden_layers is {layers}, but "
                                             r"the weights in .* have 2 \(layers 0 to 1\)"):
            hf.load(str(folder))
    assert os.path.exists(folder / "model.safetensors")
