"""Render one self-contained report.html for one or several run folders, and judge the gates.

This is the entry point both the command line (`reports.cli`) and the harness runner (right
after a run, through `render_run_report`) use, so "what a report contains" and "did it pass"
are decided in one place. The page has no external resource: CSS, SVG and the few lines of
table-sorting JS are inline, so it opens offline, in CI artifacts and in mail.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.gates import (
    Gate,
    GateResult,
    default_gates,
    evaluate,
    gate_values,
    parse_gates,
)
from harness.core.rundata import RunData, load_run
from harness.core.tables import LONG_CSV, RESULTS_CSV, atomic_writer, write_long
from harness.core.units import fmt_bytes, fmt_ratio
from reports.history import append_history, trend
from reports.views import RunView, build_run_view

REPORT_HTML = "report.html"
#: (headline key, column title) of the cross-run comparison table.
COMPARE_KEYS = (
    ("mapped_pss_ratio", "PSS"),
    ("mapped_uss_ratio", "USS"),
    ("mapped_private_ratio", "private"),
    ("mapped_rss_ratio", "RSS"),
    ("system_delta_ratio", "system delta"),
    ("init_ratio", "init"),
    ("create_ratio", "create"),
)


@dataclass
class RunOutcome:
    run_id: str
    folder: Path
    target: str
    gates: list[GateResult]

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)


@dataclass
class ReportOutcome:
    """Where the report went and what the gates said (exit code 0 pass, 1 fail)."""

    path: Path
    runs: list[RunOutcome] = field(default_factory=list)
    history_appended: list[str] = field(default_factory=list)

    @property
    def gates_passed(self) -> bool:
        return all(r.passed for r in self.runs)

    passed = gates_passed

    @property
    def exit_code(self) -> int:
        return 0 if self.gates_passed else 1

    def gate_lines(self) -> list[str]:
        """Lines for the terminal: one per gate, then the verdict."""
        lines = []
        for run in self.runs:
            for result in run.gates:
                lines.append(f"{result.status.upper():4} [{run.run_id}] {result.gate.expr}: "
                             f"{result.reason}")
        failed = sum(1 for r in self.runs for g in r.gates if not g.passed)
        total = sum(len(r.gates) for r in self.runs)
        lines.append(f"gates: {total - failed} of {total} passed or skipped, {failed} failed"
                     if total else "gates: none")
        return lines


def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["bytes"] = fmt_bytes
    env.filters["ratio"] = fmt_ratio
    return env


def _comparison(runs: Sequence[RunData], views: Sequence[RunView]) -> dict[str, Any]:
    rows = []
    for run, view in zip(runs, views, strict=True):
        head = view.values
        rows.append({
            "anchor": view.anchor, "run_id": run.run_id, "target": run.target,
            "host": str(run.env.get("hostname") or "–"),
            "system": " ".join(str(run.env.get(k) or "") for k in ("system", "arch")).strip(),
            "weights": fmt_bytes(run.weights_bytes) if run.weights_bytes else "–",
            "n": head.get("processes", "–"),
            "ep": "|".join(sorted({r.ep_file_mapping for r in run.results if r.ep_file_mapping}))
                  or "–",
            "ratios": [fmt_ratio(head.get(k)) for k, _ in COMPARE_KEYS],
            "failed": head.get("failed_workers", 0), "fallback": head.get("fallback_workers", 0),
            "gates": "pass" if view.gates_passed else "fail",
        })
    return {"columns": [title for _, title in COMPARE_KEYS], "rows": rows}


def _ensure_long_csv(run: RunData) -> None:
    """(Re)write results_long.csv when it is missing or older than results.csv, so pandas users
    always find it next to the results whoever wrote them."""
    path = run.folder / LONG_CSV
    results = run.folder / RESULTS_CSV
    stale = not path.exists() or path.stat().st_mtime < results.stat().st_mtime
    if stale and run.results:
        try:
            write_long(path, run.results, run.run_id)
        except OSError:
            pass  # a read-only run folder still gets its report


def render_report(
    run_dirs: Sequence[Path | str],
    out: Path | str,
    *,
    gates: Sequence[str] = (),
    use_default_gates: bool = True,
    history: Path | str | None = None,
    trend_runs: int = 10,
) -> ReportOutcome:
    """Load runs, judge gates, update history, write the report. `InputError` on bad input."""
    if not run_dirs:
        raise InputError("no run folder given")
    user_gates: list[Gate] = parse_gates(gates)
    runs = [load_run(d) for d in run_dirs]
    out_path = Path(out)
    if not out_path.parent.is_dir():  # before the history is touched
        raise InputError(f"{out_path.parent}: output folder does not exist")
    outcome = ReportOutcome(path=out_path)
    views = []
    for index, run in enumerate(runs):
        run_gates = user_gates + (default_gates(run.target, run.run) if use_default_gates else [])
        results = evaluate(run_gates, gate_values(run.summary))
        outcome.runs.append(RunOutcome(run.run_id, run.folder, run.target, results))
        points = None
        if history is not None:
            if append_history(history, run):
                outcome.history_appended.append(run.run_id)
            points = trend(history, trend_runs, target=run.target,
                           host=run.env.get("hostname") or None)
        _ensure_long_csv(run)
        views.append(build_run_view(run, index, results, points))
    html = _environment().get_template("report.html.j2").render(
        runs=views,
        comparison=_comparison(runs, views) if len(runs) > 1 else None,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        passed=outcome.passed,
        gate_count=sum(len(r.gates) for r in outcome.runs),
    )
    with atomic_writer(out_path) as handle:
        handle.write(html)
    return outcome


def render_run_report(
    run_dir: Path,
    *,
    gates: list[str] | None = None,
    history: Path | None = None,
    gates_file: Path | None = None,
    default_gates: bool = True,
    out: Path | None = None,
) -> ReportOutcome:
    """The runner's hook after a run: report.html inside ``run_dir``.

    Gates checked: ``gates`` + the lines of ``gates_file`` + the target's defaults (unless
    ``default_gates`` is False). Raises `InputError` for bad gates or a broken run folder."""
    from harness.core.gates import read_gates_file

    run_dir = Path(run_dir)
    exprs = list(gates or []) + (read_gates_file(gates_file) if gates_file is not None else [])
    return render_report(
        [run_dir],
        out if out is not None else run_dir / REPORT_HTML,
        gates=exprs,
        use_default_gates=default_gates,
        history=history,
    )
