"""reports: the HTML page of judged runs, the history, projections and ``report``; pandas/jinja2 loaded lazily."""

from __future__ import annotations

from .cli import report_main
from .history import append_history, check_history, read_history_frame, trend
from .html import REPORT_HTML, Published, publish, render_runs
from .projection import fit_sweep, project, projection_text
from .views import TestRecord

__all__ = [
    "REPORT_HTML",
    "Published",
    "TestRecord",
    "append_history",
    "check_history",
    "fit_sweep",
    "project",
    "projection_text",
    "publish",
    "read_history_frame",
    "render_runs",
    "report_main",
    "trend",
]
