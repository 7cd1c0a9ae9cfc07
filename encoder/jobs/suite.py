"""A downstream suite as one job of the study runner (config.mode = "suite").

`encoder ablate --suite` plans one such job per pretraining run, in <run>/suite_job/,
and sends it through the launcher its pretraining runs went through (local children,
a SLURM job array, TPU VM hosts), so a study's suites run where its runs run and their
status is read from their own records like any run's (done: run.json's `finished`).
The job runs `python -m encoder suite --init_from=... --workdir=<run>/suite ...` as a
child tied to it (encoder/tether.py): SIGTERM reaches the suite, which stops its
fine-tunings; a suite stopped that way exits 75 and the job with it (resumable).

    config.suite.init_from   the pretraining run the suite scores
    config.suite.watch       or: the run a watcher follows (`encoder ablate --watch`: the suite
                             on each checkpoint while the run trains, beside it)
    config.suite.out         the suite's folder (suite.md, suite.json, its runs)
    config.suite.args        further `encoder suite` flags (--preset=runlocal, --only=...)
"""
import json
import os
import signal
import subprocess
import sys

from encoder import tether
from encoder.train import workdir as workdir_lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def command(suite) -> list[str]:
    """The `encoder suite` command line of a config.suite (a watcher's where it names one)."""
    model = (f"--watch={suite.watch}" if suite.get("watch") else
             f"--init_from={suite.init_from}")
    return [sys.executable, "-m", "encoder", "suite", model, f"--workdir={suite.out}", *suite.args]


def _write_run(workdir: str, record: dict) -> None:
    path = os.path.join(workdir, workdir_lib.RUN)
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=1, default=str)
    os.replace(path + ".tmp", path)


def run(config, workdir: str) -> dict:
    """Runs the suite to its end; its exit status is the job's."""
    os.makedirs(workdir, exist_ok=True)
    with workdir_lib.Lock(workdir):
        record = {"job": "suite", "command": command(config.suite)}
        _write_run(workdir, record)  # a rerun drops an earlier `finished`
        child = subprocess.Popen(command(config.suite), cwd=REPO, env=tether.child_env())
        forward = lambda signum, frame: child.send_signal(signum)  # noqa: E731
        previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            rc = child.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        if rc:
            raise SystemExit(rc)  # 75: stopped by a signal, resumable; else the suite's error
        if config.suite.get("watch") and not workdir_lib.finished(config.suite.watch):
            raise SystemExit(f"error: {config.suite.watch} ended unfinished; its watcher "
                             f"scored what it kept ({config.suite.out}) and follows it again "
                             "when the study is started again")
        workdir_lib.record_finished(workdir)
    return {"suite": config.suite.out}
