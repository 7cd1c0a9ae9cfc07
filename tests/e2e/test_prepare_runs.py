"""python -m encoder prepare killed midway resumes to the same manifest (the prepared
corpus itself: tests/data/test_prepare.py)."""
import json
import os
import signal
import subprocess
import sys
import time

from helpers import ROOT


def _manifest_core(m):
    """What must agree between two prepares of the same input (not the command)."""
    return {"splits": m["splits"], "stats": m["stats"], "tokenizer": m["tokenizer"]["fingerprint"]}


def _cli(folder, out, tok, *extra):
    cmd = [sys.executable, "-m", "encoder", "prepare", f"--input={folder}", f"--out={out}",
           f"--tokenizer={tok}", "--num_workers=1", "--shard_mb=0.02", *extra]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


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
    assert manifests[1]["command"].startswith("python -m encoder prepare --input=")
