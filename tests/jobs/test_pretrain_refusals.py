"""A pretraining config that cannot give a meaningful result is refused before anything
is prepared, compiled or written, naming the field and what to change."""
import os

import jax
import pytest

from encoder.jobs import pretrain
from helpers import tiny_pretrain_config


def test_rows_too_short_to_hold_text_are_refused(tmp_path):
    config = tiny_pretrain_config()
    config.data.seq_len = 2
    with pytest.raises(ValueError, match=r"data.seq_len=2: .*at least 8"):
        pretrain.train(config, str(tmp_path / "wd"))
    assert not (tmp_path / "wd").exists()


def test_a_warmup_the_run_never_leaves_is_refused():
    config = tiny_pretrain_config()
    config.train.update(num_steps=20, warmup_steps=1000)
    with pytest.raises(ValueError, match=r"warmup_steps=1000 is not shorter than the run "
                                         r"\(train.num_steps=20\)"):
        pretrain.validate(config)
    config.train.warmup_steps = 19
    pretrain.validate(config)


def test_held_out_files_that_are_the_training_files_are_refused(tmp_path):
    text = tmp_path / "train.txt"
    text.write_text("some text\n")
    config = tiny_pretrain_config()
    config.data.train_files = str(text)
    config.data.valid_files = os.path.join(str(tmp_path), ".", "train.txt")  # same file
    config.train.eval_every = 10
    with pytest.raises(ValueError, match="are the training files"):
        pretrain.validate(config)
    config.train.eval_every = 0  # no held-out figure is reported: nothing to mislead
    pretrain.validate(config)


def test_a_length_whose_attention_cannot_fit_is_refused_with_the_figure(tmp_path):
    """seq_len=100000 on CPU: one layer's float32 scores are rows x H x T^2 x 4 bytes,
    640 GB at runlocal size; refused before the corpus is prepared (the run used to die of an
    out-of-memory error after 78 s)."""
    config = tiny_pretrain_config()
    config.data.seq_len = 100_000
    config.model.position = "rope"
    with pytest.raises(ValueError, match=r"data.seq_len=100000 cannot fit: .* 640.0 GB per device \(8 rows x 2 heads"):
        pretrain.train(config, str(tmp_path / "wd"), devices=jax.devices()[:1])
    assert not (tmp_path / "wd").exists()


def test_an_init_from_that_is_a_file_is_named_as_a_file(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"x")
    config = tiny_pretrain_config()
    config.init_from = str(path)
    with pytest.raises(ValueError, match="is a file; it takes a workdir"):
        pretrain.train(config, str(tmp_path / "wd"))
