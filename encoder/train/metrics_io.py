"""Where a run's numbers go: metrics.jsonl, TensorBoard, absl logging, a progress line."""
import json
import os
import sys
import time

import numpy as np
from absl import logging


class MetricsWriter:
    """One JSON object per line in WORKDIR/metrics.jsonl, mirrored to TensorBoard."""

    def __init__(self, workdir: str, enabled: bool = True):
        self.enabled = enabled
        self.path = os.path.join(workdir, "metrics.jsonl")
        self.tb = None
        if enabled:
            os.makedirs(workdir, exist_ok=True)
            try:
                from tensorboardX import SummaryWriter
                self.tb = SummaryWriter(os.path.join(workdir, "tensorboard"))
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

    def close(self):
        if self.tb is not None:
            self.tb.close()


def _scalar(v):
    v = np.asarray(v)
    return float(v) if v.dtype.kind == "f" else int(v) if v.dtype.kind in "iub" else v.tolist()


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
