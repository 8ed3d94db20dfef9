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


def open_headless(page: Path, work: Path, *, width: int = 1280) -> Rendered:
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
        f"--window-size={width},2000",
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


#: Written into the page by the layout test: every chart's legend box against its viewBox, the
#: screen scale of every chart (px per SVG unit: the fonts' scale), and the headline table's
#: right edge against its container and the window, as headless Chromium lays them out.
MEASURE_LAYOUT = """<script>
(function () {
  var out = {legends: [], scales: [], tables: []};
  document.querySelectorAll("svg").forEach(function (svg) {
    var vb = svg.viewBox.baseVal;
    if (!vb || !vb.width) { return; }
    out.scales.push([svg.getAttribute("aria-label"), svg.getBoundingClientRect().width / vb.width]);
    svg.querySelectorAll("g.legend, text:not([transform])").forEach(function (g) {
      var b = g.getBBox();
      var name = (g.tagName === "g" ? "legend of " : "text of ") + svg.getAttribute("aria-label");
      out.legends.push([name, b.x, b.y, b.x + b.width, b.y + b.height, vb.width, vb.height]);
    });
  });
  document.querySelectorAll("table.headline").forEach(function (t) {
    var widest = 0;
    t.querySelectorAll("td.ratio").forEach(function (td) {
      widest = Math.max(widest, td.getBoundingClientRect().width);
    });
    out.tables.push([t.scrollWidth, t.parentElement.clientWidth, t.getBoundingClientRect().right,
                     document.documentElement.clientWidth, widest]);
  });
  var pre = document.createElement("pre");
  pre.id = "layout";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def measure_layout(page: Path, work: Path, extra: str = "", width: int = 1400) -> dict:
    import html
    import json

    measured = work / f"layout-{page.stem}{'-control' if extra else ''}.html"
    measured.write_text(
        page.read_text(encoding="utf-8").replace("</body>", extra + MEASURE_LAYOUT + "</body>"), encoding="utf-8"
    )
    dom = open_headless(measured, work, width=width).dom
    found = re.search(r'<pre id="layout">([^<]*)</pre>', dom)
    assert found, "the measuring script did not run"
    return json.loads(html.unescape(found.group(1)))


def _three_repeat_run(tmp_path: Path) -> Path:
    """A run folder named as the harness names one, 3 repeats (the ratio cells carry their
    spread), with start-up peaks (the peak chart is drawn)."""
    from dataclasses import replace

    rows = [
        replace(
            r,
            peak_private_bytes=(300 if r.mode == "heap" else 30) * 1024**2,
            peak_rss_bytes=330 * 1024**2,
            peak_sample_hz=1400.0,
            peak_sample_max_gap_s=0.005,
            peak_phase="create",
            init_s=r.init_s * ((1 + 4 * r.repeat) if r.mode == "mapped" else 1),  # a spread as wide as a busy run's
        )
        for r in fake_results(processes=(2, 4), repeats=3)
    ]
    return write_run(tmp_path / "run-2026-12-02-101010", rows, metadata(processes=[2, 4], repeat=3))


def test_legends_stay_inside_their_charts_and_the_headline_table_inside_the_page(tmp_path):
    """At 1400 px: the start-up peak chart's legend was cut off (a 720-unit chart among 980-unit
    ones, its fonts drawn 1.36x the others'), and with --repeat 3 the ratio cell's spread pushed
    the headline table past the page."""
    page = tmp_path / "report.html"
    render_runs([_three_repeat_run(tmp_path)], page)
    layout = measure_layout(page, tmp_path)
    for name, left, top, right, bottom, width, height in layout["legends"]:
        assert left >= 0 and top >= 0 and right <= width and bottom <= height, (name, right, width, bottom, height)
    legends = [name for name, *_ in layout["legends"] if name.startswith("legend of ")]
    assert len(legends) >= 4 and "legend of Start-up peak vs steady memory per mode" in legends, legends
    scales = {round(scale, 3) for _, scale in layout["scales"]}
    assert len(scales) == 1, layout["scales"]  # every chart's text at one scale
    for scroll, room, right, window, ratio_cell in layout["tables"]:
        assert scroll <= room and right <= window and ratio_cell <= 260, (scroll, room, right, window, ratio_cell)
    # the negative controls: a legend past its chart, and the ratio cell as it was (the spread in
    # the bold ratio text, on one line), are seen
    wide = (
        '<svg viewBox="0 0 720 320" aria-label="control"><g class="legend"><text x="600" y="300" '
        'font-size="12">start-up peak, RSS (counts file pages)</text></g></svg>'
    )
    control = measure_layout(page, tmp_path, wide)
    assert any(n == "legend of control" and right > width for n, _, _, right, _, width, _ in control["legends"])
    as_before = (
        "<style>table.headline td.ratio div.spread { display: inline; white-space: nowrap !important; "
        "max-width: none !important; font: inherit !important; color: inherit !important; }</style>"
    )
    before = measure_layout(page, tmp_path, as_before)["tables"]
    assert any(ratio_cell > 400 for *_, ratio_cell in before), before  # the cell that pushed the table out
