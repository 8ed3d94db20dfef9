"""The two passes of a group's start-up (issue 32): ``concurrent``, the N workers started
together and their memory sampled with all N alive; ``sequential`` (the timing pass), the same
workers one at a time, no memory sampled. Memory figures come from the concurrent pass, timing
figures from the sequential one when the run has it (docs/gates.md, "Which pass a figure comes from").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from .schema import SummaryRow
from .units import fmt_percent
from .vocab import Start

CONCURRENT = Start.CONCURRENT
SEQUENTIAL = Start.SEQUENTIAL
STARTS = (CONCURRENT, SEQUENTIAL)
#: How people read each pass (terminal, report, sentence).
LABELS = {CONCURRENT: "all N starting together", SEQUENTIAL: "one at a time"}

Row = TypeVar("Row")


def start_of(row: Any) -> str:
    """The pass a result or summary row belongs to (rows of an older harness: concurrent)."""
    return getattr(row, "start", None) or CONCURRENT


def memory_view(rows: Iterable[Row]) -> list[Row]:
    """The rows memory figures come from: the concurrent pass."""
    return [r for r in rows if start_of(r) == CONCURRENT]


def timing_view(rows: Iterable[Row]) -> list[Row]:
    """The rows timing figures are judged on: the sequential pass when the run has one."""
    rows = list(rows)
    sequential = [r for r in rows if start_of(r) == SEQUENTIAL]
    return sequential or memory_view(rows)


def timing_start(rows: Iterable[Any]) -> str:
    """Which pass `timing_view` takes its rows from."""
    return SEQUENTIAL if any(start_of(r) == SEQUENTIAL for r in rows) else CONCURRENT


def contention(summary: Sequence[SummaryRow], target: str) -> dict[str, Any]:
    """How busy the machine was over ``target``'s groups whose timings are judged (headline.json
    ``contention``: the timing pass's when the run has one, ``start`` says which), and over the
    concurrent pass's (``concurrent_contended_groups``: 4 workers on 2 cores wait for each other)."""
    rows = [s for s in timing_view(summary) if s.target == target]
    loads = [s.load_avg for s in rows if s.load_avg is not None]
    shares = [s.cpu_share_min for s in rows if s.cpu_share_min is not None]
    foreign = [s.foreign_cpus_max for s in rows if s.foreign_cpus_max is not None]
    return {
        "start": timing_start(summary),
        "contended_groups": sum(1 for s in rows if s.contended),
        "groups": len(rows),
        "load_avg_max": max(loads) if loads else None,
        "cpu_share_min": min(shares) if shares else None,
        "foreign_cpus_max": max(foreign) if foreign else None,
        "concurrent_contended_groups": sum(1 for s in memory_view(summary) if s.target == target and s.contended),
    }


def contention_text(judgement: Any) -> str:
    """ " Timings were taken on a contended machine (...)." or ""."""
    busy = contention(judgement.run.summary, judgement.run.target)
    if not busy["contended_groups"]:
        return ""
    load = f"load average up to {busy['load_avg_max']:.1f}" if busy["load_avg_max"] is not None else "load unknown"
    if busy["foreign_cpus_max"] is not None:  # the timing pass: what else ran beside its worker
        load = f"other processes used up to {busy['foreign_cpus_max']:.2f} CPUs beside a worker"
    share = f", a worker got {fmt_percent(busy['cpu_share_min'])} of a CPU" if busy["cpu_share_min"] is not None else ""
    cpus = judgement.run.cpu_count
    return (
        f" Timings were taken on a contended machine ({busy['contended_groups']} of {busy['groups']} groups; "
        f"{load}{f' on {cpus} CPUs' if cpus else ''}{share}): timing gates read 'contended', not pass or fail."
    )
