"""Tiny SVG kit for the report's charts: self-contained, printable, Okabe-Ito colours and distinct markers."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

from harness.core.vocab import Mode

MODE_STYLE = {
    Mode.MAPPED: {"color": "#0072B2", "dash": "", "marker": "circle"},
    Mode.HEAP: {"color": "#D55E00", "dash": "6 4", "marker": "square"},
}
METRIC_COLOR = {"uss": "#0072B2", "pss": "#009E73", "rss": "#E69F00", "init": "#CC79A7", "private": "#56B4E9"}
FAIL_COLOR = "#C0392B"
GRID = "#d9d9d9"
CHAR_WIDTH = 7.0  #: Width a legend label's character is given (12 px system sans-serif averages ~6.5 px).
INK = "#222222"
MIB = 1024**2
GIB = 1024**3


def mode_style(mode: str) -> dict[str, str]:
    return MODE_STYLE.get(mode, {"color": "#555555", "dash": "2 3", "marker": "diamond"})


def byte_unit(max_bytes: float) -> tuple[float, str]:
    """(divisor, label): GiB once values reach 2 GiB, MiB below, so ticks stay short."""
    return (GIB, "GiB") if max_bytes >= 2 * GIB else (MIB, "MiB")


def time_unit(max_seconds: float) -> tuple[float, str]:
    """(divisor, label): milliseconds below 2 s, seconds above."""
    return (1.0, "s") if max_seconds >= 2 else (1e-3, "ms")


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^k steps) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    value = start
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < hi:
        ticks.append(round(value, 10))
    return ticks


def fmt_tick(value: float) -> str:
    return f"{value:.0f}" if abs(value - round(value)) < 1e-9 else f"{value:.3g}"


@dataclass
class Scale:
    """Linear map from data [lo, hi] to pixels [px_lo, px_hi]."""

    lo: float
    hi: float
    px_lo: float
    px_hi: float

    def __call__(self, value: float) -> float:
        span = (self.hi - self.lo) or 1.0
        return self.px_lo + (value - self.lo) / span * (self.px_hi - self.px_lo)


@dataclass
class Canvas:
    """An SVG document being built; `render` wraps the parts in an accessible <svg>."""

    width: int
    height: int
    title: str
    desc: str = ""
    parts: list[str] = field(default_factory=list)

    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(
        self,
        x: float,
        y: float,
        content: str,
        *,
        anchor: str = "start",
        size: int = 12,
        weight: str = "normal",
        color: str = INK,
        rotate: float | None = None,
    ) -> None:
        transform = f' transform="rotate({rotate:g} {x:.1f} {y:.1f})"' if rotate else ""
        self.add(
            f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" '
            f'font-weight="{weight}" fill="{color}"{transform}>{escape(content)}</text>'
        )

    def line(
        self, x1: float, y1: float, x2: float, y2: float, *, color: str = INK, width: float = 1, dash: str = ""
    ) -> None:
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{color}" stroke-width="{width:g}"{dashed}/>'
        )

    def rect(self, x: float, y: float, w: float, h: float, *, fill: str, stroke: str = "none", tip: str = "") -> None:
        title = f"<title>{escape(tip)}</title>" if tip else ""
        self.add(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" '
            f'height="{max(h, 0):.1f}" fill="{fill}" stroke="{stroke}">{title}</rect>'
        )

    def polyline(self, points: Sequence[tuple[float, float]], *, color: str, dash: str = "", width: float = 2) -> None:
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="{width:g}"{dashed}/>')

    def marker(
        self, x: float, y: float, kind: str, color: str, *, tip: str = "", size: float = 4.5, hollow: bool = False
    ) -> None:
        fill = "#ffffff" if hollow else color
        title = f"<title>{escape(tip)}</title>" if tip else ""
        if kind == "square":
            shape = (
                f'<rect x="{x - size:.1f}" y="{y - size:.1f}" width="{2 * size:.1f}" '
                f'height="{2 * size:.1f}" fill="{fill}" stroke="{color}" stroke-width="1.5">'
            )
            self.add(f"{shape}{title}</rect>")
        elif kind == "cross":
            d = (
                f"M{x - size:.1f},{y - size:.1f} L{x + size:.1f},{y + size:.1f} "
                f"M{x - size:.1f},{y + size:.1f} L{x + size:.1f},{y - size:.1f}"
            )
            self.add(f'<path d="{d}" stroke="{color}" stroke-width="2.2">{title}</path>')
        elif kind == "diamond":
            d = f"M{x:.1f},{y - size:.1f} L{x + size:.1f},{y:.1f} L{x:.1f},{y + size:.1f} L{x - size:.1f},{y:.1f} Z"
            self.add(f'<path d="{d}" fill="{fill}" stroke="{color}" stroke-width="1.5">{title}</path>')
        else:
            self.add(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{size:.1f}" fill="{fill}" '
                f'stroke="{color}" stroke-width="1.5">{title}</circle>'
            )

    def render(self) -> str:
        desc = f"<desc>{escape(self.desc)}</desc>" if self.desc else ""
        return (
            f'<svg class="chart" role="img" '
            f'aria-label="{escape(self.title)}" viewBox="0 0 {self.width} {self.height}" '
            f'font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif">'
            f"<title>{escape(self.title)}</title>{desc}"
            f'<rect x="0" y="0" width="{self.width}" height="{self.height}" fill="#ffffff"/>'
            + "".join(self.parts)
            + "</svg>"
        )


def y_axis(
    canvas: Canvas,
    scale: Scale,
    ticks: list[float],
    *,
    left: float,
    right: float,
    label: str = "",
    fmt: Callable[[float], str] = fmt_tick,
    show_labels: bool = True,
) -> None:
    """Horizontal grid lines with tick labels on the left, and the rotated axis title."""
    for tick in ticks:
        y = scale(tick)
        canvas.line(left, y, right, y, color=GRID)
        if show_labels:
            canvas.text(left - 6, y + 4, fmt(tick), anchor="end", size=11)
    if label:
        mid = (scale.px_lo + scale.px_hi) / 2
        canvas.text(16, mid, label, anchor="middle", size=12, rotate=-90)


def legend(
    canvas: Canvas, x: float, y: float, entries: Sequence[tuple[str, str, str, str]], *, gap: float = 26
) -> float:
    """A legend of (label, color, dash, marker) entries, wrapped onto rows; returns the y of its last row."""
    left, right = x, canvas.width - 8
    canvas.add('<g class="legend">')
    for label, color, dash, marker in entries:
        width = 32 + CHAR_WIDTH * len(label)
        if x > left and x + width > right:
            x, y = left, y + 20
        if dash is not None:
            canvas.line(x, y, x + 26, y, color=color, width=2, dash=dash)
        if marker:
            canvas.marker(x + 13, y, marker, color)
        canvas.text(x + 32, y + 4, label, size=12)
        x += width + gap
    canvas.add("</g>")
    canvas.height = max(canvas.height, int(y + 12))  # a wrapped row stays inside the chart
    return y
