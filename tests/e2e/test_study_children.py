"""Children die with their study: a suite killed with SIGKILL (a scheduler's
limit, an OOM kill) takes its fine-tuning run with it -- the run gets SIGTERM from the
kernel (encoder/tether.py), checkpoints, exits 75, and its workdir reads stopped
(resumable), never running. Before, the child trained on for half an hour."""
import json
import os
import signal
import subprocess
import sys
import time

from encoder.studies import jobconfig, records
from helpers import alive, child_env, ROOT, topic_task


def _env():
    return child_env()


def wait_for(predicate, timeout: float, every: float = 0.2) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return predicate()


def test_a_killed_suite_takes_its_finetuning_run_with_it(tiny_pretrained, tmp_path):
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic", n_train=64, n_dev=16)
    out = tmp_path / "out"
    run_dir = out / "runs" / "topic" / "0.001" / "0"
    log = open(tmp_path / "suite.log", "w")
    study = subprocess.Popen(
        [sys.executable, "-m", "encoder", "suite", f"--init_from={tiny_pretrained}",
         f"--tasks={tasks}", f"--workdir={out}", "--preset=runlocal", "--epochs=500"],
        cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT)
    child = None
    try:
        # the run is training (an epoch ended: it printed its row and checkpointed)
        started = wait_for(lambda: (run_dir / "run.log").exists() and '"epoch": 1' in (
            run_dir / "run.log").read_text(), 240)
        assert started, (tmp_path / "suite.log").read_text()[-3000:]
        with open(run_dir / "LOCK") as f:
            child = int(json.load(f)["pid"])
        assert alive(child)
        study.send_signal(signal.SIGKILL)
        study.wait(30)
        t0 = time.time()
        assert wait_for(lambda: not alive(child), 120), f"the run (pid {child}) outlived its suite"
        print(f"child gone {time.time() - t0:.1f} s after the suite's SIGKILL")
    finally:
        if study.poll() is None:
            study.kill()
        if child is not None and alive(child):
            os.kill(child, signal.SIGKILL)
        log.close()
    text = (run_dir / "run.log").read_text()
    assert f"received signal {int(signal.SIGTERM)}" in text and "stopped at step" in text, \
        text[-2000:]
    status = records.status(str(run_dir), jobconfig.read(str(run_dir)))
    assert status.state == "stopped", status  # resumable: the next start resumes it
    assert records.has_checkpoint(str(run_dir)) and records.lock_holder(str(run_dir)) is None
