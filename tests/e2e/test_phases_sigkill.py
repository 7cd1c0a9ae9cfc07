"""A run in phases killed (SIGKILL) after a phase boundary resumes bitwise: the
modernbert_base recipe at runlocal (three phases: 64 tokens with a batch-size warmup,
an extension to 512 tokens with a new RoPE base, a 1-sqrt decay), through the CLI."""
import os
import signal
import shutil
import subprocess
import sys
import time

import pytest

from encoder.train import metrics_io
from helpers import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _main(workdir, tiny_data):
    env = child_env()
    cmd = [sys.executable, "-m", "encoder", "run",
           "--config=experiments/modernbert_base.py:runlocal", f"--workdir={workdir}",
           "--config.train.log_every=1", "--config.train.eval_every=0",
           *(f"--config.{k}={v}" for k, v in tiny_data.items())]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _rows(workdir):
    return [r for r in metrics_io.read_metrics(str(workdir)) if "train/loss" in r]


@pytest.mark.e2e
def test_sigkill_past_a_phase_boundary_resumes_bitwise(tmp_path, tiny_data):
    ref = _main(tmp_path / "ref", tiny_data)
    assert ref.wait(timeout=900) == 0, ref.stdout.read()
    reference = _rows(tmp_path / "ref")
    assert [r["phase"] for r in reference] == ["stable"] * 5 + ["extension"] * 5 + ["decay"] * 5
    victim = _main(tmp_path / "victim", tiny_data)
    boundary = tmp_path / "victim" / "checkpoints" / "5"
    t0 = time.time()
    while not (boundary.exists() and len(_rows(tmp_path / "victim")) >= 7):
        assert victim.poll() is None, victim.stdout.read()
        assert time.time() - t0 < 900, "timed out"
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert 5 < len(_rows(tmp_path / "victim")) < 15
    again = _main(tmp_path / "victim", tiny_data)
    out = again.communicate(timeout=900)[0]
    assert again.returncode == 0, out
    assert "resumed from" in out
    rows = _rows(tmp_path / "victim")
    assert [r["step"] for r in rows] == list(range(1, 16))
    assert [r["train/loss"] for r in rows] == [r["train/loss"] for r in reference]
    assert [r["tokens"] for r in rows] == [r["tokens"] for r in reference]


@pytest.mark.e2e
def test_the_merge_command_and_its_flags(tmp_path, tiny_pretrained):
    from encoder.checkpoints import sources
    out = tmp_path / "merged"
    twin = tmp_path / "twin"  # a second run (one checkpoint twice is refused)
    shutil.copytree(tiny_pretrained, twin, ignore=shutil.ignore_patterns("LOCK"))
    cmd = [sys.executable, "-m", "encoder", "merge", f"--workdirs={tiny_pretrained},{twin}",
           f"--out={out}", "--method=weighted", "--weights=1,3", "--tree=params"]
    env = child_env()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert '"method": "weighted"' in done.stdout
    assert sources.load(str(out)).kind == "params"
    bad = subprocess.run([*cmd[:6], "--method=ties"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert bad.returncode != 0 and "Unknown merge method 'ties'" in bad.stderr
