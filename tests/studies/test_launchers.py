"""The launchers' scripts and commands, as strings (no cluster needed: tests/e2e has one)."""
import json
import os
import shlex
import shutil
import subprocess

import pytest

from encoder.studies import launchers, runner
from encoder.studies.launchers import slurm, tpu_vm



def _runs(n):
    return [runner.make_run(f"r{i}", f"/shared/study/runs/r{i}", {"seed": i}) for i in range(n)]


def test_a_study_is_one_job_array_with_a_cap():
    s = slurm.Slurm(partition="gpu", account="lab", qos="low", time="4:00:00", nodes=2,
                    tasks=8, gpus_per_node=4, cpus_per_task=8, mem="64G",
                    sbatch=("--constraint=a100", "exclusive"), setup="module load cuda",
                    parallel=3, signal_seconds=300)
    script = s.array_script(_runs(5), "/shared/study/slurm/%A_%a.out")
    for line in ["#SBATCH --partition=gpu", "#SBATCH --account=lab", "#SBATCH --qos=low",
                 "#SBATCH --time=4:00:00", "#SBATCH --nodes=2", "#SBATCH --ntasks=8",
                 "#SBATCH --gpus-per-node=4", "#SBATCH --cpus-per-task=8", "#SBATCH --mem=64G",
                 "#SBATCH --signal=TERM@300", "#SBATCH --requeue", "#SBATCH --array=0-4%3",
                 "#SBATCH --constraint=a100", "#SBATCH --exclusive", "module load cuda",
                 "  4) WORKDIR=/shared/study/runs/r4 ;;",
                 "    scontrol requeue ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID} "
                 "2>> \"$WORKDIR\"/run.log && exit 0"]:
        assert line in script.splitlines(), line
    srun = next(line for line in script.splitlines() if line.startswith("srun"))
    assert '--config="$WORKDIR"/job_config.py --workdir="$WORKDIR"' in srun
    assert "--config.distributed.coordinator_address=auto" in srun  # 8 JAX processes
    assert "--array=0-4\n" in slurm.Slurm().array_script(_runs(5), "o")  # no cap
    assert "coordinator_address" not in slurm.Slurm().array_script(_runs(1), "o")
    assert "--signal" not in slurm.Slurm(signal_seconds=0).array_script(_runs(1), "o")


def test_the_batch_script_runs_and_records_the_exit_status(tmp_path):
    """The script's own logic under bash, with srun and scontrol stood in by shell functions."""
    run = runner.make_run("r", str(tmp_path / "r"), {})
    script = slurm.Slurm(python="python-standin").array_script([run], str(tmp_path / "o"))
    for rc, requeued in ((0, False), (3, False), (75, True)):
        fake = (f"srun() {{ echo srun \"$@\"; return {rc}; }}\n"
                "scontrol() { echo scontrol \"$@\" > \"$WORKDIR\"/requeued; }\n")
        body = script.replace("set -u\n", "set -u\n" + fake)
        done = subprocess.run(["bash", "-c", body], capture_output=True, text=True,
                              env={**os.environ, "SLURM_ARRAY_TASK_ID": "0",
                                   "SLURM_ARRAY_JOB_ID": "7", "SLURM_JOB_ID": "8"})
        exit_file = tmp_path / "r" / "exit.json"
        if requeued:
            assert done.returncode == 0 and not exit_file.exists()
            assert (tmp_path / "r" / "requeued").read_text().split() == ["scontrol", "requeue",
                                                                         "7_0"]
        else:
            import json
            assert done.returncode == rc
            assert json.loads(exit_file.read_text())["rc"] == rc
            exit_file.unlink()
    assert "srun --kill-on-bad-exit=1 python-standin -m encoder run" in (
        tmp_path / "r" / "run.log").read_text()


def test_one_run_of_n_processes_is_one_job():
    s = slurm.Slurm(tasks=4, nodes=2)
    script = s.single_script(["--config=experiments/pretrain.py:size=base", "--workdir=/w x"],
                             "/w x", "/w x/slurm/%j.out")
    assert "#SBATCH --ntasks=4" in script and "#SBATCH --nodes=2" in script
    assert "--array" not in script and f"cd {shlex.quote(os.getcwd())}" in script
    assert "'--workdir=/w x' --config.distributed.coordinator_address=auto" in script
    assert "    scontrol requeue $SLURM_JOB_ID 2>> '/w x'/run.log && exit 0" in script


def test_a_refused_requeue_is_tried_again_then_named_in_the_log(tmp_path, monkeypatch):
    """A controller that refuses `scontrol requeue` (busy, restarting) gets the request again;
    one that keeps refusing leaves the stopped run's exit status (75) and a line that says
    what to do, with scontrol's own answers in the run's log."""
    monkeypatch.setattr(slurm, "REQUEUE_PAUSE_S", 0)
    run = runner.make_run("r", str(tmp_path / "r"), {})
    script = slurm.Slurm(python="python-standin").array_script([run], str(tmp_path / "o"))
    env = {**os.environ, "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_JOB_ID": "7",
           "SLURM_JOB_ID": "8"}
    for refusals, requeued in ((2, True), (slurm.REQUEUE_ATTEMPTS, False)):
        (tmp_path / "r").mkdir(exist_ok=True)
        fake = ("srun() { return 75; }\n"
                "scontrol() { n=$(cat \"$WORKDIR\"/tries 2>/dev/null || echo 0); "
                "echo $((n + 1)) > \"$WORKDIR\"/tries; "
                f"if [ $n -lt {refusals} ]; then echo 'slurm_requeue error: busy' >&2; return 1; fi; }}\n")
        done = subprocess.run(["bash", "-c", script.replace("set -u\n", "set -u\n" + fake)],
                              capture_output=True, text=True, env=env)
        log = (tmp_path / "r" / "run.log").read_text()
        assert log.count("slurm_requeue error: busy") == refusals
        if requeued:
            assert done.returncode == 0 and not (tmp_path / "r" / "exit.json").exists()
            assert (tmp_path / "r" / "tries").read_text().strip() == str(refusals + 1)
        else:
            assert done.returncode == 75, done.stderr
            assert json.loads((tmp_path / "r" / "exit.json").read_text())["rc"] == 75
            assert f"requeue of 7_0 failed {refusals} times" in log
            assert "submit the same command again to resume" in log
        shutil.rmtree(tmp_path / "r")


def test_the_tpu_vm_command_starts_every_host():
    t = tpu_vm.TpuVm(tpu="v4-32", zone="us-central2-b", project="lab",
                     setup="source ~/venv/bin/activate", repo="/home/me/encoder")
    cmd = t.command(["--config=experiments/pretrain.py:size=base", "--workdir=gs://b/run 1"])
    assert shlex.join(cmd) == (
        "gcloud compute tpus tpu-vm ssh v4-32 --zone=us-central2-b --project=lab --worker=all "
        "'--command=cd /home/me/encoder && source ~/venv/bin/activate && python3 -m "
        "encoder run --config=experiments/pretrain.py:size=base '\"'\"'--workdir=gs://b/run "
        "1'\"'\"' --config.distributed.coordinator_address=auto'")
    with pytest.raises(ValueError, match="needs --tpu and --zone"):
        tpu_vm.TpuVm().command([])
    lines = []
    t.dry_run = True
    assert t.run_job(["--workdir=w"], "w", lines.append) == 0 and lines[0].startswith("gcloud")


def test_the_launcher_table():
    assert sorted(launchers.LAUNCHERS) == ["local", "slurm", "tpu_vm"]
    assert isinstance(launchers.make("slurm", tasks=2), slurm.Slurm)
    with pytest.raises(ValueError, match="valid names: local, slurm, tpu_vm"):
        launchers.make("ray")


def test_a_restarted_study_waits_for_runs_still_queued(tmp_path, monkeypatch):
    runs = [runner.make_run(f"r{i}", str(tmp_path / f"r{i}"), {}) for i in range(3)]
    for r in runs:
        runner.prepare(r, log=lambda *_: None)
    import json
    (tmp_path / "r1" / slurm.LAUNCH).write_text(json.dumps(
        {"launcher": "slurm", "job": "41", "index": 1}))  # submitted by the killed launcher
    Q = slurm.Queued
    # r1 requeued (pending, restarted once: released once however many polls see it so);
    # r0 pending before its first start (left alone), then requeued before any poll saw it
    # run (released all the same: the restart count tells, not a transition between polls)
    polls = {"41": [{"1": Q("RUNNING", 0)}, {"1": Q("PENDING", 1)}, {"1": Q("PENDING", 1)},
                    {"1": Q("RUNNING", 1)}, {}],
             "42": [{"0": Q("PENDING", 0)}, {"0": Q("PENDING", 1)}, {}]}
    submitted, ended, updates = [], [], []

    def queued(self, job):
        states = polls[job]
        return states.pop(0) if len(states) > 1 else states[0]

    def submit(self, path):
        submitted.append(open(path).read())
        return "42"

    monkeypatch.setattr(slurm.Slurm, "queued", queued)
    monkeypatch.setattr(slurm.Slurm, "submit", submit)
    monkeypatch.setattr(slurm, "RELEASE_GRACE_S", 0.0)  # its own test below
    monkeypatch.setattr(slurm.subprocess, "run", lambda cmd, **kw: updates.append(cmd) or
                        slurm.subprocess.CompletedProcess(cmd, 0))
    lines = []
    slurm.Slurm(poll_seconds=0.01, folder=str(tmp_path / "slurm")).run(
        runs, lambda r: ended.append(r.name), lines.append)
    assert len(submitted) == 1 and "#SBATCH --array=0-1" in submitted[0]  # r0 and r2 only
    assert str(tmp_path / "r1") not in submitted[0]
    assert "r1 is already queued as job 41_1: waiting for it" in lines
    assert sorted(ended) == ["r0", "r1", "r2"]
    # each requeued task made eligible at once, once per restart; none before its first start
    assert sorted(updates) == [["scontrol", "update", "JobId=41_1", "StartTime=now"],
                               ["scontrol", "update", "JobId=42_0", "StartTime=now"]]


def test_a_requeued_job_is_released_only_after_its_grace(monkeypatch):
    """Released in the second of its requeue, slurmd kills the job ("Job credential
    revoked") and it ends FAILED; so a requeued task is made eligible RELEASE_GRACE_S after
    it is first seen pending, once per restart."""
    now = [100.0]
    updates = []
    monkeypatch.setattr(slurm, "clock", lambda: now[0])
    monkeypatch.setattr(slurm.subprocess, "run", lambda cmd, **kw: updates.append(cmd[2]) or
                        slurm.subprocess.CompletedProcess(cmd, 0))
    s, released, Q = slurm.Slurm(), {}, slurm.Queued
    for t, state, restarts in ((100.0, "PENDING", 1), (105.0, "PENDING", 1),
                               (110.0, "PENDING", 1), (112.0, "PENDING", 1),
                               (130.0, "RUNNING", 1), (131.0, "PENDING", 2),
                               (140.9, "PENDING", 2), (141.0, "PENDING", 2)):
        now[0] = t
        s.release_requeued("7", {"": Q(state, restarts)}, released)
        if t == 105.0:
            assert updates == []  # seen pending 5 s ago: not yet
    assert updates == ["JobId=7", "JobId=7"]  # at 110 (restart 1) and 141 (restart 2)
