"""Display-ready view of one run: the formatted tables the template walks over (testable here;
meanings from `harness.core.schema`, judgements from `harness.core.verdict`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.core import units
from harness.core.gates import GateResult
from harness.core.headline import headline_sentence, per_n, target_version_labels, versions
from harness.core.metrics import FAIR, FAIR_BY_KEY, FIGURES
from harness.core.notes import Note
from harness.core.passes import memory_view
from harness.core.rundata import RunData
from harness.core.runmeta import platform_line
from harness.core.schema import ResultRow, SummaryRow, column_docs
from harness.core.summary import headline_pairs, largest_groups, median, row_ok, sessions_of, system_delta_reliable
from harness.core.timing import spread_text, timing_rounds, timing_spread
from harness.core.units import fmt_bytes, fmt_percent, fmt_ratio, fmt_seconds
from harness.core.verdict import Judgement
from harness.core.vocab import FeatureStatus, Mode, Verdict
from reports import charts
from reports.capacity import CapacityView, capacity_projection, capacity_view
from reports.generate import generate_table
from reports.peakchart import peak_vs_steady
from reports.projection import (
    consecutive_marginals,
    default_projection,
    fit_sweep,
    projection_text,
)
from reports.startup import StartupView, startup_view

_MACHINE_KEYS = ("os", "system", "arch", "cpu", "cpu_count", "ram_bytes", "python")


def env_keys(env: dict[str, Any]) -> tuple[str, ...]:
    """The metadata ``env`` keys the report lists: machine, onnxruntime, the targets' own, host, commit."""
    return (*_MACHINE_KEYS, "onnxruntime", *target_version_labels(env), "hostname", "git_commit")


#: Cells longer than this are clipped to one line in the tables, the full text on hover.
CLIP_CHARS = 40
#: headline.json version key -> what the report calls it, besides the targets' own.
_MACHINE_LABELS = {"python": "Python", "os": "OS", "cpu": "CPU", "commit": "commit"}


def version_labels(*envs: dict[str, Any]) -> dict[str, str]:
    """headline.json version key -> its report label: onnxruntime, the targets' own, the machine's."""
    targets: dict[str, str] = {}
    for env in envs:
        targets.update(target_version_labels(env))
    return {"onnxruntime": "onnxruntime", **targets, **_MACHINE_LABELS}


@dataclass(frozen=True)
class TestRecord:
    """A pytest test that produced (or used) a run folder, and how it ended."""

    __test__ = False  # not a test class, whatever its name says
    nodeid: str
    outcome: str  # passed | failed | error | skipped | xfailed | xpassed
    folder: str = ""

    @property
    def failed(self) -> bool:
        return self.outcome in ("failed", "error")


def fmt_value(value: Any, unit: str) -> str:
    """One cell for people: sizes in KiB/MiB/GiB, times in ms/s, empty as a dash."""
    if value is None or value == "":
        return "–"
    if unit in ("bytes", "s", "count/s"):
        return units.fmt_value(value, unit)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@dataclass
class Table:
    columns: list[tuple[str, str, str]]  # (name, unit, doc)
    rows: list[dict[str, Any]]  # {"cells": [(text, sort_key)], "failed": bool}


@dataclass
class RunView:
    anchor: str
    run_id: str
    folder: str
    target: str
    header: list[tuple[str, str]]
    env: list[tuple[str, str]]
    headline_at: str
    headline: list[dict[str, str]]
    marginal: list[str]
    projection: list[str]
    charts: list[charts.Chart]
    notes: list[Note]
    gates: list[GateResult]
    summary_table: Table
    worker_table: Table
    verdict: str = Verdict.INCOMPLETE
    startup: StartupView | None = None
    generate: dict[str, Any] | None = None  # `reports.generate.generate_table`
    feature: str = ""
    feature_state: str = FeatureStatus.UNKNOWN
    values: dict[str, Any] = field(default_factory=dict)
    sentence: str = ""
    badge_class: str = Verdict.INCOMPLETE  # the badges: `harness.core.verdict` decides them
    badge_text: str = Verdict.INCOMPLETE
    feature_badge_class: str = f"feature-{FeatureStatus.UNKNOWN}"
    feature_badge_text: str = f"file mapping: {FeatureStatus.UNKNOWN}"
    per_n: list[dict[str, str]] = field(default_factory=list)
    versions: list[tuple[str, str]] = field(default_factory=list)
    tests: list[TestRecord] = field(default_factory=list)
    capacity: CapacityView | None = None  # a capacity run's N against survived
    platform: str | None = None  # Windows (and Wine) named at the top: `runmeta.platform_line`

    @property
    def gates_passed(self) -> bool:
        return all(g.passed for g in self.gates)

    @property
    def name(self) -> str:
        """ "run-2026-..." as it is, another folder name as "run NAME" (never "run run-...")."""
        return self.run_id if self.run_id.startswith("run-") else f"run {self.run_id}"


def _table(rows: list[Any], row_type: type, failed: Any = None) -> Table:
    """Cells are dicts: ``text`` shown, ``full`` (the whole text, for the hover title when the
    cell is clipped), ``sort`` key, ``clip`` (longer than CLIP_CHARS: one line, ellipsis)."""
    docs = column_docs(row_type)
    out = []
    for row in rows:
        cells = []
        for name, _dtype, unit, _doc in docs:
            value = getattr(row, name)
            text = fmt_value(value, unit)
            cells.append({"text": text, "sort": "" if value is None else value, "clip": len(text) > CLIP_CHARS})
        out.append({"cells": cells, "failed": bool(failed and failed(row))})
    return Table([(n, u, d) for n, _t, u, d in docs], out)


def _header(run: RunData) -> list[tuple[str, str]]:
    r = run.run
    model = str(r.get("model") or "?")
    pairs = [
        ("Target", run.target),
        ("Model", model),
        ("Weights", fmt_bytes(run.weights_bytes) if run.weights_bytes else "–"),
        ("Processes (N)", _processes(run)),
        ("Sessions per process (M)", str(r.get("sessions_per_process") or "–")),
        ("Modes", ", ".join(r.get("modes") or run.modes)),
        ("Repeats", str(r.get("repeat") or "–")),
        ("Started", str(r.get("started") or "–")),
        ("Duration", fmt_seconds(r.get("duration_s")) if r.get("duration_s") else "–"),
        ("Git commit", str(run.env.get("git_commit") or "–")),
    ]
    for key, value in run.target_options.items():  # whatever options the target declares
        pairs.append((f"{run.target} option {key}", str(value)))
    if r.get("peer"):
        pairs.append(("Peer target (mapped)", str(r["peer"])))
    for key, value in (r.get("labels") or {}).items():
        pairs.append((f"Label {key}", str(value)))
    if r.get("command"):
        pairs.append(("Command", str(r["command"])))
    return pairs


def _processes(run: RunData) -> str:
    """The N measured, and what was asked when that differs (an interrupted run, say)."""
    measured = ", ".join(map(str, run.process_counts))
    asked = ", ".join(map(str, run.run.get("processes") or []))
    if not measured:
        return asked or "–"
    return measured if not asked or asked == measured else f"{measured} (asked: {asked})"


def _env(run: RunData) -> list[tuple[str, str]]:
    env = run.env
    out = []
    for key in env_keys(env):
        if env.get(key) not in (None, ""):
            value = fmt_bytes(env[key]) if key == "ram_bytes" else str(env[key])
            out.append((key.replace("_", " "), value))
    return out


def _headline(run: RunData) -> tuple[str, list[dict[str, str]]]:
    """Mapped and heap side by side at the headline's N, with the headline's ratios."""
    own = [s for s in run.summary if s.target == run.target]
    at_top = headline_pairs(own)
    head = run.headline
    if at_top:
        mapped = [m for m, _ in at_top]
        heap = [h for _, h in at_top]
        at = (
            f"N={head.get('processes')} processes, {head.get('sessions')} sessions in all; median over "
            f"{len(at_top)} repeat(s)"
        )
    else:  # one mode only: show what exists at its largest N, without ratios
        chosen = largest_groups(own)
        mapped = [s for s in chosen if s.mode == Mode.MAPPED]
        heap = [s for s in chosen if s.mode == Mode.HEAP]
        at = f"{sessions_of(chosen[0]) if chosen else 0} sessions in all; no mapped/heap pair, so no ratios"
    fair = FAIR[0] if any(getattr(s, FAIR[0].column) is not None for s in run.summary) else FAIR[-1]
    spread = timing_spread(run.summary, timing_rounds(run))
    out = []
    for figure in FIGURES:  # one fair figure: on Linux private bytes are USS
        if not figure.hint or (figure in FAIR and figure is not fair):
            continue
        column, key, hint, unit = figure.column, figure.ratio, figure.hint, figure.unit
        label = figure.label[0].upper() + figure.label[1:]
        if column == "sum_rss_bytes" and run.env.get("system") == "Windows":
            label = "Summed working set (RSS)"
        m_val = median([getattr(s, column) for s in mapped])
        h_val = median([getattr(s, column) for s in heap])
        diff = fmt_value(h_val - m_val if m_val is not None and h_val is not None else None, unit)
        if column == "system_delta_bytes" and m_val is not None and h_val is not None:
            if not all(system_delta_reliable(s) for s in [*mapped, *heap]):
                diff, hint = "noise", f"{hint}; within its idle noise here (see the note): no difference to read"
        out.append(
            {
                "label": label,
                "hint": hint,
                Mode.MAPPED: fmt_value(m_val, unit),
                Mode.HEAP: fmt_value(h_val, unit),
                "diff": diff,
                "ratio": fmt_ratio(head.get(key) if key else None),
                "spread": spread_text(spread[key]) if key in spread else "",  # on a line of its own
                "key": key,
            }
        )
    return at, out


def _marginal(run: RunData) -> list[str]:
    system = str(run.env.get("system") or "Linux")
    sweep = fit_sweep(run.summary, system=system)
    lines = []
    for mode, fit in sorted(sweep.fits.items()):
        lines.append(
            f"{mode}: one more session costs {fmt_bytes(fit.marginal_bytes)} of "
            f"{FAIR_BY_KEY[fit.metric].short} (fit over S = {', '.join(str(s) for s, _ in fit.points)}; "
            f"RMS residual {fmt_bytes(fit.rms_residual_bytes)})"
        )
    if sweep.metric:
        label = FAIR_BY_KEY[sweep.metric].short
        for mode, steps in sorted(consecutive_marginals(run.summary, sweep.metric).items()):
            for s1, s2, per in steps:
                lines.append(f"{mode}: from {s1} to {s2} sessions, {fmt_bytes(per)} of {label} per extra session")
    if not lines:
        lines.append("Needs at least two process counts (a sweep) to show the cost of one more session.")
    return lines


def _per_n_rows(run: RunData) -> list[dict[str, str]]:
    """Mapped and heap at every N measured in both modes (absolute values and the saving)."""
    rows = []
    for entry in per_n(run.summary, run.target):
        saving = entry["saving"]
        fair = FAIR_BY_KEY.get(saving["metric"])
        column = fair.column if fair else None
        init_m, init_h = entry[Mode.MAPPED]["init_s_median"], entry[Mode.HEAP]["init_s_median"]
        rows.append(
            {
                "n": f"{entry['processes']} x {entry['sessions_per_process']}",
                "repeats": str(entry["repeats"]),
                "metric": fair.short if fair else "–",
                Mode.MAPPED: fmt_value(entry[Mode.MAPPED].get(column) if column else None, "bytes"),
                Mode.HEAP: fmt_value(entry[Mode.HEAP].get(column) if column else None, "bytes"),
                "saved": fmt_value(saving["bytes"], "bytes"),
                "saved_pct": fmt_percent(saving["fraction"]),
                "init_mapped": fmt_value(init_m, "s"),
                "init_heap": fmt_value(init_h, "s"),
                "speedup": (f"{init_h / init_m:.1f}x" if init_m and init_h else "–") + _range_text(entry, "init_ratio"),
            }
        )
    return rows


def _range_text(entry: dict[str, Any], metric: str) -> str:
    """ " (ratio 0.03..0.06 over 3 repeats)": a timing figure of several repeats with its spread."""
    spread = entry["ratio_range"].get(metric)
    if not spread or entry["repeats"] < 2:
        return ""
    return f" (ratio {spread[0]:.3g}..{spread[1]:.3g} over {entry['repeats']} repeats)"


def _versions(run: RunData) -> list[tuple[str, str]]:
    found = versions(run.env)
    return [(label, str(found.get(key) or "–")) for key, label in version_labels(run.env).items()]


def projection_for(run: RunData, override: tuple[int, int] | None = None) -> tuple[int, int]:
    """(weights bytes, sessions) to project to: --project-to, else the run's, else the default."""
    if override is not None:
        sessions, weights = override
        return weights, sessions
    recorded = run.run.get("project_to") or {}
    if recorded.get("sessions") and recorded.get("weights_bytes"):
        return int(recorded["weights_bytes"]), int(recorded["sessions"])
    return default_projection(run.summary, run.weights_bytes)


def build_run_view(
    judgement: Judgement,
    index: int,
    trend_points: list[dict] | None,
    *,
    project_to: tuple[int, int] | None = None,
    tests: list[TestRecord] | None = None,
) -> RunView:
    """Everything the template shows for one run, from its one judgement."""
    run = judgement.run
    at, headline = _headline(run)
    chart_list = [
        charts.memory_vs_n(run.summary),
        charts.init_distribution(run.results),
        charts.per_worker_bars(run.results),
        peak_vs_steady(run.results),
    ]
    if any(r.ttft_s is not None for r in run.results):
        own = [s for s in memory_view(run.summary) if s.target == run.target]
        pair = next((p for p in headline_pairs(own) if p[0].complete and p[1].complete), ())
        chart_list.append(charts.token_latency(run.folder, pair))
    if trend_points is not None:
        chart_list.append(charts.ratio_trend(trend_points))
    weights, sessions = projection_for(run, project_to)
    return RunView(
        anchor=f"run-{index}",
        run_id=run.run_id,
        folder=str(run.folder),
        target=run.target,
        header=_header(run),
        env=_env(run),
        headline_at=at,
        headline=headline,
        marginal=_marginal(run),
        projection=projection_text(
            run.summary, weights_bytes=weights, sessions=sessions, system=str(run.env.get("system") or "Linux")
        )
        + capacity_projection(run, weights, sessions),
        charts=chart_list,
        notes=judgement.notes,
        gates=judgement.gates,
        verdict=judgement.verdict,
        feature=judgement.feature.text,
        feature_state=judgement.feature.state,
        summary_table=_table(run.summary, SummaryRow, failed=lambda s: (s.failed_workers or 0) > 0),
        worker_table=_table(run.results, ResultRow, failed=lambda r: not row_ok(r)),
        startup=startup_view(run),
        generate=generate_table(run),
        values=dict(judgement.values),
        sentence=headline_sentence(judgement),
        badge_class=judgement.badge.css,
        badge_text=judgement.badge.label,
        feature_badge_class=judgement.feature_badge.css,
        feature_badge_text=judgement.feature_badge.label,
        per_n=_per_n_rows(run),
        versions=_versions(run),
        tests=list(tests or []),
        capacity=capacity_view(run),
        platform=platform_line(run.env),
    )
