"""report.html for one and several runs, and `report_main`'s exit codes and messages."""

from __future__ import annotations

import json
import re

import pytest
from report_fixtures import fail_worker, fake_results, metadata, write_run

from reports import render_runs, report_main

EXTERNAL = re.compile(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", re.I)


@pytest.fixture
def cpu_run(tmp_path):
    """Test input: a healthy cpu sweep (N = 1, 2, 4)."""
    return write_run(tmp_path / "cpu-run", fake_results())


@pytest.fixture
def failed_run(tmp_path):
    return write_run(tmp_path / "failed-run", fail_worker(fake_results(), error="Boom: crashed"))


@pytest.fixture
def qnn_run(tmp_path):
    """Test input: a qnn run on a platform where the EP turns file mapping off."""
    rows = fake_results(target="qnn", ep_file_mapping="unavailable", processes=(2,))
    return write_run(tmp_path / "qnn-run", rows, metadata("qnn", processes=[2]))


def test_one_run_report(cpu_run, capsys):
    assert report_main([str(cpu_run)]) == 0
    html = (cpu_run / "report.html").read_text()
    assert f"report: {cpu_run / 'report.html'}" in capsys.readouterr().out
    assert html.count("<svg") >= 3
    assert not EXTERNAL.search(html) and "http://" not in html and "https://" not in html
    assert "shared pages" in html and "cannot show the saving" in html
    assert "Feature unavailable" not in html
    assert "Marginal memory of one more session" in html and "Projection for 8 sessions" in html
    assert "Runs side by side" not in html
    assert (cpu_run / "results_long.csv").is_file()


def test_failures_are_highlighted_and_fail_the_default_gate(failed_run, capsys):
    assert report_main([str(failed_run)]) == 1
    out = capsys.readouterr().out
    assert "FAIL [failed-run] failed_workers==0" in out
    html = (failed_run / "report.html").read_text()
    assert html.count('<tr class="failed">') >= 2  # the worker row and its summary group
    assert "Boom: crashed" in html and "1 worker(s) failed" in html


def test_qnn_unavailable_run_says_so(qnn_run):
    outcome = render_runs([qnn_run])
    assert outcome.exit_code == 0 and outcome.path == qnn_run / "report.html"
    assert outcome.judgements[0].feature.state == "unavailable"
    html = outcome.path.read_text()
    assert "Feature unavailable on this platform" in html
    assert "measure the same path" in html
    assert "Only N=2 was measured" in html and "needs a sweep" in html


def test_several_runs_side_by_side(cpu_run, qnn_run, failed_run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert report_main([str(cpu_run), str(qnn_run), str(failed_run)]) == 1
    html = (tmp_path / "report.html").read_text()  # default out for several runs: ./report.html
    assert "Runs side by side" in html
    for anchor in ("run-0", "run-1", "run-2"):
        assert f'id="{anchor}"' in html and f'href="#{anchor}"' in html
    assert html.count('<section class="run"') == 3
    assert not EXTERNAL.search(html)


def test_user_gates_and_gates_file(cpu_run, tmp_path, capsys):
    gates = tmp_path / "gates.txt"
    gates.write_text("# strict\nmapped_pss_ratio<=0.1\n")
    out = tmp_path / "custom.html"
    code = report_main(
        [
            str(cpu_run),
            "--out",
            str(out),
            "--gates-file",
            str(gates),
            "--gate",
            "failed_workers==0",
            "--no-default-gates",
        ]
    )
    assert code == 1 and out.is_file()
    text = capsys.readouterr().out
    assert "FAIL [cpu-run] mapped_pss_ratio<=0.1" in text
    assert "gates: 2 in all: 1 passed, 0 skipped (not checked), 1 failed" in text
    assert report_main([str(cpu_run), "--gate", "mapped_pss_ratio<=0.9"]) == 0


def test_unmeasured_gate_fails(qnn_run, capsys):
    assert report_main([str(qnn_run), "--gate", "system_delta_ratio<=1", "--gate", "mapped_pss_ratio<=2"]) == 0
    rows = fake_results(target="cpu", modes=("heap",))
    heap_only = write_run(qnn_run.parent / "heap-only", rows)
    assert report_main([str(heap_only), "--gate", "mapped_pss_ratio<=2"]) == 1
    assert "not measured" in capsys.readouterr().out
    assert "Only heap mode was run" in (heap_only / "report.html").read_text()


def test_history_adds_a_trend_chart(tmp_path):
    history = tmp_path / "history.csv"
    for day in (1, 2):
        meta = metadata(started=f"2026-11-0{day}T00:00:00+00:00")
        run = write_run(tmp_path / f"night-{day}", fake_results(), meta)
        outcome = render_runs([run], history=history)
        assert outcome.history_appended == [f"night-{day}"]
    html = outcome.path.read_text()
    assert "Headline ratios (mapped / heap) over recent runs" in html
    assert html.count("<svg") == 4


def bad_inputs(tmp_path):
    """Test inputs for exit code 2: each a broken invocation or run folder."""
    no_results = tmp_path / "no-results"
    no_results.mkdir()
    future = write_run(tmp_path / "future", fake_results(processes=(1,)))
    meta = json.loads((future / "metadata.json").read_text())
    (future / "metadata.json").write_text(json.dumps(meta | {"format_version": 99}))
    good = write_run(tmp_path / "good", fake_results(processes=(1,)))
    return {
        "missing folder": ([str(tmp_path / "nope")], "no such run folder"),
        "missing results.csv": ([str(no_results)], "no results.csv"),
        "unknown format_version": ([str(future)], "format_version 99"),
        "bad gate": ([str(good), "--gate", "bogus<=1"], "unknown metric 'bogus'"),
        "malformed gate": ([str(good), "--gate", "mapped_pss_ratio=<1"], "expected METRIC OP"),
        "missing gates file": ([str(good), "--gates-file", str(tmp_path / "g")], "gates file"),
        "no run folder": ([], "required"),
        "unknown option": ([str(good), "--bogus"], "unrecognized arguments"),
        "missing out folder": ([str(good), "--out", str(tmp_path / "a" / "b.html")], "does not exist"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing folder",
        "missing results.csv",
        "unknown format_version",
        "bad gate",
        "malformed gate",
        "missing gates file",
        "no run folder",
        "unknown option",
        "missing out folder",
    ],
)
def test_bad_input_exits_2_with_one_line(case, tmp_path, capsys):
    argv, needle = bad_inputs(tmp_path)[case]
    assert report_main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and "Traceback" not in captured.err + captured.out


def test_fallback_retry_and_interruption_are_explained(tmp_path):
    """Test input: one worker fell back after mapping errors, one mapped on its 2nd try, and
    the run was interrupted after N=2 of the asked 1, 2, 4."""
    from dataclasses import replace

    rows = fake_results(processes=(1, 2))
    rows[2] = replace(
        rows[2],
        path_taken="fallback",
        map_attempts=3,
        map_errors="MappingError: mmap failed (ENOMEM); MappingError: again",
    )
    rows[3] = replace(rows[3], map_attempts=2, map_errors="MappingError: transient")
    meta = metadata() | {"status": "interrupted"}
    run = write_run(tmp_path / "partial", rows, meta)
    assert report_main([str(run), "--no-default-gates", "--gate", "fallback_workers==0"]) == 1
    html = (run / "report.html").read_text()
    assert "1 worker(s) fell back to the heap" in html
    assert "MappingError: mmap failed (ENOMEM)" in html
    assert "1 worker(s) mapped after a retry" in html and "MappingError: transient" in html
    assert "Run interrupted" in html
    assert "1, 2 (asked: 1, 2, 4)" in html


def test_report_opens_with_a_sentence_title_and_badges(cpu_run):
    html = render_runs([cpu_run]).path.read_text()
    header = html.split("</header>")[0]
    assert "<title>File mapped weights, target cpu: run cpu-run</title>" in html
    assert '<span class="badge pass" title="verdict: pass">pass</span>' in header
    assert 'class="badge feature-active"' in header
    lead = header.split('<p class="lead">')[1].split("</p>")[0]
    assert "768.0 MiB less summed PSS than heap" in lead and "57% saved" in lead
    assert "faster" in lead and "Verdict: pass" in lead


def test_a_test_session_with_one_run_and_a_failed_test_shows_no_pass_badge(cpu_run):
    """`pytest --fmw-report-dir` with one measured run whose test passed and another test that
    failed: before, the header showed the run's green "pass" badge beside "tests: 1 failed"."""
    from reports import TestRecord

    tests = [TestRecord("test_a.py::test_run", "passed", str(cpu_run)), TestRecord("test_a.py::test_fail", "failed")]
    html = render_runs([cpu_run], tests=tests, test_counts={"passed": 1, "failed": 1}).path.read_text()
    header = html.split("</header>")[0]
    assert '<span class="badge fail">tests: 1 failed, 1 passed</span>' in header
    assert 'class="badge pass"' not in header, header
    assert "768.0 MiB less summed PSS than heap" in header  # the run's sentence still opens the page


def test_unexercised_feature_never_gets_a_green_badge(qnn_run):
    html = render_runs([qnn_run]).path.read_text()
    header = html.split("</header>")[0]
    assert "target qnn" in header and "QNN file mapped weights" not in html
    assert '<span class="badge pass-unexercised" title="verdict: pass">pass, feature not exercised</span>' in header
    assert '<span class="badge feature-unavailable"' in header
    assert 'class="badge pass"' not in html
    assert "NOT exercised" in header


def test_long_cells_are_clipped_with_the_full_text_on_hover(qnn_run):
    from html import escape

    from report_fixtures import UNAVAILABLE_LOG

    html = render_runs([qnn_run]).path.read_text()
    workers = html.split('table class="data sortable workers"')[1]
    text = escape(UNAVAILABLE_LOG)
    assert f'class="long" title="{text}"><div class="clip">{text}</div>' in workers


def test_the_same_run_twice_is_a_usage_error(cpu_run, capsys):
    """`report r1 r1` would read as two runs agreeing with each other."""
    assert report_main([str(cpu_run), str(cpu_run / ".." / cpu_run.name)]) == 2
    assert "the same run folder is given twice" in capsys.readouterr().err


def test_the_report_s_words_title_caption_and_system_noise(tmp_path):
    """The title read "run run-2026-..."; the init chart's caption began with a bare "ms." after
    its title; a system delta the notes call noise stood in the headline table as a difference."""
    import csv

    from harness.core.rundata import load_run
    from harness.core.schema import SummaryRow
    from harness.core.summary import summarize
    from harness.core.tables import write_rows

    folder = write_run(tmp_path / "run-2026-12-02-101010", fake_results(processes=(2,)), metadata(processes=[2]))
    rows = load_run(folder).results
    noisy = {
        (r.target, r.mode, r.processes, r.sessions_per_process, r.repeat): (300 * 1024**2, 200 * 1024**2) for r in rows
    }
    write_rows(folder / "summary.csv", summarize(rows, noisy), SummaryRow)  # idle noise 2/3 of the delta
    page = tmp_path / "report.html"
    render_runs([folder], page)
    html = page.read_text()
    assert "<title>File mapped weights, target cpu: run-2026-12-02-101010</title>" in html
    assert "run run-" not in html and "Run run-" not in html
    caption = re.search(r"<strong>Init time of every worker[^<]*</strong>\s*([^<]*)", html)
    assert caption and caption.group(1).startswith("Times in ms."), caption and caption.group(1)
    row = re.search(r"<td>Drop in system available memory</td>(.*?)</tr>", html, re.S).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert cells[2] == "noise" and "within its idle noise" in cells[4], cells
    assert list(csv.reader(open(folder / "summary.csv")))  # the run folder still reads
