"""Render one self-contained report.html for one or several judged runs (`publish`).

Both `harness run` (right after a run) and `harness report` come through here with the runs'
`Judgement`s, which `harness.core.verdict` decided: this module lays them out, it decides
nothing. The page has no external resource: CSS, SVG and the few lines of table-sorting JS
are inline, so it opens offline, in CI artifacts and in mail.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.files import replaceable_path, write_text_atomic
from harness.core.rundata import METADATA_JSON, RunData
from harness.core.tables import LONG_CSV, RESULTS_CSV, SUMMARY_CSV, write_long
from harness.core.units import fmt_bytes, fmt_ratio
from harness.core.verdict import Judgement
from reports.history import append_history, check_history, trend
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
class Published:
    """Where the report went and which runs were added to the history."""

    path: Path
    judgements: list[Judgement] = field(default_factory=list)
    history_appended: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when every run's verdict is pass, 1 otherwise (fail or incomplete)."""
        return max((j.exit_code for j in self.judgements), default=1)


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
            "gates": view.verdict,
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


def _run_files(judgements: Sequence[Judgement]) -> set[Path]:
    """Files the runs are made of: a report must never be written over one of them."""
    files = set()
    for j in judgements:
        for name in (RESULTS_CSV, SUMMARY_CSV, LONG_CSV, METADATA_JSON):
            files.add((j.run.folder / name).resolve())
    return files


def check_report_path(out: Path, judgements: Sequence[Judgement]) -> Path:
    """The report's path, refused (InputError) when its folder is missing, when something other
    than a regular file is there, or when it is one of the runs' own files."""
    out = Path(out)
    if not out.parent.is_dir():
        raise InputError(f"{out.parent}: output folder does not exist")
    resolved = out.resolve()
    inside_workers = any((j.run.folder / "workers").resolve() in resolved.parents for j in judgements)
    if resolved in _run_files(judgements) or inside_workers:
        raise InputError(f"--out {out}: is one of the run's own files; refusing to write the report over it")
    replaceable_path(out, "--out")
    return out


def render_html(judgements: Sequence[Judgement], trends: Sequence[list[dict] | None]) -> str:
    """The self-contained page for one or several judged runs."""
    views = [build_run_view(j, index, points) for index, (j, points) in enumerate(zip(judgements, trends,
                                                                                           strict=True))]
    runs = [j.run for j in judgements]
    return _environment().get_template("report.html.j2").render(
        runs=views,
        comparison=_comparison(runs, views) if len(runs) > 1 else None,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        verdict=_overall(judgements),
        passed=all(j.verdict == "pass" for j in judgements),
        gate_count=sum(len(j.gates) for j in judgements),
    )


def _overall(judgements: Sequence[Judgement]) -> str:
    verdicts = {j.verdict for j in judgements}
    return "fail" if "fail" in verdicts else "incomplete" if "incomplete" in verdicts else "pass"


def publish(
    judgements: Sequence[Judgement],
    out: Path | str,
    *,
    history: Path | str | None = None,
    trend_runs: int = 10,
) -> Published:
    """Append the runs to the history (when given), then write the report atomically."""
    if not judgements:
        raise InputError("no run folder given")
    out_path = check_report_path(Path(out), judgements)
    if history is not None and Path(history).resolve() == out_path.resolve():
        raise InputError(f"--out {out} is also --history: the report would replace the history")
    published = Published(path=out_path, judgements=list(judgements))
    trends: list[list[dict] | None] = []
    for judgement in judgements:
        run = judgement.run
        points = None
        if history is not None:
            if append_history(history, judgement):
                published.history_appended.append(run.run_id)
            points = trend(history, trend_runs, target=run.target, host=run.env.get("hostname") or None)
        trends.append(points)
        _ensure_long_csv(run)
    write_text_atomic(out_path, render_html(judgements, trends), what="report")
    return published


def render_runs(
    run_dirs: Sequence[Path | str],
    out: Path | str | None = None,
    *,
    gates: Sequence[str] = (),
    use_default_gates: bool = True,
    history: Path | str | None = None,
) -> Published:
    """Load, judge and publish run folders in one call (what `harness report` does): the report
    goes to ``out``, by default RUN_DIR/report.html for one run and ./report.html for several."""
    from harness.core.gates import parse_gates
    from harness.core.rundata import load_run
    from harness.core.verdict import judge

    if not run_dirs:
        raise InputError("no run folder given")
    extra = parse_gates(gates)
    if history is not None:
        check_history(history)
    judgements = [judge(load_run(d), extra, use_default_gates=use_default_gates) for d in run_dirs]
    if out is None:
        out = Path(run_dirs[0]) / REPORT_HTML if len(run_dirs) == 1 else Path(REPORT_HTML)
    return publish(judgements, out, history=history)
