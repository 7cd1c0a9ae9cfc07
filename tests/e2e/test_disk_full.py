"""A full disk is a user's error: one line with the folder, what is free and what was
needed, before the first step where the disk cannot hold the checkpoints the run keeps; a write that
runs out of space mid-way is named the same (a real tmpfs of a few MB; root only)."""
import contextlib
import os
import subprocess

import pytest

from encoder import errors
from encoder.checkpoints import store
from helpers import one_line, run_module

pytestmark = pytest.mark.e2e


@contextlib.contextmanager
def small_disk(path, size: str):
    os.makedirs(path)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}",
                                            "tmpfs", str(path)]).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", str(path)])


def test_a_disk_that_cannot_hold_a_checkpoint_is_refused_before_the_first_step(tmp_path):
    with small_disk(tmp_path / "disk", "3M") as disk:
        rc, out, err = run_module("encoder", "run", "--config=experiments/pretrain.py:runlocal",
                                  f"--workdir={disk}/wd", timeout=300)
        one_line(rc, err, f"no space left on device under {disk}/wd", "MiB free",
                 "3 checkpoints (about", "train.keep_checkpoints=3")  # all it will keep
        assert err.strip().splitlines()[-1].startswith("error: no space left")
        assert "step 5:" not in out  # refused before training


def test_a_write_that_runs_out_of_space_is_named_with_the_last_checkpoint(tmp_path):
    with small_disk(tmp_path / "disk", "1M") as disk:
        with pytest.raises(errors.DiskFull, match=rf"under {disk} \(.* MiB free\) for the run's"):
            with store.disk_full_named(disk):
                with open(os.path.join(disk, "big"), "wb") as f:
                    f.write(b"x" * (2 << 20))
        with pytest.raises(errors.DiskFull, match=r"for step 9's checkpoint \(about 4.0 MiB"):
            store.check_room(disk, 4 << 20, "step 9's checkpoint")
