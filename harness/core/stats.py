"""Welch's t-test with a minimum effect, and the 95 % interval of a timing ratio; no scipy (t CDF by Lentz)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

ALPHA = 0.01  #: A change is significant when Welch's two-sided p-value is below this.
MIN_REPEATS = 3  #: Below this many repeats in either run no change is called.
MIN_TIME_EFFECT = 0.05  #: The smallest time change called (5 %, as ``mean:5%``); the timing gates' margin.
INTERVAL_LEVEL = 0.95  #: Confidence level of the interval a timing gate is judged on.

_EPS = 1e-15
_TINY = 1e-300


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (converges fast for x < (a + 1) / (a + b + 2))."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if not (a > 0 and b > 0) or not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc needs a, b > 0 and 0 <= x <= 1 (got {a}, {b}, {x})")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0 (got {df})")
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = t_two_sided_p(t, df) / 2.0
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (bisection on `t_cdf`: monotone, so it cannot miss)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile needs 0 < p < 1 (got {p})")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Welch:
    """Welch's unequal-variances t-test of ``current`` against ``baseline``."""

    t: float
    df: float
    p: float


def welch(baseline: Sequence[float], current: Sequence[float]) -> Welch:
    """Two-sided Welch test (2+ values a side); zero-variance samples give p 1 if equal, else 0."""
    if len(baseline) < 2 or len(current) < 2:
        raise ValueError("Welch's t-test needs at least 2 values on each side")
    ma, mb = statistics.fmean(baseline), statistics.fmean(current)
    va, vb = statistics.variance(baseline) / len(baseline), statistics.variance(current) / len(current)
    se2 = va + vb
    if se2 == 0.0:
        same = ma == mb
        return Welch(0.0 if same else math.copysign(math.inf, mb - ma), math.inf, 1.0 if same else 0.0)
    t = (mb - ma) / math.sqrt(se2)
    df = se2 * se2 / ((va * va) / (len(baseline) - 1) + (vb * vb) / (len(current) - 1))
    return Welch(t, df, t_two_sided_p(t, df))


@dataclass(frozen=True)
class Interval:
    """A confidence interval of a positive ratio (geometric mean, t interval on the log scale)."""

    low: float
    high: float
    centre: float
    n: int
    level: float = INTERVAL_LEVEL

    def text(self, fmt=lambda v: f"{v:.3g}") -> str:
        return f"{fmt(self.low)}..{fmt(self.high)} ({self.level:.0%} interval, {self.n} repeats)"


def ratio_interval(values: Sequence[float], level: float = INTERVAL_LEVEL) -> Interval | None:
    """The ``level`` interval of the ratio's geometric mean; None below 2 values or for a non-positive one."""
    if len(values) < 2 or any(not v > 0 or not math.isfinite(v) for v in values):
        return None
    logs = [math.log(v) for v in values]
    centre = statistics.fmean(logs)
    half = t_quantile(0.5 + level / 2.0, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return Interval(math.exp(centre - half), math.exp(centre + half), math.exp(centre), len(values), level)


MAX_PROJECTED_REPEATS = 10_000  #: The most repeats `repeats_to_decide` projects (beyond: at the threshold).


def repeats_to_decide(values: Sequence[float], bound: float, level: float = INTERVAL_LEVEL) -> int | None:
    """Repeats the interval would need to clear ``bound`` if centre and spread held (a projection); else None."""
    if len(values) < 2 or any(not v > 0 or not math.isfinite(v) for v in values) or not bound > 0:
        return None
    logs = [math.log(v) for v in values]
    spread, distance = statistics.stdev(logs), abs(statistics.fmean(logs) - math.log(bound))
    if spread == 0.0 or distance == 0.0:
        return None
    t = 0.5 + level / 2.0

    def decides(n: int) -> bool:
        return t_quantile(t, n - 1) * spread / math.sqrt(n) < distance

    if not decides(MAX_PROJECTED_REPEATS):
        return None
    lo, hi = 1, 2  # decides(lo) is false (one repeat has no interval); find a hi that decides
    while not decides(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # the half-width falls as n grows: bisect for the least n that decides
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decides(mid) else (mid, hi)
    return hi
