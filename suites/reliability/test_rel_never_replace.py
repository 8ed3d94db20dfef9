"""Never replace what is not ours: every file the harness writes (--history of `run` and of
`report`, `report --out`, the files of a reused --out) refuses, with exit 2 before any work, a
path that holds a device (a /dev/null twin), a FIFO, a folder, or a symlink (dangling, or to any
of those; a symlink to a regular file too: test_rel_hostile_links.py). The run's own files are
never written over (`report --out RUN/results.csv`,
`--history` inside --out, a report over its own history).

Before: `--history /dev/null` run as root replaced the system's /dev/null with a regular
file, and `report --out RUN/results.csv` overwrote the run's own data.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from rel_support import char_device_like_dev_null, one_line_error, record_as_written, run_args, run_quick

#: One xdist worker runs this module: its module fixtures (a run, a cache, an install) are made
#: once, not once on each worker (docs/testing.md).
pytestmark = pytest.mark.xdist_group("rel_never_replace")

KINDS = ["dev-null", "fifo", "folder", "dangling-symlink", "symlink-to-dev-null"]


def _make(kind: str, folder: Path) -> tuple[Path, int]:
    """A path of ``kind`` in ``folder``, and the file type its target must keep."""
    path = folder / f"target-{kind}"
    if kind == "dev-null":
        return char_device_like_dev_null(folder), stat.S_IFCHR
    if kind == "fifo":
        os.mkfifo(path)
        return path, stat.S_IFIFO
    if kind == "folder":
        path.mkdir()
        return path, stat.S_IFDIR
    if kind == "dangling-symlink":
        path.symlink_to(folder / "nowhere")
        return path, stat.S_IFLNK
    if kind == "symlink-to-dev-null":
        path.symlink_to(char_device_like_dev_null(folder))
        return path, stat.S_IFLNK
    raise AssertionError(kind)


def _unchanged(path: Path, kind_bits: int) -> None:
    mode = os.lstat(path).st_mode
    assert stat.S_IFMT(mode) == kind_bits, f"{path} is now {stat.filemode(mode)}"
    if stat.S_ISLNK(mode) and path.exists():
        assert stat.S_ISCHR(path.stat().st_mode)


def _one_line_exit_2(proc, *expected):
    one_line_error(proc, 2, *expected)


@pytest.fixture(scope="module")
def a_run(tmp_path_factory, model_cache):
    out = tmp_path_factory.mktemp("run") / "run"
    proc = run_quick(run_args(modes="mapped", out=out), model_cache)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_run_history_refuses_what_is_not_a_regular_file(model_cache, tmp_path, kind):
    path, bits = _make(kind, tmp_path)
    cache, out = tmp_path / "cache", tmp_path / "run"
    proc = run_quick(run_args("--history", str(path), report=True, cache=cache, out=out), model_cache, timeout=120)
    _one_line_exit_2(proc, "--history", str(path))
    _unchanged(path, bits)
    assert not cache.exists() and not out.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_report_history_refuses_what_is_not_a_regular_file(model_cache, a_run, tmp_path, kind):
    path, bits = _make(kind, tmp_path)
    report = tmp_path / "report.html"
    proc = run_quick(["report", str(a_run), "--out", str(report), "--history", str(path)], model_cache, timeout=120)
    _one_line_exit_2(proc, "--history", str(path))
    _unchanged(path, bits)
    assert not report.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_report_out_refuses_what_is_not_a_regular_file(model_cache, a_run, tmp_path, kind):
    path, bits = _make(kind, tmp_path)
    proc = run_quick(["report", str(a_run), "--out", str(path)], model_cache, timeout=120)
    _one_line_exit_2(proc, str(path))
    _unchanged(path, bits)


@pytest.mark.parametrize("kind", ["fifo", "folder", "dev-null", "symlink-to-dev-null"])
@pytest.mark.parametrize("name", ["results.csv", "report.html", "metadata.json"])
def test_reused_out_refuses_a_previous_run_file_that_is_not_regular(model_cache, a_run, tmp_path, kind, name):
    """A previous run folder whose report.html (say) is now a FIFO: the run would replace or
    remove it while cleaning; it refuses before any work instead."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(a_run, out, ignore=shutil.ignore_patterns(".harness.lock"))
    (out / name).unlink(missing_ok=True)
    made, bits = _make(kind, tmp_path)
    if kind in ("dev-null",) and made == Path(os.devnull):
        (out / name).symlink_to(made)
        bits = stat.S_IFLNK
    else:
        os.rename(made, out / name)
    cache = tmp_path / "cache"
    proc = run_quick(run_args("--replace", report=True, cache=cache, out=out), model_cache, timeout=120)
    _one_line_exit_2(proc, "--out", name)
    _unchanged(out / name, bits)
    assert not cache.exists()


@pytest.mark.parametrize(
    "name", ["results.csv", "summary.csv", "results_long.csv", "metadata.json", "workers/cpu-mapped-n1-r0/w0.spec.json"]
)
def test_report_never_writes_over_the_runs_own_files(model_cache, a_run, name):
    target = a_run / name
    before = target.read_bytes()
    proc = run_quick(["report", str(a_run), "--out", str(target)], model_cache)
    _one_line_exit_2(proc, "is one of the run's own files")
    assert target.read_bytes() == before


@pytest.mark.parametrize("name", ["results.csv", "metadata.json", "workers/cpu-mapped-n1-r0/w0.spec.json"])
def test_report_never_writes_over_the_baseline_runs_files(model_cache, a_run, tmp_path, name):
    """The --baseline run is an input of the report too (before, `report RUN --baseline RUN0
    --out RUN0/results.csv` replaced the baseline's results with HTML)."""
    import shutil

    baseline = tmp_path / "baseline"
    shutil.copytree(a_run, baseline, ignore=shutil.ignore_patterns(".harness.lock"))
    meta = json.loads((baseline / "metadata.json").read_text())
    meta["run"]["started"] = "2020-01-01T00:00:00+00:00"  # another run, not a copy (refused as such)
    (baseline / "metadata.json").write_text(json.dumps(meta))
    target = baseline / name
    before = target.read_bytes()
    proc = run_quick(["report", str(a_run), "--baseline", str(baseline), "--out", str(target)], model_cache)
    _one_line_exit_2(proc, "own files")
    assert target.read_bytes() == before


def test_report_never_writes_over_its_gates_file(model_cache, a_run, tmp_path):
    gates = tmp_path / "gates.txt"
    gates.write_text("failed_workers==0\n")
    proc = run_quick(["report", str(a_run), "--gates-file", str(gates), "--out", str(gates)], model_cache)
    _one_line_exit_2(proc, "input files")
    assert gates.read_text() == "failed_workers==0\n"


def test_report_out_that_is_its_own_history_is_refused(model_cache, a_run, tmp_path):
    history = tmp_path / "history.csv"
    proc = run_quick(["report", str(a_run), "--out", str(history), "--history", str(history)], model_cache)
    _one_line_exit_2(proc, "is also --history")
    assert not history.exists()


@pytest.mark.parametrize(
    "name, text",
    [("metadata.json", '{"name": "my dataset", "status": "final"}\n'), ("results.csv", "id,score\n1,0.5\n")],
)
def test_a_folder_with_someone_elses_metadata_or_results_is_not_cleaned(model_cache, tmp_path, name, text):
    """A project folder that holds its own metadata.json or results.csv (and a workers/ folder)
    is not a run folder: --out into it is refused and nothing in it is touched. Before, any file
    of those names made it "a run folder", and the run cleaned it: both files and workers/ went."""
    out = tmp_path / "project"
    (out / "workers").mkdir(parents=True)
    (out / "workers" / "pool.py").write_text("my code\n")
    (out / name).write_text(text)
    cache = tmp_path / "cache"
    proc = run_quick(run_args(report=True, cache=cache, out=out), model_cache, timeout=120)
    _one_line_exit_2(proc, "--out", "neither empty nor a run folder")
    assert (out / name).read_text() == text
    assert (out / "workers" / "pool.py").read_text() == "my code\n"
    assert not cache.exists()


def test_reused_out_drops_the_previous_runs_logs_and_never_writes_through_a_symlink(model_cache, a_run, tmp_path):
    """logs/ (the QNN compiler's log a qnn run keeps) belongs to the run that wrote it: a reused
    --out removes it like workers/, so a cpu run does not show a stale qnn log. A logs/ that is
    a symlink is refused before work, not written through (before, a qnn run copied its log
    into whatever file the link led to)."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(a_run, out, ignore=shutil.ignore_patterns(".harness.lock"))
    (out / "logs").mkdir()
    (out / "logs" / "old-compile.log").write_text("a previous run's log\n")
    record_as_written(out, "logs/old-compile.log")
    args = run_args("--replace", modes="mapped", out=out)
    proc = run_quick(args, model_cache, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not (out / "logs").exists(), "the previous run's logs/ is still there"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.log").write_text("keep\n")
    (out / "logs").symlink_to(elsewhere)
    _one_line_exit_2(run_quick(args, model_cache, timeout=120), "--out", "logs")
    assert (out / "logs").is_symlink() and (elsewhere / "keep.log").read_text() == "keep\n"
