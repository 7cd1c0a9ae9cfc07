"""`suite`'s numeric flags are checked as flags (one line, exit 1, nothing built): -5 epochs
once meant "the preset's" and nine fine-tuning runs started; a NaN learning rate trained."""
import subprocess
import sys

import pytest


@pytest.mark.parametrize("flag, said", [
    ("--epochs=-5", "expected -1 (the preset's per task) or a count of epochs >= 1"),
    ("--learning_rates=1e-4,nan", "each learning rate a finite number > 0"),
])
def test_a_flag_out_of_range_is_refused_before_anything_is_built(tmp_path, flag, said):
    p = subprocess.run([sys.executable, "-m", "encoder", "suite", "--baseline=majority",
                        "--only=topic", f"--workdir={tmp_path / 's'}", flag],
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert p.returncode == 1 and len(lines) == 1 and said in lines[0], p.stderr[-2000:]
    assert not (tmp_path / "s").exists()
