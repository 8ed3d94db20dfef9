"""Timing gates judged on their repeats, not on one median: a gate on a timing ratio (init,
create, latency, the peer's init) holds only when the whole 95 % interval of the ratio is on the
right side of its threshold, fails only when the whole interval is on the wrong side, and is
*inconclusive* otherwise, which is never a pass. With one repeat there is no interval:
"inconclusive: 1 repeat".

Why: one ms-scale init time on a shared 2-core machine is noise. ``peer_init_ratio<=2`` came
out 0.91, 1.86 and 1.79 in three benches of the same code (per repeat 0.42 to 3.90): a median
gate flips on that noise, an interval gate says it cannot decide. The interval is that of the
ratio's geometric mean (`harness.core.stats.ratio_interval`: the noise of a ratio is
multiplicative).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence

from .passes import timing_view
from .schema import SummaryRow
from .stats import Interval, ratio_interval
from .summary import RATIO_COLUMNS, complete_pair, pair_ratio, primary_target, ratio, timing_pairs
from .vocab import GateStatus, Mode

#: Metrics that are timing figures besides the mapped/heap ratios of a ``*_s_median`` column.
PEER_TIMING = ("peer_init_ratio",)
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}


def is_timing(metric: str) -> bool:
    """True for a gate metric measured in time: the peer ratio and every mapped/heap ratio of a
    column in seconds or per second (``*_s``, ``*_s_median``, ``inferences_per_s``), so ratios
    added later are picked up."""
    return metric in PEER_TIMING or RATIO_COLUMNS.get(metric, "").endswith(("_s", "_s_median"))


def timing_repeats(summary: Iterable[SummaryRow]) -> dict[str, list[float]]:
    """Per-repeat values of every timing metric at the headline's N x M, from complete pairs
    of the timing pass (`passes`: the values whose median the headline gives)."""
    summary = list(summary)
    target = primary_target(summary)
    pairs = [p for p in timing_pairs([s for s in summary if s.target == target]) if complete_pair(*p)]
    out: dict[str, list[float]] = {}
    for name, column in RATIO_COLUMNS.items():
        if is_timing(name):
            out[name] = [v for v in (pair_ratio(m, h, column) for m, h in pairs) if v is not None]
    out["peer_init_ratio"] = _peer_repeats(timing_view(summary), pairs, target)
    return out


def _peer_repeats(summary: Sequence[SummaryRow], pairs: list, target: str | None) -> list[float]:
    values = []
    for mapped, _ in pairs:
        for peer in summary:
            same_group = (peer.processes, peer.sessions_per_process, peer.repeat) == (
                mapped.processes,
                mapped.sessions_per_process,
                mapped.repeat,
            )
            if peer.target != target and peer.mode == Mode.MAPPED and peer.complete is True and same_group:
                value = ratio(mapped.init_s_median, peer.init_s_median)
                if value is not None:
                    values.append(value)
    return values


def interval_status(op: str, threshold: float, values: Sequence[float]) -> tuple[str, Interval | None, str]:
    """(pass | fail | inconclusive, the interval, the words) for ``METRIC op threshold`` over
    per-repeat ``values``: pass when the condition holds over the whole interval, fail when it
    fails over the whole interval."""
    if len(values) < 2:
        return GateStatus.INCONCLUSIVE, None, f"inconclusive: {len(values)} repeat{'' if len(values) == 1 else 's'}"
    interval = ratio_interval(values)
    if interval is None:
        return GateStatus.INCONCLUSIVE, None, "inconclusive: a ratio that is not positive has no interval"
    lo, hi = interval.low, interval.high
    if op == "==":
        holds, fails = lo == hi == threshold, not lo <= threshold <= hi
    elif op == "!=":
        holds, fails = not lo <= threshold <= hi, lo == hi == threshold
    else:
        at_low, at_high = _OPS[op](lo, threshold), _OPS[op](hi, threshold)
        holds, fails = at_low and at_high, not (at_low or at_high)
    status = GateStatus.PASS if holds else GateStatus.FAIL if fails else GateStatus.INCONCLUSIVE
    words = interval.text()
    return (
        status,
        interval,
        words if status != GateStatus.INCONCLUSIVE else f"inconclusive: {words} straddles the threshold",
    )


def timing_spread(summary: Iterable[SummaryRow]) -> dict[str, dict]:
    """{metric: {repeats, min, max, interval}} for every timing ratio measured at the headline's
    N x M: the spread that goes beside a timing figure wherever it is shown."""
    out = {}
    for name, values in timing_repeats(summary).items():
        if values:
            interval = ratio_interval(values)
            out[name] = {
                "repeats": len(values),
                "min": min(values),
                "max": max(values),
                "interval": [interval.low, interval.high] if interval else None,
            }
    return out


def spread_text(entry: dict | None) -> str:
    """ "0.031..0.062 over 3 repeats, 95% interval 0.024..0.081", or "1 repeat: no spread"."""
    if not entry:
        return "not measured"
    if entry["repeats"] < 2:
        return "1 repeat: no spread"
    text = f"{entry['min']:.3g}..{entry['max']:.3g} over {entry['repeats']} repeats"
    interval = entry.get("interval")
    return text + (f", 95% interval {interval[0]:.3g}..{interval[1]:.3g}" if interval else "")
