"""Exports keep what the source was (encoder/interop/origin.py): the real all-MiniLM-L6-v2
package imported and exported to sentence-transformers computes the original's embeddings
(its mean pooling and Normalize, its 256-token limit); a run's workdir that carries a
source's record exports its pooling, pooler and model_max_length; a classifier head an
import leaves out is named; exported folders read as the user's other files do."""
import json
import os
import shutil
import stat

import numpy as np
import pytest

from encoder.interop import origin
from encoder.jobs import export, import_hf
from helpers import TORCH_GROUP, minilm_dir

pytestmark = TORCH_GROUP  # imports torch (sentence-transformers, transformers)

TEXTS = ["A man is eating food.", "The new movie is awesome.",
         "def read(path): return open(path).read()", "Le chat dort sur le canapé.",
         "long " * 400]  # past the source's 256-token limit: truncated as it truncates


def _embed(folder):
    from sentence_transformers import SentenceTransformer
    return SentenceTransformer(folder, device="cpu").encode(TEXTS)


def _cosines(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def original():
    return _embed(minilm_dir())


@pytest.mark.parametrize("via", ["import_hf", "hf:DIR"])
def test_minilm_exported_to_sentence_transformers_is_the_original(tmp_path, original, via):
    source = "hf:" + minilm_dir()
    if via == "import_hf":
        import_hf.import_folder(minilm_dir(), str(tmp_path / "params"))
        source = str(tmp_path / "params")
    result = export.export(source, str(tmp_path / "st"), "sentence-transformers")
    assert result["pooling"] == "mean" and result["normalize"]
    assert result["pooling_from"].startswith("the source's")
    assert min(_cosines(original, _embed(str(tmp_path / "st")))) >= 0.9999
    assert json.load(open(tmp_path / "st" / "sentence_bert_config.json"))[
        "max_seq_length"] == 256
    assert json.load(open(tmp_path / "st" / "tokenizer_config.json"))["model_max_length"] == 512
    # --pooling still chooses, and says so
    chosen = export.export(source, str(tmp_path / "cls"), "sentence-transformers",
                           pooling="cls")
    assert chosen["pooling"] == "cls" and chosen["pooling_from"] == "--pooling's"


def test_a_workdir_carrying_the_source_exports_its_pooling_pooler_and_length(
        tmp_path, tiny_pretrained):
    """What a run continued from an HF source keeps (pretrain's start calls origin.carry;
    the whole run: tests/e2e/test_continue_keeps_source.py)."""
    wd = tmp_path / "w"
    shutil.copytree(tiny_pretrained, wd, ignore=shutil.ignore_patterns("LOCK"))
    cfg = json.load(open(wd / "config.json"))
    d, positions = cfg["model"]["hidden_size"], cfg["model"]["max_position"]
    rng = np.random.default_rng(0)
    pooler = {"kernel": rng.normal(size=(d, d)).astype(np.float32),
              "bias": rng.normal(size=(d,)).astype(np.float32)}
    origin.write(str(wd), {"source": "/models/src", "model_max_length": 10 * positions,
                           "sentence_transformers": {"pooling": "max", "normalize": False,
                                                     "max_seq_length": 16, "unsupported": []},
                           "dropped": []}, pooler)
    result = export.export(str(wd), str(tmp_path / "st"), "sentence-transformers")
    assert result["pooling"] == "max" and not result["normalize"]
    assert "kept through this run" in result["pooling_from"]
    assert result["model_max_length"] == positions  # the source's, within the positions
    modules = json.load(open(tmp_path / "st" / "modules.json"))
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling"]
    # the tiny run is RoFormer-shaped (rotary), whose HF model has no pooler: none claimed
    # (a BERT source's pooler through a continued run: tests/e2e/test_continue_keeps_source.py)
    assert result["family"] == "roformer" and not result["pooler"]
    # a run with no source record: the run's rule, Normalize, the run's length
    plain = export.export(tiny_pretrained, str(tmp_path / "plain"), "sentence-transformers")
    assert plain["pooling_from"].startswith("the run's") and plain["normalize"]
    assert plain["model_max_length"] == cfg["data"]["seq_len"]


def test_an_unsupported_sentence_transformers_module_is_refused_not_guessed(tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(minilm_dir(), folder)
    modules = json.load(open(folder / "modules.json"))
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense",
                       "type": "sentence_transformers.models.Dense"})
    json.dump(modules, open(folder / "modules.json", "w"))
    with pytest.raises(ValueError, match=r"cannot reproduce \(Dense \(2_Dense\)\)"):
        export.export(f"hf:{folder}", str(tmp_path / "out"), "sentence-transformers")
    assert not (tmp_path / "out").exists()


def test_a_classifier_head_left_out_of_an_import_is_named(tmp_path, capsys):
    import torch
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                        id2label={0: "negative", 1: "positive"},
                        label2id={"negative": 0, "positive": 1})
    folder = tmp_path / "clf"
    BertForSequenceClassification(config).save_pretrained(folder)
    shutil.copy(os.path.join(minilm_dir(), "vocab.txt"), folder / "vocab.txt")  # a tokenizer
    cfg = json.load(open(folder / "config.json"))
    cfg["vocab_size"] = 64
    json.dump(cfg, open(folder / "config.json", "w"))
    record = origin.of_hf_folder(str(folder), {"encoder": {}, "pooler": {}})
    assert record["dropped"] == ["classifier.bias", "classifier.weight"]
    line = origin.describe_dropped(str(folder), record["dropped"])
    assert "BertForSequenceClassification's task head (classifier.bias, classifier.weight; " \
           "labels negative, positive)" in line
    assert origin.dropped_heads(["bert.pooler.dense.weight"], {"encoder": {}}) == [
        "bert.pooler.dense.weight"]  # a pooler the family did not map is named too


def test_exported_folders_get_the_users_default_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        export.export("hf:" + minilm_dir(), str(tmp_path / "st"), "sentence-transformers")
    finally:
        os.umask(old)
    modes = {os.path.relpath(os.path.join(r, n), tmp_path): stat.S_IMODE(
        os.stat(os.path.join(r, n)).st_mode) for r, ds, ns in os.walk(tmp_path / "st")
        for n in ds + ns}
    modes["."] = stat.S_IMODE(os.stat(tmp_path / "st").st_mode)
    assert modes["."] == 0o755 and modes[os.path.join("st", "1_Pooling")] == 0o755
    assert modes[os.path.join("st", "model.safetensors")] == 0o644  # safetensors writes 0600
    assert all(m & 0o044 == 0o044 for m in modes.values()), modes
