"""Fine-tuning runs: every task type end to end, FSDP equivalence, exact resume after
SIGKILL mid-epoch, a fine-tuned workdir as the start of another fine-tuning, strict task files."""
import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from encoder.checkpoints import sources, store
from encoder.jobs import finetune as run
from encoder.tasks.table import TASKS
from encoder.train import metrics_io
from experiments import finetune as finetune_exp
from helpers import ROOT, child_env, topic_config, topic_task, write_jsonl as _write


def _train_losses(workdir):
    return [r["train/loss"] for r in metrics_io.read_metrics(workdir) if "train/loss" in r]


def _finetune_cli(workdir, source, task_dir, *extra):
    env = child_env()
    cmd = [sys.executable, "-m", "encoder", "run",
           "--config=experiments/finetune.py:task=classification,runlocal",
           f"--config.init_from={source}", f"--workdir={workdir}",
           f"--config.data.train_file={task_dir}/train.jsonl",
           f"--config.data.dev_file={task_dir}/dev.jsonl", *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("task,mode", [("classification", "full"), ("regression", "frozen"),
                                       ("tagging", "lora"), ("qa", "full"),
                                       ("contrastive", "full")])
def test_finetune_end_to_end_writes_eval_and_predictions(tiny_pretrained, tmp_path, task, mode):
    rng = np.random.default_rng(0)
    words = ["file", "socket", "thread", "path", "string", "number"]
    rows = []
    for i in range(48):
        w = [str(words[j]) for j in rng.integers(0, 6, size=5)]
        if task == "classification":
            rows.append({"text": " ".join(w), "label": "io" if "file" in w else "other"})
        elif task == "regression":
            rows.append({"text": " ".join(w), "label": float(w.count("file"))})
        elif task == "tagging":
            rows.append({"tokens": w, "tags": ["B-IO" if t == "file" else "O" for t in w]})
        elif task == "qa":
            ctx = " ".join(w) + " answer_here " + " ".join(w)
            rows.append({"question": "where?", "context": ctx, "answer_text": "answer_here",
                         "answer_start": ctx.index("answer_here")})
        else:
            rows.append({"text_a": " ".join(w), "text_b": " ".join(reversed(w))})
    _write(tmp_path / "train.jsonl", rows[:32])
    _write(tmp_path / "dev.jsonl", rows[32:])
    config = finetune_exp.get_config(f"task={task},mode={mode},runlocal")
    config.init_from = tiny_pretrained
    config.data.train_file = str(tmp_path / "train.jsonl")
    config.data.dev_file = str(tmp_path / "dev.jsonl")
    config.data.test_file = str(tmp_path / "dev.jsonl")
    out = tmp_path / "out"
    before = None
    if mode == "frozen":
        before = sources.load(tiny_pretrained).params["encoder"]
    result = run.finetune(config, str(out), devices=jax.devices()[:1])
    primary = TASKS[task].primary_metric
    assert primary in result["dev"] and primary in result["test"]
    with open(out / "eval.json") as f:
        assert json.load(f) == json.loads(json.dumps(result))
    preds = [json.loads(line) for line in open(out / "predictions.jsonl")]
    assert len(preds) == 2 * 16 and {p["split"] for p in preds} == {"dev", "test"}
    if before is not None:  # a linear probe leaves the encoder untouched
        _, best = store.load_params(str(out / "best"))
        np.testing.assert_array_equal(best["encoder"]["blocks_0"]["mlp"]["wi"]["kernel"],
                                      before["blocks_0"]["mlp"]["wi"]["kernel"])


def test_fsdp_on_eight_devices_matches_one_device(tiny_pretrained, tmp_path):
    task_dir = topic_task(tmp_path / "task")
    results, losses = {}, {}
    for name, devices, mesh in (("1", jax.devices()[:1], dict(data=1, fsdp=1)),
                                ("data4_fsdp2", jax.devices(), dict(data=4, fsdp=2))):
        config = topic_config(tiny_pretrained, task_dir, num_epochs=3, batch_size=16)
        config.mesh.update(mesh)
        config.finetune.dropout = 0.1  # the dropout masks must agree across meshes too
        results[name] = run.finetune(config, str(tmp_path / name), devices=devices)
        losses[name] = _train_losses(str(tmp_path / name))
    assert len(losses["1"]) == 3  # one row per epoch of 4 steps: 12 steps in all
    np.testing.assert_allclose(losses["data4_fsdp2"], losses["1"], rtol=1e-5)
    assert results["data4_fsdp2"]["dev"]["accuracy"] == results["1"]["dev"]["accuracy"]


def test_sigkill_mid_epoch_resumes_to_the_same_final_loss(tiny_pretrained, tmp_path):
    task_dir = topic_task(tmp_path / "task", n_train=128)
    # 8 steps per epoch, a checkpoint every 5 steps (step 5 is mid-epoch), and enough
    # epochs that the kill lands long before the end.
    extra = ("--config.train.num_epochs=3", "--config.train.checkpoint_every=5",
             "--config.finetune.dropout=0.1")
    ref = _finetune_cli(tmp_path / "ref", tiny_pretrained, task_dir, *extra)
    victim = _finetune_cli(tmp_path / "victim", tiny_pretrained, task_dir, *extra)
    ckpt = tmp_path / "victim" / "checkpoints" / "5"
    t0 = time.time()
    while not ckpt.exists():
        assert victim.poll() is None, victim.stdout.read()
        assert time.time() - t0 < 240
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert ref.wait(timeout=300) == 0, ref.stdout.read()
    assert not (tmp_path / "victim" / "eval.json").exists()  # it really died mid-run
    again = _finetune_cli(tmp_path / "victim", tiny_pretrained, task_dir, *extra)
    out = again.communicate(timeout=300)[0]
    assert again.returncode == 0, out
    assert "resumed from" in out
    assert _train_losses(str(tmp_path / "victim")) == _train_losses(str(tmp_path / "ref"))
    with open(tmp_path / "victim" / "eval.json") as f, open(tmp_path / "ref" / "eval.json") as g:
        assert json.load(f) == json.load(g)


def test_a_finetuned_workdir_starts_another_finetuning(tiny_pretrained, tmp_path):
    task_dir = topic_task(tmp_path / "task")
    first = run.finetune(topic_config(tiny_pretrained, task_dir, num_epochs=3),
                         str(tmp_path / "first"), devices=jax.devices()[:1])
    src = sources.load(str(tmp_path / "first"))
    assert src.kind == "finetuning" and src.labels == ["io", "other"] and "head" in src.params
    # Same task and labels: encoder and head carry over, so before any step the second
    # run scores exactly what the first one kept as its best.
    second = run.build(topic_config(str(tmp_path / "first"), task_dir), str(tmp_path / "second"))
    params = run.init_from_source(second)(second.trainer.fresh_state().params,
                                          second.trainer.shardings.params)
    fn = jax.jit(lambda p, b: second.task.forward(second.model, second.effective(p), b))
    m, _ = run.score_split(second, fn, params, second.splits["dev"])
    assert m == first["dev"]
    # A different label set (three classes): the encoder carries over, the head is fresh.
    other = tmp_path / "three"
    rows = [json.loads(x) for x in open(os.path.join(task_dir, "train.jsonl"))]
    for i, r in enumerate(rows):
        r["label"] = ["a", "b", "c"][i % 3]
    os.makedirs(other)
    _write(other / "train.jsonl", rows[16:])
    _write(other / "dev.jsonl", rows[:16])  # held out: rows training never sees
    result = run.finetune(topic_config(str(tmp_path / "first"), str(other), num_epochs=1),
                          str(tmp_path / "third"), devices=jax.devices()[:1])
    assert set(result["dev"]) >= {"accuracy"}
    _, best = store.load_params(str(tmp_path / "third" / "best"))
    assert best["head"]["classifier"]["kernel"].shape[-1] == 3
