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
from harness.core.units import fmt_value
from reports.charts import token_steps

PROMPT, NEW = 16, 8


@pytest.fixture(scope="module")
def generate_run(harness_runner, request, tmp_path_factory):
    """The issue's first Done-when command, with its report."""
    args = ["run", "--workload", "generate", "--processes", "2", "--prompt-tokens", str(PROMPT)]
    args += ["--new-tokens", str(NEW), "--quiet"]
    outcome = harness_runner.run(*args, owner=request.module.__name__, scratch=tmp_path_factory.mktemp("genrep"))
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    return outcome


def _steps(out, row) -> list[list[float]]:
    record = json.loads((out / "workers" / f"cpu-{row.mode}-n2-r0" / f"w{row.worker}.result.json").read_text())
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
        sessions = [s for r in generate_run.results() if r.mode == mode for s in _steps(generate_run.out, r)]
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
