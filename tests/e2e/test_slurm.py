"""Against a real SLURM (tests/e2e/conftest.py starts it): multi-process srun, job arrays,
preemption and requeue, failures, and a study resumed after its launcher was killed."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from encoder.studies import records
from encoder.train import metrics_io

from helpers import ROOT

pytestmark = pytest.mark.e2e


def _losses(workdir):
    return [r["train/loss"] for r in metrics_io.read_metrics(str(workdir)) if "train/loss" in r]


def _pretrain_flags(tiny_data, steps, *extra):
    return ["--config=experiments/pretrain.py:runlocal",
            *[f"--config.{k}={v}" for k, v in tiny_data.items()],
            f"--config.train.num_steps={steps}", "--config.train.log_every=1",
            "--config.train.eval_every=0", "--config.train.checkpoint_every=1000", *extra]


def _run(cmd, env, timeout=900):
    out = subprocess.run([sys.executable, "-m", *cmd], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=timeout)
    return out.returncode, out.stdout + out.stderr


def _squeue(env):
    return subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True,
                          env=env).stdout


def _tail(path, n=3000):
    try:
        return open(path, errors="replace").read()[-n:]
    except OSError as e:
        return f"({e})"


def _evidence(workdir, env) -> str:
    """What a failed wait shows: the queue, the run's log, SLURM's own output of the job
    and the controller's log."""
    parts = []
    if env:
        q = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i %T %r"], capture_output=True,
                           text=True, env=env)
        parts.append(f"squeue -t all:\n{q.stdout}{q.stderr}")
    if workdir:
        parts.append(f"run.log:\n{_tail(workdir / 'run.log')}")
        for out in sorted((workdir / "slurm").glob("*.out")):
            parts.append(f"{out.name}:\n{_tail(out, 1500)}")
    if env and env.get("SLURM_CONF"):
        parts.append(f"slurmctld.log:\n"
                     f"{_tail(os.path.join(os.path.dirname(env['SLURM_CONF']), 'slurmctld.log'))}")
    return "\n".join(parts)


def _wait(predicate, timeout=300, what="", workdir=None, env=None, proc=None):
    """Polls predicate; fails with the run's log and the queue after timeout, or at once
    with the command's output when proc (the command being waited on) has exited."""
    t0 = time.time()
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the command exited ({proc.returncode}) before {what}:\n"
                                 f"{proc.stdout.read()[-3000:]}\n{_evidence(workdir, env)}")
        if time.time() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}\n{_evidence(workdir, env)}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_data, slurm):
    """One local process, 40 steps: the losses the SLURM runs must reproduce."""
    d = tmp_path_factory.mktemp("reference")
    rc, out = _run(["encoder", "run", *_pretrain_flags(tiny_data, 40), f"--workdir={d}"], slurm)
    assert rc == 0, out
    return _losses(d)


def test_two_srun_tasks_give_one_process_loss(tmp_path, tiny_data, slurm, reference):
    d = tmp_path / "two"
    rc, out = _run(["encoder", "run", *_pretrain_flags(tiny_data, 40), f"--workdir={d}",
                    "--launcher=slurm", "--slurm_tasks=2"], slurm)
    assert rc == 0, out
    assert "submitted batch job" in out and "(2 JAX processes on 1 node)" in out
    assert "ended: exit 0" in out
    log = (d / "run.log").read_text()
    assert "Rank 1 is connected" in log or "process_count" in log or "[Gloo]" in log, log[-2000:]
    with open(d / "run.json") as f:
        assert json.load(f)["topology"]["processes"] == 2
    np.testing.assert_allclose(_losses(d), reference, rtol=1e-5)


def test_a_preempted_run_requeues_and_resumes_to_the_same_loss(tmp_path, tiny_data, slurm,
                                                               reference):
    d = tmp_path / "preempted"
    # steps slowed by checkpointing every step, so the signals land mid-run
    proc = subprocess.Popen(
        [sys.executable, "-m", "encoder", "run", *_pretrain_flags(
            tiny_data, 40, "--config.train.checkpoint_every=1", "--config.train.keep_checkpoints=2"),
         f"--workdir={d}", "--launcher=slurm", "--slurm_signal_seconds=60"],
        cwd=ROOT, env=slurm, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait(lambda: os.path.exists(d / "launch.json"), what="the submission", proc=proc)
    job = json.load(open(d / "launch.json"))["job"]
    _wait(lambda: len(_losses(d)) >= 3, what="three steps")
    # the time-limit signal (--signal=TERM@s sends SIGTERM to the job's steps, as scancel does)
    t_signal = time.time()
    subprocess.run(["scancel", "--signal=TERM", job], env=slurm, check=True)
    _wait(lambda: "(restart 1)" in (d / "run.log").read_text(), what="the requeued start",
          workdir=d, env=slurm, proc=proc)
    log = (d / "run.log").read_text()
    t_requeue = float(next(line.split()[0] for line in log.splitlines()
                           if "requeueing" in line))
    t_restart = float(next(line.split()[0] for line in log.splitlines()
                           if "(restart 1)" in line))
    # then the scheduler's own requeue (preemption by another job, a node failure)
    _wait(lambda: "resumed from" in (d / "run.log").read_text(), what="the resumed run",
          workdir=d, env=slurm, proc=proc)
    # seconds after the restart, often before the launcher's next poll has seen it running
    t_requeue2 = time.time()
    subprocess.run(["scontrol", "requeue", job], env=slurm, check=True)
    out, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, out[-3000:]
    log = (d / "run.log").read_text()
    assert "stopped by signal at step" in log and "(restart 2)" in log
    assert log.count("resumed from") == 2
    # released from SLURM's 121 s hold on requeued jobs (the steps' own stop takes at most
    # KillWait, 30 s, when the signal lands mid-compile)
    t_restart2 = float(next(line.split()[0] for line in log.splitlines()
                            if "(restart 2)" in line))
    assert t_restart2 - t_requeue2 < 100, log[-3000:]
    np.testing.assert_allclose(_losses(d), reference, rtol=1e-5)
    print(f"\nsignal -> requeue {t_requeue - t_signal:.2f} s; signal -> restarted "
          f"{t_restart - t_signal:.2f} s; scheduler's requeue -> restarted "
          f"{t_restart2 - t_requeue2:.2f} s")


def _ablate(workdir, tiny_data, env, *extra, sweep="train.learning_rate=1e-3,2e-3"):
    return ["encoder", "ablate", *_pretrain_flags(tiny_data, 4), f"--sweep={sweep}",
            "--seeds=1", f"--workdir={workdir}", *extra]


def _table(workdir):
    with open(os.path.join(workdir, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in r.items() if "tokens_per_s" not in k} for r in rows]


def test_an_ablation_and_its_suites_as_job_arrays_give_the_local_table(tmp_path, tiny_data,
                                                                       slurm):
    """Two runs in one array, then their suites (a frozen-embedding task) in a second one:
    the suites go where the runs went (the throttle below the run count is the next test's;
    a study's seeds and their aggregation, tests/e2e/test_ablate.py's)."""
    suite = ["--suite=embedded", "--suite_arg=--preset=runlocal",
             "--suite_arg=--only=sts_relatedness"]
    rc, out = _run(_ablate(tmp_path / "local", tiny_data, slurm, "--parallel=2", *suite), slurm)
    assert rc == 0, out
    t0 = time.time()
    rc, out = _run(_ablate(tmp_path / "slurm", tiny_data, slurm, "--launcher=slurm",
                           "--parallel=2", *suite), slurm)
    assert rc == 0, out
    assert out.count("submitted job array") == 2 and "(2 runs, at most 2 at once)" in out
    assert "started learning_rate=0.001__seed0/suite (array task" in out
    table = _table(tmp_path / "slurm")
    assert table == _table(tmp_path / "local") and len(table) == 2
    assert all(float(r["suite/sts_relatedness"]) > -100 for r in table)
    job = tmp_path / "slurm" / "runs" / "learning_rate=0.001__seed0" / "suite_job"
    assert records.finished(str(job)) and json.load(open(job / "launch.json"))["launcher"] == "slurm"
    print(f"\nslurm study of 2 runs and 2 suites: {time.time() - t0:.1f} s")


def test_a_failing_task_is_reported_and_a_killed_study_resumes_only_what_is_left(
        tmp_path, tiny_data, slurm):
    # three runs, one at a time; the second diverges (a NaN at step 2: exit 1)
    study = ["encoder", "ablate", *_pretrain_flags(tiny_data, 4), "--zip",
             "--sweep=train.debug_nan_at_step=-1,2,-2", "--sweep=train.learning_rate=1e-3,2e-3,3e-3",
             f"--workdir={tmp_path}", "--launcher=slurm", "--parallel=1"]
    # (a negative step is no NaN; the values differ: a sweep refuses repeats)
    names = [f"debug_nan_at_step={n},learning_rate={lr}__seed0"
             for n, lr in ((-1, 0.001), (2, 0.002), (-2, 0.003))]
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", *study], cwd=ROOT, env=slurm,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    first = runs / names[0]
    _wait(lambda: records.finished(str(first)), what="the first run", proc=proc)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher dies; its array goes on in SLURM
    proc.wait()
    job = json.load(open(first / "launch.json"))["job"]
    subprocess.run(["scancel", job], env=slurm, check=True)  # and the cluster loses it too
    _wait(lambda: job not in _squeue(slurm), what="the cancelled array")
    rc, out = _run(study, slurm)
    assert rc != 0, out  # one run failed: the study says so ...
    assert f"skip {names[0]} (finished)" in out
    assert "(2 runs, at most 1 at once)" in out, out  # ... submitting only what was not done
    bad = runs / names[1]
    assert f"{names[1]}: exit 1; log: {bad}/run.log" in out
    assert "non-finite loss" in out  # the end of its log, shown with the failure
    assert f"finished {names[2]}" in out and records.finished(str(runs / names[2]))
