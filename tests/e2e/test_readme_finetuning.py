"""Fine-tuning defaults follow the model's size; given values win; the README command works."""
import json
import os
import subprocess
import sys


from helpers import CHILD_XLA_FLAGS, ROOT, STEP_BOUND_XLA_FLAGS  # noqa: E402


def _run(*args, timeout=900, xla_flags=CHILD_XLA_FLAGS):
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags)
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_readme_finetuning_command_beats_the_majority_class(tmp_path, tiny_pretrained):
    """The README's commands in order, pretraining as the session's tiny_pretrained (the
    README's recipe, 6 steps: pretraining's own commands are tested in test_pretrain_runs),
    fine-tuning exactly as written, at XLA's defaults."""
    pre, tasks, ft = tiny_pretrained, tmp_path / "tasks", tmp_path / "ft_topic"
    _run("-m", "encoder", "tasks", "--out", str(tasks))
    out = _run("-m", "encoder", "run",
               "--config=experiments/finetune.py:task=classification,pooling=mean",
               f"--config.init_from={pre}",
               f"--config.data.train_file={tasks}/topic/train.jsonl",
               f"--config.data.dev_file={tasks}/topic/dev.jsonl", f"--workdir={ft}",
               xla_flags=STEP_BOUND_XLA_FLAGS)  # 126 steps: step-bound (helpers)
    assert "learning_rate=0.001 (default for a 2-layer, 128-wide model" in out
    dev = json.load(open(ft / "eval.json"))["dev"]["accuracy"]
    labels = [json.loads(line)["label"] for line in open(tasks / "topic" / "dev.jsonl")]
    majority = max(labels.count(x) for x in set(labels)) / len(labels)
    assert dev > majority + 0.4, (dev, majority)
