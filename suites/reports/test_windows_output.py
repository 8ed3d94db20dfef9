"""Windows output says Windows (issue 44 item 3): the platform, and Wine when it is Wine, named
once at the top of the terminal output and of the report; the figures Windows measures (private
bytes) lead the table and are charted; the working set is called so; a projection uses private
bytes when they are all there is (Wine gives no USS).

The rows are test inputs built from a known law (report_fixtures), with what a Windows run under
Wine records (no PSS, USS refused, private bytes); the real run is the Wine lane's cpu-run."""

from __future__ import annotations

import re
from dataclasses import replace

from report_fixtures import fake_results, metadata, write_run
from rich.console import Console

from harness.console import print_judgement
from harness.core.rundata import load_run
from harness.core.verdict import judge
from reports.html import render_runs

PLATFORM = "platform: Windows under Wine 8.0 (AMD64)"
REFUSED = "USS not measured: Invalid parameter (OS error 87); no PSS on Windows: private bytes is the figure"


def _wine_run(tmp_path, name: str = "run"):
    rows = [replace(r, pss_bytes=None, uss_bytes=None, memory_note=REFUSED) for r in fake_results(processes=(1, 2))]
    meta = metadata("cpu", processes=[1, 2])
    meta["env"] |= {"os": "Windows-10-10.0.19045-SP0", "system": "Windows", "arch": "AMD64", "wine": "8.0"}
    return write_run(tmp_path / name, rows, meta)


def _terminal(folder) -> str:
    console = Console(record=True, width=200, highlight=False, markup=False, soft_wrap=True)
    print_judgement(console, judge(load_run(folder)))
    return console.export_text()


def test_the_terminal_names_windows_and_wine_once_at_the_top_and_leads_with_private_bytes(tmp_path):
    text = _terminal(_wine_run(tmp_path))
    assert text.splitlines()[0].startswith(PLATFORM), text.splitlines()[0]
    assert text.count("Windows under Wine") == 1, text
    assert "DXGI" in text.splitlines()[0], "ORT's DXGI line under Wine is explained"
    metrics = re.findall(r"│\s*(sum [a-zA-Z]+)\s*│", text)
    assert metrics[0] == "sum private" and "sum PSS" not in metrics, metrics


def test_a_linux_run_names_no_platform(tmp_path):
    text = _terminal(write_run(tmp_path / "run", fake_results(processes=(1, 2))))
    assert "platform:" not in text
    assert re.findall(r"│\s*(sum [a-zA-Z]+)\s*│", text)[0] == "sum PSS"


def test_the_report_names_windows_once_and_charts_private_bytes(tmp_path):
    html = render_runs([_wine_run(tmp_path)]).path.read_text(encoding="utf-8")
    assert html.count(PLATFORM) == 1, "named once, at the top"
    assert html.index(PLATFORM) < html.index('class="lead"'), "before the headline sentence"
    assert "Summed working set (RSS)" in html and "Summed RSS" not in html
    assert "Bars per worker: PRIVATE, RSS." in html, "private bytes are charted per worker"
    assert "private bytes" in html.split("Summed memory of all workers vs number of processes", 1)[1][:20000]
    assert "no memory figures were measured" not in html, "private bytes were measured"
