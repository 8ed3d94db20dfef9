"""The generate workload in the report, headline.json and --baseline (issue 45, item 7): a real
run's per-token decode times, its sentence, and how a baseline judges TTFT and tokens/s."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from harness.core.compare import Change, metrics_for
from harness.core.metrics import FAIR
from harness.core.schema import SummaryRow
from harness.core.units import fmt_bytes, fmt_value
from reports.charts import token_steps

PROMPT, NEW = 16, 8


@pytest.fixture(scope="module")
def generate_run(harness_runner, request, tmp_path_factory):
    """The issue's first Done-when command at two N, with its report."""
    args = ["run", "--workload", "generate", "--processes", "1,2", "--prompt-tokens", str(PROMPT)]
    args += ["--new-tokens", str(NEW), "--quiet"]
    outcome = harness_runner.run(*args, owner=request.module.__name__, scratch=tmp_path_factory.mktemp("genrep"))
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    return outcome


def _steps(out, row) -> list[list[float]]:
    group = f"cpu-{row.mode}-n{row.processes}-r0"
    record = json.loads((out / "workers" / group / f"w{row.worker}.result.json").read_text())
    return record["token_latencies_s"]


@pytest.mark.memory
def test_each_worker_records_every_session_s_decode_steps(generate_run):
    """G - 1 step times per session in the worker's record, whose percentile is results.csv's."""
    for row in generate_run.results():
        steps = _steps(generate_run.out, row)
        assert len(steps) == row.sessions_per_process and all(len(s) == NEW - 1 for s in steps), steps
        pooled = [t for s in steps for t in s]
        assert all(t > 0 for t in pooled)
        assert np.percentile(pooled, 50) == pytest.approx(row.token_latency_p50_s, rel=1e-9)
        assert len(pooled) / sum(pooled) == pytest.approx(row.decode_tokens_per_s, rel=1e-9)


@pytest.mark.memory
def test_the_report_draws_each_mode_s_median_step_time(generate_run):
    html = (generate_run.out / "report.html").read_text(encoding="utf-8")
    svg = re.search(r'<svg[^>]*aria-label="Per-token decode latency: mapped vs heap".*?</svg>', html, re.S)
    assert svg, "no per-token latency chart"
    assert svg.group(0).count("<polyline") == 2
    for mode in ("mapped", "heap"):
        rows = [r for r in generate_run.results() if r.mode == mode and r.processes == 2]
        sessions = [s for r in rows for s in _steps(generate_run.out, r)]
        tips = re.findall(rf"<title>{mode} token (\d+): ([\d.]+) (ms|s)</title>", svg.group(0))
        assert [int(t[0]) for t in tips] == list(range(2, NEW + 1))
        for (token, shown, unit), values in zip(tips, zip(*sessions, strict=True), strict=True):
            want = float(np.median(values)) / (1e-3 if unit == "ms" else 1.0)
            assert float(shown) == pytest.approx(want, rel=5e-3), (mode, token)


@pytest.mark.memory
def test_the_sentence_names_ttft_and_tokens_per_s_mapped_vs_heap(generate_run):
    headline = json.loads((generate_run.out / "headline.json").read_text())
    entry = headline["per_n"][-1]
    m, h = entry["mapped"], entry["heap"]
    ttft = f"TTFT {fmt_value(m['ttft_s_median'], 's')} vs {fmt_value(h['ttft_s_median'], 's')}"
    rate = m["decode_tokens_per_s_median"], h["decode_tokens_per_s_median"]
    tokens = f"decode tokens/s {fmt_value(rate[0], 'count/s')} vs {fmt_value(rate[1], 'count/s')}"
    sentence = headline["sentence"]
    assert ttft in sentence and tokens in sentence, sentence
    assert f"ratio {entry['ratios']['ttft_ratio']:.3f}, 1 repeat: no spread" in sentence
    if headline["contention"]["contended_groups"]:
        assert "indicatively (timed on a contended machine)" in sentence.split(ttft)[0]


@pytest.mark.memory
def test_the_report_tables_tokens_and_the_kv_split_per_mode_and_n(generate_run):
    """Each (N, mode): TTFT and tokens/s as the worker rows' medians, each worker's KV cache as its
    row's, its runtime the control's private memory less that cache; no --runs advice."""
    import statistics

    html = (generate_run.out / "report.html").read_text(encoding="utf-8")
    table = re.search(r'<table class="data generate">.*?</table>', html, re.S)
    assert table, "no generate table"
    cells = [re.findall(r"<td[^>]*>([^<]*)</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", table.group(0), re.S)]
    shown = {(c[0], c[1]): c[2:] for c in cells if c}
    rows = generate_run.results()
    assert set(shown) == {(f"{n} x 1", m) for n in (1, 2) for m in ("mapped", "heap")}
    for (size, mode), values in shown.items():
        group = [r for r in rows if r.mode == mode and f"{r.processes} x 1" == size]
        ttft = fmt_value(statistics.median(r.ttft_s for r in group), "s")
        rate = fmt_value(statistics.median(r.decode_tokens_per_s for r in group), "count/s")
        kv = group[0].kv_cache_bytes
        assert values[0] == ttft and values[1] == rate and values[4] == fmt_bytes(kv * len(group)), values
        assert values[7] == fmt_bytes(kv) and values[8] == fmt_bytes(group[0].runtime_bytes - kv), values
    assert "run with --runs" not in html


def _metric(key: str):
    return next(m for m in metrics_for(FAIR[0]) if m.key == key)


def test_a_lower_decode_throughput_is_the_regression_and_a_higher_one_is_not():
    """Tokens/s is higher-is-better, its mapped/heap ratio too: a significant drop regresses."""
    for key, base, worse in (
        ("mapped_decode_tokens_per_s", [40.0, 40.4, 39.6], [20.0, 20.2, 19.8]),
        ("decode_throughput_ratio", [1.0, 1.01, 0.99], [0.5, 0.505, 0.495]),
        ("ttft_ratio", [1.0, 1.01, 0.99], [2.0, 2.02, 1.98]),
    ):
        metric = _metric(key)
        assert Change(metric, base, worse).regressed, key
        assert not Change(metric, worse, base).regressed, key
        assert Change(metric, base, worse).changed
    assert Change(_metric("mapped_decode_tokens_per_s"), [40.0, 40.4, 39.6], [20.0, 20.2, 19.8]).call == "slower"


def test_decode_steps_are_read_only_inside_the_run_folder(tmp_path):
    """A summary row naming a target outside the folder reads nothing there, nor a malformed record."""
    run, outside = tmp_path / "run", tmp_path / "workers" / "x-mapped-n1-r0"
    outside.mkdir(parents=True)
    (outside / "w0.result.json").write_text(json.dumps({"token_latencies_s": [[0.1, 0.2]]}))
    (run / "workers" / "cpu-mapped-n1-r0").mkdir(parents=True)
    (run / "workers" / "cpu-mapped-n1-r0" / "w0.result.json").write_text('{"token_latencies_s": [["1", -2]]}')
    row = SummaryRow(target="../../workers/x", mode="mapped", processes=1, repeat=0)
    assert token_steps(outside.parent.parent, SummaryRow(target="x", mode="mapped", processes=1, repeat=0)) == [
        [0.1, 0.2]
    ]
    assert token_steps(run, row) == []
    assert token_steps(run, SummaryRow(target="cpu", mode="mapped", processes=1, repeat=0)) == []


@pytest.mark.memory
def test_the_history_line_carries_the_generate_figures(generate_run, tmp_path):
    """The history file's headline line holds the run's TTFT and tokens/s ratios, its summary lines the figures."""
    import csv

    from reports import report_main

    history = tmp_path / "history.csv"
    assert report_main([str(generate_run.out), "--history", str(history), "--out", str(tmp_path / "r.html")]) == 0
    lines = list(csv.DictReader(history.open(encoding="utf-8")))
    headline = json.loads((generate_run.out / "headline.json").read_text())["headline"]
    top = next(x for x in lines if x["record"] == "headline")
    for key in ("ttft_ratio", "decode_throughput_ratio"):
        assert float(top[key]) == pytest.approx(headline[key], rel=1e-6), key
    summary = {(x["mode"], x["processes"]): x for x in lines if x["record"] == "summary"}
    for row in generate_run.results():
        line = summary[(row.mode, str(row.processes))]
        assert int(line["sum_kv_cache_bytes"]) == row.kv_cache_bytes * row.processes
        assert float(line["ttft_s_median"]) > 0 and float(line["decode_tokens_per_s_median"]) > 0


def test_the_report_writes_a_rate_with_its_unit_as_the_terminal_does():
    """The headline table showed decode tokens/s as a bare 14.38 beside the terminal's 14.4/s."""
    from harness.core.units import fmt_value as terminal_value
    from reports.views import fmt_value

    assert fmt_value(14.38, "count/s") == terminal_value(14.38, "count/s") == "14.4/s"
    assert fmt_value(None, "count/s") == "–"
