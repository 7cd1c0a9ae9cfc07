"""Every learning-rate schedule against hand values (encoder/train/schedules.py)."""
import math

import numpy as np
import pytest
from ml_collections import ConfigDict

from encoder.train import optimizer, schedules


def cfg(**kw):
    base = dict(learning_rate=1.0, warmup_steps=10, num_steps=110, schedule="linear",
                end_learning_rate_fraction=0.0, decay_shape="linear", decay_steps=0,
                decay_fraction=0.2)
    return ConfigDict({**base, **kw})


def values(c, steps):
    lr = schedules.make(c)
    return np.array([float(lr(s)) for s in steps])


def test_warmup_is_linear_from_zero_for_every_schedule():
    for name in schedules.SCHEDULES:
        np.testing.assert_allclose(values(cfg(schedule=name), [0, 5, 10]), [0, 0.5, 1],
                                   atol=1e-6, err_msg=name)


def test_linear_cosine_constant():
    np.testing.assert_allclose(values(cfg(), [10, 60, 110]), [1, 0.5, 0], atol=1e-6)
    np.testing.assert_allclose(values(cfg(end_learning_rate_fraction=0.1), [60, 110]),
                               [0.55, 0.1], atol=1e-6)
    steps = [10, 35, 60, 85, 110]
    hand = [0.5 * (1 + math.cos(math.pi * (s - 10) / 100)) for s in steps]
    np.testing.assert_allclose(values(cfg(schedule="cosine"), steps), hand, atol=1e-6)
    np.testing.assert_allclose(values(cfg(schedule="constant"), [10, 50, 110, 500]), [1] * 4)


def test_inverse_sqrt():
    steps = [10, 20, 50, 1010]
    hand = [math.sqrt(10 / s) for s in steps]  # peak * sqrt(warmup / step)
    np.testing.assert_allclose(values(cfg(schedule="inverse_sqrt"), steps), hand, rtol=1e-6)
    # no warmup: peak / sqrt(1 + step)
    np.testing.assert_allclose(values(cfg(schedule="inverse_sqrt", warmup_steps=0), [0, 3, 99]),
                               [1, 0.5, 0.1], rtol=1e-6)


@pytest.mark.parametrize("shape,f", [("linear", lambda p: 1 - p),
                                     ("cosine", lambda p: 0.5 * (1 + math.cos(math.pi * p))),
                                     ("1-sqrt", lambda p: 1 - math.sqrt(p))])
def test_wsd_decay_shapes(shape, f):
    # 110 steps, warmup 10, decay 20% = 22 steps: stable over steps 10..87, decay 88..110.
    c = cfg(schedule="wsd", decay_shape=shape, end_learning_rate_fraction=0.1)
    assert schedules.wsd_decay_steps(c, 110) == 22
    steps = [10, 50, 88, 93, 99, 110, 200]
    hand = [1.0, 1.0] + [0.1 + 0.9 * f(min((s - 88) / 22, 1.0)) for s in steps[2:]]
    np.testing.assert_allclose(values(c, steps), hand, atol=1e-6)


def test_wsd_decay_length_in_steps_and_whole_phase_decay():
    c = cfg(schedule="wsd", decay_steps=50)
    np.testing.assert_allclose(values(c, [59, 60, 85, 110]), [1, 1, 0.5, 0], atol=1e-6)
    # ModernBERT's decay phase (OneMinusSqrtScheduler): wsd, no warmup, decay_fraction=1.
    c = cfg(schedule="wsd", warmup_steps=0, decay_fraction=1.0, decay_shape="1-sqrt",
            num_steps=100)
    np.testing.assert_allclose(values(c, [0, 25, 64, 100]), [1, 0.5, 0.2, 0], atol=1e-6)


def test_unknown_names_fail_listing_the_valid_ones():
    with pytest.raises(ValueError, match="valid names: constant, cosine, inverse_sqrt, linear"):
        schedules.make(cfg(schedule="trapezoid"))
    with pytest.raises(ValueError, match="1-sqrt, cosine, linear"):
        schedules.make(cfg(schedule="wsd", decay_shape="sqrt"))
    with pytest.raises(ValueError, match="decay_fraction"):
        schedules.make(cfg(schedule="wsd", decay_fraction=1.5))


def test_the_optimizer_module_keeps_its_schedule_entry_point():
    # fine-tuning's train config has no wsd fields: read with defaults.
    c = ConfigDict(dict(learning_rate=1.0, warmup_steps=10, num_steps=110, schedule="linear",
                        end_learning_rate_fraction=0.0))
    np.testing.assert_allclose([float(optimizer.learning_rate_schedule(c)(s)) for s in
                                (5, 60)], [0.5, 0.5], atol=1e-6)


def test_base_config_validates_its_schedule_fields():
    from encoder import config as config_lib
    from encoder.jobs import pretrain
    c = config_lib.base_config()
    c.train.schedule = "wsd"
    pretrain.validate(c)
    c.train.schedule = "nope"
    with pytest.raises(ValueError, match="Unknown schedule 'nope'"):
        pretrain.validate(c)
