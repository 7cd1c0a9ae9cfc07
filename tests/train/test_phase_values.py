"""A phase's values are checked against their fields, never rounded or left to a foreign
message."""
import pytest

from encoder.train import phases

from helpers import experiment_config


def _with(*declared):
    config = experiment_config("pretrain")
    config.phases = tuple(declared)
    return config


@pytest.mark.parametrize("declared, words", [
    (("a",), "phases[0]: expected a dict"),
    (dict(name="a", steps=1.5), "steps=1.5 must be a whole number"),
    (dict(name="a", steps="3"), "steps='3' must be a whole number"),
    (dict(name="a", tokens="1e9"), "tokens='1e9' must be a number"),
    (dict(name="a", steps=2, train=dict(batch_size=2.5)),
     "phase 'a': train.batch_size=2.5 must be a whole number"),
    (dict(name="a", steps=2, data=dict(seq_len=64.5)), "data.seq_len=64.5"),
    (dict(name="a", steps=2, train=dict(learning_rate="abc")),
     "phase 'a': train.learning_rate='abc' must be a number"),
    (dict(name="a", steps=2, train=dict(schedule=3)), "phase 'a': train.schedule=3"),
    (dict(name="a", steps=2, train="constant"), "train must be a dict of fields"),
])
def test_a_phase_value_of_the_wrong_kind_is_refused_naming_it(declared, words):
    with pytest.raises(ValueError) as e:
        phases.validate(_with(declared))
    assert words in str(e.value), str(e.value)


def test_whole_numbers_written_as_floats_still_count():
    plan = phases.validate(_with(
        dict(name="a", steps=4e0, train=dict(batch_size=8.0, learning_rate=1e-3)),
        dict(name="b", tokens=1.5e3, data=dict(seq_len=32), train=dict(warmup_steps=0))))
    assert [p.steps for p in plan.phases][0] == 4
    assert plan.phases[0].config.train.batch_size == 8
    assert isinstance(plan.phases[0].config.train.batch_size, int)
