"""A benchmark row as the command prints it (a subprocess run: the e2e lane)."""
import json
import os

from helpers import run_module


def test_a_benchmark_row_names_the_path_that_ran():
    """`bench --attention_impl=cudnn` on a CPU: the row asked cudnn, XLA ran, and says so."""
    # One device (no simulated ones), compiled as this process compiles (conftest: -O0):
    # a one-step run is compile-bound, and what ran does not depend on the code's speed.
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                     if not f.startswith("--xla_force_host_platform_device_count"))
    rc, out, err = run_module("encoder.bench", "--size=tiny", "--seq_len=128",
                              "--batch_size=2", "--vocab_size=512", "--steps=1", "--warmup=1",
                              "--attention_impl=cudnn", timeout=240,
                              env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags})
    assert rc == 0, err[-2000:]
    row = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert row["attention_impl"] == "cudnn" and row["attention_ran"] == "xla", row
    assert any("no cuDNN there" in n for n in row["attention_notes"]), row
