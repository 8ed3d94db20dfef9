"""The statistics of `harness.core.stats` on known values and on synthetic repeats drawn from
known distributions (seeded: the same draws every time). No timing is measured here."""

from __future__ import annotations

import math
import random

import pytest

from harness.core.stats import ALPHA, betainc, ratio_interval, t_cdf, t_quantile, t_two_sided_p, welch


def _t_pdf(x: float, df: float) -> float:
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1) / 2 * math.log1p(x * x / df))


def _t_cdf_by_integration(t: float, df: float, steps: int = 20000) -> float:
    """An independent check: 0.5 + Simpson's rule over the density from 0 to t."""
    h = t / steps
    total = _t_pdf(0, df) + _t_pdf(t, df)
    total += sum((4 if i % 2 else 2) * _t_pdf(i * h, df) for i in range(1, steps))
    return 0.5 + total * h / 3


@pytest.mark.parametrize(
    ("a", "b", "x", "expected"),
    [(2, 3, 0.5, 0.6875), (1, 1, 0.3, 0.3), (3, 1, 0.4, 0.4**3), (0.5, 0.5, 0.5, 0.5), (5, 2, 0.9, 0.885735)],
)
def test_incomplete_beta_known_values(a, b, x, expected):
    assert betainc(a, b, x) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("df", [1, 2, 3, 4.5, 10, 60])
@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 2.5, 6.0, -1.7])
def test_t_cdf_matches_integrating_the_density(df, t):
    expected = _t_cdf_by_integration(abs(t), df)
    expected = expected if t >= 0 else 1 - expected
    assert t_cdf(t, df) == pytest.approx(expected, abs=1e-9)


def test_t_cdf_closed_forms():
    for t in (-3.0, -0.5, 0.2, 1.0, 12.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)  # Cauchy
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)


@pytest.mark.parametrize(
    ("df", "q975"),
    [(1, 12.7062047), (2, 4.3026527), (3, 3.1824463), (5, 2.5705818), (7, 2.3646243), (10, 2.2281389), (30, 2.0422725)],
)
def test_t_quantiles_from_the_tables(df, q975):
    assert t_quantile(0.975, df) == pytest.approx(q975, abs=1e-6)
    assert t_quantile(0.025, df) == pytest.approx(-q975, abs=1e-6)
    assert t_two_sided_p(q975, df) == pytest.approx(0.05, abs=1e-8)
    assert t_quantile(0.975, 1e6) == pytest.approx(1.959966, abs=1e-5)


def test_welch_on_a_worked_example():
    """[1,2,3] vs [4,5,6]: t = 3 / sqrt(2/3) = 3.674, df = 4 (equal variances), p = 0.0213."""
    result = welch([1, 2, 3], [4, 5, 6])
    assert result.t == pytest.approx(3.6742346, rel=1e-6) and result.df == pytest.approx(4.0)
    assert result.p == pytest.approx(0.021311641, rel=1e-5)
    unequal = welch([10.0, 10.2, 9.9, 10.1], [11.0, 13.0, 12.1])
    assert unequal.df == pytest.approx(2.05, abs=0.01) and unequal.p == pytest.approx(0.0738, abs=5e-4)
    # Satterthwaite's df (2.05) follows the noisier side: not significant although t = 3.4


def test_welch_without_any_variance():
    assert welch([5, 5, 5], [5, 5, 5]).p == 1.0
    assert welch([5, 5, 5], [6, 6, 6]).p == 0.0
    with pytest.raises(ValueError):
        welch([1.0], [1.0, 2.0])


def test_welch_false_alarms_on_same_distribution_three_repeats():
    """Both runs drawn from one normal distribution, 3 repeats each: a change is called at most
    about once in 100 comparisons (Welch is a little conservative with 3 a side: ~0.5 %; the old
    non-overlap rule: once in 10)."""
    rng = random.Random(19)
    trials = 4000
    alarms = sum(
        welch([rng.gauss(100, 3) for _ in range(3)], [rng.gauss(100, 3) for _ in range(3)]).p < ALPHA
        for _ in range(trials)
    )
    assert 0.001 < alarms / trials < 0.015, alarms


def test_welch_finds_a_real_shift():
    """A shift of 10 standard deviations with 3 repeats each is found nearly always (4 only
    about half the time: run more repeats to see small changes); with 8 repeats, unequal
    spreads (1 vs 4) and a shift of 10, as well."""
    rng = random.Random(7)
    trials = 500
    found = sum(
        welch([rng.gauss(100, 1) for _ in range(3)], [rng.gauss(110, 1) for _ in range(3)]).p < ALPHA
        for _ in range(trials)
    )
    assert found / trials > 0.9, found
    found = sum(
        welch([rng.gauss(100, 1) for _ in range(8)], [rng.gauss(110, 4) for _ in range(8)]).p < ALPHA
        for _ in range(trials)
    )
    assert found / trials > 0.9, found


def test_ratio_interval_covers_the_true_ratio_95_percent_of_the_time():
    """Log-normal ratios around 0.4 (a noisy init ratio), 8 repeats: the 95 % interval of the
    geometric mean holds 0.4 in about 95 % of the draws."""
    rng = random.Random(3)
    trials = 2000
    covered = 0
    for _ in range(trials):
        interval = ratio_interval([0.4 * math.exp(rng.gauss(0, 0.6)) for _ in range(8)])
        covered += interval.low <= 0.4 <= interval.high
    assert 0.93 < covered / trials < 0.97, covered


def test_ratio_interval_edges():
    assert ratio_interval([0.5]) is None  # one repeat: no interval
    assert ratio_interval([0.5, -0.1]) is None  # a log interval needs positive ratios
    flat = ratio_interval([0.25, 0.25, 0.25])
    assert flat.low == pytest.approx(0.25) and flat.high == pytest.approx(0.25) and flat.n == 3
    wide = ratio_interval([0.42, 3.90, 1.8])  # the peer_init_ratio repeats
    assert wide.low < 1 < 2 < wide.high  # a gate "<= 2" can be neither held nor failed on these
