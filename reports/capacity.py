"""The report's view of a capacity run: per probe N which mode's workers survived, beside the projection."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.core.capacity import Measured, ModeCapacity, Probe, bounds_text, cost_range, limit_room
from harness.core.units import fmt_bytes, fmt_seconds
from harness.core.vocab import Mode

WHY_THEY_DIFFER = (
    "Measured and projected differ for three reasons: the projection assumes every worker peaks at "
    "once, but workers started together reach their peaks at different moments (start-up overlap); the "
    "container also holds the page cache its workers fault in (the mapped weights once, a heap read's "
    "pages until reclaimed); and every worker carries a runtime floor (interpreter, numpy, onnxruntime)."
)


@dataclass
class CapacityView:
    sentence: str
    rows: list[dict[str, str]] = field(default_factory=list)  # one per probed N
    lines: list[str] = field(default_factory=list)


def _cell(probe: Probe | None) -> str:
    if probe is None:
        return "–"
    took = fmt_seconds(probe.seconds)
    peak = f", peak {fmt_bytes(probe.container_peak_bytes)}" if probe.container_peak_bytes else ""
    if probe.outcome == "fit":
        return f"survived ({took}{peak})"
    if probe.outcome == "oom":
        return f"ended by the limit: {probe.oom_workers} of {probe.processes} ({took}{peak})"
    return f"failed, not the limit: {probe.error[:120]} ({took})"


def capacity_view(run: Any) -> CapacityView | None:
    """N against survived for both modes, or None for a run without a measured capacity."""
    measured: Measured | None = getattr(run, "capacity", None)
    if measured is None:
        return None
    view = CapacityView(measured.sentence())
    by_mode = {mode: {p.processes: p for p in m.probes} for mode, m in measured.modes.items()}
    for n in sorted({n for probes in by_mode.values() for n in probes}):
        view.rows.append(
            {"n": str(n), **{mode: _cell(by_mode.get(mode, {}).get(n)) for mode in (Mode.HEAP, Mode.MAPPED)}}
        )
    for m in measured.modes.values():
        if m.note:
            view.lines.append(f"{m.mode}: {m.note}")
        if m.peak_private_bytes:
            view.lines.append(
                f"{m.mode}: projected from the start-up peak of one worker, {fmt_bytes(m.peak_private_bytes)} "
                "private, all workers peaking at once"
            )
    view.lines.append(WHY_THEY_DIFFER)
    return view


def _worker_cost(m: ModeCapacity, measured: Measured, weights: int) -> tuple[float | None, float | None]:
    return cost_range(m, limit_room(m.mode, measured.limit_bytes, weights, measured.counts_file_pages))


def _between(low: float | None, high: float | None) -> str:
    return bounds_text(low, high, fmt_bytes, strict=True)


def capacity_projection(run: Any, weights_bytes: int, sessions: int) -> list[str]:
    """The projected deployment from the measured cost per worker (a heap worker's extra cost scales with weights)."""
    measured: Measured | None = getattr(run, "capacity", None)
    measured_weights = int(run.weights_bytes or 0)
    if measured is None or not measured_weights:
        return []
    costs = {mode: _worker_cost(m, measured, measured_weights) for mode, m in measured.modes.items()}
    spw = max(1, next(iter(measured.modes.values())).sessions_per_process)
    lines = [
        f"Measured under {fmt_bytes(measured.limit_bytes)} (this capacity run): one worker cost "
        + ", ".join(f"{mode} {_between(*cost)}" for mode, cost in costs.items())
        + " (the limit over the workers that fit and over one more; mapped beside the weights' pages)."
    ]
    heap, mapped = costs.get(Mode.HEAP), costs.get(Mode.MAPPED)
    if heap and mapped and mapped[1] is not None:
        base = mapped[1]
        scale = weights_bytes / measured_weights

        def scaled(cost: float | None) -> float | None:
            return None if cost is None else sessions / spw * (base + max(0.0, cost - base) * scale)

        lines.append(
            f"From the measured costs, {sessions} sessions of a {fmt_bytes(weights_bytes)} model need: heap "
            f"{_between(scaled(heap[0]), scaled(heap[1]))}, mapped at most "
            f"{fmt_bytes(sessions / spw * base + weights_bytes)} (heap's cost beyond a mapped worker's scaled "
            "with the weights; the mapped worker's cost taken as it was measured)."
        )
    return lines
