"""`bench --mode=prepare` refuses a size or worker count out of range on the command line,
before it trains a tokenizer or writes a corpus."""
import subprocess
import sys

import pytest

from benchmarks import prepare


@pytest.mark.parametrize("kind, values, ok", [
    (float, ["25", "0.5"], True), (float, ["25", "-1"], False), (float, ["0"], False),
    (float, ["abc"], False), (int, ["1", "2"], True), (int, ["0"], False),
    (int, ["1.5"], False)])
def test_the_list_validator(kind, values, ok):
    assert prepare._all_positive(kind)(values) is ok


def test_a_negative_size_is_one_line_before_anything_is_written(tmp_path):
    p = subprocess.run([sys.executable, "-m", "encoder", "bench", "--mode=prepare",
                        "--sizes_mb=25,-1", f"--bench_dir={tmp_path / 'b'}"],
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert p.returncode == 1 and len(lines) == 1, p.stderr[-2000:]
    assert "each --sizes_mb a size in MB > 0" in lines[0]
    assert "Traceback" not in p.stderr and not (tmp_path / "b").exists()
