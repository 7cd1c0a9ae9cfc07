"""When a difference between variants is real: intervals over seeds, paired comparisons and
the smallest difference a study could have detected.

A study's numbers are a few seeds per variant, so every interval here is Student's t at
n - 1 degrees of freedom (a normal interval at n = 3 would be 2.2 times too narrow). A
comparison is paired by seed (and task) where both variants ran the same seed, which
cancels what the seed shares (data order, initialisation); otherwise Welch's unpaired
interval. "Separable" means the 95% interval of the difference excludes zero; a table says
"not separable" instead of ranking noise.
"""
import dataclasses
import math
from typing import Sequence

from scipy import stats as scipy_stats


def _finite(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


@dataclasses.dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def text(self, digits: int = 3) -> str:
        if self.n < 2:
            return f"{self.mean:.{digits}f} (1 seed)"
        return f"{self.mean:.{digits}f} ± {self.half_width:.{digits}f}"


def mean_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """The mean and its t interval over seeds (NaN bounds with fewer than 2 values)."""
    xs = _finite(values)
    n = len(xs)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = sum(xs) / n
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = scipy_stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """b - a: its mean and interval, whether it excludes zero, how it was computed, and the
    smallest difference this many seeds could detect at 80% power."""
    difference: Interval
    paired: bool
    detectable: float

    @property
    def separable(self) -> bool:
        d = self.difference
        return d.n >= 2 and not (d.low <= 0.0 <= d.high) and math.isfinite(d.low)

    def verdict(self, a: str = "A", b: str = "B") -> str:
        if self.difference.n < 2:
            return "one seed: no verdict"
        if not self.separable:
            return "not separable"
        return f"{b} > {a}" if self.difference.mean > 0 else f"{a} > {b}"


def detectable_difference(sd: float, n: int, level: float = 0.95, power: float = 0.8) -> float:
    """The smallest true mean difference a paired t test over n pairs with this spread of
    differences detects with the given power: (t_{1-alpha/2} + t_{power}) sd / sqrt(n)."""
    if n < 2 or not math.isfinite(sd):
        return math.nan
    df = n - 1
    return (scipy_stats.t.ppf(0.5 + level / 2, df) + scipy_stats.t.ppf(power, df)) \
        * sd / math.sqrt(n)


def compare(a: dict, b: dict, level: float = 0.95) -> Comparison:
    """b - a over seeds. a, b: {seed (or (seed, task)): value}. Paired over the keys both
    have when there are at least two; else Welch's interval of the two means."""
    shared = sorted(k for k in a if k in b and len(_finite([a[k], b[k]])) == 2)
    if len(shared) >= 2:
        diffs = [float(b[k]) - float(a[k]) for k in shared]
        iv = mean_interval(diffs, level)
        sd = math.sqrt(sum((d - iv.mean) ** 2 for d in diffs) / (len(diffs) - 1))
        return Comparison(iv, True, detectable_difference(sd, len(diffs), level))
    xa, xb = _finite(a.values()), _finite(b.values())
    if len(xa) < 2 or len(xb) < 2:
        mean = (sum(xb) / len(xb) - sum(xa) / len(xa)) if xa and xb else math.nan
        return Comparison(Interval(mean, math.nan, math.nan, min(len(xa), len(xb))), False,
                          math.nan)
    ma, mb = sum(xa) / len(xa), sum(xb) / len(xb)
    va = sum((x - ma) ** 2 for x in xa) / (len(xa) - 1)
    vb = sum((x - mb) ** 2 for x in xb) / (len(xb) - 1)
    se = math.sqrt(va / len(xa) + vb / len(xb))
    if se == 0:
        half, df = 0.0, len(xa) + len(xb) - 2
    else:  # Welch-Satterthwaite degrees of freedom
        df = se ** 4 / ((va / len(xa)) ** 2 / (len(xa) - 1) + (vb / len(xb)) ** 2 / (len(xb) - 1))
        half = scipy_stats.t.ppf(0.5 + level / 2, df) * se
    n = min(len(xa), len(xb))
    sd = math.sqrt((va + vb) / 2)
    return Comparison(Interval(mb - ma, mb - ma - half, mb - ma + half, n), False,
                      detectable_difference(sd * math.sqrt(2), n, level))
