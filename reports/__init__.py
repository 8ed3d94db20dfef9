"""reports: CSV I/O, charts, projection, gates, history and the HTML report of harness runs.

Public API (the harness runner and the suites import these names):

- CSV: `write_rows`, `read_rows`, `read_frame`, `write_long`, `read_long`, `write_run_tables`
- run folders: `load_run`, `RunData`
- gates: `parse_gate`, `evaluate`, `default_gates`, `known_metrics`, `read_gates_file`,
  `gate_values`, `GateResult`
- projection: `fit_sweep`, `project`, `projection_text`
- history: `append_history`, `trend`, `read_history_frame`
- report: `render_report`, `render_run_report`, `ReportOutcome`, `report_main`

Heavy dependencies (pandas, jinja2) are imported inside the functions that need them, so
importing this package stays cheap for worker processes.
"""

from __future__ import annotations

from harness.core.gates import (
    GateResult,
    default_gates,
    evaluate,
    gate_values,
    known_metrics,
    parse_gate,
    read_gates_file,
)
from harness.core.rundata import RunData, load_run
from harness.core.tables import (
    LONG_CSV,
    RESULTS_CSV,
    SUMMARY_CSV,
    read_frame,
    read_long,
    read_rows,
    write_long,
    write_rows,
    write_run_tables,
)
from reports.cli import report_main
from reports.history import append_history, read_history_frame, trend
from reports.html import REPORT_HTML, ReportOutcome, render_report, render_run_report
from reports.projection import fit_sweep, project, projection_text

__all__ = [
    "LONG_CSV",
    "REPORT_HTML",
    "RESULTS_CSV",
    "SUMMARY_CSV",
    "GateResult",
    "ReportOutcome",
    "RunData",
    "append_history",
    "default_gates",
    "evaluate",
    "fit_sweep",
    "gate_values",
    "known_metrics",
    "load_run",
    "parse_gate",
    "project",
    "projection_text",
    "read_frame",
    "read_gates_file",
    "read_history_frame",
    "read_long",
    "read_rows",
    "render_report",
    "render_run_report",
    "report_main",
    "trend",
    "write_long",
    "write_rows",
    "write_run_tables",
]
