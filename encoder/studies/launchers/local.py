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
        with tether.sigterm_interrupting():  # a SIGTERM stops and waits, as Ctrl-C
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
            except KeyboardInterrupt:
                tether.interrupt_seen()  # stopping: a second SIGTERM must not cut it short
                raise
            finally:
                stop_children([proc for _, proc in active], self.stop_timeout)


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
