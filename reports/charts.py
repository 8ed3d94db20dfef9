"""The report's charts as inline SVG, from schema rows and the workers' records: each a `Chart`,
or the reason the run cannot support it (one N, one mode, no history), never an empty frame."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.core.schema import MODES, ResultRow, SummaryRow
from harness.core.summary import row_ok
from harness.core.vocab import Mode
from reports.svg import (
    FAIL_COLOR,
    INK,
    METRIC_COLOR,
    Canvas,
    Scale,
    byte_unit,
    fmt_tick,
    legend,
    mode_style,
    nice_ticks,
    time_unit,
    y_axis,
)

MEMORY_METRICS = (("uss", "USS (private)"), ("pss", "PSS (proportional)"), ("rss", "RSS (counts shared pages)"))
#: Windows (no PSS): private bytes lead, the figure that shows its saving.
WINDOWS_METRICS = (("private", "private bytes"), ("uss", "USS (private)"), ("rss", "working set (RSS)"))


def memory_metrics(measured) -> list[tuple[str, str]]:
    """(metric, label) of the memory panels and bars: Linux's three, or Windows' measured ones."""
    return list(MEMORY_METRICS) if measured("pss") else [(m, label) for m, label in WINDOWS_METRICS if measured(m)]


TREND_METRICS = (
    ("mapped_pss_ratio", "PSS ratio", "pss"),
    ("mapped_uss_ratio", "USS ratio", "uss"),
    ("mapped_rss_ratio", "RSS ratio", "rss"),
    ("init_ratio", "init ratio", "init"),
)

INK_OR_FAIL = {True: INK, False: FAIL_COLOR}


@dataclass
class Chart:
    title: str
    svg: str | None
    caption: str = ""
    missing: str = ""  # why there is no chart


def _mode_order(modes: Iterable[str]) -> list[str]:
    return sorted(set(modes), key=lambda m: (MODES.index(m) if m in MODES else 9, m))


def _mode_legend(canvas: Canvas, x: float, y: float, modes: list[str]) -> None:
    legend(canvas, x, y, [(m, mode_style(m)["color"], mode_style(m)["dash"], mode_style(m)["marker"]) for m in modes])


def _overlap(a: dict[int, list[int]] | None, b: dict[int, list[int]] | None) -> bool:
    """True when two series agree within 3% at every common N (one line hides the other)."""
    common = sorted(set(a or {}) & set(b or {}))
    if not a or not b or not common:
        return False
    for n in common:
        x, y = statistics.median(a[n]), statistics.median(b[n])
        if abs(x - y) > 0.03 * max(abs(x), abs(y), 1):
            return False
    return True


def memory_vs_n(summary: Sequence[SummaryRow]) -> Chart:
    """Summed USS, PSS and RSS against N, one panel per metric, one line per mode."""
    title = "Summed memory of all workers vs number of processes"
    series: dict[tuple[str, str], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    chosen = memory_metrics(lambda m: any(getattr(s, f"sum_{m}_bytes") is not None for s in summary))
    for row in summary:
        for metric, _ in chosen:
            value = getattr(row, f"sum_{metric}_bytes")
            if value is not None and row.processes is not None:
                series[(metric, row.mode)][row.processes].append(value)
    if not series:
        return Chart(title, None, missing="no memory figures were measured")
    xs = sorted({n for by_n in series.values() for n in by_n})
    top = max(statistics.median(v) for by_n in series.values() for v in by_n.values())
    div, unit = byte_unit(top)
    ticks = nice_ticks(0, top / div)
    modes = _mode_order(mode for _, mode in series)
    width, height, left, panel_w, gap, top_px, bottom = 980, 384, 70, 280, 30, 40, 300
    canvas = Canvas(
        width,
        height,
        title,
        "Lines: mapped solid with circles, heap dashed with squares. USS and PSS show the sharing; RSS cannot.",
    )
    yscale = Scale(0, ticks[-1], bottom, top_px + 20)
    panel = _Panel(canvas, yscale, ticks, xs, div, unit, top_px, bottom, panel_w)
    for index, (metric, label) in enumerate(chosen):
        _memory_panel(panel, left + index * (panel_w + gap), index, metric, label, series, modes)
    _mode_legend(canvas, left, height - 12, modes)
    caption = (
        f"Median over repeats; {unit}. With mapped weights USS and PSS grow by the "
        "per-process overhead only, heap grows by a full copy of the weights per process; "
        "RSS shows both alike because it counts shared file pages in every process."
    )
    if len(xs) == 1:
        caption += " Only one N was measured, so there is no trend to read here."
    return Chart(title, canvas.render(), caption)


@dataclass
class _Panel:
    """What every panel of `memory_vs_n` shares: the canvas, the y axis, the N measured."""

    canvas: Canvas
    yscale: Scale
    ticks: list[float]
    xs: list[int]
    div: float
    unit: str
    top_px: float
    bottom: float
    width: float


def _memory_panel(p: _Panel, x0: float, index: int, metric: str, label: str, series: dict, modes: list[str]) -> None:
    """One metric's panel: axes, one line per mode, and a word when lines overlap or are absent."""
    canvas, xs, div, unit, bottom, top_px, panel_w = p.canvas, p.xs, p.div, p.unit, p.bottom, p.top_px, p.width
    xscale = Scale(xs[0] - 0.5, xs[-1] + 0.5, x0 + 10, x0 + panel_w - 10)
    if len(xs) == 1:
        xscale = Scale(xs[0] - 1, xs[0] + 1, x0 + 10, x0 + panel_w - 10)
    canvas.text(x0 + panel_w / 2, top_px + 6, label, anchor="middle", size=13, weight="bold")
    y_axis(
        canvas,
        p.yscale,
        p.ticks,
        left=x0,
        right=x0 + panel_w,
        label=f"summed memory ({unit})" if index == 0 else "",
        show_labels=index == 0,
    )
    canvas.line(x0, bottom, x0 + panel_w, bottom)
    for n in xs:
        canvas.text(xscale(n), bottom + 18, str(n), anchor="middle", size=11)
    canvas.text(x0 + panel_w / 2, bottom + 38, "processes (N)", anchor="middle", size=12)
    drawn = False
    for mode in modes:
        by_n = series.get((metric, mode))
        if not by_n:
            continue
        style = mode_style(mode)
        pts = [(n, statistics.median(by_n[n])) for n in sorted(by_n)]
        canvas.polyline([(xscale(n), p.yscale(v / div)) for n, v in pts], color=style["color"], dash=style["dash"])
        for n, v in pts:
            canvas.marker(
                xscale(n),
                p.yscale(v / div),
                style["marker"],
                style["color"],
                tip=f"{mode}, N={n}: {v / div:.1f} {unit} {metric.upper()}",
            )
        drawn = True
    if _overlap(series.get((metric, Mode.MAPPED)), series.get((metric, Mode.HEAP))):
        canvas.text(
            x0 + panel_w / 2, top_px + 24, "mapped and heap lines overlap", anchor="middle", size=11, color="#555555"
        )
    if not drawn:
        canvas.text(
            x0 + panel_w / 2, (top_px + bottom) / 2, "not measured here", anchor="middle", size=12, color="#777777"
        )


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def init_distribution(results: Sequence[ResultRow]) -> Chart:
    """Every worker's init_s as a dot, grouped by N and mode, with a box of the quartiles."""
    title = "Init time of every worker (load + session creation)"
    groups: dict[tuple[int, str], list[ResultRow]] = defaultdict(list)
    for row in results:
        if row.init_s is not None:
            groups[(row.processes or 0, row.mode)].append(row)
    if not groups:
        return Chart(title, None, missing="no worker reported an init time")
    top = max(r.init_s for rows in groups.values() for r in rows)
    div, unit = time_unit(top)
    ticks = nice_ticks(0, top / div)
    keys = sorted(groups, key=lambda k: (k[0], MODES.index(k[1]) if k[1] in MODES else 9, k[1]))
    width, height, left, top_px, bottom = 980, 340, 80, 30, 270
    band = (width - left - 20) / len(keys)
    canvas = Canvas(
        width,
        height,
        title,
        "One dot per worker; boxes span the quartiles, the thick line is the median; crosses are failed workers.",
    )
    yscale = Scale(0, ticks[-1], bottom, top_px)
    y_axis(canvas, yscale, ticks, left=left, right=width - 20, label=f"init time ({unit})")
    canvas.line(left, bottom, width - 20, bottom)
    for index, key in enumerate(keys):
        _init_group(canvas, yscale, key, groups[key], left + band * (index + 0.5), band, div, unit, bottom)
    modes = _mode_order(m for _, m in keys)
    legend(
        canvas,
        left,
        height - 12,
        [(m, mode_style(m)["color"], None, mode_style(m)["marker"]) for m in modes]
        + [("failed worker", FAIL_COLOR, None, "cross")],
    )
    caption = (
        f"Times in {unit}. Mapped init does not read the weights, so it should sit well below "
        "heap once the weights are large; a wide spread means contention between workers."
    )
    return Chart(title, canvas.render(), caption)


def _init_group(
    canvas: Canvas,
    yscale: Scale,
    key: tuple[int, str],
    rows: list[ResultRow],
    cx: float,
    band: float,
    div: float,
    unit: str,
    bottom: float,
) -> None:
    """One (N, mode) group of `init_distribution`: the quartile box, one dot per worker."""
    n, mode = key
    style = mode_style(mode)
    values = [r.init_s / div for r in rows if row_ok(r)]
    if values:
        q1, q2, q3 = _quartiles(values)
        half = min(band * 0.3, 40)
        canvas.rect(cx - half, yscale(q3), 2 * half, yscale(q1) - yscale(q3), fill="none", stroke=style["color"])
        canvas.line(cx - half, yscale(q2), cx + half, yscale(q2), color=style["color"], width=3)
    for i, row in enumerate(sorted(rows, key=lambda r: r.worker or 0)):
        jitter = (((i * 0.618034) % 1) - 0.5) * min(band * 0.5, 50)
        ok = row_ok(row)
        canvas.marker(
            cx + jitter,
            yscale(row.init_s / div),
            style["marker"] if ok else "cross",
            style["color"] if ok else FAIL_COLOR,
            size=3.5,
            hollow=True,
            tip=f"{mode} N={n} worker {row.worker}: {row.init_s / div:.1f} {unit}{'' if ok else ' (failed)'}",
        )
    canvas.text(cx, bottom + 18, mode, anchor="middle", size=12, color=style["color"])
    canvas.text(cx, bottom + 34, f"N={n}", anchor="middle", size=11)


def per_worker_bars(results: Sequence[ResultRow]) -> Chart:
    """USS, PSS and RSS of each worker at the largest N (first repeat), grouped by mode."""
    title = "Memory of each worker at the largest N"
    measured = [r for r in results if r.processes is not None]
    if not measured:
        return Chart(title, None, missing="no worker rows")
    top_n = max(r.processes for r in measured)
    at_top = [r for r in measured if r.processes == top_n]
    first = min(r.repeat or 0 for r in at_top)
    rows = [r for r in at_top if (r.repeat or 0) == first]

    def measured(metric: str) -> bool:
        return any(getattr(r, f"{metric}_bytes") for r in rows)

    metrics = [m for m, _ in memory_metrics(measured) if measured(m)]
    if not metrics:
        return Chart(title, None, missing="no per-worker memory figures were measured")
    top = max(getattr(r, f"{m}_bytes") or 0 for r in rows for m in metrics)
    div, unit = byte_unit(top)
    ticks = nice_ticks(0, top / div)
    by_mode: dict[str, list[ResultRow]] = defaultdict(list)
    for row in rows:
        by_mode[row.mode].append(row)
    modes = _mode_order(by_mode)
    slots = sum(len(v) for v in by_mode.values()) + len(modes) - 1
    width, height, left, top_px, bottom = 980, 340, 80, 30, 262
    slot_w = (width - left - 20) / max(slots, 1)
    bar_w = min(slot_w * 0.8 / len(metrics), 28)
    canvas = Canvas(width, height, title, f"Bars per worker: {', '.join(m.upper() for m in metrics)}.")
    yscale = Scale(0, ticks[-1], bottom, top_px)
    y_axis(canvas, yscale, ticks, left=left, right=width - 20, label=f"memory ({unit})")
    canvas.line(left, bottom, width - 20, bottom)
    slot = 0
    for mode in modes:
        start = slot
        for row in sorted(by_mode[mode], key=lambda r: r.worker or 0):
            bars = _Bars(canvas, yscale, metrics, div, unit, bottom, bar_w)
            _worker_bars(
                bars, row, left + slot_w * slot + (slot_w - bar_w * len(metrics)) / 2, left + slot_w * (slot + 0.5)
            )
            slot += 1
        mid = left + slot_w * (start + slot) / 2
        canvas.text(mid, bottom + 36, mode, anchor="middle", size=13, weight="bold", color=mode_style(mode)["color"])
        slot += 1
    legend(canvas, left, height - 12, [(m.upper(), METRIC_COLOR[m], None, "square") for m in metrics])
    caption = (
        f"N={top_n}, repeat {first}; {unit}. Mapped workers' USS and private bytes leave the shared "
        "weights out and PSS splits them between the workers; RSS (the working set) counts them in full "
        "in every worker, so RSS bars look the same in both modes."
    )
    return Chart(title, canvas.render(), caption)


@dataclass
class _Bars:
    """What every worker's bars in `per_worker_bars` share."""

    canvas: Canvas
    yscale: Scale
    metrics: list[str]
    div: float
    unit: str
    bottom: float
    bar_w: float


def _worker_bars(b: _Bars, row: ResultRow, x: float, centre: float) -> None:
    """One worker's USS/PSS/RSS bars from ``x``, its name under them (marked when it failed)."""
    for j, metric in enumerate(b.metrics):
        value = getattr(row, f"{metric}_bytes")
        if value is not None:
            b.canvas.rect(
                x + j * b.bar_w,
                b.yscale(value / b.div),
                b.bar_w - 1,
                b.bottom - b.yscale(value / b.div),
                fill=METRIC_COLOR[metric],
                tip=f"{row.mode} worker {row.worker} {metric.upper()}: {value / b.div:.1f} {b.unit}",
            )
    ok = row_ok(row)
    text = f"w{row.worker}" + ("" if ok else " ✕")
    b.canvas.text(centre, b.bottom + 16, text, anchor="middle", size=11, color=INK_OR_FAIL[ok])


def ratio_trend(points: Sequence[dict]) -> Chart:
    """Headline ratios of the last runs (oldest left), from the history file."""
    title = "Headline ratios (mapped / heap) over recent runs"
    if len(points) < 2:
        return Chart(
            title,
            None,
            missing="the trend needs at least two runs in the history "
            f"file (it has {len(points)} for this target and host)",
        )
    present = [(k, label, c) for k, label, c in TREND_METRICS if any(p.get(k) is not None for p in points)]
    if not present:
        return Chart(title, None, missing="no ratio was measured in the recorded runs")
    top = max(1.0, *(p[k] for p in points for k, _, _ in present if p.get(k) is not None))
    ticks = nice_ticks(0, top * 1.05)
    width, height, left, top_px, bottom = 980, 330, 70, 30, 250
    canvas = Canvas(width, height, title, "Lower is better; 1.0 means mapped costs the same as heap.")
    yscale = Scale(0, ticks[-1], bottom, top_px)
    xscale = Scale(-0.5, len(points) - 0.5, left, width - 20)
    y_axis(canvas, yscale, ticks, left=left, right=width - 20, label="mapped / heap", fmt=fmt_tick)
    canvas.line(left, bottom, width - 20, bottom)
    canvas.line(left, yscale(1.0), width - 20, yscale(1.0), color="#555555", dash="3 3")
    canvas.text(width - 24, yscale(1.0) - 5, "1.0 = no saving", anchor="end", size=11)
    for i, point in enumerate(points):
        canvas.text(
            xscale(i),
            bottom + 16,
            str(point.get("label", i)),
            anchor="middle",
            size=10,
            rotate=-20 if len(points) > 6 else None,
        )
    for key, label, color_key in present:
        color = METRIC_COLOR[color_key]
        pts = [(xscale(i), yscale(p[key])) for i, p in enumerate(points) if p.get(key) is not None]
        canvas.polyline(pts, color=color)
        for (x, y), p in zip(pts, [p for p in points if p.get(key) is not None], strict=True):
            canvas.marker(x, y, "circle", color, size=3.5, tip=f"{p.get('label', '')}: {label} {p[key]:.3f}")
    legend(canvas, left, height - 12, [(label, METRIC_COLOR[c], "", "circle") for _, label, c in present])
    caption = "Each point is one run's headline ratio at its largest N (oldest left)."
    return Chart(title, canvas.render(), caption)


def token_steps(folder: Path, row: SummaryRow) -> list[list[float]]:
    """Each session's decode-step times from its group's worker records (bounded, inside ``folder`` only)."""
    from harness.core.errors import InputError
    from harness.core.files import contained_file
    from harness.core.rundata import read_run_json

    group = f"workers/{row.target}-{row.mode}-n{row.processes}-r{row.repeat}"
    sessions: list[list[float]] = []
    for index in range(min(int(row.processes or 0), 1024)):
        try:
            path = contained_file(folder, f"{group}/w{index}.result.json", str(folder), "a worker file")
            record = read_run_json(path)
        except InputError:
            continue
        steps = record.get("token_latencies_s") if isinstance(record, dict) else None
        for session in steps if isinstance(steps, list) else []:
            if isinstance(session, list) and all(type(v) is float and v > 0 for v in session):
                sessions.append(session)
    return sessions


def token_latency(folder: Path, pair: Sequence[SummaryRow]) -> Chart:
    """The time of each decode step (token 2..G), median over every session, one line per mode."""
    title = "Per-token decode latency: mapped vs heap"
    series = {}
    for row in pair:
        sessions = token_steps(folder, row)
        steps = min(map(len, sessions), default=0)
        if steps:
            series[row.mode] = [statistics.median(s[i] for s in sessions) for i in range(steps)]
    if len(series) < 2:
        return Chart(title, None, missing="needs the decode steps of a mapped and a heap group (--workload generate)")
    modes = _mode_order(series)
    top = max(max(v) for v in series.values())
    div, unit = time_unit(top)
    ticks = nice_ticks(0, top / div)
    width, height, left, top_px, bottom = 980, 330, 70, 30, 250
    count = max(map(len, series.values()))
    canvas = Canvas(width, height, title, "Lines: one per mode; x: the decode step (token 2 onwards).")
    yscale, xscale = Scale(0, ticks[-1], bottom, top_px), Scale(1.5, count + 1.5, left, width - 20)
    y_axis(canvas, yscale, ticks, left=left, right=width - 20, label=f"step time ({unit})", fmt=fmt_tick)
    canvas.line(left, bottom, width - 20, bottom)
    for mode in modes:
        style = mode_style(mode)
        points = [(xscale(i + 2), yscale(v / div)) for i, v in enumerate(series[mode])]
        canvas.polyline(points, color=style["color"], dash=style["dash"])
        for i, ((x, y), v) in enumerate(zip(points, series[mode], strict=True)):
            canvas.marker(x, y, style["marker"], style["color"], tip=f"{mode} token {i + 2}: {v / div:.4g} {unit}")
    for i in range(count):
        canvas.text(xscale(i + 2), bottom + 16, str(i + 2), anchor="middle", size=10)
    _mode_legend(canvas, left, height - 12, modes)
    row = pair[0]
    caption = (
        f"N={row.processes} x M={row.sessions_per_process}, repeat {row.repeat}: each point is the median over every "
        f"session of that step's time, in {unit}."
    )
    return Chart(title, canvas.render(), caption)
