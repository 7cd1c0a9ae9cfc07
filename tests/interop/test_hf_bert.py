"""The imported all-MiniLM-L6-v2 matches HuggingFace's PyTorch BertModel."""
import os

import numpy as np
import pytest

import encoder
from encoder.jobs import import_hf as hf_bert
from helpers import TORCH_GROUP, minilm_dir

pytestmark = TORCH_GROUP  # imports torch (helpers.TORCH_GROUP)


def test_minilm_matches_pytorch_bert():
    import torch  # a real dependency of the test suite: never skipped
    from transformers import BertModel, BertTokenizerFast
    path = minilm_dir()
    cfg, params = hf_bert.load(path)
    tok = BertTokenizerFast.from_pretrained(path)
    batch = tok(["Encoders read in both directions.", "A much longer second example, with a "
                 "clause that makes it longer than the others by some way."],
                ["It pairs with this sentence.", "and a pair too"],
                padding=True, return_tensors="np")
    single = tok(["short"], padding="max_length", max_length=batch["input_ids"].shape[1],
                 return_tensors="np")
    inputs = {k: np.concatenate([batch[k], single[k]]) for k in batch}
    assert inputs["token_type_ids"].max() == 1 and inputs["attention_mask"].min() == 0
    model = BertModel.from_pretrained(path).eval()
    with torch.no_grad():
        ref = model(**{k: torch.tensor(v) for k, v in inputs.items()}).last_hidden_state.numpy()
    ours = np.asarray(encoder.encode(cfg, params, inputs["input_ids"], inputs["token_type_ids"],
                                     inputs["attention_mask"]))
    diff = np.abs(ours - ref)
    print(f"max |ours - torch| = {diff.max():.2e}")
    assert diff.max() <= 1e-4


def test_minilm_config_and_pooler():
    cfg, params = hf_bert.load(minilm_dir())
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.vocab_size) == (6, 384, 12, 30522)
    assert params["pooler"]["dense"]["kernel"].shape == (384, 384)


def test_unsupported_model_type_is_an_error():
    with pytest.raises(ValueError, match="model_type 'gpt2' is not supported; supported: "):
        hf_bert.config_from_hf({"model_type": "gpt2"})


def test_unsupported_position_type_is_an_error():
    with pytest.raises(ValueError, match="relative_key"):
        hf_bert.config_from_hf({"position_embedding_type": "relative_key"})


def _copy_minilm(dst, config_edit=None, drop_tensor=None):
    """A copy of the MiniLM folder with its config.json or tensors damaged."""
    import json
    import shutil
    from safetensors.numpy import load_file, save_file
    shutil.copytree(minilm_dir(), dst)
    if config_edit is not None:
        cfg = json.load(open(os.path.join(dst, "config.json")))
        config_edit(cfg)
        json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
    if drop_tensor is not None:
        tensors = load_file(os.path.join(dst, "model.safetensors"))
        del tensors[drop_tensor]
        save_file(tensors, os.path.join(dst, "model.safetensors"))
    return str(dst)


def test_malformed_folders_get_errors_that_name_what_is_wrong(tmp_path):
    folder = _copy_minilm(tmp_path / "a", config_edit=lambda c: c.pop("num_hidden_layers"))
    with pytest.raises(ValueError, match=r"config.json lacks \['num_hidden_layers'\]"):
        hf_bert.load(folder)
    folder = _copy_minilm(tmp_path / "b", drop_tensor="encoder.layer.3.output.dense.weight")
    with pytest.raises(ValueError, match=r"no tensor 'bert.encoder.layer.3.output.dense.weight'"):
        hf_bert.load(folder)
    folder = _copy_minilm(tmp_path / "c", config_edit=lambda c: c.update(vocab_size=1000))
    with pytest.raises(ValueError, match=r"embed/token/embedding has shape \(30522, 384\), but "
                                         r"config.json implies \(1000, 384\)"):
        hf_bert.load(folder)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        hf_bert.load(str(tmp_path / "d"))
