"""A benchmark row as the command prints it (a subprocess run: the e2e lane)."""
import json

from helpers import child_env, run_module


def test_a_benchmark_row_names_the_path_that_ran():
    """`bench --attention_impl=cudnn` on a CPU: the row asked cudnn, XLA ran, and says so."""
    # One device (no simulated ones), compiled as this process compiles (conftest: -O0):
    # a one-step run is compile-bound, and what ran does not depend on the code's speed.
    rc, out, err = run_module("encoder", "bench", "--size=tiny", "--seq_len=128",
                              "--batch_size=2", "--vocab_size=512", "--steps=1", "--warmup=1",
                              "--attention_impl=cudnn", timeout=240,
                              env=child_env())
    assert rc == 0, err[-2000:]
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    # first, once compiled and before the timed steps: which path each kind of layer took
    assert lines[0] == {"attention_layers": {"global": ["xla (key lengths)"]},
                        "attention_notes": lines[0]["attention_notes"]}, lines[0]
    row = lines[1]
    assert row["attention_impl"] == "cudnn" and row["attention_ran"] == "xla", row
    assert row["attention_layers"] == lines[0]["attention_layers"]
    assert any("no cuDNN there" in n for n in row["attention_notes"]), row
