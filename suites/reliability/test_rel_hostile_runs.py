"""Hostile run folders, command lines, CSV cells, full disks, torn histories and plugin options
(issue 16): each class ends in the exit code and the one line it promises, and changes nothing
outside the folders it may write (a snapshot of the folder before and after).

The run folder every report case forges is a real run (real workers, real figures), copied and
edited the way a hostile user or a corrupted disk would. A forgery that is internally
consistent (summary.csv rewritten to agree with the edited results.csv) may be read, but it can
never make PASS.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from rel_support import ROOT, harness_env, one_line_error, run_args, run_quick, unwritable

from harness.core.schema import ResultRow, SummaryRow
from harness.core.summary import group_key, summarize
from harness.core.tables import read_frame, read_long, read_rows, write_long, write_rows

#: One xdist worker runs this module: its module fixtures (a run, a cache, an install) are made
#: once, not once on each worker (docs/testing.md).
pytestmark = pytest.mark.xdist_group("rel_hostile_runs")

# Not `memory`: these tests judge refusals of forged folders and bad input, never a memory figure.


# ----------------------------------------------------------------------------- helpers


def tree_state(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time: what "unchanged" means."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    }


def table(path: Path) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(path.open(newline="")))
    return rows[0], rows[1:]


def write_table(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with path.open("w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows([header, *rows])


def set_cell(path: Path, column: str, value: str, row: int | None = None) -> None:
    """Set ``column`` of every row (or of row number ``row``) of a run CSV to ``value``."""
    header, rows = table(path)
    for i, line in enumerate(rows):
        if row is None or i == row:
            line[header.index(column)] = value
    write_table(path, header, rows)


def edit_json(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def drop_first_row(path: Path) -> None:
    header, rows = table(path)
    write_table(path, header, rows[1:])


def consistent(folder: Path) -> None:
    """Make a forged folder agree with itself: summary.csv recomputed from the edited
    results.csv (the system deltas kept), headline.json removed."""
    results = read_rows(folder / "results.csv", ResultRow)
    system = {
        group_key(s): (s.system_delta_bytes, s.system_noise_bytes)
        for s in read_rows(folder / "summary.csv", SummaryRow)
    }
    write_rows(folder / "summary.csv", summarize(results, system), SummaryRow)
    (folder / "headline.json").unlink()


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, model_cache) -> Path:
    """One real run, both modes, 2 workers each: the original every forgery starts from."""
    out = tmp_path_factory.mktemp("hostile") / "run"
    proc = run_quick(run_args(processes=2, out=out), model_cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture
def forged(real_run, tmp_path) -> Callable[[Callable[[Path], None]], Path]:
    def make(change: Callable[[Path], None]) -> Path:
        folder = tmp_path / "forged"
        shutil.copytree(real_run, folder)
        change(folder)
        return folder

    return make


def report(folder: Path, model_cache: Path, *extra: str, out: Path | None = None) -> subprocess.CompletedProcess:
    out = out or folder.parent / "report.html"
    return run_quick(["report", str(folder), "--out", str(out), *extra], model_cache)


def refused(folder: Path, model_cache: Path, *expected: str, extra: tuple[str, ...] = ()) -> str:
    """``report`` of ``folder``: exit 2, one line with ``expected``, the folder unchanged and
    no report written."""
    before = tree_state(folder)
    proc = report(folder, model_cache, *extra)
    line = one_line_error(proc, 2, *expected)
    assert tree_state(folder) == before
    assert not (folder.parent / "report.html").exists()
    return line


# ----------------------------------------------------------------------------- 1. report believes nothing

CONTRADICTIONS = {
    "memory_ok=False in results only": (
        lambda f: set_cell(f / "results.csv", "memory_ok", "False"),
        "summary.csv contradicts results.csv",
    ),
    "a worker row deleted": (lambda f: drop_first_row(f / "results.csv"), "summary.csv contradicts results.csv"),
    "exit_code=-9 in results only": (
        lambda f: set_cell(f / "results.csv", "exit_code", "-9"),
        "summary.csv contradicts results.csv",
    ),
    "summary ok_workers raised": (
        lambda f: set_cell(f / "summary.csv", "ok_workers", "7"),
        "ok_workers is 7 there",
    ),
    "headline failed_workers lowered": (
        lambda f: (set_cell(f / "results.csv", "output_ok", "False", row=0), _resummarise(f)),
        "headline.json contradicts results.csv: failed_workers",
    ),
    "headline status": (
        lambda f: edit_json(f / "headline.json", lambda d: d.update(status="interrupted")),
        "headline.json contradicts metadata.json: status",
    ),
    "rows of a mode metadata never ran": (
        lambda f: edit_json(f / "metadata.json", lambda d: d["run"].update(modes=["mapped"])),
        "results.csv contradicts metadata.json: a worker row has mode=heap",
    ),
}


def _resummarise(folder: Path) -> None:
    """summary.csv agrees with the edited results.csv again, headline.json is left as it was."""
    headline = (folder / "headline.json").read_bytes()
    consistent(folder)
    (folder / "headline.json").write_bytes(headline)


@pytest.mark.parametrize("case", list(CONTRADICTIONS))
def test_report_refuses_files_that_contradict_each_other(forged, model_cache, case):
    change, expected = CONTRADICTIONS[case]
    refused(forged(change), model_cache, "error: ", expected)


BAD_CELLS = {
    "processes=1.5": ("results.csv", "processes", "1.5", "not an integer (a 3-character cell)"),
    "mode=bogus": ("results.csv", "mode", "bogus", "a 5-character value that is not one of mapped, heap"),
    "pss_bytes=1e308": ("results.csv", "pss_bytes", "1e308", "not an integer"),
    "pss_bytes=2**50": ("results.csv", "pss_bytes", str(2**50), "is outside 0..1.1259e+15"),
    "rss_bytes=-1": ("results.csv", "rss_bytes", "-1", "is outside"),
    "init_s=nan": ("results.csv", "init_s", "nan", "not a finite number (nan)"),
    "load_s=-0.5": ("results.csv", "load_s", "-0.5", "is outside"),
    "sum_pss_bytes=-100": ("summary.csv", "sum_pss_bytes", "-100", "-100 is outside"),
    "init_s_median=inf": ("summary.csv", "init_s_median", "inf", "not a finite number (inf)"),
}


@pytest.mark.parametrize("case", list(BAD_CELLS))
def test_report_refuses_a_cell_outside_its_type_or_range(forged, model_cache, case):
    name, column, value, expected = BAD_CELLS[case]
    folder = forged(lambda f: set_cell(f / name, column, value, row=0))
    refused(folder, model_cache, f"{name}:2: column {column}: ", expected)


FORGERIES = {
    "every row memory_ok=False": lambda f: set_cell(f / "results.csv", "memory_ok", "False"),
    "every row exit_code=-9": lambda f: set_cell(f / "results.csv", "exit_code", "-9"),
    "a worker row deleted": lambda f: drop_first_row(f / "results.csv"),
    "pss_bytes=0 (100 % saved)": lambda f: set_cell(f / "results.csv", "pss_bytes", "0"),
    "uss above rss": lambda f: set_cell(f / "results.csv", "uss_bytes", str(2**40)),
}


@pytest.mark.parametrize("case", list(FORGERIES))
def test_a_consistent_forgery_never_makes_pass(forged, model_cache, case):
    folder = forged(lambda f: (FORGERIES[case](f), consistent(f)))
    proc = report(folder, model_cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "verdict: PASS" not in proc.stdout and "Traceback" not in proc.stderr
    assert "100% saved" not in proc.stdout and "SLOWER" not in proc.stdout


def _deep(folder: Path) -> None:
    (folder / "metadata.json").write_text("[" * 100_000 + "]" * 100_000)


METADATA = {
    "env as a list": (lambda f: edit_json(f / "metadata.json", lambda d: d.update(env=[1, 2])), "env is a list"),
    "nested 100 000 deep": (_deep, "nested deeper than 32 levels"),
    "labels as a string": (
        lambda f: edit_json(f / "metadata.json", lambda d: d["run"].update(labels="x")),
        "run.labels is a string",
    ),
    "NaN in duration": (
        lambda f: (f / "metadata.json").write_text(
            (f / "metadata.json").read_text().replace('"duration_s": ', '"duration_s": NaN, "x": ')
        ),
        "NaN is not a JSON number",
    ),
}


@pytest.mark.parametrize("case", list(METADATA))
def test_report_refuses_malformed_metadata_in_one_line(forged, model_cache, case):
    change, expected = METADATA[case]
    refused(forged(change), model_cache, "metadata.json: ", expected)


@pytest.mark.parametrize("how", ["same path", "trailing slash", "symlink", "copy"])
def test_report_refuses_a_run_as_its_own_baseline(real_run, tmp_path, model_cache, how):
    if how == "symlink":
        baseline = tmp_path / "link"
        baseline.symlink_to(real_run)
    elif how == "copy":
        baseline = tmp_path / "copy"
        shutil.copytree(real_run, baseline)
    else:
        baseline = Path(f"{real_run}/") if how == "trailing slash" else real_run
    before = tree_state(real_run)
    out = tmp_path / "report.html"
    proc = report(real_run, model_cache, "--baseline", str(baseline), out=out)
    one_line_error(proc, 2, f"--baseline {baseline}", "copy of the run" if how == "copy" else "itself")
    assert tree_state(real_run) == before and not out.exists()


# ----------------------------------------------------------------------------- 2. bad command lines

BOUNDS = {
    "--intra-op-threads 100000": "at most",
    "--processes 2000": "--processes 2000: at most 1024",
    "--sessions-per-process 5000": "at most 1024",
    "--repeat 100000": "--repeat 100000: at most 1000",
    "--runs 10000000": "--runs 10000000: at most 1000000",
    "--worker-timeout 1e9": "at most 86400 s",
    "--model-size 1TiB": "at most 64.0 GiB",
    "--max-attempts 1000": "at most 100",
    "--fault map=100000": "--fault K 100000: at most 1000",
    "--project-to 100000000x1GiB": "at most 1000000",
    "--fault map=1 --fault map=2": "--fault map: given twice",
    "--session-config a=1 --session-config a=2": "--session-config a: given twice",
    "--provider-option a=1 --provider-option a=2": "--provider-option a: given twice",
    "--label k=1 --label k=2": "--label k: given twice",
    "--free-dim b=1 --free-dim b=2": "--free-dim b: given twice",
    "--input x=1 --input x=2": "--input x: given twice",
}


@pytest.mark.parametrize("options", list(BOUNDS))
def test_a_bad_command_line_is_refused_before_any_work(tmp_path, model_cache, options):
    cache, out = tmp_path / "cache", tmp_path / "run"
    sentinel = tmp_path / "sentinel"
    sentinel.mkdir()
    (sentinel / "keep.txt").write_text("mine")
    before = tree_state(tmp_path)
    proc = run_quick(run_args(*options.split(), cache=cache, out=out), model_cache, cwd=sentinel, timeout=60)
    one_line_error(proc, 2, "error: ", BOUNDS[options])
    assert tree_state(tmp_path) == before, "a refused command line created or changed files"


def _unicode_model(tmp_path: Path) -> Path:
    import numpy as np
    from rel_support import matmul_model

    folder = tmp_path / "modèle_ü"
    folder.mkdir()
    return matmul_model(folder / "modèle.onnx", np.ones((64, 64), dtype=np.float32))


def _run_in_c_locale(args: list[str], model_cache: Path, **extra: str) -> subprocess.CompletedProcess:
    env = harness_env(model_cache)
    for name in ("PYTHONUTF8", "PYTHONCOERCECLOCALE", "LC_CTYPE"):
        env.pop(name, None)
    env.update({"LC_ALL": "C", "LANG": "C", **extra})
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )


def test_a_unicode_model_path_under_lc_all_c_works_or_fails_in_one_line(tmp_path, model_cache):
    model = _unicode_model(tmp_path)
    out = tmp_path / "run"
    # Python coerces the C locale to UTF-8 (PEP 538): the run works, for real
    proc = _run_in_c_locale(
        run_args(model=("--model", str(model)), out=out, cache=tmp_path / "cache", report=True), model_cache
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / "report.html").is_file()
    # without coercion or UTF-8 mode the path cannot be text: one line, before any work
    out2 = tmp_path / "run2"
    proc = _run_in_c_locale(
        run_args(model=("--model", str(model)), out=out2, cache=tmp_path / "cache2"),
        model_cache,
        PYTHONCOERCECLOCALE="0",
        PYTHONUTF8="0",
    )
    one_line_error(proc, 2, "not text in this locale", "LC_ALL=C.UTF-8")
    assert not out2.exists() and not (tmp_path / "cache2").exists()


# ----------------------------------------------------------------------------- 3. CSV neutralisation


def test_text_cells_are_neutralised_numbers_are_not(tmp_path):
    hostile = ['=HYPERLINK("http://x")', "+1+1", "-2-2", "@SUM(A1)", "\tx", "\rx", "'quoted", "plain"]
    row = ResultRow(target="cpu", mode="mapped", processes=1, sessions_per_process=1, repeat=0, worker=0, init_s=0.01)
    rows = [
        ResultRow(**{**row.__dict__, "worker": i, "error": text, "exit_code": -9, "memory_note": text})
        for i, text in enumerate(hostile)
    ]
    results = write_rows(tmp_path / "results.csv", rows, ResultRow)
    summary = [SummaryRow(target="cpu", mode="mapped", processes=1, repeat=0, system_delta_bytes=-5, note="=1+2")]
    write_rows(tmp_path / "summary.csv", summary, SummaryRow)
    write_long(tmp_path / "long.csv", rows, run_id="-run")
    header, lines = table(results)
    errors = [line[header.index("error")] for line in lines]
    assert errors == ["'" + t if t[0] in "=+-@\t\r'" else t for t in hostile]
    assert {line[header.index("exit_code")] for line in lines} == {"-9"}, "a negative number stays a number"
    s_header, s_lines = table(tmp_path / "summary.csv")
    assert s_lines[0][s_header.index("system_delta_bytes")] == "-5"
    assert s_lines[0][s_header.index("note")] == "'=1+2"
    # read back: the very texts, by every reader
    assert [r.error for r in read_rows(results, ResultRow)] == hostile
    assert list(read_frame(results, ResultRow)["error"]) == hostile
    assert read_rows(tmp_path / "summary.csv", SummaryRow)[0].note == "=1+2"
    assert set(read_long(tmp_path / "long.csv")["run_id"]) == {"-run"}
    assert "'-run" in (tmp_path / "long.csv").read_text()


def test_a_history_label_is_neutralised_and_read_back(real_run, tmp_path, model_cache):
    history = tmp_path / "history.csv"
    folder = tmp_path / "run"
    shutil.copytree(real_run, folder)
    edit_json(folder / "metadata.json", lambda d: d["run"].update(labels={"@evil": "=cmd|' /C calc'!A0"}))
    (folder / "headline.json").unlink()
    proc = report(folder, model_cache, "--history", str(history))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = history.read_text()
    assert ",'@evil==cmd|' /C calc'!A0," in text or "\"'@evil==cmd|' /C calc'!A0\"" in text
    from reports.history import read_history

    _, rows = read_history(history)
    assert {r["labels"] for r in rows} == {"@evil==cmd|' /C calc'!A0"}


# ----------------------------------------------------------------------------- 4. honest status


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE and SIGXFSZ are POSIX")
def test_disk_full_writing_report_html_fails_the_command_but_leaves_the_run_as_measured(tmp_path, model_cache):
    """A report never writes a run's facts (issue 29): the publishing step fails with one line
    and exit 1, metadata.json keeps the runner's status, no headline.json says anything, and
    `report` renders the folder once there is room."""
    out = tmp_path / "run"

    def small_files() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))  # tables fit, report.html does not

    proc = run_quick(run_args(out=out, report=True), model_cache, preexec=small_files)
    one_line_error(proc, 1, "error: report failed: disk full writing report.html", str(out))
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["status"] == "complete", meta["status"]
    assert not (out / "headline.json").exists(), "no headline.json may say pass for it"
    assert not (out / "report.html").exists()
    before = tree_state(out)
    again = report(out, model_cache, out=out / "report.html")
    assert again.returncode in (0, 1) and "run status is" not in again.stdout, again.stdout + again.stderr
    assert (out / "report.html").is_file()
    assert {k: v for k, v in tree_state(out).items() if k != "report.html"} == before


def test_a_torn_history_line_is_refused_and_a_missing_line_end_repaired(real_run, tmp_path, model_cache):
    history = tmp_path / "history.csv"
    proc = report(real_run, model_cache, "--history", str(history), out=tmp_path / "r1.html")
    assert proc.returncode == 0, proc.stderr
    whole = history.read_bytes()
    header_width = len(whole.splitlines()[0].split(b","))
    # a cut write: the last line stops half way -> refused, before anything is appended
    history.write_bytes(whole[: len(whole) - 40])
    before = history.read_bytes()
    line = one_line_error(report(real_run, model_cache, "--history", str(history)), 2, "--history")
    assert f"under a {header_width}-column header" in line and "torn" in line
    assert history.read_bytes() == before
    # all cells there, only the line end missing -> the next run starts on a line of its own
    history.write_bytes(whole.rstrip(b"\n"))
    copy = tmp_path / "copy"
    shutil.copytree(real_run, copy)
    edit_json(copy / "metadata.json", lambda d: d["run"].update(started="2030-01-01T00:00:00+00:00"))
    (copy / "headline.json").unlink()
    proc = report(copy, model_cache, "--history", str(history), out=tmp_path / "r2.html")
    assert proc.returncode == 0, proc.stderr
    header, rows = table(history)
    assert all(len(r) == len(header) for r in rows), "a row was glued to another"
    assert [r[header.index("record")] for r in rows].count("headline") == 2


def test_a_history_whose_rows_do_not_match_its_header_is_refused(real_run, tmp_path, model_cache):
    history = tmp_path / "history.csv"
    assert report(real_run, model_cache, "--history", str(history)).returncode == 0
    header, rows = table(history)
    rows[0] = rows[0] + rows[1]  # 2 x the cells, as a glued line gives
    write_table(history, header, rows)
    line = one_line_error(report(real_run, model_cache, "--history", str(history)), 2, "--history", ":2:")
    assert f"{2 * len(header)} cells under a {len(header)}-column header" in line


# ----------------------------------------------------------------------------- 5. plugin usage errors


def _pytest_in(project: Path, *options: str) -> subprocess.CompletedProcess:
    (project / "test_x.py").write_text("def test_x(harness_options):\n    assert harness_options\n")
    env = dict(os.environ)
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *options],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("case", ["report-dir is a file", "report-dir unwritable", "processes abc", "processes 0"])
def test_plugin_usage_errors_are_usage_errors_before_the_session(tmp_path, case):
    project = tmp_path / "project"
    project.mkdir()
    target = tmp_path / "reports"
    options: tuple[str, ...]
    if case == "report-dir is a file":
        target.write_text("a file")
        options, expected = ("--fmw-report-dir", str(target)), "is a file, not a folder"
    elif case == "report-dir unwritable":
        target.mkdir()
        options, expected = ("--fmw-report-dir", str(target)), "cannot write in"
    else:
        value = case.split()[-1]
        options, expected = (
            ("--fmw-processes", value),
            f"--fmw-processes '{value}'" if value == "abc" else "must be >= 1",
        )
    before = tree_state(tmp_path)
    with unwritable(target) if case == "report-dir unwritable" else contextlib.nullcontext():
        proc = _pytest_in(project, *options)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "INTERNALERROR" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr
    assert "passed" not in proc.stdout, "a session started"
    after = tree_state(tmp_path)
    assert {k: v for k, v in after.items() if k != "project/test_x.py"} == before
