"""One range table for every numeric config field (encoder/ranges.py): every number of every
shipped config is in it or exempt with a reason, every kind of bad value is refused naming
the field, every shipped experiment is in range, and a job, a phase and a sweep variant are
checked through it before anything is built."""
import copy
import glob
import importlib
import math
import os

import pytest

from encoder import config as config_lib, errors, ranges
from encoder.finetune import config as finetune_config
from helpers import ROOT, tiny_pretrain_config

EXPERIMENTS = sorted(os.path.basename(p)[:-3] for p in glob.glob(
    os.path.join(ROOT, "experiments", "*.py")) if not p.endswith("__init__.py"))
FINETUNE_TASKS = ("classification", "regression", "tagging", "qa", "contrastive")


def _experiment(name: str, arg=None):
    return importlib.import_module(f"experiments.{name}").get_config(arg)


def _mixture():
    config = config_lib.base_config()
    config.data.sources = {"web": {"files": "web/*.txt", "weight": 0.7},
                           "code": {"files": "code/*.txt", "weight": 0.3}}
    config.data.temperature = 0.5
    return config


def every_config() -> dict:
    """name -> config: each size's base config, each experiment as shipped and at runlocal
    size, the declared-evaluator kinds, a mixture, a recipe's phase continued, and the
    fine-tuning config of each task."""
    out = {}
    for size in config_lib.SIZES:
        out[f"base:{size}"] = config_lib.apply_options(config_lib.base_config(),
                                                       {"size": size}, config_lib.OPTIONS)
    for name in EXPERIMENTS:
        for arg in (None, "runlocal"):
            out[f"{name}:{arg}"] = _experiment(name, arg)
    out["pretrain:evals"] = _experiment("pretrain", "evals=heldout+sts_relatedness+topic")
    out["continue:recipe"] = _experiment("continue", "recipe=modernbert_base,phase=decay")
    out["mixture"] = _mixture()
    for task in FINETUNE_TASKS:
        out[f"finetune:{task}"] = finetune_config.get_config(f"task={task},mode=lora")
    return out


CONFIGS = every_config()


def test_every_numeric_field_has_a_range_or_a_reason():
    missing = sorted({f"{f.key} ({where})" for where, c in CONFIGS.items()
                      for f in ranges.fields(c)
                      if f.key not in ranges.RANGES and f.key not in ranges.EXEMPT})
    assert not missing, "numeric fields with no range and no reason:\n" + "\n".join(missing)
    assert all(reason.strip() for reason in ranges.EXEMPT.values())
    assert not set(ranges.RANGES) & set(ranges.EXEMPT)


def test_every_table_entry_names_a_field_some_config_has():
    reached = {f.key for c in CONFIGS.values() for f in ranges.fields(c)}
    stale = sorted((set(ranges.RANGES) | set(ranges.EXEMPT)) - reached)
    assert not stale, f"table entries no config has (a typo, or a field removed): {stale}"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_shipped_config_is_in_range(name):
    assert ranges.check(CONFIGS[name], name, whole_run=False) == []


def _carriers() -> dict:
    """table key -> (config, field) of one config holding it."""
    out = {}
    for c in CONFIGS.values():
        for f in ranges.fields(c):
            out.setdefault(f.key, (c, f))
    return out


CARRIERS = _carriers()


def bad_values(spec: ranges.Range) -> list:
    """NaN, both infinities, just past each bound, and a fraction for an integer field."""
    values = [math.nan, math.inf, -math.inf]
    if math.isfinite(spec.low):
        values.append(spec.low if spec.low_open else spec.low - 1)
    if math.isfinite(spec.high):
        values.append(spec.high if spec.high_open else spec.high + 1)
    if spec.integer:
        values.append((spec.low if math.isfinite(spec.low) else 0) + 1.5)
    return [v for v in values if not any(v == s for s, _ in spec.special)]


def with_value(config, field: ranges.Field, value) -> dict:
    """A plain-dict copy of config with `field` set to value (a phase's field in its phase)."""
    d = copy.deepcopy(config.to_dict())
    node = d
    if field.where:  # phases[i] ('name')
        i = int(field.where.split("[", 1)[1].split("]", 1)[0])
        d["phases"] = [dict(copy.deepcopy(p)) for p in d["phases"]]
        node = d["phases"][i]
    *path, last = field.name.split(".")
    for part in path:
        node = node[part]
    node[last] = value
    return d


@pytest.mark.parametrize("key", sorted(ranges.RANGES))
def test_each_kind_of_bad_value_is_refused_naming_the_field(key):
    config, field = CARRIERS[key]
    spec = ranges.RANGES[key]
    for value in bad_values(spec):
        with pytest.raises(ValueError) as refused:
            ranges.check(with_value(config, field, value))
        text = str(refused.value)
        assert f"{field.name} must be" in text and repr(value) in text, (key, value, text)
        assert field.where in text and "\n" not in text
        assert isinstance(refused.value, errors.UserFacing)  # one line, exit 1


@pytest.mark.parametrize("key", sorted(ranges.RANGES))
def test_the_bounds_and_special_values_themselves_are_accepted(key):
    spec = ranges.RANGES[key]
    edges = [b for b, is_open in ((spec.low, spec.low_open), (spec.high, spec.high_open))
             if math.isfinite(b) and not is_open] + [v for v, _ in spec.special]
    for value in edges:
        assert ranges.problem(ranges.Field(key, key, value)) == "", (key, value)


def test_nan_and_infinity_are_refused_in_a_field_the_table_does_not_bound():
    config, field = CARRIERS["evals.*.layer"]
    for value in (math.nan, math.inf):  # e.g. in a config read back from JSON
        with pytest.raises(ValueError, match=rf"{field.name} must be a finite number"):
            ranges.check(with_value(config, field, value))


def test_the_message_names_field_value_range_and_meaning():
    config = config_lib.base_config()
    config.model.dropout = 1.5
    with pytest.raises(ValueError) as refused:
        ranges.check(config, "variant 'dropout=1.5'")
    assert str(refused.value) == (
        "variant 'dropout=1.5': model.dropout must be a number in [0, 1) (1 drops every "
        "unit: nothing is learned and nothing is predicted), got 1.5")


# ----------------------------------------------------------------- through the jobs' doors

@pytest.mark.parametrize("field,value,words", [
    ("model.dropout", 1.5, "model.dropout must be a number in [0, 1)"),
    ("model.attention_dropout", 1.0, "model.attention_dropout must be"),
    ("train.learning_rate", math.nan, "train.learning_rate must be a finite number >= 0, "
                                      "got nan"),
    ("train.learning_rate", math.inf, "got inf"),
    ("train.b2", 1.5, "train.b2 must be a number in [0, 1)"),
    ("train.b1", 1.0, "train.b1 must be"),
    ("model.rope_theta", 0.0, "model.rope_theta must be a finite number > 0"),
    ("model.layer_norm_eps", -1.0, "model.layer_norm_eps must be"),
    ("model.num_heads", 0, "model.num_heads must be an integer >= 1, got 0"),
    ("masking.span_p", 0.0, "masking.span_p must be a number in (0, 1]"),
    ("masking.span_p", 1.5, "masking.span_p must be"),
    ("train.clip_norm", -1.0, "train.clip_norm must be"),
])
def test_pretraining_validation_refuses_out_of_range_values_first(field, value, words):
    config = tiny_pretrain_config()
    section, name = field.split(".")
    config[section][name] = value
    if field == "masking.span_p":
        config.masking.mode = "span"
    from encoder.jobs import pretrain
    with pytest.raises(ValueError) as refused:  # never ZeroDivisionError or a later crash
        pretrain.validate(config)
    assert words in str(refused.value)


def test_a_sweep_variant_out_of_range_is_refused_naming_the_variant():
    from encoder.studies import ablation
    base = tiny_pretrain_config()
    variants = [{"model.num_heads": 0}, {"model.num_heads": 2}]
    with pytest.raises(ValueError, match=r"variant 'num_heads=0': model\.num_heads must be an "
                                         r"integer >= 1, got 0"):
        ablation.plan(base, variants, seeds=1, equal_flops=False)
    planned = ablation.plan(base, [{"model.dropout": 0.0}, {"model.dropout": 0.2}], 1, False)
    assert [r["variant"] for r in planned] == ["dropout=0.0", "dropout=0.2"]


def test_a_phase_out_of_range_is_refused_naming_the_phase():
    from encoder.jobs import pretrain
    config = tiny_pretrain_config()
    config.phases = (dict(name="stable", steps=3),
                     dict(name="decay", steps=3, train=dict(learning_rate=math.nan)))
    with pytest.raises(ValueError, match=r"phases\[1\] \('decay'\): train\.learning_rate must "
                                         r"be a finite number >= 0, got nan"):
        pretrain.validate(config)
    config.phases = (dict(name="stable", steps=3, masking=dict(span_p=2.0)),)
    with pytest.raises(ValueError, match=r"phases\[0\] \('stable'\): masking\.span_p must be"):
        pretrain.validate(config)


def test_each_phase_config_goes_through_the_rules(monkeypatch, capsys):
    from encoder.train import phases
    monkeypatch.setattr(ranges, "_said", set())
    config = tiny_pretrain_config()
    config.model.local_window = 18
    config.phases = (dict(name="long", steps=3), dict(name="short", steps=3,
                                                      data=dict(seq_len=8)))
    phases.plan(config)
    err = capsys.readouterr().err
    # the short phase's rows lie inside the window: its local layers attend globally
    assert "phase 'short': model.local_window=18 reaches every token of a data.seq_len=8" in err
    assert "phase 'long'" not in err


def test_fine_tuning_validation_refuses_out_of_range_values_first():
    from encoder.jobs import finetune
    config = finetune_config.get_config("task=classification,runlocal")
    config.finetune.dropout = 1.5
    with pytest.raises(ValueError, match=r"finetune\.dropout must be a number in \[0, 1\) .*"
                                         r"or -1 \(by the model's size\), got 1\.5"):
        finetune.validate(config)
    config.finetune.dropout = -1.0  # auto: passes the table, refused later for its data
    with pytest.raises(ValueError, match="needs --config.data.train_file"):
        finetune.validate(config)
    config.contrastive.temperature = 0.0
    with pytest.raises(ValueError, match=r"contrastive\.temperature must be a finite number "
                                         r"> 0, got 0\.0"):
        finetune.validate(config)


# ------------------------------------------------------------------------------ the rules

def test_heads_that_do_not_divide_the_width_are_refused_by_rule():
    config = config_lib.base_config()
    config.model.num_heads = 3
    with pytest.raises(ValueError, match="hidden_size 128 is not divisible by num_heads 3"):
        ranges.check(config)


def test_replacement_shares_over_one_are_refused_in_either_masking():
    config = config_lib.base_config()
    config.masking.update(mask_prob=0.8, random_prob=0.3)
    with pytest.raises(ValueError, match=r"masking\.mask_prob \+ random_prob must be within"):
        ranges.check(config)
    config = _experiment("evaluate")
    config.eval.masking.update(mask_prob=0.9, random_prob=0.2)
    with pytest.raises(ValueError, match=r"eval\.masking\.mask_prob \+ random_prob"):
        ranges.check(config)


def test_t5_buckets_must_reach_past_their_exact_offsets():
    config = config_lib.base_config()
    config.model.update(position="t5_bias", t5_num_buckets=32, t5_max_distance=8)
    with pytest.raises(ValueError, match=r"t5_max_distance=8 must exceed t5_num_buckets // 4"):
        ranges.check(config)


def test_a_warmup_as_long_as_the_run_is_refused_but_not_inside_a_phase():
    config = config_lib.base_config()
    config.train.update(num_steps=20, warmup_steps=20)
    with pytest.raises(ValueError, match=r"warmup_steps=20 is not shorter than the run"):
        ranges.check(config)
    assert ranges.check(config, "phase 'x'", whole_run=False) == []


def test_a_zero_learning_rate_and_a_global_window_are_said_once(monkeypatch, capsys):
    monkeypatch.setattr(ranges, "_said", set())
    config = config_lib.base_config()
    config.train.learning_rate = 0.0
    config.model.local_window = 1000
    config.data.seq_len = 64
    said = ranges.check(config)
    assert len(said) == 2 and "pretrains nothing" in said[0] and "attend globally" in said[1]
    ranges.check(config)  # validation runs more than once a run: one line each
    err = capsys.readouterr().err
    assert err.count("warning: train.learning_rate=0") == 1
    assert err.count("warning: model.local_window=1000") == 1
    fine_tuning = finetune_config.finetune_config()  # 0 there means "by the model's size"
    assert fine_tuning.train.learning_rate == 0.0 and ranges.check(fine_tuning) == []


def test_evaluate_and_embed_check_their_numbers_before_any_work(tmp_path):
    from encoder.jobs import evaluate
    config = _experiment("evaluate", "runlocal")
    config.eval.masking.span_p = 0.0
    with pytest.raises(ValueError, match=r"eval\.masking\.span_p must be a number in \(0, 1\]"):
        evaluate.evaluate(config, str(tmp_path / "e"))
    config = _experiment("embed")
    config.eval.top_k = 0
    with pytest.raises(ValueError, match=r"eval\.top_k must be an integer >= 1, got 0"):
        evaluate.embed(config, str(tmp_path / "e"))
    assert not (tmp_path / "e").exists()
