"""A folder of this codebase given where a HuggingFace folder is read (`hf:DIR`,
`import_hf --checkpoint`) is named for what it is, with the flag to use instead."""
import json

import pytest

from encoder.interop import hf


def test_a_workdir_or_a_params_folder_is_not_taken_for_an_hf_folder(tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "config.json").write_text(json.dumps({"model": {"hidden_size": 8}, "train": {}}))
    with pytest.raises(ValueError, match=r"is a workdir of this codebase, not a HuggingFace "
                                         r"folder: give it as init_from=.*wd \(no hf:\)"):
        hf.read_config(str(wd))
    with pytest.raises(ValueError, match="is a workdir of this codebase"):
        hf.read_tensors(str(wd))
    params = tmp_path / "params_folder"
    (params / "params").mkdir(parents=True)
    (params / "model_config.json").write_text("{}")
    with pytest.raises(ValueError, match="is a params folder of this codebase"):
        hf.read_tensors(str(params))
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(FileNotFoundError, match="expected model.safetensors"):
        hf.read_tensors(str(plain))
