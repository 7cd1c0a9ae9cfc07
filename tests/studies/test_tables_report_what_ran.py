"""Ablation tables report what ran: a repeated sweep value is refused (it would be one run
reported as two seeds), a one-seed gap carries no significance (issue 27)."""
import math

import pytest

from encoder.studies import ablation


def test_a_repeated_sweep_value_is_refused():
    with pytest.raises(ValueError, match="repeats rope"):
        ablation.parse_sweep("model.position=rope,rope")


def test_a_single_seed_gap_has_no_z():
    table = [{"variant": "a", "seeds": 1, "m": 0.5, "m_std": 0.0},
             {"variant": "b", "seeds": 1, "m": 0.4, "m_std": 0.0}]
    ablation.separation(table, "m")
    assert all(math.isnan(e["gap_z"]) for e in table)
    two = [{"variant": "a", "seeds": 2, "m": 0.5, "m_std": 0.1},
           {"variant": "b", "seeds": 2, "m": 0.4, "m_std": 0.1}]
    ablation.separation(two, "m")
    assert two[1]["gap_z"] == pytest.approx(0.1 / math.sqrt(0.01))


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
