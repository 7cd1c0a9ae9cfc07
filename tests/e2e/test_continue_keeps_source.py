"""A run continued from the real all-MiniLM-L6-v2 package keeps what the source was into its
export: the sentence-transformers pooling and Normalize, the 256-token limit, the tokenizer's
model_max_length (512, not the run's 64) and BERT's pooler, which the MLM run has no place
for. At learning rate 0 the export computes the original's embeddings."""
import importlib
import json
import sys

import jax
import numpy as np
import pytest

from helpers import ROOT, TORCH_GROUP, minilm_dir

pytestmark = [pytest.mark.e2e, TORCH_GROUP]


def test_a_continued_minilm_exports_its_source_pooling_pooler_and_length(tmp_path):
    from safetensors.numpy import load_file
    from sentence_transformers import SentenceTransformer
    from encoder.jobs import export, pretrain
    sys.path.insert(0, ROOT)
    config = importlib.import_module("experiments.continue").get_config("runlocal")
    config.init_from = "hf:" + minilm_dir()
    config.init_fresh = "mlm_head"  # a sentence encoder has none
    config.train.update(dict(num_steps=2, learning_rate=0.0, eval_every=2, eval_batches=1,
                             checkpoint_every=2, log_every=1))
    pretrain.train(config, str(tmp_path / "run"), devices=jax.devices()[:1])
    result = export.export(str(tmp_path / "run"), str(tmp_path / "st"), "sentence-transformers")
    assert result["pooling"] == "mean" and result["normalize"]
    assert "kept through this run" in result["pooling_from"]
    assert result["pooler"] == "the source's (not trained by this run)"
    out = tmp_path / "st"
    assert json.load(open(out / "tokenizer_config.json"))["model_max_length"] == 512
    assert json.load(open(out / "sentence_bert_config.json"))["max_seq_length"] == 256
    mine, theirs = load_file(str(out / "model.safetensors")), load_file(
        minilm_dir() + "/model.safetensors")
    np.testing.assert_array_equal(mine["bert.pooler.dense.weight"], theirs["pooler.dense.weight"])
    texts = ["A man is eating food.", "Continued pretraining keeps the pooling.",
             "word " * 300]
    a = SentenceTransformer(minilm_dir(), device="cpu").encode(texts)
    b = SentenceTransformer(str(out), device="cpu").encode(texts)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() >= 0.9999, cos
