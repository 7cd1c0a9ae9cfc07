"""Ahead-of-time sizing: the train step compiled from shapes for a mesh of devices, its
memory per device and FLOPs (python -m encoder.bench --mode=compile)."""
import json

from absl import app, flags

from benchmarks.common import experiment_config

FLAGS = flags.FLAGS


def run():
    if FLAGS.config is None:
        raise app.UsageError("--mode=compile needs --config=experiments/NAME.py[:arg]")
    from encoder.train import compile_report
    row = compile_report.compile_report(experiment_config(), FLAGS.unrolled_flops)
    gib = lambda b: round(b / 2**30, 3)  # noqa: E731
    row.update({k.replace("_bytes", "_gib"): gib(v) for k, v in list(row.items())
                if k.endswith("_bytes")})
    print(json.dumps(row), flush=True)
