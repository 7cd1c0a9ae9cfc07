"""Figures for BUILD_NOTES (not a test): SLURM submission overhead per array task, and the time
from a preemption signal to the requeued job running again, on a fresh one-node cluster.

    python tests/e2e/measure_slurm.py [--tasks=20]

Array tasks are trivial (`srun true` through the launcher's own batch-script lines), so the
figure is the scheduler's and the script's cost per run, not a model's.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import slurm_cluster  # noqa: E402

from encoder.studies import runner  # noqa: E402
from encoder.studies.launchers import slurm  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=20)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="slurm-measure-")
    cluster = slurm_cluster.Cluster(os.path.join(root, "cluster"))
    os.makedirs(cluster.root)
    cluster.start()
    env = {**os.environ, **cluster.env}
    try:
        runs = [runner.make_run(f"r{i}", os.path.join(root, "runs", f"r{i}"), {})
                for i in range(args.tasks)]
        s = slurm.Slurm(env=env, poll_seconds=0.2, python="true")
        script = s.array_script(runs, os.path.join(root, "%A_%a.out")).replace(
            "srun --kill-on-bad-exit=1 true -m encoder run", "srun --kill-on-bad-exit=1 true")
        path = os.path.join(root, "array.sbatch")
        open(path, "w").write(script)
        t0 = time.time()
        job = s.submit(path)
        while s.wait_queued(job):
            time.sleep(0.1)
        total = time.time() - t0
        done = sum(os.path.exists(os.path.join(r.workdir, "exit.json")) for r in runs)
        print(f"array of {args.tasks} trivial tasks on {os.cpu_count()} CPUs: {total:.1f} s "
              f"from sbatch to the last task's end, {total / args.tasks:.2f} s per task "
              f"({done} exit records)")
        # preemption: a job that exits 75 on SIGTERM (as a stopped run does), signalled
        stop = runner.make_run("p", os.path.join(root, "runs", "p"), {})
        s2 = slurm.Slurm(env=env, poll_seconds=0.2, python=sys.executable)
        code = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: "
                "sys.exit(75)); time.sleep(3600)")
        script = s2.array_script([stop], os.path.join(root, "%A_%a.out")).replace(
            f"{sys.executable} -m encoder run --config=\"$WORKDIR\"/job_config.py "
            "--workdir=\"$WORKDIR\"", f"{sys.executable} -c '{code}'")
        path = os.path.join(root, "preempt.sbatch")
        open(path, "w").write(script)
        job = s2.submit(path)
        log = os.path.join(stop.workdir, "run.log")
        while "start of job" not in (open(log).read() if os.path.exists(log) else ""):
            time.sleep(0.1)
        time.sleep(2)
        t_signal = time.time()
        subprocess.run(["scancel", "--signal=TERM", job], env=env, check=True)
        released = {}
        while "(restart 1)" not in open(log).read():
            s2.release_requeued(job, s2.wait_queued(job), released)
            time.sleep(0.2)
        lines = open(log).read().splitlines()
        t_req = float(next(x.split()[0] for x in lines if "requeueing" in x))
        t_run = float(next(x.split()[0] for x in lines if "(restart 1)" in x))
        print(f"preemption: signal -> requeue {t_req - t_signal:.2f} s, signal -> running "
              f"again {t_run - t_signal:.2f} s (the launcher releases SLURM's 2-minute hold "
              "on requeued jobs)")
        subprocess.run(["scancel", job], env=env)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
