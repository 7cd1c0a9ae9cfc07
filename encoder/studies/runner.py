"""The one study runner: `encoder ablate` and `encoder suite` plan runs, this starts them.

A run is data: a workdir and the job's whole resolved configuration (see
jobconfig.py). `execute(runs, launcher)`:

  1. reads each run's status from its workdir (records.py): done runs are
     skipped; a folder holding another configuration, or a run of another model or
     data than the study reads now (its inputs.json: checkpoint step and content hash,
     data file hashes), is moved aside to <dir>.stale-<time> (nothing is deleted) and
     the run starts afresh;
     stopped or interrupted runs start again and their job resumes from the
     newest checkpoint;
  2. writes each run's job_config.py and hands the runs to a launcher
     (launchers/: local subprocesses, a SLURM job array, TPU VM hosts), which
     starts `python -m encoder run --config=WORKDIR/job_config.py` for each;
  3. reports every run as it ends, from its records again: a failure names its
     exit status and log and never hides the others; the caller gets every
     failure back.

The records are the truth, not the launcher's memory: a study whose launcher
was killed is resumed (or reported) by starting it again from any machine that
sees the workdirs, and only what is not done is started.
"""
import dataclasses
import os
import sys
import time

from encoder import errors
from encoder.studies import jobconfig, records

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass
class Run:
    name: str                 # how reports and logs name it, e.g. topic/0.001/0
    workdir: str
    config: dict              # the job's whole configuration, plain data
    tags: dict = dataclasses.field(default_factory=dict)  # the study's own bookkeeping
    # the identity of the model and data the run reads (encoder/eval/identity.py): kept in
    # WORKDIR/inputs.json; a change makes a done run stale. None: not tracked.
    inputs: dict | None = None

    @property
    def log(self) -> str:
        return os.path.join(self.workdir, records.LOG)

    @property
    def config_file(self) -> str:
        return os.path.join(self.workdir, jobconfig.JOB_CONFIG)

    def status(self) -> records.Status:
        return records.status(self.workdir, self.config, self.inputs)


@dataclasses.dataclass
class Failure:
    run: Run
    reason: str
    stopped: bool = False  # stopped by a signal at a checkpoint: resumable, not broken

    def __str__(self) -> str:
        return f"{self.run.name}: {self.reason}; log: {self.run.log}"


def make_run(name: str, workdir: str, config, inputs: dict | None = None, **tags) -> Run:
    """A run from a ConfigDict (or plain dict): its config is kept as data."""
    return Run(name, os.path.abspath(workdir), jobconfig.as_data(config), dict(tags), inputs)


def job_args(run: Run) -> list[str]:
    """The `encoder run` flags of a run (every launcher starts the same command)."""
    return [f"--config={run.config_file}", f"--workdir={run.workdir}"]


def job_command(run: Run, python: str = sys.executable) -> list[str]:
    return [python, "-m", "encoder", "run", *job_args(run)]


def move_aside(run: Run, reason: str, log=print, cause: str = "config") -> str:
    aside = f"{run.workdir}.stale-{time.strftime('%Y%m%d-%H%M%S')}"
    os.replace(run.workdir, aside)
    what = ("its configuration changed" if cause == "config" else
            "the model or data it ran on is not what this study reads now")
    log(f"rerunning {run.name}: {what} ({reason}); the old run is kept in {aside}")
    return aside


def prepare(run: Run, log=print) -> bool:
    """Makes the workdir this run's; False when the run is already done (nothing to start)."""
    st = run.status()
    if st.state == "done":
        log(f"skip {run.name} (finished)")
        return False
    if st.state == "stale":
        move_aside(run, st.detail, log, st.cause)
    jobconfig.write(run.workdir, run.config)
    if run.inputs is not None:
        records.write_inputs(run.workdir, run.inputs)
    records.clear_exit(run.workdir)
    return True


def outcome(run: Run) -> Failure | None:
    """None when the run is done; otherwise why not, from its records."""
    st = run.status()
    if st.state == "done":
        return None
    if st.state in ("new", "running"):
        return Failure(run, "ended without an exit record (killed, or its job never started)")
    return Failure(run, st.detail or st.state, stopped=st.state == "stopped")


def execute(runs: list, launcher, log=print) -> tuple[list, list]:
    """Starts what is not done through `launcher`: (started runs, failures)."""
    todo = [run for run in runs if prepare(run, log)]
    failures = []

    def on_exit(run: Run) -> None:
        failure = outcome(run)
        if failure is None:
            log(f"finished {run.name}")
        else:
            failures.append(failure)
            log(f"FAILED {failure}\n{records.log_tail(run.log)}")

    if todo:
        launcher.run(todo, on_exit, log)
    return todo, failures


def report_failures(failures: list, what: str = "run(s)") -> str:
    return f"{len(failures)} {what} failed:\n" + "\n".join(f"  {f}" for f in failures)


def failures_error(failures: list, what: str = "run(s)") -> Exception:
    """What a study raises for runs that did not finish: when every one was stopped by a
    signal at a checkpoint (a user's or a scheduler's kill of the run alone), a resumable
    stop (exit 75: the same command resumes them); else the failures (exit 1)."""
    if failures and all(f.stopped for f in failures):
        return errors.Stopped(
            f"{len(failures)} {what} stopped by a signal before finishing (checkpointed): run "
            "the same command again to resume:\n" + "\n".join(f"  {f}" for f in failures))
    return RuntimeError(report_failures(failures, what))
