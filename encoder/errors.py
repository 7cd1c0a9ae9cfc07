"""The user-facing side of failing: which errors are the user's to fix, how every command
reports them (one `error: ...` line), and the rule that a command writes only into a
folder it owns.

* `UserFacing` marks an error class whose message is the whole story (a bad flag, file,
  field or folder); `ValueError` and `OSError` are treated the same way (config
  validation, corpus, task-file and run-identity errors all derive from ValueError).
* `message(e)` is the line a user reads; encoder/commands/one_line.py wraps every command
  so those errors end in one `error: ...` line (exit 1), Ctrl-C in exit 75 or 130.
* `check_output(folder, kind, ...)` / `mark_output(folder, kind)`: a command that writes a
  folder writes only into one that is new, empty, or carries its own marker
  (`.encoder-output.json`, kind = which command) from an earlier run of the same kind;
  anything else is refused before a byte is written, naming what is there.
"""
import json
import os
import re
import sys
import time

STOPPED_EXIT_CODE = 75      # EX_TEMPFAIL: stopped, resumable, not finished
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT: stopped, nothing to resume
MARKER = ".encoder-output.json"


class UserFacing(Exception):
    """Mixin: an error whose message says what to fix (no traceback needed)."""


class UsageError(UserFacing, ValueError):
    """A flag value that cannot work (out of range, contradictory, missing)."""


class DiskFull(UserFacing, OSError):
    """A write found no space left on its device: a user's error, with the figures."""


def is_disk_full(e: BaseException) -> bool:
    """ENOSPC, as an OSError or inside a message (orbax and tensorstore re-raise it as
    ValueError("... No space left on device [os_error_code='28']"))."""
    import errno
    return (isinstance(e, OSError) and e.errno == errno.ENOSPC) or \
        "No space left on device" in str(e)


def disk_full(folder: str, what: str) -> DiskFull:
    """The one line for a full disk under `folder`: what was being written, what is free."""
    import shutil
    try:
        free = shutil.disk_usage(folder).free
        free_text = f"{free / 2**20:.1f} MiB free"
    except OSError:
        free_text = "free space unknown"
    return DiskFull(f"no space left on device under {folder} ({free_text}) for "
                    f"{what}; free space there or use a folder on a larger disk, then run the "
                    "same command again")


class Stopped(UserFacing):
    """A stop signal arrived and the work in flight failed as it stopped: resumable (exit
    75), like a clean stop, so a scheduler requeues it (see train.loop.stopped_instead)."""


class NonFinite(UserFacing, FloatingPointError):
    """A figure of the run became NaN or infinite (a loss, a gradient, a held-out figure,
    a source's tensors): the run stops in one line naming where, and the likely causes."""


# Why a run's numbers stop being finite, most likely first: what goes in (a source's
# weights, the data's targets) makes every step non-finite from the start; step sizes
# (rate, warmup, clipping) make a run diverge after some steps.
NON_FINITE_CAUSES = (
    "non-finite inputs or weights (init_from's tensors, a task file's targets)",
    "too high a learning rate (train.learning_rate)",
    "too short a warmup (train.warmup_steps)",
    "no gradient clipping (train.clip_norm=0) or a loose one",
)


def non_finite(what: str, value, step: int, last_checkpoint: int | None, workdir: str,
               causes: tuple = NON_FINITE_CAUSES) -> NonFinite:
    """The one line that stops a run whose `what` (loss, gradient norm, eval/mlm_loss) is
    `value` (NaN, inf) at `step`: the checkpoint a restart would take, then the causes."""
    kept = (f"The last good checkpoint (step {last_checkpoint}) in {workdir} is intact"
            if last_checkpoint is not None else f"No checkpoint was saved before it in "
            f"{workdir}")
    likely = "; ".join(f"{i}) {c}" for i, c in enumerate(causes, 1))
    return NonFinite(f"non-finite {what} ({value}) at step {step}; stopping. {kept}. "
                     f"Likely causes, most likely first: {likely}")


def first_non_finite(row: dict) -> tuple[str, float] | None:
    """(name, value) of the first number in a metrics row that is NaN or infinite."""
    import math
    for k, v in row.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isfinite(v):
            return k, v
    return None


def stop_if_non_finite(row: dict, step: int, workdir: str,
                       last_checkpoint: int | None = None) -> None:
    """Raises non_finite for the first NaN or infinite figure of a metrics row (a
    source's held-out figures before its first step here: its weights are the cause)."""
    bad = first_non_finite(row)
    if bad is not None:
        raise non_finite(bad[0], bad[1], step, last_checkpoint, workdir)


def non_finite_source(source: str, bad: list[tuple[str, str]], total: int) -> NonFinite:
    """The refusal of a source whose tensors hold NaN or infinity: bad is (tensor name,
    what it holds) for each such tensor, total the tensors read."""
    shown = "; ".join(f"{name}: {what}" for name, what in bad[:4])
    more = f" (+{len(bad) - 4} more)" if len(bad) > 4 else ""
    return NonFinite(f"{source}: {len(bad)} of {total} tensors hold non-finite values "
                     f"({shown}{more}): a model computed from them is NaN from its first "
                     "step; use a checkpoint from before the run diverged, or convert the "
                     "model again")


def non_finite_counts(array) -> str:
    """'3 NaN, 1 inf of 4096 values' for an array holding any; '' when all are finite."""
    import numpy as np
    a = np.asarray(array)
    if a.dtype.kind not in "fc" or bool(np.isfinite(a).all()):
        return ""
    nan, inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
    parts = [f"{nan} NaN" if nan else "", f"{inf} inf" if inf else ""]
    return f"{', '.join(p for p in parts if p)} of {a.size} values"


class NotOurs(UserFacing, ValueError):
    """An output folder this command did not write: it is never written into or deleted."""


def is_user_facing(e: BaseException) -> bool:
    return isinstance(e, (UserFacing, ValueError, OSError))


# an atomic write's temporary name (PATH.tmpPID[.ext]): the user typed PATH
_TEMP_NAME = re.compile(r"\.tmp\d+(\.\w+)?$")


def _os_where(e: OSError) -> str:
    """': PATH' of an OSError as the user gave it (not an atomic write's temporary name),
    and, when PATH's folder is what is missing, that folder."""
    if not e.filename:
        return ""
    path = _TEMP_NAME.sub("", str(e.filename))
    folder = os.path.dirname(os.path.abspath(path))
    if isinstance(e, FileNotFoundError) and not os.path.isdir(folder):
        return f": {path} (its folder {folder} does not exist: create it first)"
    return f": {path}"


def message(e: BaseException) -> str:
    """The one line (or short block: a diff) a user reads."""
    if isinstance(e, OSError) and not isinstance(e, UserFacing) and e.strerror:
        return f"{e.strerror}{_os_where(e)}"
    if isinstance(e, KeyError) and e.args:
        return one_line(str(e.args[0]))
    if isinstance(e, UserFacing):  # ours: a diff keeps its lines
        return str(e) or type(e).__name__
    return one_line(str(e)) or type(e).__name__


# ------------------------------------------------------------------ owned output folders

def read_marker(folder: str) -> dict | None:
    try:
        with open(os.path.join(folder, MARKER)) as f:
            marker = json.load(f)
        return marker if isinstance(marker, dict) else None
    except (OSError, ValueError):
        return None


def _listing(folder: str, limit: int = 5) -> str:
    names = sorted(os.listdir(folder))
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} entries)" if len(names) > limit else "")


def check_output(folder: str, kind: str, flag: str = "--out", legacy=None) -> str:
    """Refuses an output folder this command does not own; returns 'new', 'empty' or 'ours'.

    legacy(folder) -> bool recognises an earlier run of this kind written before markers
    existed (e.g. prepare's plan.json). Nothing is written here.
    """
    if not os.path.lexists(folder):
        return "new"
    if not os.path.isdir(folder):
        raise NotOurs(f"{flag}={folder} is a file, not a folder; choose a folder to write")
    if not os.listdir(folder):
        return "empty"
    marker = read_marker(folder)
    if marker is not None and marker.get("kind") == kind:
        return "ours"
    if marker is not None:
        raise NotOurs(f"{flag}={folder} holds the output of another command "
                      f"({marker.get('kind')!r}, not {kind!r}); choose another folder")
    if legacy is not None and legacy(folder):
        return "ours"
    raise NotOurs(f"{flag}={folder} is a non-empty folder this command did not write "
                  f"({_listing(folder)}); nothing was written: choose a new or empty folder")


def mark_output(folder: str, kind: str, **extra) -> None:
    """Writes (atomically) the marker that makes `folder` this command's output."""
    os.makedirs(folder, exist_ok=True)
    old = read_marker(folder) or {}
    record = {"kind": kind, "created": old.get("created", time.time()), "updated": time.time(),
              "command": " ".join(sys.argv), **extra}
    tmp = os.path.join(folder, f"{MARKER}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, os.path.join(folder, MARKER))


def foreign_files(folder: str, written: list[str]) -> list[str]:
    """Files under folder that are not in `written` (relative paths) nor the marker."""
    mine = set(written) | {MARKER}
    found = []
    for root, _, names in os.walk(folder):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), folder)
            if rel not in mine:
                found.append(rel)
    return sorted(found)


def inside(path: str, folder: str) -> bool:
    """path is folder or lies under it (absolute, symlinks resolved)."""
    p, f = os.path.realpath(path), os.path.realpath(folder)
    return p == f or p.startswith(f.rstrip(os.sep) + os.sep)


def one_line(text: str) -> str:
    """A message as one line: a repr'd KeyError unquoted, an embedded traceback reduced to
    its last line (ml_collections puts one inside a config file's error)."""
    text = text.strip()
    if "Traceback (most recent call last)" in text:
        head = text.split("Traceback (most recent call last)")[0].rstrip(": \n")
        text = f"{head}: {text.splitlines()[-1].strip()}"
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":  # a repr'd KeyError
        text = text[1:-1].replace("\\n", "\n").replace("\\'", "'")
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def as_made_by_user(folder: str) -> None:
    """Everything under folder given the modes a plain write gives (0666 / 0777 less the
    user's umask): tempfile.mkdtemp makes a folder 0700 and safetensors writes its files
    0600, so a folder swapped into place from them would keep a lab's shared disk out."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(folder, 0o777 & ~mask)
    for root, dirs, names in os.walk(folder):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o777 & ~mask)
        for n in names:
            if not os.path.islink(os.path.join(root, n)):
                os.chmod(os.path.join(root, n), 0o666 & ~mask)


def discard_if_untouched(folder: str, created: bool) -> None:
    """Undoes mark_output when a command failed before writing anything else: the marker
    goes, and the folder too if the command created it (nothing of anyone's is touched)."""
    try:
        if os.listdir(folder) != [MARKER]:
            return
        os.remove(os.path.join(folder, MARKER))
        if created:
            os.rmdir(folder)
    except OSError:
        pass
