"""Intervals, paired comparisons and the detectable difference against hand values
(Student's t: t(0.975, 2) = 4.3027, t(0.8, 2) = 1.0607)."""
import math

import pytest

from encoder.studies import stats

T975_2, T80_2 = 4.302653, 1.060660


def test_the_interval_over_three_seeds_is_students():
    iv = stats.mean_interval([1.0, 2.0, 3.0])  # mean 2, sd 1, se 1/sqrt(3)
    half = T975_2 / math.sqrt(3)
    assert (iv.mean, iv.n) == (2.0, 3)
    assert iv.low == pytest.approx(2 - half, abs=1e-5) and iv.high == pytest.approx(2 + half,
                                                                                  abs=1e-5)
    assert iv.text(2) == f"2.00 ± {half:.2f}"
    assert stats.mean_interval([5.0]).text() == "5.000 (1 seed)"
    assert stats.mean_interval([1.0, float("nan"), 3.0]).n == 2  # a NaN seed is not a seed


def test_a_paired_difference_is_separable_only_when_its_interval_excludes_zero():
    a = {0: 0.50, 1: 0.60, 2: 0.70}
    noisy = {0: 0.60, 1: 0.80, 2: 1.00}    # diffs 0.1, 0.2, 0.3: mean 0.2, sd 0.1
    c = stats.compare(a, noisy)
    half = T975_2 * 0.1 / math.sqrt(3)
    assert c.paired and c.difference.mean == pytest.approx(0.2)
    assert c.difference.low == pytest.approx(0.2 - half, abs=1e-6)  # -0.0484: includes 0
    assert not c.separable and c.verdict("mlm", "rtd") == "not separable"
    clear = {0: 0.70, 1: 0.90, 2: 1.10}    # diffs 0.2, 0.3, 0.4: low 0.052
    c = stats.compare(a, clear)
    assert c.separable and c.verdict("mlm", "rtd") == "rtd > mlm"
    assert stats.compare(clear, a).verdict("rtd", "mlm") == "rtd > mlm"
    # the smallest true difference 3 pairs with sd 0.1 detect at 80% power
    assert c.detectable == pytest.approx((T975_2 + T80_2) * 0.1 / math.sqrt(3), abs=1e-5)


def test_unpaired_seeds_take_welchs_interval():
    a, b = {0: 1.0, 1: 2.0, 2: 3.0}, {3: 3.0, 4: 4.0, 5: 5.0}  # no shared seed
    c = stats.compare(a, b)
    se = math.sqrt(1 / 3 + 1 / 3)  # df = 4 (equal variances and sizes)
    half = 2.776445 * se
    assert not c.paired and c.difference.mean == pytest.approx(2.0)
    assert c.difference.high - c.difference.mean == pytest.approx(half, abs=1e-5)
    assert not c.separable  # low = 2 - 2.267 < 0
    one = stats.compare({0: 1.0}, {0: 2.0})
    assert one.verdict() == "one seed: no verdict" and not one.separable
