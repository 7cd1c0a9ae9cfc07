"""Every command's own errors end in one `error: ...` line naming what the user gave, exit 1,
no traceback; Ctrl-C ends in one line (75 where the command resumes); a pretraining restart
on changed data is refused with a diff and changes nothing."""
import json
import signal
import subprocess
import sys
import time

import pytest

from encoder.data import corpus

from helpers import ROOT, one_line, run_module, snapshot

pytestmark = pytest.mark.e2e
run = run_module  # python -m MODULE ARGS -> (exit status, stdout, stderr)


def test_flag_and_config_mistakes_are_one_line(tmp_path):
    wd = tmp_path / "wd"
    rc, _, err = run("encoder", "run", "--config=experiments/pretrain.py:runlocal",
                     "--config.model.num_layer=4", f"--workdir={wd}")
    one_line(rc, err, "num_layer", 'Did you mean "num_layers"')
    rc, _, err = run("encoder", "ablate", "--config=experiments/pretrain.py:runlocal",
                     "--sweep=model.position=bogus", f"--workdir={tmp_path / 'study'}")
    one_line(rc, err, "bogus")
    rc, _, err = run("encoder", "prepare", "--out=x", "--shard_mb=abc")
    one_line(rc, err, "--shard_mb=abc")
    assert not wd.exists()
    (tmp_path / "task").mkdir()
    rc, _, err = run("encoder", "ablate", "--config=experiments/pretrain.py:runlocal",
                     "--finetune=experiments/finetune.py:task=classification,runlocal",
                     f"--finetune_data={tmp_path / 'task'}", f"--workdir={tmp_path / 'study'}")
    one_line(rc, err, "has no train.jsonl")  # before the first pretraining run, not after
    assert not (tmp_path / "study").exists()


def test_a_second_suite_on_one_workdir_refuses_at_start(tmp_path):
    from encoder import errors
    from encoder.train import workdir as workdir_lib
    errors.mark_output(str(tmp_path / "suite"), "suite")
    with workdir_lib.Lock(str(tmp_path / "suite")):  # a live suite holds it
        rc, _, err = run("encoder", "suite", "--baseline=majority",
                         f"--workdir={tmp_path / 'suite'}")
    one_line(rc, err, "is in use by pid")


def test_prepare_interrupted_ends_in_one_line_and_resumes(tmp_path):
    text = tmp_path / "big.txt"
    # ~600 units of 20 KB: seconds of work left when the first is done, so the Ctrl-C
    # cannot come after the end on a quiet machine (4,000 documents once did: exit 0)
    docs = corpus.stdlib_documents()[:4000] * 8
    text.write_text("\n\n".join(docs) + "\n")
    out = tmp_path / "c"
    cmd = [sys.executable, "-m", "encoder", "prepare", f"--input={text}", f"--out={out}",
           "--vocab_size=300", "--shard_mb=0.02", "--num_workers=1", "--sample_chars=200000"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.time() + 120
    while not (out / "units" / "00001.json").exists():
        assert p.poll() is None and time.time() < deadline, p.communicate()
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 75, err
    assert "Traceback" not in err and "run the same command again to resume" in err, err
    done = len(list((out / "units").glob("*.json")))
    assert not (out / "manifest.json").exists()
    # the same command resumes: the finished units are kept, the corpus completes
    rc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rc.returncode == 0, rc.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["units"] > done > 0


def test_pretraining_restart_on_changed_data_is_refused(tmp_path):
    data = tmp_path / "text"
    data.mkdir()
    docs = corpus.stdlib_documents()[:400]
    (data / "a.txt").write_text("\n\n".join(docs) + "\n")
    wd = tmp_path / "wd"
    args = ["--config=experiments/pretrain.py:runlocal", f"--config.data.train_files={data}",
            "--config.train.num_steps=2", "--config.train.checkpoint_every=2",
            "--config.train.eval_every=0", "--config.data.tokenizer_sample_chars=100000",
            f"--workdir={wd}"]
    rc, _, err = run("encoder", "run", *args)
    assert rc == 0, err[-3000:]
    (data / "b.txt").write_text("\n\n".join(docs[:50]) + "\n")  # a file added to the folder
    before = snapshot(wd)
    rc, _, err = run("encoder", "run", *args[:-1], "--config.train.num_steps=4", f"--workdir={wd}")
    one_line(rc, err, "different data", "file added:", "b.txt")
    assert snapshot(wd) == before
    # a folder that looks prepared but has no manifest is refused, not read as text
    half = tmp_path / "half"
    (half / "units").mkdir(parents=True)
    (half / "plan.json").write_text('{"units": 3, "fingerprint": "x"}')
    rc, _, err = run("encoder", "run", *args[:1], f"--config.data.train_files={half}",
                     f"--workdir={tmp_path / 'wd2'}")
    one_line(rc, err, "unfinished prepared corpus", "0 of 3 units")
    assert not (tmp_path / "wd2").exists()  # a run that failed before writing leaves nothing
