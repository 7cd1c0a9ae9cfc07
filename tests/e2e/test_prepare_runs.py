"""Prepared corpora: the same rows as in-memory packing, parallel/resumed/distributed runs
that agree, an evenly drawn tokenizer sample, and clear errors for damaged corpora."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from encoder.data import corpus, prepare, tokenizer as tokenizer_lib

from helpers import ROOT  # noqa: E402
SMALL_UNITS = prepare.Settings(shard_mb=0.05)  # ~50 KB units: many cuts inside each file


@pytest.fixture(scope="module")
def text_corpus(tmp_path_factory):
    """Three files of real text (stdlib docs), blank-line documents, ~400 KB."""
    d = tmp_path_factory.mktemp("text")
    docs = corpus.stdlib_documents()[:3000]
    for k in range(3):
        with open(d / f"part{k}.txt", "w", encoding="utf-8") as f:
            for doc in docs[k::3]:
                f.write(doc + "\n\n\n" if k == 1 else doc + "\n\n")
    tok = tokenizer_lib.train_sentencepiece(docs, str(d / "sp"), 2000)
    return str(d), tok


def _manifest_core(m):
    """What must agree between two prepares of the same input (not the command)."""
    return {"splits": m["splits"], "stats": m["stats"], "tokenizer": m["tokenizer"]["fingerprint"]}


@pytest.fixture(scope="module")
def prepared(text_corpus, tmp_path_factory):
    folder, tok = text_corpus
    out = str(tmp_path_factory.mktemp("prep") / "corpus")
    manifest = prepare.prepare(folder, out, SMALL_UNITS, tokenizer=tok, num_workers=1)
    return out, manifest


def _cli(folder, out, tok, *extra):
    cmd = [sys.executable, "-m", "encoder.data.prepare", f"--input={folder}", f"--out={out}",
           f"--tokenizer={tok}", "--num_workers=1", "--shard_mb=0.02", *extra]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _data_cfg(train_files, **kw):
    from encoder import config as config_lib
    cfg = config_lib.base_config().data
    cfg.train_files = train_files
    cfg.seq_len = 32
    cfg.update(kw)
    return cfg


def _copy(out, tmp_path):
    import shutil
    dst = str(tmp_path / "copy")
    shutil.copytree(out, dst)
    return dst


def test_prepare_killed_midway_resumes_to_the_same_manifest(text_corpus, tmp_path):
    folder, tok = text_corpus
    full = _cli(folder, tmp_path / "full", tok)
    assert full.wait(timeout=120) == 0, full.stdout.read()
    victim = _cli(folder, tmp_path / "killed", tok)
    deadline = time.time() + 120
    while not os.path.exists(tmp_path / "killed" / "units" / "00003.json"):
        assert victim.poll() is None and time.time() < deadline, victim.stdout.read()
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert not os.path.exists(tmp_path / "killed" / "manifest.json")
    again = _cli(folder, tmp_path / "killed", tok)
    out = again.communicate(timeout=120)[0]
    assert again.returncode == 0, out
    assert "prepared" in out and "train with: --config.data.train_files=" in out
    manifests = [json.load(open(tmp_path / d / "manifest.json")) for d in ("full", "killed")]
    assert _manifest_core(manifests[0]) == _manifest_core(manifests[1])
    assert manifests[1]["command"].startswith("python -m encoder.data.prepare --input=")
