"""reports: lay out judged runs as one self-contained HTML page, keep a history CSV across runs,
project bigger deployments, and the ``report`` command.

Public API: `publish` (history + report.html for judged runs), `render_runs` (load, judge and
publish run folders), `Published`, `REPORT_HTML`, `TestRecord` (a pytest outcome shown beside
its run), `check_history`, `append_history`, `trend`, `read_history_frame`, `fit_sweep`, `project`,
`projection_text`, `report_main`.

What runs mean (gates, notes, verdicts) is decided in `harness.core.verdict`; this package only
presents it. It depends on the harness's bottom layer (`harness.core`) and never on the runner
or the targets. Heavy dependencies (pandas, jinja2) are imported inside the functions that need
them, so importing this package stays cheap.
"""

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
