"""A run's status, read from its own workdir (any machine that sees the folder can read it).

    WORKDIR/job_config.py  the run's whole config, written by the study (jobconfig.py)
    WORKDIR/inputs.json    what the run reads that its config names only by path: the
                           identity of the model it starts from (step, content hash) and
                           of its data files (encoder/eval/identity.py), written with
                           job_config.py; a done or checkpointed run whose inputs changed
                           since is stale (else a suite would reuse step-20 scores for
                           a model trained on to step 60 at the same path)
    WORKDIR/run.json       written by the job: its identity, and `finished` once it ends
                           (encoder/train/workdir.py record_finished)
    WORKDIR/LOCK           held while the job runs (host, pid)
    WORKDIR/exit.json      the job's exit status, written by whatever launched it (the
                           local launcher, or the SLURM batch script after srun)
    WORKDIR/run.log        the job's output
    WORKDIR/checkpoints/   what a restart resumes from

States: new (never started), stale (its config, or the model or data it read, is not
this study's: moved aside before the run starts), running, stopped (by a signal or a scheduler: resumable),
failed (its exit status and log), done.
"""
import dataclasses
import json
import os
import socket
import time

from encoder import errors
from encoder.eval import identity
from encoder.studies import jobconfig
from encoder.train import workdir as workdir_lib

RUN = "run.json"
INPUTS = "inputs.json"
LOCK = "LOCK"
EXIT = "exit.json"
LOG = "run.log"
STOPPED = errors.STOPPED_EXIT_CODE  # a job stopped by a signal, checkpointed, resumable


@dataclasses.dataclass(frozen=True)
class Status:
    state: str          # new | stale | running | stopped | failed | done
    detail: str = ""
    cause: str = "config"  # stale: config (its job_config differs) | inputs (model or data)


def _json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def finished(workdir: str) -> bool:
    """The job's own completion record (run.json's `finished`)."""
    return workdir_lib.finished(workdir)


def write_exit(workdir: str, rc: int, **extra) -> None:
    record = {"rc": int(rc), "host": socket.gethostname(), "time": time.time(), **extra}
    tmp = os.path.join(workdir, EXIT + ".tmp")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(workdir, EXIT))


def read_exit(workdir: str) -> dict | None:
    return _json(os.path.join(workdir, EXIT))


def clear_exit(workdir: str) -> None:
    try:
        os.remove(os.path.join(workdir, EXIT))
    except FileNotFoundError:
        pass


def lock_holder(workdir: str) -> dict | None:
    """The LOCK's owner where it is alive (or on another host, where it cannot be checked)."""
    owner = _json(os.path.join(workdir, LOCK))
    if not owner:
        return None
    if owner.get("host") != socket.gethostname():
        return owner
    try:
        os.kill(int(owner.get("pid", -1)), 0)
    except ProcessLookupError:
        return None
    except (PermissionError, ValueError):
        pass
    return owner


def has_checkpoint(workdir: str) -> bool:
    folder = os.path.join(workdir, "checkpoints")
    return os.path.isdir(folder) and any(d.isdigit() for d in os.listdir(folder))


# Fields that change what a run scores along the way, not the run (a workdir lets them
# change too): a study with another declared evaluator resumes its runs, never reruns them.
SCORING_ONLY = ("evals.", "evals:")


def stale_reason(workdir: str, config: dict) -> list[str]:
    """Why the folder is not this run's: the fields that differ ([] when it is, or is empty)."""
    if not os.path.isdir(workdir) or not os.listdir(workdir):
        return []
    old = jobconfig.read(workdir)
    if old is None:
        return [f"no {jobconfig.JOB_CONFIG}: not a run of this study"]
    return [c for c in jobconfig.changed_fields(old, config)
            if not c.startswith(SCORING_ONLY)]


def read_inputs(workdir: str) -> dict | None:
    return _json(os.path.join(workdir, INPUTS))


def write_inputs(workdir: str, inputs: dict) -> None:
    os.makedirs(workdir, exist_ok=True)
    tmp = os.path.join(workdir, INPUTS + ".tmp")
    with open(tmp, "w") as f:
        json.dump(inputs, f, indent=1, default=str)
    os.replace(tmp, os.path.join(workdir, INPUTS))


NO_INPUTS = ("it holds no record of the model and data it ran on (a run from before runs "
             "recorded them): its scores cannot be told to be this model's")


def inputs_changed(workdir: str, inputs: dict) -> list[str]:
    """How the model or data a run read differ from `inputs` (what the study plans now);
    [] when they do, or when the run has nothing yet (no checkpoint, not finished)."""
    if not (finished(workdir) or has_checkpoint(workdir)):
        return []
    recorded = read_inputs(workdir)
    if recorded is None:
        return _legacy_changes(workdir, inputs)
    return identity.changes(recorded, inputs)


def _legacy_changes(workdir: str, inputs: dict) -> list[str]:
    """A run from before inputs.json: one that started from a model cannot be told to be
    this model's (stale); one that reads only data (a pretraining run from scratch) is
    compared through its job's own record of its data (run.json's fingerprints), so a
    finished study's pretraining runs are not all rerun for want of the new record."""
    saved = (_json(os.path.join(workdir, RUN)) or {}).get("data")
    if inputs.get("source") or saved is None:
        return [NO_INPUTS]
    from encoder.data import corpus
    out = []
    for name, d in (inputs.get("data") or {}).items():
        old = saved.get(f"data.{name}", {})
        out += [f"data {name}: {line}" for line in
                corpus.fingerprint_diff(old, corpus.fingerprint(d["path"], old))]
    return out


def status(workdir: str, config: dict, inputs: dict | None = None) -> Status:
    """The run's state from its records; `config` (and `inputs`: the identity of the model
    and data it reads, where the study knows them) is what the study plans for it now."""
    changed = stale_reason(workdir, config)
    if changed:
        return Status("stale", "; ".join(changed[:5]))
    if not os.path.isdir(workdir):
        return Status("new")
    if inputs is not None and lock_holder(workdir) is None:  # never a running job's folder
        changed = inputs_changed(workdir, inputs)
        if changed:
            return Status("stale", "; ".join(changed[:3]), cause="inputs")
    if finished(workdir):
        return Status("done")
    exit_record = read_exit(workdir)
    if exit_record is None:
        holder = lock_holder(workdir)
        if holder is not None:
            return Status("running", f"pid {holder.get('pid')} on {holder.get('host')}")
        if has_checkpoint(workdir):
            return Status("stopped", "interrupted (a checkpoint is there: the next start "
                                     "resumes it)")
        return Status("new")
    rc = exit_record["rc"]
    if rc == STOPPED:
        return Status("stopped", "stopped by a signal (checkpointed: the next start resumes it)")
    if rc == 0:
        return Status("failed", "exited 0 without its completion record")
    return Status("failed", f"exit {rc}")


def log_tail(path: str, lines: int = 6) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""
