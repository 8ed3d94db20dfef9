"""Physical ranges of the derived figures: a figure outside its range is no measurement (a
gate on -2.79 mapped copies must not pass). Its `Refusal` says why, as an enum the verdict reads
and words the gates show: implausible (missing evidence, never a pass) or not measurable
(below the run's noise). docs/gates.md ("Physics first") has the cases.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .metrics import BY_RATIO, fair_bytes
from .schema import SummaryRow
from .vocab import Doubt

#: How far below a bound a figure may be before it is implausible: a tenth of a copy plus, in
#: copies of the weights, `NOISE_BYTES` per process of the pair and `OVERHEAD_NOISE` of the heap
#: run's overhead (a worker's own memory moves by MiB between groups: docs/gates.md).
COPIES_SLACK = 0.1
NOISE_BYTES = 4 * 1024**2
OVERHEAD_NOISE = 0.1
#: The figures counted in copies of the weights: with noise of a whole copy or more they are
#: "not measurable" (no measurement, but no broken sample: the run is not made incomplete).
COPY_METRICS = ("mapped_weight_copies", "heap_copies_per_session")


def weight_copies(mapped: SummaryRow, heap: SummaryRow) -> tuple[float | None, float | None]:
    """(mapped copies of the weights, heap copies per session) of a pair: the heap run's overhead is
    O = heap - S x W, so (mapped - O) / W counts the copies mapped keeps (1: all share one)."""
    weights = heap.weights_bytes or mapped.weights_bytes
    m, h = fair_bytes(mapped), fair_bytes(heap)
    sessions = int(heap.processes or 0) * int(heap.sessions_per_process or 1)
    if not weights or m is None or h is None or not sessions:
        return None, None
    overhead = h - sessions * weights
    return (m - overhead) / weights, h / (sessions * weights)


def memory_budget_ratio(mapped: SummaryRow) -> float | None:
    """Mapped summed fair memory over one copy of the weights plus N x the control worker's
    private memory (the runtime with its sessions, inputs and KV cache, no weights)."""
    m, weights, runtime = fair_bytes(mapped), mapped.weights_bytes, mapped.runtime_bytes
    if m is None or not weights or runtime is None:
        return None
    return m / (weights + int(mapped.processes or 0) * runtime)


def heap_overhead(heap: SummaryRow) -> int | None:
    """The heap run's memory beyond one copy of the weights per session (`weight_copies`' O)."""
    weights, h = heap.weights_bytes, fair_bytes(heap)
    sessions = int(heap.processes or 0) * int(heap.sessions_per_process or 1)
    return None if not weights or h is None else h - sessions * weights


@dataclass(frozen=True)
class Refusal:
    """Why a figure is no measurement: the doubt the verdict reads, and the words gates show."""

    doubt: Doubt
    text: str

    def __str__(self) -> str:
        return f"{self.doubt}: {self.text}"


def bounded(
    name: str,
    value: float | None,
    values: Mapping[str, float | int | None],
    weights_bytes: int | None = None,
    overhead_bytes: int | None = None,
) -> tuple[float | None, Refusal | None]:
    """(value, None) when ``value`` is physically possible for metric ``name``, else (None, why).
    ``overhead_bytes``: the heap run's memory beyond its copies (its noise widens the bounds)."""
    if value is None:
        return None, None
    if not math.isfinite(value):
        return None, Refusal(Doubt.IMPLAUSIBLE, f"{name} = {value!r} is not a finite number")
    slack = 2 * int(values.get("processes") or 1) * NOISE_BYTES + OVERHEAD_NOISE * max(overhead_bytes or 0, 0)
    noise = slack / weights_bytes if weights_bytes else 0.0
    if name in COPY_METRICS and noise >= 1:
        from .units import fmt_bytes

        return None, Refusal(
            Doubt.NOT_MEASURABLE,
            f"the weights ({fmt_bytes(weights_bytes or 0)}) are smaller than this run's memory "
            f"noise (about {fmt_bytes(int(slack))}: a worker's own memory moves by that much between groups), "
            f"so {name} cannot tell one copy from none",
        )
    if name == "mapped_weight_copies" and value < -(COPIES_SLACK + noise):
        heap = values.get("heap_copies_per_session")
        hint = f" (heap_copies_per_session = {heap:.2f})" if isinstance(heap, float) else ""
        return None, Refusal(
            Doubt.IMPLAUSIBLE,
            f"mapped_weight_copies = {value:.2f}, below 0 copies: the heap workers hold more than "
            f"one copy per session{hint}, so the heap run's overhead estimate is wrong",
        )
    if name == "heap_copies_per_session" and value < 1 - COPIES_SLACK - noise:
        return None, Refusal(
            Doubt.IMPLAUSIBLE,
            f"heap_copies_per_session = {value:.2f}, below 1: a heap session holds a whole copy, "
            "so the sample lacks pages (reclaimed, or not the worker)",
        )
    if name in BY_RATIO and BY_RATIO[name].positive and value <= 0:
        return None, Refusal(Doubt.IMPLAUSIBLE, f"{name} = {value:.4g}, but a figure of a live process is above 0")
    return value, None
