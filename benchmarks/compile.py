"""Ahead-of-time sizing: the train step compiled from shapes for a mesh of devices (simulated
CPU devices, or a TPU topology compiled by libtpu here), one JSON line per compile
(python -m encoder.bench --mode=compile; encoder/train/compile_report.py has the fields).

    python -m encoder.bench --mode=compile --topology=v5e:2x2 \\
        --config=experiments/bert_base.py --seq_len=512 --batch_size=32 --dtype=bfloat16
"""
import json

from absl import app, flags

from benchmarks.common import experiment_config

FLAGS = flags.FLAGS


def gib_fields(row: dict) -> dict:
    """row with every *_bytes figure also in GiB (3 decimals)."""
    out = dict(row)
    for key, value in row.items():
        if key.endswith("_bytes") and isinstance(value, (int, float)):
            out[key.replace("_bytes", "_gib")] = round(value / 2**30, 3)
    return out


def run():
    if FLAGS.config is None:
        raise app.UsageError("--mode=compile needs --config=experiments/NAME.py[:arg]")
    if FLAGS.topology and FLAGS.devices:
        raise app.UsageError("--topology (TPU chips or GPUs) and --devices (simulated CPU "
                             "devices) are two targets: give one")
    from encoder.train import compile_report
    row = compile_report.compile_report(
        experiment_config(), FLAGS.unrolled_flops, topology=FLAGS.topology,
        num_slices=FLAGS.num_slices, job=FLAGS.job, task=FLAGS.task)
    print(json.dumps(gib_fields(row)), flush=True)
