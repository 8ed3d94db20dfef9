"""A report reads a run's facts and never writes them (issue 29, item 3).

Only the runner writes a run folder's facts (results.csv, summary.csv, results_long.csv,
metadata.json, the workers' files). Reporting it, into its folder or elsewhere, with a
baseline, a history, a comparison JSON or as part of a pytest session's page, changes none of
its files but the report itself. Before, rendering (re)wrote results_long.csv when it was
missing or older than results.csv, and publishing rewrote metadata.json's status when a report
file could not be written.

Each file is fingerprinted by content, inode and modification time: an atomic rewrite with the
same bytes (what the old results_long.csv refresh did) is a write too.
"""

from __future__ import annotations

import hashlib
import os
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
from report_fixtures import fake_results, metadata, write_run

from harness import publish
from harness.core.errors import ReportFailed
from harness.publish import render_test_session, report_run
from reports import report_main


def fingerprint(folder: Path) -> dict[str, tuple[str, int, int]]:
    """Every file under ``folder``: (sha256, inode, mtime in ns)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            info = path.stat()
            out[path.relative_to(folder).as_posix()] = (
                hashlib.sha256(path.read_bytes()).hexdigest(),
                info.st_ino,
                info.st_mtime_ns,
            )
    return out


def changed(before: dict, after: dict) -> list[str]:
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))


@pytest.fixture
def runs(tmp_path):
    """Test inputs: two runs of the same sweep, as the runner's writer leaves them."""
    meta = metadata(processes=[1, 2], repeat=1)
    first = write_run(tmp_path / "run-a", fake_results(processes=(1, 2)), meta)
    second = write_run(tmp_path / "run-b", fake_results(processes=(1, 2)), meta)
    return first, second


def test_reporting_into_the_run_folder_writes_only_the_report(runs):
    run, _ = runs
    before = fingerprint(run)
    assert report_main([str(run)]) == 0
    assert changed(before, fingerprint(run)) == ["report.html"]


def test_reporting_elsewhere_with_a_baseline_a_history_and_json_writes_nothing_in_either_run(runs, tmp_path):
    run, base = runs
    before = fingerprint(run), fingerprint(base)
    out = tmp_path / "elsewhere"
    out.mkdir()
    argv = [str(run), "--baseline", str(base), "--out", str(out / "r.html"), "--json", str(out / "c.json")]
    assert report_main([*argv, "--history", str(out / "history.csv")]) == 0
    assert (fingerprint(run), fingerprint(base)) == before
    assert {"c.json", "history.csv", "r.html"} <= set(os.listdir(out))


def test_a_run_folder_without_its_long_table_does_not_get_one(runs, tmp_path):
    """A folder copied without results_long.csv (or written by another tool) is reported as
    it is: the report does not complete it (before: it wrote one)."""
    run, _ = runs
    (run / "results_long.csv").unlink()
    before = fingerprint(run)
    assert report_main([str(run), "--out", str(tmp_path / "r.html")]) == 0
    assert fingerprint(run) == before


def test_an_older_long_table_is_not_rewritten(runs, tmp_path):
    """results_long.csv older than results.csv (a copy that touched one file) is left alone
    (before: rewritten, same bytes, new file)."""
    run, _ = runs
    stale = (run / "results.csv").stat().st_mtime_ns - 10**9
    os.utime(run / "results_long.csv", ns=(stale, stale))
    before = fingerprint(run)
    assert report_main([str(run), "--out", str(tmp_path / "r.html")]) == 0
    assert fingerprint(run) == before


def test_a_pytest_session_page_writes_nothing_in_its_runs(runs, tmp_path):
    """The plugin's --fmw-report-dir page (`render_test_session`) over the session's runs."""
    before = [fingerprint(r) for r in runs]
    records = [publish.test_record(f"test_{r.name}", "passed", str(r)) for r in runs]
    page = render_test_session([str(r) for r in runs], tmp_path / "session.html", records, {"passed": 2})
    assert page.is_file()
    assert [fingerprint(r) for r in runs] == before


@contextmanager
def file_size_limit(limit: int):
    """Files of this process cannot grow past ``limit`` bytes: a write beyond fails with
    EFBIG, as on a full disk (POSIX RLIMIT_FSIZE, SIGXFSZ ignored); restored afterwards."""
    resource = pytest.importorskip("resource", reason="RLIMIT_FSIZE is POSIX; the code under test is not")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def test_a_report_that_cannot_be_written_leaves_the_run_as_measured(runs, capsys):
    """`harness run`'s publishing step: report.html cannot be written (the disk is full). The
    run's metadata.json still says what the runner recorded (before: "failed: disk full
    writing report.html"), no headline.json is written, and the failure is a ReportFailed
    naming the file."""
    run, _ = runs
    before = fingerprint(run)
    with file_size_limit(20_000), pytest.raises(ReportFailed, match="writing report.html") as caught:
        report_run(run, history=None, render=True, outcomes=False)
    assert caught.value.out == run
    assert fingerprint(run) == before
    assert '"status": "complete"' in (run / "metadata.json").read_text()
    capsys.readouterr()
