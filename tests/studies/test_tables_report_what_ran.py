"""Ablation tables report what ran: a repeated sweep value is refused (it would be one run
reported as two seeds), a one-seed gap carries no significance."""
import math

import pytest

from encoder.studies import ablation


def test_a_repeated_sweep_value_is_refused():
    with pytest.raises(ValueError, match="repeats rope"):
        ablation.parse_sweep("model.position=rope,rope")


def test_a_single_seed_gap_has_no_verdict_and_seeds_pair():
    rows = [{"variant": "a", "seed": 0, "m": 0.5}, {"variant": "b", "seed": 0, "m": 0.4}]
    table, _ = ablation.aggregate(rows)
    ablation.separation(table, rows, "m")
    assert table[0]["verdict"] == "best" and table[1]["verdict"] == "one seed: no verdict"
    # three seeds, b below a by 0.10, 0.11, 0.12: paired, the interval excludes zero
    rows = [{"variant": v, "seed": k, "m": m} for k, (x, y) in enumerate(
        ((0.5, 0.40), (0.7, 0.59), (0.6, 0.48))) for v, m in (("a", x), ("b", y))]
    table, _ = ablation.aggregate(rows)
    ablation.separation(table, rows, "m")
    b = table[1]
    assert b["vs_best"].mean == pytest.approx(-0.11) and b["verdict"] == "a > b"
    half = 4.302653 * 0.01 / math.sqrt(3)
    assert b["vs_best"].high == pytest.approx(-0.11 + half, abs=1e-6)
    # unpaired, the seeds' spread (0.1) would hide the same gap
    assert b["interval"].half_width > 0.2


def test_sweep_values_are_checked_against_the_fields_type():
    from encoder.studies import jobconfig
    from experiments import pretrain as pretrain_exp
    config = pretrain_exp.get_config("runlocal")
    for field, value, word in (("train.num_steps", 1.5, "silently become 1"),
                               ("train.learning_rate", "fast", "not a float"),
                               ("data.one_doc_per_line", "yes", "not a bool")):
        if field.split(".")[1] not in config[field.split(".")[0]]:
            continue
        with pytest.raises(ValueError, match=word):
            jobconfig.set_field(config, field, value)
    jobconfig.set_field(config, "train.num_steps", 7.0)  # an integral float is the int
    assert config.train.num_steps == 7


def test_a_run_in_phases_is_accounted_per_phase(tmp_path):
    """A WSD recipe's planned budget (steps, tokens, FLOPs per phase), and the tokens its
    metrics rows counted, per phase, in the study's row; --equal_flops refuses phases."""
    import json

    from experiments import wsd
    from encoder.train import flops
    config = wsd.get_config("stable=6,decay=4")
    tokens_per_step = config.train.batch_size * config.data.seq_len
    budget = ablation.phase_budget(config)
    assert budget["steps"] == 10 and budget["tokens"] == 10 * tokens_per_step
    assert {k: v["tokens"] for k, v in budget["phases"].items()} == {
        "stable": 6 * tokens_per_step, "decay": 4 * tokens_per_step}
    assert budget["flops"] == pytest.approx(10 * flops.config_train_flops_per_step(config))
    # the run's own rows: cumulative tokens, each row naming its phase
    d = tmp_path / "runs" / "r"
    d.mkdir(parents=True)
    rows = [{"step": s, "train/loss": 1.0, "train/tokens_per_s": 1.0, "phase": p,
             "tokens": s * tokens_per_step} for s, p in ((3, "stable"), (6, "stable"),
                                                         (8, "decay"), (10, "decay"))]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "config.json").write_text(config.to_json())
    out = ablation.read_run({"variant": "v", "seed": 0, "config": config, "dir": "r",
                             "budget": budget}, str(tmp_path))
    assert out["tokens"] == 10 * tokens_per_step and out["steps"] == 10
    assert (out["tokens/stable"], out["tokens/decay"]) == (6 * tokens_per_step,
                                                           4 * tokens_per_step)
    # a decay started from another run's step 6 has rows of its own phase only
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[2:]))
    late = ablation.read_run({"variant": "v", "seed": 0, "config": config, "dir": "r",
                              "budget": budget}, str(tmp_path))
    assert late["tokens/decay"] == 4 * tokens_per_step and "tokens/stable" not in late
    with pytest.raises(ValueError, match="budget per phase"):
        ablation.plan(config, [{}], 1, equal_flops=True)


def test_a_wsd_study_plans_one_stable_run_and_a_decay_per_budget(tmp_path):
    """--wsd_budgets=150,300,450: per seed one stable run to step 360, checkpointed at
    every decay start (120, 240, 360), and per budget a run of stable S + decay D that
    starts from the stable run's step S with its optimizer state; each decay accounted as
    a budget of B steps, only its D steps trained."""
    from experiments import pretrain as pretrain_exp
    base = pretrain_exp.get_config("steps=100")
    base.train.warmup_steps = 10  # shorter than the run (a warmup it never leaves is refused)
    planned = ablation.plan(base, [{}], 2, equal_flops=False)
    stables, decays = ablation.wsd_runs(planned, str(tmp_path), ["300", "150", "450"])
    assert [s["dir"] for s in stables] == ["base__seed0__stable", "base__seed1__stable"]
    s0 = stables[0]["config"]
    assert [(p["name"], p["steps"]) for p in s0.phases] == [("stable", 360)]
    assert s0.train.checkpoint_every == 120 and s0.train.keep_checkpoints >= 4
    assert [d["variant"] for d in decays] == ["budget=150", "budget=300", "budget=450"] * 2
    for d, (start, length) in zip(decays[:3], [(120, 30), (240, 60), (360, 90)]):
        c = d["config"]
        assert [(p["name"], p["steps"]) for p in c.phases] == [("stable", start),
                                                               ("decay", length)]
        assert (c.init_step, c.init_state) == (start, "full")
        assert c.init_from == str(tmp_path / "runs" / "base__seed0__stable")
        assert d["budget"]["steps"] == start + length
    assert decays[3]["config"].seed == 1 and decays[3]["dir"] == "budget=150__seed1"
    with pytest.raises(ValueError, match="at least 2"):
        ablation.wsd_runs(planned, str(tmp_path), ["1"])
    phased = ablation.plan(base, [{}], 1, False)
    phased[0]["config"].phases = ({"name": "a", "steps": 5},)
    with pytest.raises(ValueError, match="must have none"):
        ablation.wsd_runs(phased, str(tmp_path), ["10"])
