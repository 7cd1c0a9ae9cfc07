"""The pretraining job in process: FSDP shards parameters and optimizer state, the run says
how often it reads its data (whole runs, signals and resumes: tests/e2e/test_pretrain_runs.py)."""
import json

import jax
import numpy as np

from encoder.jobs import pretrain
from encoder.train import partitioning
from helpers import tiny_pretrain_config


def small_config(**train):
    return tiny_pretrain_config(**{"num_steps": 10, "log_every": 1, "checkpoint_every": 100,
                                   **train})


def test_fsdp_shards_parameters(shared_data, tmp_path):
    config = small_config()
    config.data.tokenizer, config.data.cache_dir = shared_data
    config.mesh.update(dict(data=4, fsdp=2))
    mesh = partitioning.make_mesh(config.mesh)
    exp = pretrain.build(config, str(tmp_path), mesh, pretrain.validate(config, mesh.devices.size))
    state = exp.trainer.fresh_state()
    kernel = state.params["encoder"]["blocks_0"]["mlp"]["wi"]["kernel"]  # [embed, mlp]
    assert kernel.sharding.spec[0] == "fsdp"
    assert kernel.addressable_shards[0].data.shape == (kernel.shape[0] // 2, kernel.shape[1])
    mu = state.opt_state[1][0].mu["encoder"]["blocks_0"]["mlp"]["wi"]["kernel"]
    assert mu.sharding.spec[0] == "fsdp"


def test_the_run_says_how_many_times_it_reads_its_data():
    from encoder.jobs import pretrain_checks
    once = pretrain_checks.data_passes(rows=400, steps=50, batch_size=8, seq_len=128)
    assert "read it 1.0 times" in once and "many passes" not in once
    many = pretrain_checks.data_passes(rows=3398, steps=1200, batch_size=32, seq_len=128)
    assert "read it 11.3 times" in many and "many passes" in many


def test_a_run_in_phases_plans_them_once(shared_data, tmp_path, monkeypatch):
    """The phase plan is computed once per run (validation's), whatever reads it after."""
    from encoder.train import phases
    calls = []
    real = phases.plan
    monkeypatch.setattr(phases, "plan", lambda config: calls.append(1) or real(config))
    config = small_config(num_steps=4, checkpoint_every=4)
    config.data.tokenizer, config.data.cache_dir = shared_data
    config.phases = ({"name": "a", "steps": 2}, {"name": "b", "steps": 2,
                                                 "masking": {"rate": 0.3}})
    result = pretrain.train(config, str(tmp_path), devices=jax.devices()[:1])
    assert result["step"] == 4 and len(calls) == 1


def test_an_objective_is_its_own_file_and_one_row(shared_data, tmp_path, monkeypatch):
    """A toy objective registered in the table alone trains, counts its FLOPs and prints
    its summary: nothing else in the codebase names it."""
    from encoder.objectives import mlm, objectives
    from encoder.train import flops

    def loss_fn(params, batch, rng, ctx, deterministic=False):  # MLM at half weight
        loss, metrics = mlm.loss_fn(params, batch, rng, ctx, deterministic)
        return loss / 2, {**metrics, "loss": loss / 2}

    toy = objectives.Objective(
        objectives.build_mlm, mlm.prepare, loss_fn, ("loss", "mlm_accuracy"),
        forward_flops=lambda c, b, t, p: 7.0 * b * t,
        summary=lambda result: [f"toy held-out loss {result['eval/loss']:.3f}"])
    monkeypatch.setitem(objectives.OBJECTIVES, "toy", toy)
    config = small_config(num_steps=3, eval_every=3, eval_batches=1, checkpoint_every=3,
                          peak_flops=1e12)
    config.objective = "toy"
    config.data.tokenizer, config.data.cache_dir = shared_data
    result = pretrain.train(config, str(tmp_path), devices=jax.devices()[:1])
    assert result["step"] == 3 and np.isfinite(result["eval/loss"])
    b, t = config.train.batch_size, config.data.seq_len
    assert flops.config_train_flops_per_step(config) == 3 * 7.0 * b * t
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert all(r["train/mfu"] > 0 for r in rows if "train/loss" in r)
    # what `python -m encoder run` prints after the result's JSON (encoder/commands/run.py)
    assert objectives.summary(config, result) == [f"toy held-out loss {result['eval/loss']:.3f}"]
