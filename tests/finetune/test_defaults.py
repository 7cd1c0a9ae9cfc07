"""Fine-tuning defaults follow the model's size; given values win; the README command works."""
import json
import os
import subprocess
import sys

import pytest

from encoder import config as config_lib
from encoder.finetune import config as finetune_config, defaults as finetune_defaults

from helpers import ROOT  # noqa: E402


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


def test_probes_and_adapters_get_a_larger_step():
    assert finetune_defaults.defaults_for(768, "frozen")["learning_rate"] == 1e-3
    assert finetune_defaults.defaults_for(768, "lora")["learning_rate"] == 5e-4
    assert finetune_defaults.defaults_for(768, "full")["learning_rate"] == 5e-5


def _run(*args, timeout=900):
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_readme_finetuning_command_beats_the_majority_class(tmp_path):
    """The README's commands in order, pretraining shortened, fine-tuning exactly as written."""
    pre, tasks, ft = tmp_path / "tiny", tmp_path / "tasks", tmp_path / "ft_topic"
    _run("-m", "encoder.main", "--config=experiments/pretrain.py", f"--workdir={pre}",
         "--config.train.num_steps=30", "--config.train.eval_every=0",
         "--config.train.progress=false")
    _run("-m", "encoder.data.stdlib_tasks", "--out", str(tasks))
    out = _run("-m", "encoder.main",
               "--config=experiments/finetune.py:task=classification,pooling=mean",
               f"--config.init_from={pre}",
               f"--config.data.train_file={tasks}/topic/train.jsonl",
               f"--config.data.dev_file={tasks}/topic/dev.jsonl", f"--workdir={ft}")
    assert "learning_rate=0.001 (default for a 2-layer, 128-wide model" in out
    dev = json.load(open(ft / "eval.json"))["dev"]["accuracy"]
    labels = [json.loads(line)["label"] for line in open(tasks / "topic" / "dev.jsonl")]
    majority = max(labels.count(x) for x in set(labels)) / len(labels)
    assert dev > majority + 0.4, (dev, majority)
