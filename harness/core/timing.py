"""Timing gates judged on the 95 % interval of a ratio's geometric mean over the repeats, with
the 5 % timing margin (`stats.MIN_TIME_EFFECT`): pass, fail, or inconclusive, never a pass. Why
an interval and why the margin, and how each repeat's value is paired by round of an
interleaved timing pass: docs/gates.md ("Timing gates are judged on their repeats").
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .metrics import BY_COLUMN, RATIO_COLUMNS, is_timing
from .passes import timing_view
from .schema import ResultRow, SummaryRow
from .stats import MAX_PROJECTED_REPEATS, MIN_TIME_EFFECT, Interval, ratio_interval, repeats_to_decide
from .summary import complete_pair, median, pair_ratio, primary_target, ratio, timing_pairs
from .vocab import Aggregate, GateStatus, Mode, Start

#: How a timing gate reads its threshold: within the minimum time effect (see the module doc).
TIMING_MARGIN = MIN_TIME_EFFECT
#: The metadata value (``run.timing_pass``) of a run whose timing pass was interleaved.
INTERLEAVED = "interleaved"
#: A group's workers of the timing pass by round: {(target, mode, N, M, repeat): {worker: row}}.
Rounds = dict[tuple, dict[int, ResultRow]]

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}


def timing_rounds(run: Any) -> Rounds | None:
    """The timing pass's worker rows of a run whose timing pass was interleaved, by group and
    round (`Rounds`); None for any other run (its per-repeat values stay group medians)."""
    if (run.run.get("timing_pass") or "") != INTERLEAVED:
        return None
    rounds: Rounds = {}
    for row in run.results:
        if row.start == Start.SEQUENTIAL and not row.error and row.init_s is not None:
            key = (row.target, row.mode, row.processes, row.sessions_per_process, row.repeat)
            rounds.setdefault(key, {})[row.worker] = row
    return rounds


def timing_repeats(summary: Iterable[SummaryRow], rounds: Rounds | None = None) -> dict[str, list[float]]:
    """Per-repeat values of every timing metric at the headline's N x M, from complete pairs
    of the timing pass (`passes`): paired by round where ``rounds`` (`timing_rounds`) has both
    groups' workers, else the ratio of the two groups' medians."""
    return {name: [v for v, _ in values] for name, values in _repeat_values(summary, rounds).items()}


def _repeat_values(summary: Iterable[SummaryRow], rounds: Rounds | None) -> dict[str, list[tuple[float, bool]]]:
    """`timing_repeats` with, for each value, whether it was paired by round."""
    summary = list(summary)
    target = primary_target(summary)
    pairs = [p for p in timing_pairs([s for s in summary if s.target == target]) if complete_pair(*p)]
    out: dict[str, list[tuple[float, bool]]] = {}
    for name, column in RATIO_COLUMNS.items():
        if is_timing(name):
            values = (_repeat_ratio(m, h, column, rounds) for m, h in pairs if pair_ratio(m, h, column) is not None)
            out[name] = [v for v in values if v[0] is not None]
    out["peer_init_ratio"] = _peer_repeats(timing_view(summary), pairs, target, rounds)
    return out


def _worker_value(row: ResultRow, column: str) -> float | None:
    """A worker's own time behind a group's median (None: the group's figure is no such median)."""
    figure = BY_COLUMN[column]
    return figure.worker_value(row) if figure.aggregate == Aggregate.MEDIAN and figure.unit == "s" else None


def _repeat_ratio(a: SummaryRow, b: SummaryRow, column: str, rounds: Rounds | None) -> tuple[float | None, bool]:
    """One repeat's ``a`` / ``b`` of ``column``, and whether it is paired: the median of the
    rounds' ratios when both groups' workers are known round by round, else the ratio of the
    groups' medians."""
    if rounds is not None:
        ours, theirs = rounds.get(_key(a), {}), rounds.get(_key(b), {})
        both = sorted(set(ours) & set(theirs))
        if both and len(both) == len(ours) == len(theirs):
            paired = [ratio(_worker_value(ours[i], column), _worker_value(theirs[i], column)) for i in both]
            if all(v is not None and v > 0 for v in paired):
                return median(paired), True
    return ratio(getattr(a, column), getattr(b, column)), False


def _key(row: SummaryRow) -> tuple:
    return (row.target, row.mode, row.processes, row.sessions_per_process, row.repeat)


def _peer_repeats(
    summary: Sequence[SummaryRow], pairs: list, target: str | None, rounds: Rounds | None
) -> list[tuple[float, bool]]:
    values = []
    for mapped, _ in pairs:
        for peer in summary:
            same_group = (peer.processes, peer.sessions_per_process, peer.repeat) == (
                mapped.processes,
                mapped.sessions_per_process,
                mapped.repeat,
            )
            if peer.target != target and peer.mode == Mode.MAPPED and peer.complete is True and same_group:
                value = _repeat_ratio(mapped, peer, "init_s_median", rounds)
                if value[0] is not None:
                    values.append(value)
    return values


def margin_band(threshold: float, margin: float = TIMING_MARGIN) -> tuple[float, float]:
    """(T / (1 + margin), T x (1 + margin)): where a timing ratio counts as at its threshold."""
    return threshold / (1 + margin), threshold * (1 + margin)


@dataclass(frozen=True)
class IntervalVerdict:
    """A timing gate judged on its interval (`judge_interval`)."""

    status: str  # pass | fail | inconclusive
    interval: Interval | None
    words: str
    #: inconclusive and one-sided: about how many repeats would decide it (a projection), else None
    repeats_to_decide: int | None = None


def interval_status(
    op: str, threshold: float, values: Sequence[float], margin: float = TIMING_MARGIN
) -> tuple[str, Interval | None, str]:
    """(status, interval, words) of `judge_interval`."""
    verdict = judge_interval(op, threshold, values, margin)
    return verdict.status, verdict.interval, verdict.words


def judge_interval(
    op: str, threshold: float, values: Sequence[float], margin: float = TIMING_MARGIN
) -> IntervalVerdict:
    """``METRIC op threshold`` over per-repeat ``values``, the threshold read within ``margin``
    (module doc): pass when the condition holds over the whole interval, fail when it fails over
    the whole interval, else inconclusive, then with the repeats that would decide a one-sided
    gate at this spread (`stats.repeats_to_decide`; none for ``==``/``!=``: two edges)."""
    if len(values) < 2:
        words = f"inconclusive: {len(values)} repeat{'' if len(values) == 1 else 's'}"
        return IntervalVerdict(GateStatus.INCONCLUSIVE, None, words)
    interval = ratio_interval(values)
    if interval is None:
        return IntervalVerdict(
            GateStatus.INCONCLUSIVE, None, "inconclusive: a ratio that is not positive has no interval"
        )
    lo, hi = interval.low, interval.high
    below, above = margin_band(threshold, margin)
    factor = f"{1 + margin:g}"
    bound = None
    if op in ("==", "!="):
        inside, outside = below <= lo and hi <= above, hi < below or lo > above
        holds, fails = (inside, outside) if op == "==" else (outside, inside)
        within = f"{below:.3g}..{above:.3g} ({threshold:g} / {factor} .. {threshold:g} x {factor}"
    else:
        bound = above if op in ("<=", "<") else below
        at_low, at_high = _OPS[op](lo, bound), _OPS[op](hi, bound)
        holds, fails = at_low and at_high, not (at_low or at_high)
        within = f"{bound:.3g} ({threshold:g} {'x' if bound >= threshold else '/'} {factor}"
    within += f": the {margin:.0%} timing margin)"
    status = GateStatus.PASS if holds else GateStatus.FAIL if fails else GateStatus.INCONCLUSIVE
    words = interval.text()
    if status != GateStatus.INCONCLUSIVE:
        return IntervalVerdict(status, interval, f"{words}, judged against {within}")
    if bound is None:
        return IntervalVerdict(status, interval, f"inconclusive: {words} straddles {within}")
    n = repeats_to_decide(values, bound)
    projection = _projection_text(n, interval.centre, bound)
    return IntervalVerdict(status, interval, f"inconclusive: {words} straddles {within}{projection}", n)


def _projection_text(n: int | None, centre: float, bound: float) -> str:
    """The projection in words, labelled one (no repeat was run to see it)."""
    if n is None:
        return (
            f"; projected from this spread: no repeat count up to {MAX_PROJECTED_REPEATS} decides it,"
            f" the interval's centre {centre:.3g} sits at its bound {bound:.3g}"
        )
    return (
        f"; projected from this spread: about {n} repeats would decide it, if the interval's centre {centre:.3g} held"
    )


def timing_spread(summary: Iterable[SummaryRow], rounds: Rounds | None = None) -> dict[str, dict]:
    """{metric: {repeats, min, max, interval, paired}} for every timing ratio measured at the
    headline's N x M: the spread that goes beside a timing figure wherever it is shown
    (``rounds``: see `timing_repeats`; ``paired``: every repeat's value paired by round)."""
    out = {}
    for name, pairs in _repeat_values(summary, rounds).items():
        values = [v for v, _ in pairs]
        if values:
            interval = ratio_interval(values)
            out[name] = {
                "repeats": len(values),
                "min": min(values),
                "max": max(values),
                "interval": [interval.low, interval.high] if interval else None,
                "paired": all(flag for _, flag in pairs),
            }
    return out


def spread_text(entry: dict | None) -> str:
    """ "0.031..0.062 over 3 repeats, 95% interval 0.024..0.081", or "1 repeat: no spread";
    "per repeat paired by round" when each repeat's value is the median of its rounds' ratios
    (then the median before it, the ratio of the printed medians, may lie outside the range)."""
    if not entry:
        return "not measured"
    if entry["repeats"] < 2:
        return "1 repeat: no spread"
    paired = " (per repeat paired by round)" if entry.get("paired") else ""
    text = f"{entry['min']:.3g}..{entry['max']:.3g} over {entry['repeats']} repeats{paired}"
    interval = entry.get("interval")
    return text + (f", 95% interval {interval[0]:.3g}..{interval[1]:.3g}" if interval else "")
