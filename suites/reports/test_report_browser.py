"""report.html in a real browser: headless Chromium renders the charts with no console errors.

Chromium comes from Debian (`apt-get install -y chromium`, as the CI script does); without it
these tests skip with that reason. The screenshot is kept as an artifact: in the pytest temp
folder and, when REPORT_ARTIFACT_DIR is set, copied there for CI to upload.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from report_fixtures import fail_worker, fake_results, metadata, write_run

from reports import render_runs

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]?\s*(.*)")


@dataclass
class Rendered:
    dom: str
    console: list[str]
    screenshot: Path


#: Written into the page by the row-height test: each worker row's height in text lines (its
#: height over its first cell's computed line height), laid out by the real browser.
MEASURE_ROWS = """<script>
(function () {
  var out = [];
  document.querySelectorAll("table.workers tbody tr").forEach(function (tr) {
    var lineHeight = parseFloat(getComputedStyle(tr.cells[0]).lineHeight);
    out.push((tr.getBoundingClientRect().height / lineHeight).toFixed(2));
  });
  var pre = document.createElement("pre");
  pre.id = "row-lines";
  pre.textContent = out.join(" ");
  document.body.appendChild(pre);
})();
</script>"""
#: The negative control: the same page with clipping undone (long cells wrap in a narrow column).
UNCLIPPED = "<style>table.data td.long div.clip { white-space: normal !important; max-width: 6em !important; }</style>"


def row_lines(page: Path, work: Path, extra: str = "") -> list[float]:
    """Heights of the worker rows, in lines, as headless Chromium lays the page out."""
    measured = work / f"measured-{page.stem}{'-unclipped' if extra else ''}.html"
    measured.write_text(
        page.read_text(encoding="utf-8").replace("</body>", extra + MEASURE_ROWS + "</body>"), encoding="utf-8"
    )
    dom = open_headless(measured, work).dom
    found = re.search(r'<pre id="row-lines">([^<]*)</pre>', dom)
    assert found, "the measuring script did not run"
    return [float(x) for x in found.group(1).split()]


def open_headless(page: Path, work: Path) -> Rendered:
    """Load ``page`` once: rendered DOM on stdout, console messages on stderr, a screenshot."""
    profile = work / "chromium-profile"
    screenshot = work / f"{page.stem}.png"
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # any network fetch would fail loudly
        f"--screenshot={screenshot}",
        "--window-size=1280,2000",
        "--dump-dom",
        page.as_uri(),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [m.group(1) for m in map(CONSOLE.search, proc.stderr.splitlines()) if m]
    return Rendered(proc.stdout, console, screenshot)


def keep_artifact(path: Path, name: str) -> None:
    target = os.environ.get("REPORT_ARTIFACT_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(target) / name)


def test_console_errors_are_detected(tmp_path):
    """Negative control: a page with a script error must show up, or the next test proves
    nothing."""
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>noSuchFunction();</script></body></html>")
    rendered = open_headless(page, tmp_path)
    assert any("Uncaught" in line for line in rendered.console), rendered.console


def test_report_renders_charts_without_console_errors(tmp_path):
    history = tmp_path / "history.csv"
    for day in (1, 2):  # two nights so the trend chart has a line
        meta = metadata(started=f"2026-11-0{day}T01:00:00+00:00")
        cpu = write_run(tmp_path / f"cpu-night-{day}", fake_results(), meta)
        render_runs([cpu], tmp_path / "scratch.html", history=history)
    failed = write_run(tmp_path / "failed", fail_worker(fake_results(processes=(2,))))
    qnn = write_run(
        tmp_path / "qnn", fake_results(target="qnn", ep_file_mapping="unavailable", processes=(1, 2)), metadata("qnn")
    )
    page = tmp_path / "report.html"
    render_runs([cpu, failed, qnn], page, history=history)

    rendered = open_headless(page, tmp_path)
    assert rendered.console == [], rendered.console
    charts_in_file = page.read_text().count('<svg class="chart"')
    assert charts_in_file >= 9
    assert rendered.dom.count('<svg class="chart"') == charts_in_file
    assert "<polyline" in rendered.dom and "<rect" in rendered.dom
    assert "Feature unavailable on this platform" in rendered.dom
    png = rendered.screenshot.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000
    keep_artifact(rendered.screenshot, "report.png")


def test_worker_rows_stay_a_few_lines_tall(tmp_path):
    """Long text cells (EP log tail, errors, mapping errors) are clipped to one line with the
    full text on hover: no worker row is taller than 3 lines. Before, the EP log column was
    squeezed to ~8 characters and every row was ~390 px tall."""
    from dataclasses import replace

    rows = fake_results(target="qnn", ep_file_mapping="unavailable", processes=(1, 2))
    rows = fail_worker(rows, error="RuntimeError: " + "the QNN backend refused the context binary; " * 8)
    rows[0] = replace(rows[0], map_errors="; ".join(["MappingError: mmap failed (ENOMEM)"] * 6))
    page = tmp_path / "workers.html"
    render_runs([write_run(tmp_path / "qnn", rows, metadata("qnn"))], page)

    lines = row_lines(page, tmp_path)
    assert len(lines) == len(rows)
    assert max(lines) <= 3, lines
    control = row_lines(page, tmp_path, UNCLIPPED)
    assert max(control) > 6, control  # the measurement sees tall rows when they are tall
