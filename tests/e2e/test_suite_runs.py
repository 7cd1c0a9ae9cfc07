"""The downstream suite: GLUE's exact layouts, metrics by hand, the learning-rate choice,
the embedded battery, resume without repeats, failures reported, one run end to end."""
import json
import math
import signal
import subprocess
import sys
import time

import pytest

from encoder.data import embedded_tasks
from encoder.studies import records
from encoder.studies.suite import battery
from helpers import ROOT, child_env, topic_task


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    return battery.embedded_tasks(str(tmp_path_factory.mktemp("suite")))


def _env():
    return child_env()


def test_the_embedded_suite_end_to_end(embedded, tiny_pretrained, tmp_path):
    out = tmp_path / "out"
    opts = battery.SuiteOptions(init_from=tiny_pretrained, workdir=str(out), tasks=embedded,
                                preset="runlocal", max_train=32, max_eval=16, parallel=2,
                                probe=True, probe_max_train=32, env=_env())
    result = battery.run_suite(opts)
    assert result["failed"] == 0
    names = set(embedded_tasks.TASK_META)
    assert {s["task"] for s in result["tasks"]} == names and not result["missing"]
    assert all(math.isfinite(s["median"]) for s in result["tasks"])
    assert math.isfinite(result["averages"]["average"])
    with open(out / "suite.csv") as f:
        lines = f.read().splitlines()
    assert {line.split(",")[0] for line in lines[1:]} >= names | {"average"}
    text = (out / "suite.md").read_text()
    assert "**average** (7 tasks)" in text and "Per-layer linear probes" in text
    assert (out / "suite.png").stat().st_size > 0 and (out / "probes" / "probes.png").exists()
    for task in ("topic", "same_package", "relatedness", "arg_mentions", "api_qa"):
        assert (out / "runs" / task / "0.001" / "0" / "eval.json").exists()
    assert battery.suite_average(str(out))["suite/average"] == pytest.approx(
        result["averages"]["average"])


def test_an_interrupted_suite_repeats_no_finished_run(tiny_pretrained, tmp_path):
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic", n_train=32, n_dev=16)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "encoder", "suite", f"--init_from={tiny_pretrained}",
           f"--tasks={tasks}", f"--workdir={out}", "--preset=runlocal", "--seeds=2"]
    first = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    runs = out / "runs" / "topic" / "0.001"
    done = runs / "0" / "eval.json"
    deadline = time.time() + 300
    # finished = the run's own completion record (eval.json is written just before it: a
    # Ctrl-C between the two stops the run, and the next start rightly resumes it)
    while not records.finished(str(runs / "0")) and first.poll() is None and \
            time.time() < deadline:
        time.sleep(0.2)
    assert records.finished(str(runs / "0")), first.communicate()[0][-3000:]
    first.send_signal(signal.SIGINT)  # Ctrl-C while seed 1 runs: it is stopped, not finished
    first.communicate(timeout=180)
    # seed 1 can (rarely, on a quiet machine) finish before the Ctrl-C lands: then it too
    # must be skipped, else it must be started again
    seed1_finished = records.finished(str(runs / "1"))
    mtime = done.stat().st_mtime_ns
    second = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True,
                            timeout=600)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    log = second.stdout + second.stderr
    assert "skip topic/0.001/0 (finished)" in log and "started topic/0.001/0" not in log
    assert ("skip topic/0.001/1 (finished)" if seed1_finished else "started topic/0.001/1") in log
    assert done.stat().st_mtime_ns == mtime  # the finished run was not repeated
    with open(out / "suite.json") as f:
        assert json.load(f)["tasks"][0]["seeds"] == 2


def test_a_failed_run_is_reported_with_its_log(tiny_pretrained, tmp_path):
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic", n_train=8, n_dev=8)  # fewer rows than one batch of 16
    opts = battery.SuiteOptions(init_from=tiny_pretrained, workdir=str(tmp_path / "out"),
                                tasks=str(tasks), preset="runlocal", env=_env())
    result = battery.run_suite(opts)
    assert result["failed"] == 1 and result["missing"] == ["topic"]
    log = str(tmp_path / "out" / "runs" / "topic" / "0.001" / "0" / records.LOG)
    assert log in result["failures"][0] and "exit 1" in result["failures"][0]
    assert "fewer than one batch" in open(log).read()
    assert log in (tmp_path / "out" / "suite.md").read_text()
