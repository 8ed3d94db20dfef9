"""Render one self-contained report.html (inline CSS, SVG and JS) for judged runs: it lays out, decides nothing."""

from __future__ import annotations

import datetime as _dt
import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.files import real_path, write_text_atomic
from harness.core.units import fmt_bytes, fmt_ratio
from harness.core.verdict import Judgement, badge_tones, gate_tones, runs_badge, session_badge
from harness.core.vocab import Verdict
from reports.history import append_history, check_history, trend
from reports.views import RunView, TestRecord, build_run_view, version_labels

REPORT_HTML = "report.html"
#: (headline key, row title) of the ratio rows of the cross-run comparison.
COMPARE_KEYS = (
    ("mapped_pss_ratio", "PSS ratio"),
    ("mapped_uss_ratio", "USS ratio"),
    ("mapped_private_ratio", "private-bytes ratio"),
    ("mapped_rss_ratio", "RSS ratio"),
    ("system_delta_ratio", "system-delta ratio"),
    ("init_ratio", "init ratio"),
    ("create_ratio", "create ratio"),
)


@dataclass
class Published:
    """Where the report went and which runs were added to the history."""

    path: Path
    judgements: list[Judgement] = field(default_factory=list)
    history_appended: list[str] = field(default_factory=list)
    comparisons: list[Any] = field(default_factory=list)  # harness.core.compare.Comparison per run

    @property
    def exit_code(self) -> int:
        """0 when every run's verdict is pass, 1 otherwise (fail or incomplete)."""
        return max((j.exit_code for j in self.judgements), default=1)


@functools.cache
def _environment() -> Any:
    """One template environment per process (compiling the template costs ~0.12 s)."""
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


def warm_templates() -> None:
    """Compile the templates now (a fork server does it once for all the runs it forks)."""
    env = _environment()
    for name in env.list_templates():
        env.get_template(name)


def _cell(text: Any, cls: str = "", title: str = "") -> dict[str, str]:
    return {"text": "–" if text in (None, "") else str(text), "cls": cls, "title": title}


def _version_rows(views: Sequence[RunView]) -> list[dict[str, Any]]:
    """One row per version the first run lists; a cell differs when the runs disagree."""
    rows = []
    for label in (label for label, _ in (views[0].versions if views else [])):
        values = [dict(v.versions).get(label) for v in views]
        differs = "differs" if len(set(values)) > 1 else ""
        rows.append({"label": label, "hint": "", "cells": [_cell(value, differs) for value in values]})
    return rows


def _labels_text(view: RunView) -> str | None:
    return ", ".join(f"{k[6:]}={val}" for k, val in view.header if k.startswith("Label ")) or None


def _comparison(views: Sequence[RunView]) -> dict[str, Any]:
    """Runs in columns, figures in rows: values at each run's largest N, savings, ratios, failures, versions."""
    top = [v.per_n[-1] if v.per_n else None for v in views]

    def row(label: str, cells: list[dict[str, str]], hint: str = "") -> dict[str, Any]:
        return {"label": label, "hint": hint, "cells": cells}

    def at_top(key: str) -> list[dict[str, str]]:
        return [_cell(t[key] if t else None, "num") for t in top]

    sections = [
        (
            "Run",
            [
                row("target", [_cell(v.target) for v in views]),
                row("verdict", [_cell(v.badge_text, f"v-{v.badge_class}") for v in views]),
                row("file mapping", [_cell(v.feature_state, f"v-{v.feature_badge_class}", v.feature) for v in views]),
                row("host", [_cell(dict(v.env).get("hostname")) for v in views]),
                row("labels", [_cell(_labels_text(v)) for v in views]),
                row("weights", [_cell(dict(v.header).get("Weights"), "num") for v in views]),
                row("N x M", at_top("n")),
                row("repeats", at_top("repeats")),
            ],
        ),
        (
            "Memory at the largest N (summed over workers)",
            [
                row("metric", at_top("metric"), "PSS where measured (Linux), private bytes otherwise (Windows)"),
                row("mapped", at_top("mapped")),
                row("heap", at_top("heap")),
                row("saved (heap − mapped)", at_top("saved")),
                row("saved %", at_top("saved_pct")),
            ],
        ),
        (
            "Start-up (median init)",
            [
                row("mapped", at_top("init_mapped")),
                row("heap", at_top("init_heap")),
                row("speed-up", at_top("speedup")),
            ],
        ),
        (
            "Ratios mapped / heap (lower is better)",
            [row(title, [_cell(fmt_ratio(v.values.get(key)), "num") for v in views]) for key, title in COMPARE_KEYS],
        ),
        (
            "Workers",
            [
                row("failed", [_cell(v.values.get("failed_workers", 0), "num") for v in views]),
                row("fell back to heap", [_cell(v.values.get("fallback_workers", 0), "num") for v in views]),
            ],
        ),
        ("Versions", _version_rows(views)),
    ]
    if any(v.tests for v in views):
        tests = [_cell("; ".join(f"{t.outcome}: {t.nodeid}" for t in v.tests) or None, "tests") for v in views]
        sections.append(("Tests", [{"label": "pytest", "hint": "", "cells": tests}]))
    return {"runs": [{"anchor": v.anchor, "run_id": v.run_id} for v in views], "sections": sections}


def _baseline(comparison: Any) -> dict[str, Any]:
    from harness.core.compare_text import comparison_rows, likely_cause, rule_text

    labels = version_labels(comparison.baseline.env, comparison.current.env)
    return {
        "rule": rule_text(comparison.min_effect),
        "baseline": comparison.baseline.run_id,
        "current": comparison.current.run_id,
        "at": comparison.at,
        "rows": comparison_rows(comparison),
        "versions": [
            {"name": labels.get(k, k), "baseline": b, "current": c, "differs": b != c}
            for k, b, c in comparison.versions
        ],
        "warnings": list(comparison.warnings),
        "cause": likely_cause(comparison),
    }


def _tests_summary(tests: Sequence[TestRecord], counts: dict[str, int] | None) -> dict[str, Any] | None:
    if not tests and not counts:
        return None
    counts = dict(counts or Counter(t.outcome for t in tests))
    failed = counts.get("failed", 0) + counts.get("error", 0)
    text = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "no test ran"
    return {"records": list(tests), "text": text, "failed": failed, "badge": session_badge(counts).css}


def check_report_path(
    out: Path,
    judgements: Sequence[Judgement],
    *,
    baseline: Path | None = None,
    inputs: Sequence[Path] = (),
    option: str = "--out",
) -> Path:
    """The report's path, checked as every output is (`check_output`): never a file of the runs,
    the baseline's or any run folder (but a report.html), nor an input."""
    from harness.core.runfiles import check_output

    folders = [j.run.folder for j in judgements] + ([Path(baseline)] if baseline is not None else [])
    return check_output(out, option, runs=folders, inputs=inputs, may_be=REPORT_HTML if option == "--out" else "")


def render_html(
    judgements: Sequence[Judgement],
    trends: Sequence[list[dict] | None],
    *,
    project_to: tuple[int, int] | None = None,
    tests: Sequence[TestRecord] = (),
    test_counts: dict[str, int] | None = None,
    baseline: Any = None,
) -> str:
    """The page for judged runs; ``tests`` and ``baseline`` add their sections."""
    views = []
    for index, (j, points) in enumerate(zip(judgements, trends, strict=True)):
        mine = [t for t in tests if t.folder and real_path(t.folder) == real_path(j.run.folder)]
        views.append(build_run_view(j, index, points, project_to=project_to, tests=mine))
    session = _tests_summary(tests, test_counts)
    targets = sorted({v.target for v in views})
    if len(views) == 1:
        title = f"File mapped weights, target {views[0].target}: {views[0].name}"
    elif views:
        title = f"File mapped weights: {len(views)} runs (target {', '.join(targets)})"
    else:
        title = "File mapped weights: test session"
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            title=title,
            runs=views,
            comparison=_comparison(views) if len(views) > 1 else None,
            baseline=_baseline(baseline) if baseline is not None else None,
            session=session,
            generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            verdict=_overall(judgements),
            verdicts=dict(Counter(j.verdict for j in judgements)),
            runs_badge=runs_badge(judgements, in_session=session is not None).css,
            badge_tones=sorted(badge_tones().items()),
            gate_tones=gate_tones(),
            gate_count=sum(len(j.gates) for j in judgements),
        )
    )


def _overall(judgements: Sequence[Judgement]) -> str:
    verdicts = {j.verdict for j in judgements}
    if Verdict.FAIL in verdicts:
        return Verdict.FAIL
    return Verdict.INCOMPLETE if Verdict.INCOMPLETE in verdicts or not verdicts else Verdict.PASS


def publish(
    judgements: Sequence[Judgement],
    out: Path | str,
    *,
    history: Path | str | None = None,
    trend_runs: int = 10,
    project_to: tuple[int, int] | None = None,
    tests: Sequence[TestRecord] = (),
    test_counts: dict[str, int] | None = None,
    baseline: Any = None,
    inputs: Sequence[Path] = (),
) -> Published:
    """Append the runs to the history (when given), then write the report atomically; ``inputs`` are never written."""
    if not judgements and not tests and not test_counts:
        raise InputError("no run folder given")
    base_folder = baseline.baseline.folder if baseline is not None else None
    out_path = check_report_path(Path(out), judgements, baseline=base_folder, inputs=inputs)
    if history is not None and real_path(history) == real_path(out_path):
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
    html = render_html(
        judgements, trends, project_to=project_to, tests=tests, test_counts=test_counts, baseline=baseline
    )
    write_text_atomic(out_path, html, what="report")
    return published


def _check_distinct_runs(run_dirs: Sequence[Path | str], baseline: Path | str | None) -> None:
    """No run folder twice, and not the baseline among the runs."""
    seen: dict[Path, str] = {}
    for folder in map(str, run_dirs):
        key = real_path(folder)
        if key in seen:
            raise InputError(f"{folder}: the same run folder is given twice ({seen[key]} and {folder})")
        seen[key] = folder
    if baseline is not None and real_path(baseline) in seen:
        raise InputError(
            f"--baseline {baseline}: is the run folder {seen[real_path(baseline)]} itself; a run compared "
            "with itself shows no change whatever it measured"
        )


def render_runs(
    run_dirs: Sequence[Path | str],
    out: Path | str | None = None,
    *,
    gates: Sequence[str] = (),
    use_default_gates: bool = True,
    history: Path | str | None = None,
    project_to: tuple[int, int] | None = None,
    baseline: Path | str | None = None,
    tests: Sequence[TestRecord] = (),
    test_counts: dict[str, int] | None = None,
    inputs: Sequence[Path] = (),
    min_effect: Any = None,
    json_out: Path | None = None,
) -> Published:
    """Load, judge and publish run folders (``harness report``), with an optional baseline comparison."""
    from harness.core.compare import compare
    from harness.core.gates import parse_gates
    from harness.core.rundata import load_run, same_run
    from harness.core.verdict import judge

    if not run_dirs and not tests and not test_counts:
        raise InputError("no run folder given")
    _check_distinct_runs(run_dirs, baseline)
    extra = parse_gates(gates)
    if history is not None:
        check_history(history)
    judgements = [judge(load_run(d), extra, use_default_gates=use_default_gates) for d in run_dirs]
    comparisons = []
    if baseline is not None:
        base = load_run(baseline)
        for j in judgements:
            if same_run(j.run, base):
                raise InputError(f"--baseline {baseline}: is a copy of the run {j.run.folder} (same run id and start)")
        comparisons = [compare(j.run, base, min_effect) for j in judgements]
    if out is None:
        out = Path(run_dirs[0]) / REPORT_HTML if len(run_dirs) == 1 else Path(REPORT_HTML)
    if json_out is not None:
        others = [*inputs, Path(out), *([Path(history)] if history is not None else [])]
        check_report_path(
            json_out, judgements, baseline=Path(baseline) if baseline else None, inputs=others, option="--json"
        )
    published = publish(
        judgements,
        out,
        history=history,
        project_to=project_to,
        tests=tests,
        test_counts=test_counts,
        baseline=comparisons[0] if comparisons else None,
        inputs=inputs,
    )
    published.comparisons = comparisons
    if json_out is not None:
        _write_comparison(json_out, comparisons)
    return published


def _write_comparison(json_out: Path, comparisons: list) -> None:
    """The --json document: every compared figure with its values, delta, p-value and call."""
    from harness.core.compare_text import comparison_document
    from harness.core.files import write_json_atomic

    write_json_atomic(json_out, comparison_document(comparisons), what="--json")
