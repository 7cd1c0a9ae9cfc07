"""Where a run's numbers go: metrics.jsonl, TensorBoard, absl logging, a progress line."""
import json
import math
import os
import sys
import time

import numpy as np
from absl import logging


def _summary_writer_class():
    """tensorboardX's SummaryWriter, imported without torch.

    tensorboardX.writer imports torch at module level when it is installed, only to accept
    torch tensors; this writer passes Python floats. Hiding torch for that one import
    (a None entry in sys.modules makes `import torch` raise ImportError, which tensorboardX
    catches) saves every job about 3 s of start-up where torch is installed (BUILD_NOTES,
    "Test suite time"). A torch imported before stays as it is.
    """
    hide = "torch" not in sys.modules
    if hide:
        sys.modules["torch"] = None
    try:
        from tensorboardX import SummaryWriter
    finally:
        if hide:
            del sys.modules["torch"]
    return SummaryWriter


class MetricsWriter:
    """One JSON object per line in WORKDIR/metrics.jsonl, mirrored to TensorBoard."""

    def __init__(self, workdir: str, enabled: bool = True):
        self.enabled = enabled
        self.workdir = workdir
        self.path = os.path.join(workdir, "metrics.jsonl")
        self.tb = None
        if enabled:
            os.makedirs(workdir, exist_ok=True)
            try:
                self.tb = _summary_writer_class()(os.path.join(workdir, "tensorboard"))
            except ImportError:  # optional: the JSONL file is the record
                logging.warning("tensorboardX not installed; writing metrics.jsonl only")

    def write(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        row = {"step": int(step), **{k: _scalar(v) for k, v in metrics.items()}}
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        if self.tb is not None:
            for k, v in row.items():
                if k != "step" and isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, step)
            self.tb.flush()

    def drop_after(self, step: int) -> int:
        """Removes rows past `step` (steps a resume will redo); returns how many went.

        A run killed after logging step s but before its checkpoint at s
        restores an earlier step; without this its curve would show steps twice.
        """
        if not self.enabled or not os.path.exists(self.path):
            return 0
        with open(self.path) as f:
            lines = [line for line in f if line.strip()]
        keep = [line for line in lines if _row_step(line) <= step]
        if len(keep) != len(lines):
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                f.writelines(keep)
            os.replace(tmp, self.path)
            logging.warning("metrics.jsonl: dropped %d rows past the restored step %d",
                            len(lines) - len(keep), step)
        return len(lines) - len(keep)

    def close(self):
        if self.tb is not None:
            self.tb.close()


def _row_step(line: str) -> int:
    try:
        return int(json.loads(line).get("step", 0))
    except (ValueError, AttributeError):
        return 1 << 62  # a torn last line from a kill: dropped with the rows past the step


def _scalar(v):
    if isinstance(v, (bool, str)):
        return v
    v = np.asarray(v)
    return float(v) if v.dtype.kind == "f" else int(v) if v.dtype.kind in "iub" else v.tolist()


def _non_finite(obj, path=""):
    """The first key path holding NaN or infinity, or None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return path or "/"
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return None
    for k, v in items:
        found = _non_finite(v, f"{path}/{k}" if path else str(k))
        if found:
            return found
    return None


def write_json(path: str, obj) -> None:
    """Strict JSON (no NaN): a non-finite metric is an error naming it, never a file."""
    bad = _non_finite(obj)
    if bad:
        raise FloatingPointError(f"{path}: metric {bad} is not finite; not writing it")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, allow_nan=False)
    os.replace(tmp, path)


def read_metrics(workdir: str) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Progress:
    """A one-line progress bar on stderr: step, loss, tokens/s, ETA."""

    def __init__(self, total: int, start: int, enabled: bool = True):
        self.total, self.start, self.enabled = total, start, enabled and sys.stderr.isatty()
        self.t0 = time.time()

    def update(self, step: int, loss: float, tokens_per_s: float):
        if not self.enabled:
            return
        done = step - self.start
        rate = done / max(time.time() - self.t0, 1e-9)
        eta = (self.total - step) / rate if rate > 0 else float("inf")
        width = 30
        filled = int(width * step / max(self.total, 1))
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] step {step}/{self.total} "
                         f"loss {loss:.4f} {tokens_per_s:,.0f} tok/s ETA {eta:,.0f}s ")
        sys.stderr.flush()

    def close(self):
        if self.enabled:
            sys.stderr.write("\n")


# ------------------------------------------------ scores of declared evaluators

SCORES = "evals.jsonl"


class ScoreRecord:
    """WORKDIR/evals.jsonl: one row a score of a declared evaluator (encoder/jobs/evals.py:
    its name, step, key and metrics); what a resumed run reads back instead of scoring a
    step again. ev: anything with .name and .key; primary: the process that writes."""

    def __init__(self, workdir: str, primary: bool = True):
        self.path = os.path.join(workdir, SCORES)
        self.primary = primary
        self.scores: dict = {}
        self.torn = False  # the last line a kill left half-written: the next row starts anew
        if os.path.exists(self.path):
            with open(self.path) as f:
                for line in f:
                    self.torn = not line.endswith("\n")
                    try:
                        row = json.loads(line)
                        self.scores[(row["name"], row["step"], row["key"])] = row["metrics"]
                    except (ValueError, KeyError, TypeError):
                        continue  # a torn last line (killed mid-write): that score is redone

    def get(self, ev, step: int) -> dict | None:
        return self.scores.get((ev.name, step, ev.key))

    def add(self, ev, step: int, metrics: dict) -> None:
        metrics = {k: float(v) for k, v in metrics.items()}
        self.scores[(ev.name, step, ev.key)] = metrics
        if not self.primary:
            return
        row = {"name": ev.name, "step": step, "key": ev.key, "metrics": metrics,
               "time": time.time()}
        with open(self.path, "a") as f:
            if self.torn:
                f.write("\n")
                self.torn = False
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
