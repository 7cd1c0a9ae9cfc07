"""Ablation studies: expansion, a small end-to-end study, skip-finished and resume."""
import csv
import os
import signal
import subprocess
import sys
import time

import pytest

from encoder.studies import ablation as ablate, records

from helpers import ROOT, child_env


def test_expand_product_and_zip():
    sweeps = [("model.position", ["learned", "rope"]), ("objective", ["mlm", "rtd"])]
    assert len(ablate.expand(sweeps, zipped=False)) == 4
    assert ablate.expand(sweeps, zipped=True) == [
        {"model.position": "learned", "objective": "mlm"},
        {"model.position": "rope", "objective": "rtd"}]
    with pytest.raises(ValueError, match="equal length"):
        ablate.expand([("a", [1, 2]), ("b", [1])], zipped=True)
    assert ablate.parse_sweep("train.learning_rate=1e-3,2e-3") == ("train.learning_rate",
                                                                   [1e-3, 2e-3])


def test_apply_variant_sets_paths_and_options():
    sys.path.insert(0, ROOT)
    from experiments import pretrain
    base = pretrain.get_config("runlocal")
    c = ablate.apply_variant(base, {"model.position": "alibi", "objective": "rtd",
                                    "train.learning_rate": 2e-3})
    assert (c.model.position, c.objective, c.train.learning_rate) == ("alibi", "rtd", 2e-3)
    assert base.model.position == "rope"  # the base is untouched
    with pytest.raises(ValueError, match="no 'positon'"):
        ablate.apply_variant(base, {"model.positon": "rope"})


def test_equal_flops_gives_rtd_fewer_steps():
    sys.path.insert(0, ROOT)
    from experiments import pretrain
    runs = ablate.plan(pretrain.get_config("runlocal"), [{"objective": "mlm"},
                                                         {"objective": "rtd"}], 1, True)
    mlm, rtd = runs
    assert rtd["flops_per_step"] > mlm["flops_per_step"]
    assert rtd["config"].train.num_steps < mlm["config"].train.num_steps
    budget = mlm["config"].train.num_steps * mlm["flops_per_step"]
    assert abs(rtd["config"].train.num_steps * rtd["flops_per_step"] - budget) / budget < 0.05


def _study(workdir, *extra, steps=8, sweep="model.position=learned,rope", seeds=2):
    cmd = [sys.executable, "-m", "encoder", "ablate", "--config=experiments/pretrain.py:runlocal",
           f"--sweep={sweep}", f"--seeds={seeds}", f"--workdir={workdir}",
           f"--config.train.num_steps={steps}", "--config.train.log_every=2",
           f"--config.train.eval_every={steps}", "--config.train.checkpoint_every=4", *extra]
    env = child_env()
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)



def test_small_study_end_to_end_skips_finished_and_resumes(tmp_path, tiny_pretrained):
    shared = (f"--config.data.tokenizer={tiny_pretrained}/tokenizer/sp.model",
              f"--config.data.cache_dir={tiny_pretrained}/cache")
    # An interrupted study: kill it (and its runs) once the first run has a checkpoint.
    first = tmp_path / "runs" / "position=learned__seed0"
    proc = _study(tmp_path, "--parallel=1", *shared, steps=12)
    t0 = time.time()
    while not (first / "checkpoints" / "4").exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() - t0 < 240
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not records.finished(str(first))
    # Rerun: the interrupted run resumes from its checkpoint and the study completes.
    proc = _study(tmp_path, "--parallel=2", *shared, steps=12)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert "resumed from" in (first / "run.log").read_text()
    with open(tmp_path / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert [r["variant"] for r in table] == ["position=learned", "position=rope"]
    assert all(r["seeds"] == "2" for r in table)
    for r in table:
        assert float(r["final_train_loss"]) > 0 and float(r["eval/mlm_accuracy"]) >= 0
        assert float(r["flops"]) > 0 and int(float(r["parameters"])) > 0
    with open(tmp_path / "runs.csv") as f:
        assert len(list(csv.DictReader(f))) == 4
    assert (tmp_path / "loss_curves.png").stat().st_size > 0
    assert (tmp_path / "final_metric.png").stat().st_size > 0
    assert "| position=rope | 2 |" in (tmp_path / "results.md").read_text()
    # A third invocation repeats nothing.
    stamps = {p: p.stat().st_mtime for p in tmp_path.glob("runs/*/run.json")}
    proc = _study(tmp_path, "--parallel=2", *shared, steps=12)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "started" not in out
    assert {p: p.stat().st_mtime for p in tmp_path.glob("runs/*/run.json")} == stamps
    assert len(stamps) == 4 and all(records.finished(str(p.parent)) for p in stamps)
    # A changed setting is a different run: it is rerun, never reported from the old one.
    proc = _study(tmp_path, *shared, steps=10, sweep="model.position=rope", seeds=1)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "rerunning position=rope__seed0: its configuration changed (train.eval_every: 12 " \
           "-> 10; train.num_steps: 12 -> 10)" in out
    assert list(tmp_path.glob("runs/position=rope__seed0.stale-*"))
    with open(tmp_path / "runs.csv") as f:
        assert [r["steps"] for r in csv.DictReader(f)] == ["10"]


def test_zero_seeds_is_refused_up_front(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "encoder", "ablate",
                           "--config=experiments/pretrain.py:runlocal", "--seeds=0",
                           f"--workdir={tmp_path}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=child_env())
    assert proc.returncode != 0 and "--seeds and --parallel must be at least 1" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_watchers_beside_the_runs_give_the_curves_and_the_final_scores(tmp_path,
                                                                     tiny_pretrained):
    """--watch: a watcher a run, each a run of the study (through its launcher), scoring
    every checkpoint once while the run trains; its final checkpoint's suite is the table's
    suite/* columns; a second invocation repeats nothing."""
    import json
    shared = (f"--config.data.tokenizer={tiny_pretrained}/tokenizer/sp.model",
              f"--config.data.cache_dir={tiny_pretrained}/cache", "--watch",
              "--suite_arg=--probe_only", "--suite_arg=--preset=runlocal",
              "--suite_arg=--only=sts_relatedness", "--parallel=2")
    proc = _study(tmp_path, *shared, steps=4, sweep="train.learning_rate=1e-3,2e-3", seeds=1)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    names = ["learning_rate=0.001__seed0", "learning_rate=0.002__seed0"]
    assert out.index(f"started {names[0]}/watch") < out.index(f"started {names[1]}")
    with open(tmp_path / "results.csv") as f:
        table = {r["variant"]: r for r in csv.DictReader(f)}
    for name in names:
        with open(tmp_path / "watch" / name / "curve.jsonl") as f:
            curve = [json.loads(line) for line in f]
        assert [r["step"] for r in curve] == [4]  # checkpoint_every=4: one, the last
        row = table[name.split("__")[0]]
        assert float(row["suite/sts_relatedness"]) == pytest.approx(
            curve[-1]["suite/sts_relatedness"], abs=1e-9)
    assert "Primary metric: `suite/average`" in (tmp_path / "results.md").read_text()
    proc = _study(tmp_path, *shared, steps=4, sweep="train.learning_rate=1e-3,2e-3", seeds=1)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "started" not in out and "rerunning" not in out, out
    assert f"skip {names[0]}/watch (finished)" in out
