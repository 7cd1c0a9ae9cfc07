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


def test_a_finetune_set_value_out_of_range_is_refused_once_before_any_run():
    import types
    from encoder.studies.suite import plan
    opts = types.SimpleNamespace(finetune_set=("finetune.dropout=2",))
    task = types.SimpleNamespace(type="classification", kind="finetune", name="topic")
    with pytest.raises(ValueError, match="--finetune_set: finetune.dropout must be a number "
                       "in \\[0, 1\\)"):
        plan.check_sets([task], {"pooling": "cls"}, opts)
    plan.check_sets([task], {"pooling": "cls"},
                    types.SimpleNamespace(finetune_set=("finetune.dropout=0.2",)))
