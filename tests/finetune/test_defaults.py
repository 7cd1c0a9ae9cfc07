"""Fine-tuning defaults follow the model's size; given values win (the README command:
tests/e2e/test_readme_finetuning.py)."""
import pytest

from encoder import config as config_lib
from encoder.finetune import config as finetune_config, defaults as finetune_defaults


@pytest.mark.parametrize("size,lr,epochs,dropout", [("tiny", 1e-3, 6, 0.0),
                                                    ("mini", 1e-3, 6, 0.0),
                                                    ("base", 5e-5, 3, 0.1),
                                                    ("large", 2e-5, 3, 0.1)])
def test_defaults_follow_the_model_size(size, lr, epochs, dropout):
    cfg = finetune_config.finetune_config()
    layers, width, _, _ = config_lib.SIZES[size]
    lines = finetune_defaults.resolve(cfg, width, layers)
    assert (cfg.train.learning_rate, cfg.train.num_epochs, cfg.finetune.dropout) == (
        lr, epochs, dropout)
    assert all("default for a" in line for line in lines)


def test_given_values_win_and_are_reported_as_given():
    cfg = finetune_config.finetune_config()
    cfg.train.learning_rate = 3e-4
    cfg.finetune.dropout = 0.2
    lines = finetune_defaults.resolve(cfg, 128, 2)
    assert (cfg.train.learning_rate, cfg.train.num_epochs, cfg.finetune.dropout) == (3e-4, 6, 0.2)
    assert "learning_rate=0.0003 (given)" in lines and "dropout=0.2 (given)" in lines


def test_a_given_step_count_is_reported_instead_of_the_unused_epochs():
    cfg = finetune_config.finetune_config()
    cfg.train.num_steps = 32
    lines = finetune_defaults.resolve(cfg, 128, 2)
    assert "num_steps=32 (given; num_epochs unused)" in lines
    assert not any(line.startswith("num_epochs=") for line in lines)


def test_probes_and_adapters_get_a_larger_step():
    assert finetune_defaults.defaults_for(768, "frozen")["learning_rate"] == 1e-3
    assert finetune_defaults.defaults_for(768, "lora")["learning_rate"] == 5e-4
    assert finetune_defaults.defaults_for(768, "full")["learning_rate"] == 5e-5


