"""python -m encoder import_hf: the import command writes an orbax checkpoint of
all-MiniLM-L6-v2 that restores to the same parameters (parity: tests/interop/test_hf_bert.py)."""

import numpy as np

import encoder
from encoder.jobs import import_hf as hf_bert
from helpers import child_env, minilm_dir


def test_cli_writes_an_orbax_checkpoint_that_restores(tmp_path):
    import subprocess
    import sys
    from helpers import ROOT as root
    out = tmp_path / "ckpt"
    subprocess.run([sys.executable, "-m", "encoder", "import_hf", f"--checkpoint={minilm_dir()}",
                    f"--out={out}"], cwd=root, check=True, capture_output=True,
                   env=child_env())
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
