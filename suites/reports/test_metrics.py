"""The metric registry (issue 41, item 1): each figure declared once in `harness.core.metrics`,
and every reader derived from that declaration.

Before: each figure was listed again, with its own label, in the terminal table, the report,
headline.json, the summary, the gates and ``--baseline``; the fair memory figure was chosen
three ways (PSS-or-private in two places, PSS-or-USS in the projection). These tests read the
outputs, so a figure a reader forgets, or a docs table that drifts, fails here.
"""

from __future__ import annotations

import io
import re
from dataclasses import fields, replace
from pathlib import Path

from report_fixtures import fake_results, metadata, write_run

from harness.core import metrics
from harness.core.compare import compare
from harness.core.gates import RUN_FACTS, known_metrics, metrics_epilog
from harness.core.headline import headline_document
from harness.core.metrics import FAIR, FIGURES, OTHER_METRICS, Figure, fair_bytes, fair_figure, is_timing
from harness.core.rundata import load_run
from harness.core.schema import ResultRow, SummaryRow
from harness.core.summary import summarize
from harness.core.verdict import judge
from harness.core.vocab import Aggregate, Mode
from reports.history import history_columns
from reports.projection import fit_sweep
from reports.views import build_run_view

GATES_MD = Path(__file__).resolve().parents[2] / "docs" / "gates.md"


def test_every_figure_names_real_columns_and_unique_metrics():
    summary, result = {f.name for f in fields(SummaryRow)}, {f.name for f in fields(ResultRow)}
    assert {f.column for f in FIGURES} <= summary
    assert {f.source for f in FIGURES if isinstance(f.source, str)} <= result
    ratios = [f.ratio for f in FIGURES if f.ratio]
    names = [*ratios, *(name for name, _, _ in OTHER_METRICS)]
    assert len(names) == len(set(names)) and len({f.column for f in FIGURES}) == len(FIGURES)


def _judged(tmp_path, **kw):
    rows = fake_results(repeats=3, **kw)
    for r in rows:  # every figure measured, so that a reader that drops one is seen
        r.first_run_s, r.runs, r.inferences_per_s = 0.02, 5, 90.0
        r.latency_p50_s = r.latency_p90_s = r.latency_p95_s = r.latency_p99_s = r.latency_mean_s = 0.01
        r.latency_min_s, r.latency_max_s, r.latency_stdev_s = 0.009, 0.03, 0.001
        r.peak_private_bytes, r.peak_sample_hz = r.uss_bytes + 1024, 1000.0
        r.copied_bytes, r.runtime_bytes, r.mapped_resident_bytes = 1024, 1024**2, 4096
        r.ttft_s, r.decode_tokens_per_s, r.kv_cache_bytes = 0.05, 40.0, 8192
        r.token_latency_p50_s = r.token_latency_p99_s = 0.025
    return judge(load_run(write_run(tmp_path / "run", rows, metadata(repeat=3))))


def test_every_reader_shows_what_the_registry_declares(tmp_path):
    """The gates, headline.json, the terminal table, the report, the history and --baseline
    take their figures from `FIGURES`: each declared figure is where its declaration says."""
    judgement = _judged(tmp_path)
    ratios = [f.ratio for f in FIGURES if f.ratio]
    assert set(ratios) | {n for n, _, _ in OTHER_METRICS} | set(RUN_FACTS) == set(known_metrics())
    assert all(f"  {name}" in metrics_epilog() for name in ratios)
    document = headline_document(judgement)
    top = document["per_n"][-1]
    assert set(top[Mode.MAPPED]) == {f.column for f in FIGURES if f.per_n}
    assert set(top["ratios"]) == set(ratios) and set(ratios) <= set(document["headline"])
    assert set(ratios) <= set(history_columns(judgement.run.env))

    from rich.console import Console

    from harness.console import print_judgement

    out = io.StringIO()
    print_judgement(Console(file=out, width=200, markup=False), judgement)
    assert all(f" {f.terminal} " in out.getvalue() for f in FIGURES if f.terminal)

    shown = {row["label"].lower() for row in build_run_view(judgement, 0, None).headline}
    hinted = {f.label.lower() for f in FIGURES if f.hint and f.column != FAIR[-1].column}  # Linux: PSS, not private
    assert shown == hinted

    keys = {c.metric.key for c in compare(judgement.run, judgement.run).changes}
    for figure in (f for f in FIGURES if f.compare):
        assert ({figure.compare} if figure.once else {f"{m}_{figure.compare}" for m in Mode}) <= keys
    assert {f.ratio for f in FIGURES if f.compare_ratio} <= keys


def test_a_group_aggregates_as_declared():
    """Sums only over a complete group (a partial sum is not the group's memory), medians,
    minima and maxima over the ok workers, a computed source from each row."""
    rows = [ResultRow(uss_bytes=u, init_s=t, first_run_s=0.5) for u, t in ((10, 1.0), (20, 2.0), (40, 6.0))]
    total = Figure("sum_uss_bytes", "x", source="uss_bytes", aggregate=Aggregate.SUM)
    assert total.group_value(rows, rows[:1], True) == 70
    assert total.group_value(rows, rows, False) is None
    assert total.group_value([*rows, ResultRow()], rows, True) is None  # a worker without the figure
    startup = metrics.BY_COLUMN["startup_s_median"]
    assert startup.group_value(rows, rows, True) == 2.5  # median of init + first inference
    assert Figure("init_s_median", "x", source="init_s", aggregate=Aggregate.MAX).group_value([], rows, True) == 6.0
    assert metrics.BY_COLUMN["init_s_median"].group_value(rows, [], True) is None  # no ok worker: not measured


def _declare(monkeypatch, figure: Figure) -> None:
    """Replace the registry by one with ``figure`` declared in place of the same column's, in
    every module that took the registry's derived tables at import."""
    import sys

    old = [f for f in FIGURES if f.column != figure.column]
    figures = (*old, figure)
    derived = {
        "FIGURES": figures,
        "BY_COLUMN": {f.column: f for f in figures},
        "RATIO_COLUMNS": {f.ratio: f.column for f in figures if f.ratio},
        "BY_RATIO": {f.ratio: f for f in figures if f.ratio},
        "TABLE_FIGURES": [f for f in figures if f.terminal],
    }
    derived["PAIR_METRICS"] = (*derived["RATIO_COLUMNS"], *metrics.PAIR_METRICS[len(metrics.RATIO_COLUMNS) :])
    before = {name: getattr(metrics, name, None) for name in derived} | {"TABLE_FIGURES": None}
    for module in [m for name, m in sys.modules.items() if name.startswith(("harness", "reports"))]:
        for name, value in derived.items():
            current = getattr(module, name, None)
            if current is not None and (current is before[name] or name == "TABLE_FIGURES"):
                monkeypatch.setattr(module, name, value)


def test_a_new_figure_is_one_declaration(tmp_path, monkeypatch):
    """Its declaration is all a figure needs: the floor time, which no reader showed, declared
    with a ratio, a terminal line and a --baseline stem appears in the gates, headline.json,
    the terminal and the comparison, with nothing else changed."""
    import harness.console  # noqa: F401  (its table is derived at import)

    floor = replace(metrics.BY_COLUMN["floor_s_median"], ratio="floor_ratio", terminal="floor", per_n=True,
                    compare="floor", compare_ratio=True)  # fmt: skip
    rows = fake_results(repeats=3)
    for r in rows:
        r.floor_s = 0.001 if r.mode == Mode.MAPPED else 0.002
    judgement = judge(load_run(write_run(tmp_path / "run", rows, metadata(repeat=3))))
    assert "floor_ratio" not in judgement.values
    _declare(monkeypatch, floor)
    judgement = judge(load_run(write_run(tmp_path / "again", rows, metadata(repeat=3))))
    assert judgement.values["floor_ratio"] == 0.5 and is_timing("floor_ratio") and "floor_ratio" in known_metrics()
    assert headline_document(judgement)["per_n"][-1][Mode.MAPPED]["floor_s_median"] == 0.001
    keys = {c.metric.key for c in compare(judgement.run, judgement.run).changes}
    assert {"mapped_floor", "heap_floor", "floor_ratio"} <= keys

    from rich.console import Console

    from harness.console import print_judgement

    out = io.StringIO()
    print_judgement(Console(file=out, width=200, markup=False), judgement)
    assert " floor " in out.getvalue()


def test_the_fair_memory_figure_is_chosen_once():
    """PSS where every group has it, else private bytes (Windows; USS on Linux): the headline,
    the physics and the projection agree (the projection took USS before)."""
    linux = summarize(fake_results())
    windows = summarize(fake_results(pss=False))
    assert fair_figure(linux) is FAIR[0] and fair_figure(windows) is FAIR[1]
    assert fit_sweep(linux).metric == "pss" and fit_sweep(windows).metric == "private"
    assert all(fair_bytes(s) == s.sum_private_bytes for s in windows)
    assert fair_figure([replace(linux[0], sum_pss_bytes=None, sum_private_bytes=None)]) is None


def gate_metrics_table() -> str:
    """docs/gates.md's metric table, as the registry declares it."""
    lines = ["| metric | what |", "| --- | --- |"]
    for f in (f for f in FIGURES if f.ratio):
        where = "" if f.systems == metrics.ALL_SYSTEMS else f" ({', '.join(sorted(f.systems))} only)"
        timing = "; a timing metric" if f.timing else ""
        lines.append(f"| `{f.ratio}` | mapped / heap of the {f.label} (`{f.column}`){where}{timing} |")
    for name, text, _ in OTHER_METRICS:
        lines.append(f"| `{name}` | {text}{'; a timing metric' if is_timing(name) else ''} |")
    lines.append("| `weights_bytes` | the weights size of the run (for `if` conditions; units allowed: `128MiB`) |")
    return "\n".join(lines)


def test_the_docs_table_of_gate_metrics_is_the_registry():
    """docs/gates.md lists exactly the registry's gate metrics (regenerate it from
    `gate_metrics_table` when a figure is added)."""
    text = GATES_MD.read_text(encoding="utf-8")
    found = re.search(r"^\| metric \| what \|\n(?:\|.*\n)+", text, re.M)
    assert found and found.group(0).strip() == gate_metrics_table(), gate_metrics_table()
    assert set(RUN_FACTS) == {"weights_bytes"}


def test_the_terminal_shows_a_figure_in_its_unit(tmp_path, monkeypatch):
    """A rate declared for the terminal table reads as a rate (tokens/s of the LLM workload,
    here inferences/s), not as seconds."""
    from rich.console import Console

    import harness.console  # noqa: F401  (its table is derived at import)
    from harness.console import print_judgement

    _declare(monkeypatch, replace(metrics.BY_COLUMN["inferences_per_s"], terminal="inferences/s"))
    out = io.StringIO()
    print_judgement(Console(file=out, width=200, markup=False), _judged(tmp_path))
    line = next(x for x in out.getvalue().splitlines() if " inferences/s " in x)
    assert "90.0/s" in line and " ms " not in line, line
