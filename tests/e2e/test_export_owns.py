"""`encoder export` writes only into a folder it owns: a downloaded HF model folder,
an HF Trainer output, a previous export with files added and a sibling named like its
scratch folder all survive byte for byte; refusals are one line, exit 1."""
import os

import pytest

from encoder import errors
from encoder.jobs import export as export_lib

from helpers import run_module, snapshot

pytestmark = pytest.mark.e2e


def cli(source, out):
    return run_module("encoder", "export", f"--workdir={source}", f"--out={out}")


def test_export_never_touches_a_folder_it_did_not_write(tiny_pretrained, tmp_path):
    downloaded = tmp_path / "bert-base-uncased"  # what from_pretrained's download looks like
    downloaded.mkdir()
    (downloaded / "config.json").write_text('{"model_type": "bert"}')
    (downloaded / "model.safetensors").write_bytes(b"weights")
    (downloaded / "README.md").write_text("the model card")
    trainer = tmp_path / "trainer_out"  # an HF Trainer output folder
    (trainer / "checkpoint-500").mkdir(parents=True)
    (trainer / "checkpoint-500" / "optimizer.pt").write_bytes(b"state")
    (trainer / "config.json").write_text("{}")
    (trainer / "model.safetensors").write_bytes(b"weights")
    (trainer / "notes.txt").write_text("what I tried")
    before = {p: snapshot(p) for p in (downloaded, trainer)}
    rc, _, err = cli(tiny_pretrained, downloaded)
    assert rc == 1 and "Traceback" not in err, err
    assert "error: export: --out=" in err and "did not write" in err, err
    from encoder.jobs import merge
    for out in (trainer,):
        with pytest.raises(errors.NotOurs, match="did not write"):
            export_lib.export(tiny_pretrained, str(out))
        with pytest.raises(errors.NotOurs, match="did not write"):  # merge: the same rule
            merge.merge(tiny_pretrained, str(out))
    assert {p: snapshot(p) for p in (downloaded, trainer)} == before

    # A previous export is replaced, but not once a file was added to it; a user's folder
    # named like the scratch folder survives every export.
    out = tmp_path / "hf"
    (tmp_path / "hf.partial").mkdir()
    (tmp_path / "hf.partial" / "keep.txt").write_text("mine")
    rc, stdout, err = cli(tiny_pretrained, out)
    assert rc == 0, err
    assert errors.read_marker(str(out))["kind"] == "export"
    export_lib.export(tiny_pretrained, str(out))  # its own previous export: replaced
    (out / "my_eval.json").write_text("{}")
    before = snapshot(out)
    with pytest.raises(errors.NotOurs, match="my_eval.json"):
        export_lib.export(tiny_pretrained, str(out))
    assert snapshot(out) == before
    assert (tmp_path / "hf.partial" / "keep.txt").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["bert-base-uncased", "hf", "hf.partial",
                                            "trainer_out"]  # no scratch folder left behind
