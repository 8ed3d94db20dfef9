"""A real harness run (cpu target, generated 16 MiB model, N = 1, 2) renders a report.

Small weights keep this quick (a few seconds): the default saving gates skip below 128 MiB,
so this checks the plumbing from runner to report, not the size of the saving.
"""

from __future__ import annotations

import re

from harness.core.rundata import load_run
from harness.core.schema import ResultRow
from harness.core.tables import read_frame, read_long
from reports import render_runs


def test_real_run_report(run_harness, tmp_path):
    out = tmp_path / "run"
    outcome = run_harness("run", "--model-size", "16MiB", "--processes", "1,2", "--quiet", out=out)
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    run = load_run(out)
    assert run.process_counts == [1, 2] and run.modes == ["mapped", "heap"]
    assert all(r.output_ok for r in run.results)

    frame = read_frame(out / "results.csv", ResultRow)
    assert len(frame) == 6 and frame["uss_bytes"].notna().all()

    report = render_runs([out], gates=["failed_workers==0"], history=tmp_path / "h.csv")
    assert report.exit_code == 0, [j.gate_lines() for j in report.judgements]
    html = report.path.read_text()
    assert html.count('<svg class="chart"') >= 3 and "shared pages" in html
    assert "Small weights" in html  # 16 MiB: the note explains why ratios stay near 1
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    long = read_long(out / "results_long.csv")
    assert set(long.metric) >= {"uss_bytes", "pss_bytes", "rss_bytes", "init_s"}
