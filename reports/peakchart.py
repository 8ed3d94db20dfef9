"""The report's "peak vs steady" chart: each mode's start-up peak beside its steady state and RSS peak."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from harness.core.schema import ResultRow
from harness.core.summary import row_ok
from reports.charts import Chart, _mode_order
from reports.svg import METRIC_COLOR, Canvas, Scale, byte_unit, legend, mode_style, nice_ticks, y_axis

#: (ResultRow column, legend label, colour)
BARS = (
    ("peak_private_bytes", "start-up peak, private", "#D55E00"),
    ("steady_private", "steady at the barrier, private", METRIC_COLOR["uss"]),
    ("peak_rss_bytes", "start-up peak, RSS (counts file pages)", METRIC_COLOR["rss"]),
)


def _steady(row: ResultRow) -> int | None:
    return row.uss_bytes if row.uss_bytes is not None else row.private_bytes


def _value(row: ResultRow, column: str) -> int | None:
    return _steady(row) if column == "steady_private" else getattr(row, column)


def _medians(rows: list[ResultRow]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for column, _, _ in BARS:
        values = [v for v in (_value(r, column) for r in rows) if v is not None]
        out[column] = statistics.median(values) if values else None
    return out


def peak_vs_steady(results: Sequence[ResultRow]) -> Chart:
    """Grouped bars per mode: start-up peak (private), steady private, peak RSS."""
    title = "Start-up peak vs steady memory per mode"
    ok = [r for r in results if row_ok(r) and r.processes is not None]
    if not any(r.peak_private_bytes is not None for r in ok):
        return Chart(
            title, None, missing="no start-up peak was measured (runs before the peak sampler, or no ok worker)"
        )
    top_n = max(r.processes for r in ok)
    at_top = [r for r in ok if r.processes == top_n]
    first = min(r.repeat or 0 for r in at_top)
    rows = [r for r in at_top if (r.repeat or 0) == first]
    modes = _mode_order({r.mode for r in rows})
    figures = {mode: _medians([r for r in rows if r.mode == mode]) for mode in modes}
    top = max((v or 0) for f in figures.values() for v in f.values())
    div, unit = byte_unit(top)
    ticks = nice_ticks(0, top / div)
    width, height, left, top_px, bottom = 980, 330, 80, 30, 262  # the other charts' width: same font scale
    group_w = (width - left - 20) / max(len(modes), 1)
    bar_w = min(group_w * 0.8 / len(BARS), 60)
    canvas = Canvas(width, height, title, "Bars per mode: start-up peak private, steady private, peak RSS.")
    yscale = Scale(0, ticks[-1], bottom, top_px)
    y_axis(canvas, yscale, ticks, left=left, right=width - 20, label=f"memory ({unit})")
    canvas.line(left, bottom, width - 20, bottom)
    for i, mode in enumerate(modes):
        x0 = left + group_w * i + (group_w - bar_w * len(BARS)) / 2
        for j, (column, label, color) in enumerate(BARS):
            value = figures[mode][column]
            if value is None:
                continue
            canvas.rect(
                x0 + j * bar_w,
                yscale(value / div),
                bar_w - 2,
                bottom - yscale(value / div),
                fill=color,
                tip=f"{mode} {label}: {value / div:.1f} {unit}",
            )
        mid = left + group_w * (i + 0.5)
        canvas.text(mid, bottom + 18, mode, anchor="middle", size=12, weight="bold", color=mode_style(mode)["color"])
    legend(canvas, left, height - 12, [(label, color, None, "square") for _, label, color in BARS])
    phases = sorted({r.peak_phase for r in rows if r.peak_phase})
    rates = [r.peak_sample_hz for r in rows if r.peak_sample_hz]
    rate = f"; sampled at {min(rates):.0f}-{max(rates):.0f} Hz" if rates else ""
    caption = (
        f"N={top_n}, repeat {first}, median over ok workers; {unit}. The start-up peak is sampled from "
        "each worker's start to its first inference, by the harness from outside (1 kHz or faster) and by "
        "the worker at each phase change; a heap load's peak holds every private copy "
        "at once, a mapped one leaves the shared file pages out (they count only in RSS). Peak phase(s): "
        f"{', '.join(phases) or 'unknown'}{rate}."
    )
    return Chart(title, canvas.render(), caption)
