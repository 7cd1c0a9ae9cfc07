"""A workdir belongs to one run: a lock against a second writer, and the run's identity.

`claim(workdir, config, mutable)` is the first thing a job does with its
workdir, before it writes anything there:

  * the lock (WORKDIR/LOCK: host, pid, start time) is taken atomically; a
    second launch on the same workdir is told who holds it and exits; a lock
    left by a dead process on this host is taken over; released at exit;
  * the run's identity is every config field except the `mutable` ones
    (step counts, logging, checkpoint cadence, the mesh, ...). It is kept in
    WORKDIR/run.json. A restart whose identity differs from a workdir that has
    checkpoints is refused with a short diff and nothing written; a changed
    mutable field is allowed and logged;
  * the run's own tokenizer (WORKDIR/tokenizer) is part of its identity: its fingerprint
    is in run.json, and a restart finding another one there (or none) is refused;
  * `record_finished` adds run.json's `finished` record when the job ends (a
    study's notion of done).
"""
import contextlib
import json
import os
import socket
import time

from absl import logging

from encoder import errors
from encoder.checkpoints import store
from encoder.data import corpus

LOCK = "LOCK"
RUN = "run.json"


class WorkdirBusy(errors.UserFacing, RuntimeError):
    """Another live process holds the workdir."""


class RunMismatch(errors.UserFacing, ValueError):
    """A restart would mix two different runs in one workdir."""


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), or None where unknown.

    With the pid it names one process for good: a container restarted after a kill
    often gets the same pid (even 1) again, but not the same start time.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _holder_alive(owner: dict) -> bool:
    pid = int(owner.get("pid", -1))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        pass
    started = owner.get("started")
    return started is None or _start_time(pid) in (None, started)


class Lock:
    """WORKDIR/LOCK, created with O_EXCL; a context manager that releases it.

    A lock whose holder is gone (on this host) is renamed away, which only one
    contender can do, and the creation retried; another host's lock is never
    taken over (its holder's liveness cannot be checked from here).
    """

    def __init__(self, workdir: str):
        self.path = os.path.join(workdir, LOCK)
        self.me = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time(),
                   "started": _start_time(os.getpid())}
        self.held = False

    def _owner(self) -> dict | None:
        try:
            with open(self.path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def acquire(self) -> "Lock":
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        for _ in range(5):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                owner = self._owner()
                if owner is None:  # being written right now, or torn: look again
                    time.sleep(0.2)
                    owner = self._owner()
                if owner is not None and (owner.get("host") != self.me["host"]
                                          or _holder_alive(owner)):
                    since = time.strftime("%Y-%m-%d %H:%M:%S",
                                          time.localtime(owner.get("since", 0)))
                    raise WorkdirBusy(
                        f"{os.path.dirname(self.path)} is in use by pid {owner.get('pid')} on "
                        f"{owner.get('host')} (since {since}). Wait for it, stop it, or use "
                        f"another --workdir; if that process is gone, delete {self.path}.")
                logging.warning("taking over the stale lock %s (owner %s)", self.path, owner)
                aside = f"{self.path}.stale.{os.getpid()}"
                try:  # only one contender's rename succeeds; the others retry the create
                    os.rename(self.path, aside)
                except FileNotFoundError:
                    continue
                try:
                    with open(aside) as f:
                        moved = json.load(f)
                except (OSError, ValueError):
                    moved = None
                if moved is not None and moved != owner:  # a fresh lock slipped in: put it back
                    try:
                        os.link(aside, self.path)
                    except FileExistsError:
                        pass
                os.remove(aside)
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(self.me, f)
            self.held = True
            return self
        raise WorkdirBusy(f"{self.path}: could not take the lock (contended)")

    def release(self) -> None:
        if self.held and self._owner() == self.me:
            os.remove(self.path)
        self.held = False

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


@contextlib.contextmanager
def claim(workdir: str, config, mutable, primary: bool = True, defaults=None):
    """Locks the workdir (process 0 only), then checks the restart's identity; releases at exit.

    The workdir must be new, empty or a run's (its marker, or what a job or a study writes
    into one): a folder of anything else is refused before a byte is written."""
    state = errors.check_output(workdir, "run", "--workdir", legacy=_looks_like_a_run)
    os.makedirs(workdir, exist_ok=True)
    lock = Lock(workdir) if primary else None
    if lock is not None:
        lock.acquire()
    ended = False
    try:
        check_identity(workdir, config, mutable, defaults)
        if primary and errors.read_marker(workdir) is None:
            errors.mark_output(workdir, "run")
        yield
        ended = True
    finally:
        if lock is not None:
            lock.release()
        if not ended and primary and state != "ours":  # failed before writing anything
            errors.discard_if_untouched(workdir, created=state == "new")


# What a job or a study's runner writes into a run's workdir (runs from before the marker).
RUN_FILES = (RUN, LOCK, "config.json", "checkpoints", "metrics.jsonl", "tokenizer", "cache",
             "job_config.py", "exit.json", "run.log", "launch.json", "best", "eval.json",
             "params")


def _looks_like_a_run(folder: str) -> bool:
    return any(os.path.exists(os.path.join(folder, n)) for n in RUN_FILES)


def _is_mutable(key: str, mutable) -> bool:
    return any(key == m or key.startswith(m + ".") for m in mutable)


# Fine-tuning's fields whose value names a rule, not a number (chosen by the model's size).
AUTO = {"train.learning_rate": 0.0, "train.num_epochs": 0, "finetune.dropout": -1}


def _shown(key: str, value, auto: dict) -> str:
    """A recorded value as a refusal shows it: 'auto' beside the value that means a rule."""
    if key in auto and value == auto[key] and not isinstance(value, bool):
        return f"{value!r} (auto: chosen by the model's size)"
    return repr(value)


def check_identity(workdir: str, config, mutable, defaults=None) -> list[str]:
    """Refuses a restart that would change the run; returns the allowed changes (logged).
    defaults: the config's defaults; a field the recorded run lacks (added to the code
    since) that keeps its default is no change."""
    path = os.path.join(workdir, RUN)
    if not (os.path.exists(path) and store.has_checkpoint(workdir)):
        return []
    with open(path) as f:
        saved = json.load(f)
    new = json.loads(json.dumps(flatten(config.to_dict()), default=str))  # as run.json has it
    old = saved.get("config", {})
    base = (json.loads(json.dumps(flatten(defaults.to_dict()), default=str))
            if defaults is not None else {})
    changed = sorted(k for k in set(old) | set(new)
                     if old.get(k, "<absent>") != new.get(k, "<absent>")
                     and not (k not in old and k in base and new.get(k) == base[k]))
    refused = [k for k in changed if not _is_mutable(k, mutable)]
    if refused:
        auto = AUTO if config.get("mode") == "finetune" else {}
        lines = [f"  {k}: {_shown(k, old.get(k, '<absent>'), auto)} -> "
                 f"{_shown(k, new.get(k, '<absent>'), auto)}" for k in refused[:12]]
        more = f"\n  ... and {len(refused) - 12} more" if len(refused) > 12 else ""
        raise RunMismatch(
            f"{workdir} holds a run with a different configuration; resuming would mix two "
            "runs. Changed:\n" + "\n".join(lines) + more + "\nUse a new --workdir (nothing "
            "was written to this one), or restore these values.")
    if "data" in saved:  # runs recorded before data was part of the identity: not compared
        new_data = data_identity(config, saved["data"])
        lines = [f"  {k}: {line}" for k in sorted(set(saved["data"]) | set(new_data))
                 for line in corpus.fingerprint_diff(saved["data"].get(k, {}),
                                                     new_data.get(k, {}))]
        if lines:
            raise RunMismatch(
                f"{workdir} holds a run on different data; resuming would mix two datasets "
                "in one run. Changed:\n" + "\n".join(lines) + "\nUse a new --workdir "
                "(nothing was written to this one), or restore the data.")
    check_tokenizer(workdir, saved.get("tokenizer"))
    allowed = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
               + (schedule_note(config, old.get(k), workdir) if k == "train.num_steps" else "")
               for k in changed]
    for line in allowed:
        logging.warning("resuming with a changed setting: %s", line)
        print(f"resuming with a changed setting: {line}", flush=True)
    return allowed


def schedule_note(config, old_steps, workdir: str) -> str:
    """What a changed train.num_steps does to a resumed pretraining run's learning rate: the
    schedule is laid over the new length, so the rate at the resumed step jumps (a run in
    phases is planned by its phases, not by num_steps: nothing to say)."""
    if config.get("mode", "pretrain") != "pretrain" or config.get("phases") or not old_steps:
        return ""
    from encoder.train import schedules
    try:
        step = max(int(d) for d in os.listdir(os.path.join(workdir, "checkpoints"))
                   if d.isdigit())
        was = float(schedules.make(config.train, int(old_steps))(step))
        now = float(schedules.make(config.train)(step))
    except (OSError, ValueError, KeyError):
        return ""
    return (f" (the {config.train.get('schedule', 'linear')} learning-rate schedule is laid "
            f"over the new length: at step {step} it was {was:.3g} and is now {now:.3g}; the "
            "rest of the run follows the new schedule, not the old one's end)")


# The config fields that name what a run reads; their content is part of its identity.
DATA_FIELDS = ("data.train_files", "data.valid_files", "data.tokenizer", "data.train_file",
               "data.dev_file", "data.test_file")


def data_identity(config, previous: dict | None = None) -> dict:
    """field -> fingerprint of what it names (encoder.data.corpus.fingerprint: a prepared
    corpus by its manifest, files by name, size and content hash)."""
    flat = flatten(config.to_dict())
    previous = previous or {}
    fields = DATA_FIELDS + tuple(k for k in flat  # a mixture's sources: each one's files
                                 if k.startswith("data.sources.") and k.endswith(".files"))
    return {k: corpus.fingerprint(str(flat[k]), previous.get(k)) for k in fields
            if flat.get(k)}


def tokenizer_identity(workdir: str) -> dict | None:
    """{path, fingerprint} of the run's own tokenizer (WORKDIR/tokenizer/sp.model, or a
    tokenizer.json folder there); None where the workdir has none yet. The fingerprint is
    the tokenizer's own (what `merge` compares), so a copy of the same model matches."""
    from encoder.data import tokenizer as tokenizer_lib
    folder = os.path.join(workdir, "tokenizer")
    for path in (os.path.join(folder, "sp.model"), folder):
        if os.path.isfile(path) or (path == folder and os.path.isdir(folder)
                                    and os.listdir(folder)):
            try:
                fingerprint = tokenizer_lib.load(path).fingerprint()
            except Exception as e:  # noqa: BLE001 (a damaged file is a different tokenizer)
                fingerprint = f"unreadable ({type(e).__name__})"
            return {"path": os.path.relpath(path, workdir), "fingerprint": fingerprint}
    return None


def check_tokenizer(workdir: str, recorded: dict | None) -> None:
    """Refuses a restart whose WORKDIR/tokenizer is not the one run.json records: the
    checkpoints' embedding rows mean the recorded tokenizer's pieces, and the data would be
    prepared again with the new one (as `merge` refuses to average two tokenizers)."""
    if not recorded:
        return
    now = tokenizer_identity(workdir)
    if now is not None and now["fingerprint"] == recorded["fingerprint"]:
        return
    where = os.path.join(workdir, recorded["path"])
    found = (f"its fingerprint is now {now['fingerprint']}" if now is not None else
             "it is gone (a new one would be trained)")
    raise RunMismatch(
        f"{where} is not the tokenizer this run was trained with: run.json records "
        f"{recorded['fingerprint']}, {found}. Its checkpoints' token ids mean the recorded "
        "tokenizer's pieces; put that tokenizer back, or use a new --workdir (nothing was "
        "written to this one)")


def describe_topology(t: dict) -> str:
    mesh = " x ".join(f"{k}={v}" for k, v in t.get("mesh", {}).items())
    return (f"{t.get('devices')} device(s) in {t.get('processes')} process(es)"
            + (f" (mesh {mesh})" if mesh else ""))


def shape_change(workdir: str, topology: dict) -> str | None:
    """'A -> B' when the run in workdir last ran on another mesh or process count (not a
    change of experiment: the state reshards on restore, the data position is global)."""
    try:
        with open(os.path.join(workdir, RUN)) as f:
            old = json.load(f).get("topology")
    except (OSError, ValueError):
        return None
    if not old or old == topology:
        return None
    return f"{describe_topology(old)} -> {describe_topology(topology)}"


def record_identity(workdir: str, config, topology: dict | None = None) -> None:
    """WORKDIR/run.json: the requested configuration (its data's and its own tokenizer's
    fingerprints) a restart is compared with, and the topology it runs on (devices,
    processes, mesh)."""
    tmp = os.path.join(workdir, RUN + ".tmp")
    try:
        with open(os.path.join(workdir, RUN)) as f:
            previous = json.load(f).get("data")
    except (OSError, ValueError):
        previous = None
    tokenizer = tokenizer_identity(workdir)
    with open(tmp, "w") as f:
        json.dump({"config": flatten(config.to_dict()),
                   "data": data_identity(config, previous),
                   **({"tokenizer": tokenizer} if tokenizer else {}),
                   **({"topology": topology} if topology else {})}, f, indent=1, default=str)
    os.replace(tmp, os.path.join(workdir, RUN))


def finished(workdir: str) -> bool:
    """run.json's `finished` record is there: the job ran to its end."""
    try:
        with open(os.path.join(workdir, RUN)) as f:
            return bool(json.load(f).get("finished"))
    except (OSError, ValueError, AttributeError):
        return False


def record_finished(workdir: str, **summary) -> None:
    """run.json's `finished` record: the job ran to its end (what a study reads as done).
    A restart rewrites run.json without it (record_identity), so it never outlives a rerun."""
    path = os.path.join(workdir, RUN)
    with open(path) as f:
        record = json.load(f)
    record["finished"] = {"time": time.time(), "host": socket.gethostname(), **summary}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1, default=str)
    os.replace(tmp, path)
