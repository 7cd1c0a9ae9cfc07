"""A resumed run whose train.num_steps changed says what that does to its learning rate (the
schedule is laid over the new length), and the start-up disk check counts every checkpoint
the run keeps, not one."""
import shutil

from encoder.checkpoints import store
from encoder.jobs import pretrain
from encoder.train import schedules, workdir as workdir_lib
from helpers import tiny_pretrain_config


def test_a_longer_run_on_resume_says_how_its_learning_rate_moves(tmp_path, tiny_pretrained):
    wd = tmp_path / "w"
    shutil.copytree(tiny_pretrained, wd, ignore=shutil.ignore_patterns("LOCK"))
    config = tiny_pretrain_config(num_steps=8)
    allowed = workdir_lib.check_identity(str(wd), config, pretrain.MUTABLE)
    line, = [a for a in allowed if a.startswith("train.num_steps")]
    was = float(schedules.make(config.train, 6)(6))
    now = float(schedules.make(config.train, 8)(6))
    assert was != now
    assert line.startswith("train.num_steps: 6 -> 8 (the linear learning-rate schedule is laid "
                           f"over the new length: at step 6 it was {was:.3g} and is now "
                           f"{now:.3g}")


def test_the_disk_check_counts_the_checkpoints_a_run_keeps(tmp_path, tiny_pretrained):
    assert store.checkpoints_to_write(str(tmp_path), 3) == 3      # a new run: all three
    assert store.checkpoints_to_write(tiny_pretrained, 3) == 2    # it holds one already
    assert store.checkpoints_to_write(tiny_pretrained, 1) == 1    # the next one, always
    assert store.checkpoints_to_write(str(tmp_path), 0) == 1
