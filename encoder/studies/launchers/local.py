"""The local launcher: each run is a subprocess of this machine, `parallel` at a time.

Every child writes to its run.log; its exit status goes to the run's exit.json
(records.py) as it ends, so the status reads the same as under any other
launcher. Ctrl-C or SIGTERM of the study stops the children with SIGTERM,
which checkpoints them (exit 75), so the next start resumes them; a child
still alive after `timeout` seconds is killed. Never orphans: a study killed
without a word (SIGKILL, an OOM kill) takes its children with it, as each is
started tethered (encoder/tether.py: the kernel sends it SIGTERM when the study
dies; `start` runs in the thread that waits for the children, as the kernel's
parent-death signal asks).
"""
import dataclasses
import os
import signal
import subprocess
import sys
import time

from encoder import tether
from encoder.studies import records, runner


@dataclasses.dataclass
class Local:
    parallel: int = 1
    env: dict | None = None        # the children's environment (default: this process's)
    stop_timeout: float = 120.0
    detached = False

    def command(self, run) -> list[str]:
        return runner.job_command(run, sys.executable)

    def start(self, run) -> subprocess.Popen:
        cmd = self.command(run)
        env = tether.child_env(self.env)  # it ends when this process dies, however
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [runner.REPO,
                                                          env.get("PYTHONPATH", "")]))
        with open(run.log, "a") as f:  # the child keeps its own handle
            f.write(f"$ {' '.join(cmd)}\n")
            f.flush()
            return subprocess.Popen(cmd, cwd=runner.REPO, env=env, stdout=f,
                                    stderr=subprocess.STDOUT)

    def run(self, runs: list, on_exit, log=print) -> None:
        pending, active = list(runs), []
        previous = _interrupt_on_sigterm()
        try:
            while pending or active:
                while pending and len(active) < max(1, self.parallel):
                    run = pending.pop(0)
                    active.append((run, self.start(run)))
                    log(f"started {run.name}")
                for run, proc in list(active):
                    rc = proc.poll()
                    if rc is None:
                        continue
                    active.remove((run, proc))
                    records.write_exit(run.workdir, rc, launcher="local")
                    on_exit(run)
                time.sleep(0.2)
        finally:
            try:
                stop_children([proc for _, proc in active], self.stop_timeout)
            finally:
                if previous is not None:
                    signal.signal(signal.SIGTERM, previous)


def _interrupt_on_sigterm():
    """SIGTERM of the study (a scheduler, `timeout`, a user's kill) interrupts it as Ctrl-C
    does, so the children are stopped and waited for before it exits: left to Python's
    default the study died at once, and the command after it started while its runs were
    still writing their last checkpoints (stop 44: a suite read a run's step 4,500 as its
    newest while step 6,000 was being saved). Returns the previous handler (None off the
    main thread, where signals stay with the caller)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    try:
        return signal.signal(signal.SIGTERM, interrupt)
    except ValueError:
        return None


def stop_children(procs, timeout: float) -> None:
    """SIGTERM every child still running (they checkpoint and exit), then wait; a child
    still alive after `timeout` seconds is killed."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
